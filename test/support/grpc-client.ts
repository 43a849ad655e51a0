// An independent gRPC client: @grpc/grpc-js with the service loaded from
// proto/ by @grpc/proto-loader, sharing no code with the server.
import http2 from "node:http2";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { createRegistry } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ActiveVersionChangedSchema, StaleBaseSchema } from "../../gen/entityversions/v1/entity_versions_pb.js";
import { ErrorInfoSchema, RetryInfoSchema } from "../../gen/google/rpc/error_details_pb.js";
import { StatusSchema } from "../../gen/google/rpc/status_pb.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

const definition = protoLoader.loadSync(["entityversions/v1/entity_versions.proto", "entityversions/v1/entity_access.proto", "entityversions/v1/entity_events.proto"], {
  includeDirs: [path.join(root, "proto"), path.join(root, "node_modules/google-proto-files")],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});
const pkg = grpc.loadPackageDefinition(definition) as unknown as {
  entityversions: {
    v1: {
      EntityVersionsService: grpc.ServiceClientConstructor;
      EntityAccessService: grpc.ServiceClientConstructor;
      EntityEventsService: grpc.ServiceClientConstructor;
    };
  };
};

/** A failed gRPC call: status code, message and the decoded rich details. */
export interface GrpcFailure {
  readonly code: grpc.status;
  readonly message: string;
  readonly reason: string | undefined;
  readonly metadata: Record<string, string>;
  readonly staleBase: ReturnType<typeof fromBinary<typeof StaleBaseSchema>> | undefined;
  readonly activeVersionChanged: ReturnType<typeof fromBinary<typeof ActiveVersionChangedSchema>> | undefined;
  readonly retryable: boolean;
}

const registry = createRegistry(ErrorInfoSchema, RetryInfoSchema, StaleBaseSchema, ActiveVersionChangedSchema);

/** A gRPC error as the test reads it: its code, message and rich details. */
export function failure(error: grpc.ServiceError): GrpcFailure {
  const bin = error.metadata?.get("grpc-status-details-bin")[0];
  let reason: string | undefined;
  let metadata: Record<string, string> = {};
  let staleBase: GrpcFailure["staleBase"];
  let activeVersionChanged: GrpcFailure["activeVersionChanged"];
  let retryable = false;
  if (bin !== undefined) {
    const status = fromBinary(StatusSchema, bin as Buffer);
    for (const any of status.details) {
      const msg = anyUnpack(any, registry);
      if (msg?.$typeName === "google.rpc.ErrorInfo") ({ reason, metadata } = msg as unknown as { reason: string; metadata: Record<string, string> });
      if (msg?.$typeName === "entityversions.v1.StaleBase") staleBase = msg as GrpcFailure["staleBase"];
      if (msg?.$typeName === "entityversions.v1.ActiveVersionChanged") activeVersionChanged = msg as GrpcFailure["activeVersionChanged"];
      if (msg?.$typeName === "google.rpc.RetryInfo") retryable = true;
    }
  }
  return { code: error.code, message: error.details, reason, metadata, staleBase, activeVersionChanged, retryable };
}

/** The outcome of a gRPC call: the response, or the failure. */
export type GrpcResult<T = Record<string, any>> = { ok: true; value: T } | { ok: false; error: GrpcFailure };

/** A promise-returning gRPC client for EntityVersionsService. */
export class GrpcClient {
  readonly #versions: grpc.Client & Record<string, Function>;
  readonly #access: grpc.Client & Record<string, Function>;
  readonly #events: grpc.Client & Record<string, Function>;
  readonly #metadata: Record<string, string>;

  constructor(address: string, metadata: Record<string, string> = {}, channelOptions: grpc.ChannelOptions = {}) {
    const credentials = grpc.credentials.createInsecure();
    this.#versions = new pkg.entityversions.v1.EntityVersionsService(address, credentials, channelOptions) as never;
    this.#access = new pkg.entityversions.v1.EntityAccessService(address, credentials, { channelOverride: this.#versions.getChannel() }) as never;
    this.#events = new pkg.entityversions.v1.EntityEventsService(address, credentials, { channelOverride: this.#versions.getChannel() }) as never;
    this.#metadata = metadata;
  }

  call<T = Record<string, any>>(method: string, request: object, metadata: Record<string, string> = this.#metadata): Promise<GrpcResult<T>> {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(metadata)) md.set(k, v);
    const client = method in this.#versions ? this.#versions : method in this.#access ? this.#access : this.#events;
    return new Promise((resolve) => {
      client[method]!.call(client, request, md, { deadline: Date.now() + 30_000 }, (error: grpc.ServiceError | null, value: T) => {
        resolve(error === null ? { ok: true, value } : { ok: false, error: failure(error) });
      });
    });
  }

  /** Starts a server-streaming call (WatchEvents): the grpc-js stream, with no deadline unless one is given. */
  stream(method: string, request: object, options: { metadata?: Record<string, string>; deadlineMs?: number } = {}): grpc.ClientReadableStream<Record<string, any>> {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(options.metadata ?? this.#metadata)) md.set(k, v);
    return this.#events[method]!.call(this.#events, request, md, options.deadlineMs === undefined ? {} : { deadline: Date.now() + options.deadlineMs });
  }

  close(): void {
    this.#versions.close();
  }
}

export { grpc };

/** One unary gRPC call over a bare HTTP/2 stream: what a client that frames its own bytes gets back. */
export function rawGrpc(
  url: string,
  path: string,
  frame: Buffer,
  headers: Record<string, string>,
): Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; body: Buffer; rstCode: number | undefined }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    const timer = setTimeout(() => fail(new Error(`no answer within 10 s to ${path}`)), 10_000);
    const fail = (error: Error) => {
      clearTimeout(timer);
      session.destroy();
      reject(error);
    };
    session.on("error", fail);
    const req = session.request({ ":path": path, ":method": "POST", "content-type": "application/grpc", te: "trailers", ...headers });
    let got: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on("response", (h) => (got = h));
    req.on("trailers", (t) => (trailers = t));
    req.on("data", (d: Buffer) => chunks.push(d));
    // Closed: answered (with its trailers), or reset by the server.
    req.on("close", () => {
      clearTimeout(timer);
      session.close();
      resolve({ headers: got, trailers, body: Buffer.concat(chunks), rstCode: req.rstCode });
    });
    req.on("error", () => {});
    req.end(frame);
  });
}

