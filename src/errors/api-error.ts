import { create, type DescMessage, type MessageInitShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { catalog, errorDomain, isReason, type ParamsOf, type Reason } from "./catalog.js";

/** An error detail as ConnectError carries it on the way out. */
export interface OutgoingDetail<Desc extends DescMessage = DescMessage> {
  desc: Desc;
  value: MessageInitShape<Desc>;
}

/** Pairs a detail message with its schema so it can ride on a ConnectError. */
export function detail<Desc extends DescMessage>(desc: Desc, value: MessageInitShape<Desc>): OutgoingDetail {
  return { desc, value } as OutgoingDetail;
}

const snakeCase = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/**
 * Creates the ConnectError for a catalog reason. Every error the service
 * answers is made here, so gRPC, Connect and REST all render the same code,
 * message and google.rpc.ErrorInfo (reason, domain, and the parameters as
 * metadata), plus RetryInfo when retrying can help. `cause` is for the
 * logs only: it is never sent.
 */
export function apiError<R extends Reason>(
  reason: R,
  params: ParamsOf<R>,
  options: { details?: OutgoingDetail[]; cause?: unknown } = {},
): ConnectError {
  const spec = catalog[reason];
  // Well-formed UTF-16: a message may quote the request's own text, and a
  // lone surrogate in it (a JSON "\ud83d") cannot be written as UTF-8, so
  // gRPC's percent-encoded grpc-message could not carry it at all.
  const message = (spec.message as (p: ParamsOf<R>) => string)(params).toWellFormed();
  const metadata: Record<string, string> = {};
  for (const [key, value] of Object.entries(params as Record<string, unknown>)) {
    if (value !== undefined) metadata[snakeCase(key)] = String(value).toWellFormed();
  }
  const details = [detail(ErrorInfoSchema, { reason, domain: errorDomain, metadata })];
  // Clients (and gRPC retry policies) read RetryInfo to know a retry may
  // succeed; REST renders it as Retry-After.
  if (spec.retryable === true) details.push(detail(RetryInfoSchema, { retryDelay: { seconds: 1n } }));
  return new ConnectError(message, spec.code, undefined, [...details, ...(options.details ?? [])], options.cause);
}

/**
 * The catalog reason of an error made by apiError, read back from its
 * ErrorInfo detail; undefined for any other error.
 */
export function reasonOf(error: ConnectError): Reason | undefined {
  for (const d of error.details) {
    if ("desc" in d && d.desc.typeName === ErrorInfoSchema.typeName) {
      const info = create(ErrorInfoSchema, d.value as MessageInitShape<typeof ErrorInfoSchema>);
      if (info.domain === errorDomain && isReason(info.reason)) return info.reason;
    }
  }
  return undefined;
}
