import { create, type JsonObject, type MessageInitShape, toJson } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyReply } from "fastify";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { reasonOf } from "../errors/api-error.js";
import { bearerChallenge } from "../errors/bearer-challenge.js";
import { catalog, httpStatusOfCode } from "../errors/catalog.js";

/** An error as the REST gateway answers it. */
export interface RestErrorResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: JsonObject;
}

const skipped = new Set<string>([ErrorInfoSchema.typeName, RetryInfoSchema.typeName]);

/**
 * Renders an error as REST JSON: `{"error": message, "code": REASON}` with
 * the catalog's HTTP status, plus the fields of any other detail message at
 * the top level (STALE_BASE's `latest_version`, null when absent), and a
 * Retry-After header when retrying can help. Connect's own errors (a reason
 * outside the catalog) use their code's name.
 */
export function renderRestError(error: ConnectError): RestErrorResponse {
  const reason = reasonOf(error);
  const status = reason === undefined ? httpStatusOfCode[error.code] ?? 500 : catalog[reason].httpStatus;
  const code = reason ?? Code[error.code].replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase();
  const body: JsonObject = { error: error.rawMessage, code };
  const headers: Record<string, string> = {};
  const challenge = bearerChallenge(error);
  if (challenge !== undefined) headers["www-authenticate"] = challenge;
  for (const d of error.details) {
    if (!("desc" in d)) continue;
    if (d.desc.typeName === RetryInfoSchema.typeName) {
      const info = create(RetryInfoSchema, d.value as MessageInitShape<typeof RetryInfoSchema>);
      headers["retry-after"] = String(Math.max(1, Number(info.retryDelay?.seconds ?? 1n)));
      continue;
    }
    if (skipped.has(d.desc.typeName)) continue;
    const json = toJson(d.desc, create(d.desc, d.value), { useProtoFieldName: true }) as JsonObject;
    for (const field of d.desc.fields) body[field.name] = json[field.name] ?? null;
  }
  return { status, headers, body };
}

/** Answers a REST request with the error, rendered as every REST error is, with its headers and any given (Allow). */
export function sendRestError(reply: FastifyReply, error: ConnectError, headers: Readonly<Record<string, string>> = {}): FastifyReply {
  const rendered = renderRestError(error);
  return reply.code(rendered.status).headers({ ...rendered.headers, ...headers }).send(rendered.body);
}
