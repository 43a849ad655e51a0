import { createHmac, timingSafeEqual } from "node:crypto";
import { apiError } from "../errors/api-error.js";

/** Where a listing continues: after this creation order of this entity. */
export interface PageCursor {
  readonly entityId: string;
  readonly beforeSeq: number;
}

/**
 * Opaque, signed page tokens (AIP-158). The cursor travels base64url-encoded
 * with an HMAC, so a token that was altered, or made for another entity, is
 * refused instead of trusted; replicas sharing the secret accept each
 * other's tokens.
 */
export class PageTokens {
  readonly #secret: Buffer;
  readonly #scope: string;

  /**
   * `scope` names what is listed ("" for versions, "events"): a token of
   * one listing is refused by another, though both page by number.
   */
  constructor(secret: Buffer, scope = "") {
    this.#secret = secret;
    this.#scope = scope;
  }

  #mac(payload: string): Buffer {
    return createHmac("sha256", this.#secret)
      .update(this.#scope === "" ? payload : `${this.#scope}:${payload}`)
      .digest()
      .subarray(0, 16);
  }

  encode(cursor: PageCursor): string {
    const payload = Buffer.from(JSON.stringify([cursor.entityId, cursor.beforeSeq])).toString("base64url");
    return `${payload}.${this.#mac(payload).toString("base64url")}`;
  }

  /**
   * Where a request's page_token says its page starts: before this number;
   * undefined for the first page (no token). Anything but a token issued
   * for this entity's listing is INVALID_ARGUMENT.
   */
  startOf(pageToken: string, entityId: string): number | undefined {
    if (pageToken === "") return undefined;
    const cursor = this.decode(pageToken, entityId);
    if (cursor === undefined) {
      throw apiError("INVALID_ARGUMENT", {
        field: "page_token",
        problem: "is not a next_page_token this service issued for this list of this entity; start again without page_token",
      });
    }
    return cursor.beforeSeq;
  }

  /** The next_page_token of a page: empty on the last one, else the token of what comes after its last item. */
  nextAfter(entityId: string, hasMore: boolean, lastSeq: number | undefined): string {
    return hasMore && lastSeq !== undefined ? this.encode({ entityId, beforeSeq: lastSeq }) : "";
  }

  /** The cursor of a token issued for this entity; undefined for anything else. */
  decode(token: string, entityId: string): PageCursor | undefined {
    const dot = token.indexOf(".");
    if (dot <= 0 || token.length > 512) return undefined;
    const payload = token.slice(0, dot);
    const mac = Buffer.from(token.slice(dot + 1), "base64url");
    const expected = this.#mac(payload);
    if (mac.length !== expected.length || !timingSafeEqual(mac, expected)) return undefined;
    try {
      const [id, seq] = JSON.parse(Buffer.from(payload, "base64url").toString()) as [unknown, unknown];
      if (id !== entityId || typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 1) return undefined;
      return { entityId: id, beforeSeq: seq };
    } catch {
      return undefined;
    }
  }
}
