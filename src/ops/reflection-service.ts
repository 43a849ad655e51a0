import { create, createRegistry, type DescFile, type MessageInitShape, type Registry, toBinary } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import {
  type ServerReflection,
  type ServerReflectionRequest,
  ServerReflectionResponseSchema,
} from "../../gen/grpc/reflection/v1/reflection_pb.js";
import {
  type ServerReflection as ServerReflectionV1alpha,
  ServerReflectionResponseSchema as ServerReflectionResponseV1alphaSchema,
} from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

type Answer = MessageInitShape<typeof ServerReflectionResponseSchema>["messageResponse"];

/** What a reflection request asks, in either version of the protocol (their messages are field for field the same). */
type Query = Pick<ServerReflectionRequest, "host"> & {
  readonly messageRequest:
    | { case: "fileByFilename" | "fileContainingSymbol" | "allExtensionNumbersOfType" | "listServices"; value: string }
    | { case: "fileContainingExtension"; value: { containingType: string; extensionNumber: number } }
    | { case: undefined; value?: undefined };
};

/** A file and everything it imports, each once. */
function withDependencies(file: DescFile, seen = new Set<string>()): DescFile[] {
  if (seen.has(file.name)) return [];
  seen.add(file.name);
  return [file, ...file.dependencies.flatMap((d) => withDependencies(d, seen))];
}

/**
 * gRPC server reflection v1, so tools like `buf curl` and grpcurl can list
 * and call the services with no proto at hand. Answers from the generated
 * descriptors of the served files, each file once a stream but the one
 * asked for (see #fileAnswer): a stream needs no token, and answering every
 * request with every import let 46-byte requests draw 22 KB answers.
 */
export class ReflectionService implements ServiceImpl<typeof ServerReflection> {
  readonly #services: readonly string[];
  readonly #registry: Registry;
  readonly #files: ReadonlyMap<string, DescFile>;
  readonly #encoded = new Map<string, Uint8Array>();

  constructor(serviceNames: readonly string[], files: readonly DescFile[]) {
    this.#services = [...serviceNames].sort();
    const all = new Map<string, DescFile>();
    // By the name the descriptor itself gives (with ".proto"), as clients ask for it.
    for (const file of files) for (const f of withDependencies(file)) all.set(f.proto.name, f);
    this.#files = all;
    this.#registry = createRegistry(...all.values());
  }

  #encode(file: DescFile): Uint8Array {
    let bytes = this.#encoded.get(file.name);
    if (bytes === undefined) {
      bytes = toBinary(FileDescriptorProtoSchema, file.proto);
      this.#encoded.set(file.name, bytes);
    }
    return bytes;
  }

  /**
   * The file and those it imports, less the imports already sent on this
   * stream (`sent`, which it adds to), as grpc-go answers: the file asked
   * for always comes, since a client may ask again for one it dropped, but
   * a client that asks for file after file (or the same one 20,000 times)
   * is not sent its imports' 16 KB (descriptor.proto most of it) each time.
   */
  #fileAnswer(file: DescFile | undefined, what: string, sent: Set<string>): Answer {
    if (file === undefined) return { case: "errorResponse", value: { errorCode: 5, errorMessage: `${what} not found` } };
    const files = withDependencies(file).filter((f, i) => i === 0 || !sent.has(f.name));
    for (const f of files) sent.add(f.name);
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto: files.map((f) => this.#encode(f)) } };
  }

  /**
   * The file declaring any fully-qualified name, as grpc-go's and C++'s
   * servers resolve it (grpcurl describes fields and enum values by it):
   * a type, service or extension; a method (pkg.Service.Method); a field or
   * oneof (pkg.Message.field); an enum value, named in its enum's scope
   * (pkg.VALUE, pkg.Message.VALUE).
   */
  #symbolFile(symbol: string): DescFile | undefined {
    const found = this.#registry.get(symbol);
    if (found !== undefined) return found.file;
    const dot = symbol.lastIndexOf(".");
    if (dot <= 0) return undefined;
    const scope = symbol.slice(0, dot);
    const name = symbol.slice(dot + 1);
    const service = this.#registry.getService(scope);
    if (service?.methods.some((m) => m.name === name) === true) return service.file;
    const message = this.#registry.getMessage(scope);
    if (message !== undefined && (message.fields.some((f) => f.name === name) || message.oneofs.some((o) => o.name === name))) return message.file;
    for (const type of this.#registry) {
      if (type.kind !== "enum" || (type.parent?.typeName ?? type.file.proto.package) !== scope) continue;
      if (type.values.some((v) => v.name === name)) return type.file;
    }
    return undefined;
  }

  /** The answer to one request of a stream, which has been sent the files in `sent`. */
  #answer(req: Query, sent: Set<string>): Answer {
    const r = req.messageRequest;
    switch (r.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: this.#services.map((name) => ({ name })) } };
      case "fileByFilename":
        return this.#fileAnswer(this.#files.get(r.value), `file ${r.value}`, sent);
      case "fileContainingSymbol":
        return this.#fileAnswer(this.#symbolFile(r.value), `symbol ${r.value}`, sent);
      case "fileContainingExtension": {
        const message = this.#registry.getMessage(r.value.containingType);
        const extension = message === undefined ? undefined : this.#registry.getExtensionFor(message, r.value.extensionNumber);
        return this.#fileAnswer(extension?.file, `extension ${r.value.extensionNumber} of ${r.value.containingType}`, sent);
      }
      case "allExtensionNumbersOfType": {
        const message = this.#registry.getMessage(r.value);
        if (message === undefined) return { case: "errorResponse", value: { errorCode: 5, errorMessage: `type ${r.value} not found` } };
        const numbers: number[] = [];
        for (const type of this.#registry) {
          if (type.kind === "extension" && type.extendee.typeName === r.value) numbers.push(type.number);
        }
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: r.value, extensionNumber: numbers } };
      }
      default:
        return { case: "errorResponse", value: { errorCode: 12, errorMessage: "unsupported reflection request" } };
    }
  }

  async *serverReflectionInfo(requests: AsyncIterable<ServerReflectionRequest>) {
    const sent = new Set<string>();
    for await (const req of requests) {
      yield create(ServerReflectionResponseSchema, { validHost: req.host, originalRequest: req, messageResponse: this.#answer(req, sent) });
    }
  }

  /**
   * The same answers under `grpc.reflection.v1alpha`, the name tools
   * written before v1 (and some still) ask for.
   */
  v1alpha(): ServiceImpl<typeof ServerReflectionV1alpha> {
    const answer = (req: Query, sent: Set<string>) => this.#answer(req, sent);
    return {
      async *serverReflectionInfo(requests) {
        const sent = new Set<string>();
        for await (const req of requests) {
          // Field for field the v1 answer: only the messages' names differ.
          const messageResponse = answer(req, sent) as unknown as MessageInitShape<typeof ServerReflectionResponseV1alphaSchema>["messageResponse"];
          yield create(ServerReflectionResponseV1alphaSchema, { validHost: req.host, originalRequest: req, messageResponse });
        }
      },
    };
  }
}
