import { createHmac, timingSafeEqual } from "node:crypto";

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

  constructor(secret: Buffer) {
    this.#secret = secret;
  }

  #mac(payload: string): Buffer {
    return createHmac("sha256", this.#secret).update(payload).digest().subarray(0, 16);
  }

  encode(cursor: PageCursor): string {
    const payload = Buffer.from(JSON.stringify([cursor.entityId, cursor.beforeSeq])).toString("base64url");
    return `${payload}.${this.#mac(payload).toString("base64url")}`;
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
