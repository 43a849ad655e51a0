import type { ConnectError } from "@connectrpc/connect";
import { apiError } from "../errors/api-error.js";
import { shownPath } from "../http/shown-path.js";
import { codeName } from "./observe-interceptor.js";
import { grpcErrorHeaders, packedDetails } from "./trailers-only.js";

/** An answer to a call of a method the server does not have. */
export interface UnknownMethodAnswer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** `/package.Service/Method`: the path every RPC protocol calls a method by. */
const rpcPath = /^\/[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)+\/[A-Za-z_]\w*$/;

/**
 * The answer to a call of a method this server does not have, in the
 * caller's protocol: gRPC and gRPC-Web get UNIMPLEMENTED as a Trailers-Only
 * response (HTTP 200, the status in the headers), Connect a 404 with its
 * error JSON, both with the catalog's ErrorInfo, as statuscodes.md asks
 * ("Method not found at server: UNIMPLEMENTED"). Their routers answer only
 * the methods they have, so the server's not-found handler asks here first;
 * undefined for anything else (a REST path), which gets the REST answer.
 */
export function unknownMethodAnswer(method: string, url: string, contentType: string | undefined): UnknownMethodAnswer | undefined {
  const [path = ""] = url.split("?", 2);
  const type = (contentType ?? "").toLowerCase();
  const error = apiError("UNKNOWN_METHOD", { path: shownPath(path) });
  if (type.startsWith("application/grpc")) return { status: 200, headers: grpcErrorHeaders(error, type), body: "" };
  const connectGet = isConnectGet(method, url);
  const connectPost = method === "POST" && /^application\/(?:connect\+)?(?:json|proto)\b/.test(type);
  if (!isRpcPath(path) || !(connectGet || connectPost)) return undefined;
  return { status: 404, headers: { "content-type": "application/json" }, body: connectErrorJson(error, "unimplemented") };
}

/** Whether a path (without its query) is an RPC's, `/package.Service/Method`, rather than a REST route's. */
export function isRpcPath(path: string): boolean {
  return rpcPath.test(path);
}

/** Whether a request is a Connect GET (its query says connect=v1), which a Connect client reads the error JSON of. */
export function isConnectGet(method: string, url: string): boolean {
  return method === "GET" && /(?:^|&)connect=v1(?:&|$)/.test(url.split("?", 2)[1] ?? "");
}

/**
 * A catalog error as the Connect protocol's error JSON
 * (connectrpc.com/docs/protocol, "Error end-stream"): its code (the
 * catalog's, unless given), message and details, the ErrorInfo among them.
 */
export function connectErrorJson(error: ConnectError, code = codeName(error.code)): string {
  const details = packedDetails(error).map((any) => ({ type: any.typeUrl.replace(/^type\.googleapis\.com\//, ""), value: Buffer.from(any.value).toString("base64").replace(/=+$/, "") }));
  return JSON.stringify({ code, message: error.rawMessage, details });
}
