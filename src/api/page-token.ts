import { createCipheriv, createDecipheriv, createHmac, hkdfSync } from "node:crypto";
import { apiError } from "../errors/api-error.js";

/** Where a listing continues: after this creation order of this entity. */
export interface PageCursor {
  readonly entityId: string;
  readonly beforeSeq: number;
}

/**
 * Opaque page tokens (AIP-158: "must not be user-parseable"). The cursor is
 * sealed with AES-256-GCM under a key derived from the page token secret
 * and the listing, the entity bound in as associated data: a token that was
 * altered, or made for another entity or listing, fails to open and is
 * refused; a client can neither read nor make one. Replicas sharing the
 * secret accept each other's tokens.
 */
export class PageTokens {
  readonly #key: Buffer;
  readonly #ivKey: Buffer;
  /** Keys of previous secrets: they still open tokens, never seal one, so a change of secret rolls out without breaking paging. */
  readonly #previousKeys: readonly Buffer[];

  /**
   * `scope` names what is listed ("" for versions, "events"): a token of
   * one listing is refused by another, though both page by number.
   * `previous`: secrets replaced (PAGE_TOKEN_SECRET_PREVIOUS), whose
   * tokens are still accepted.
   */
  constructor(secret: Buffer, scope = "", previous: readonly Buffer[] = []) {
    this.#key = sealingKey(secret, scope);
    this.#ivKey = Buffer.from(hkdfSync("sha256", secret, Buffer.alloc(0), `entity-versions page token iv:${scope}`, 32));
    this.#previousKeys = previous.map((old) => sealingKey(old, scope));
  }

  encode(cursor: PageCursor): string {
    // The nonce is derived from what is sealed (as in AES-SIV): one cursor
    // always gives one token, so a page answers the same however it was
    // read, and two different cursors never share a nonce.
    const iv = createHmac("sha256", this.#ivKey).update(`${cursor.entityId}\n${cursor.beforeSeq}`).digest().subarray(0, 12);
    const cipher = createCipheriv("aes-256-gcm", this.#key, iv);
    cipher.setAAD(Buffer.from(cursor.entityId));
    const sealed = Buffer.concat([cipher.update(String(cursor.beforeSeq)), cipher.final()]);
    return Buffer.concat([iv, sealed, cipher.getAuthTag()]).toString("base64url");
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
        problem:
          "is not a next_page_token this service issued for this list of this entity (or it was sealed under a PAGE_TOKEN_SECRET since replaced); start again without page_token",
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
    if (token.length > 512 || !/^[A-Za-z0-9_-]+$/.test(token)) return undefined;
    const bytes = Buffer.from(token, "base64url");
    // One spelling per token: base64url's last character carries spare
    // bits a decoder drops, and a token altered there is refused too.
    if (bytes.length < 12 + 1 + 16 || bytes.toString("base64url") !== token) return undefined;
    for (const key of [this.#key, ...this.#previousKeys]) {
      const seq = open(key, bytes, entityId);
      if (seq !== undefined) return Number.isSafeInteger(seq) && seq >= 1 ? { entityId, beforeSeq: seq } : undefined;
    }
    return undefined;
  }
}

function sealingKey(secret: Buffer, scope: string): Buffer {
  return Buffer.from(hkdfSync("sha256", secret, Buffer.alloc(0), `entity-versions page token:${scope}`, 32));
}

/** The number sealed in `bytes` under `key` for `entityId`; undefined when the tag does not verify (altered, or sealed for another entity, listing or secret). */
function open(key: Buffer, bytes: Buffer, entityId: string): number | undefined {
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(0, 12));
    decipher.setAAD(Buffer.from(entityId));
    decipher.setAuthTag(bytes.subarray(bytes.length - 16));
    const text = Buffer.concat([decipher.update(bytes.subarray(12, bytes.length - 16)), decipher.final()]).toString();
    return /^[0-9]{1,16}$/.test(text) ? Number(text) : Number.NaN;
  } catch {
    return undefined;
  }
}
