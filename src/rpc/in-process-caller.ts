import { create, type DescMethod, isMessage, type Message } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createHandlerContext,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type ServiceImplSpec,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";

/** What an in-process call takes from the HTTP request that carries it. */
export interface InProcessCallInit {
  /** The protocol the call arrived on, as handlers and interceptors see it in `protocolName`. */
  readonly protocolName: string;
  readonly header: Headers;
  /** Aborts when the client goes away. */
  readonly signal: AbortSignal;
  /** Aborts when the server stops waiting for calls in flight. */
  readonly shutdownSignal?: AbortSignal;
  /** The deadline the client set, if any. */
  readonly timeoutMs?: number;
  readonly requestMethod: string;
  readonly url: string;
  readonly contextValues?: ContextValues;
}

/** The answer of an in-process call: the message, and the headers and trailers the handler and interceptors set. */
export interface InProcessResult {
  readonly message: Message;
  readonly header: Headers;
  readonly trailer: Headers;
}

/** Calls a unary RPC of a registered service in this process, through the interceptors. */
export type InProcessCaller = (method: DescMethod, input: Message, init: InProcessCallInit) => Promise<InProcessResult>;

type AnyFn = Parameters<Interceptor>[0];

/**
 * Runs unary RPCs in-process through the same interceptors as the Connect
 * router, with the request already decoded: the REST gateway uses it so
 * that authentication, deadlines, error mapping and metrics are the same
 * code for every protocol, without encoding the message to binary and back
 * as createRouterTransport would. The handler gets a real HandlerContext
 * (createHandlerContext): the protocol's name, the client's deadline and
 * the request's abort signal, and response headers and trailers that come
 * back with the answer.
 */
export function createInProcessCaller(services: readonly ServiceImplSpec[], interceptors: readonly Interceptor[]): InProcessCaller {
  const specs = new Map<DescMethod, MethodImplSpec>();
  for (const service of services) for (const spec of Object.values(service.methods)) specs.set(spec.method, spec);
  return async (method, input, init) => {
    const spec = specs.get(method);
    if (spec === undefined || spec.kind !== "unary") {
      throw new ConnectError(`${method.parent.typeName}.${method.name} cannot be called in-process`, Code.Unimplemented);
    }
    const context = createHandlerContext({
      service: method.parent,
      method,
      protocolName: init.protocolName,
      requestMethod: init.requestMethod,
      url: init.url,
      requestHeader: init.header,
      requestSignal: init.signal,
      ...(init.timeoutMs === undefined ? {} : { timeoutMs: init.timeoutMs }),
      ...(init.shutdownSignal === undefined ? {} : { shutdownSignal: init.shutdownSignal }),
      contextValues: init.contextValues ?? createContextValues(),
    });
    const impl: AnyFn = async (req) => {
      if (req.stream) throw new ConnectError("a unary call was sent a stream", Code.Internal);
      // As Connect's own handlers do: the interceptors may have replaced
      // the request's signal, headers or context values on the way in.
      const handlerContext: HandlerContext = { ...context, requestHeader: req.header, signal: req.signal, values: req.contextValues };
      const output = await spec.impl(req.message, handlerContext);
      const response: UnaryResponse = {
        stream: false,
        service: method.parent,
        method: spec.method,
        header: context.responseHeader,
        trailer: context.responseTrailer,
        message: isMessage(output, spec.method.output) ? output : create(spec.method.output, output),
      };
      return response;
    };
    const request: UnaryRequest = {
      stream: false,
      service: method.parent,
      method: spec.method,
      requestMethod: init.requestMethod,
      url: init.url,
      signal: context.signal,
      header: context.requestHeader,
      contextValues: context.values,
      message: input,
    };
    try {
      const res = await interceptors.reduceRight<AnyFn>((next, interceptor) => interceptor(next), impl)(request);
      if (res.stream) throw new ConnectError("a unary call answered a stream", Code.Internal);
      return { message: res.message, header: res.header, trailer: res.trailer };
    } finally {
      // Clears the deadline's timer and tells anything still listening that the call is over.
      context.abort();
    }
  };
}
