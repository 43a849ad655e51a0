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
  type StreamRequest,
  type StreamResponse,
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

/**
 * The answer of an in-process server-streaming call: the headers, and the
 * messages as they come. The call's errors, before or after its first
 * message, reject the iteration; ending the iteration early ends the call.
 */
export interface InProcessStream {
  readonly header: Headers;
  readonly messages: AsyncIterable<Message>;
}

/** Calls a server-streaming RPC of a registered service in this process, through the interceptors. */
export type InProcessStreamCaller = (method: DescMethod, input: Message, init: InProcessCallInit) => Promise<InProcessStream>;

type AnyFn = Parameters<Interceptor>[0];

/**
 * The reason a finished call's signal aborts with. One shared error rather
 * than `abort()`'s default, a new DOMException with its stack per call:
 * nothing reads it but a listener left over from the finished call.
 */
const callEnded = new ConnectError("the call has ended", Code.Canceled);

function methodSpecs(services: readonly ServiceImplSpec[]): Map<DescMethod, MethodImplSpec> {
  const specs = new Map<DescMethod, MethodImplSpec>();
  for (const service of services) for (const spec of Object.values(service.methods)) specs.set(spec.method, spec);
  return specs;
}

/** The HandlerContext of an in-process call, as Connect's own handlers make it. */
function handlerContext(method: DescMethod, init: InProcessCallInit): Context {
  return createHandlerContext({
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
}

type Context = ReturnType<typeof createHandlerContext>;

/** What every request of an in-process call carries, as Connect's own handlers fill it. */
function requestOf<M extends DescMethod>(method: M, init: InProcessCallInit, context: Context) {
  return {
    service: method.parent,
    method,
    requestMethod: init.requestMethod,
    url: init.url,
    signal: context.signal,
    header: context.requestHeader,
    contextValues: context.values,
  };
}

/** What every response of an in-process call carries: the headers and trailers the handler and interceptors set. */
function responseOf<M extends DescMethod>(method: M, context: Context) {
  return { service: method.parent, method, header: context.responseHeader, trailer: context.responseTrailer };
}

async function* once<T>(value: T): AsyncGenerator<T> {
  yield value;
}

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
  const specs = methodSpecs(services);
  return async (method, input, init) => {
    const spec = specs.get(method);
    if (spec === undefined || spec.kind !== "unary") {
      throw new ConnectError(`${method.parent.typeName}.${method.name} cannot be called in-process`, Code.Unimplemented);
    }
    const context = handlerContext(method, init);
    const impl: AnyFn = async (req) => {
      if (req.stream) throw new ConnectError("a unary call was sent a stream", Code.Internal);
      // As Connect's own handlers do: the interceptors may have replaced
      // the request's signal, headers or context values on the way in.
      const handlerContext: HandlerContext = { ...context, requestHeader: req.header, signal: req.signal, values: req.contextValues };
      const output = await spec.impl(req.message, handlerContext);
      const response: UnaryResponse = {
        stream: false,
        ...responseOf(spec.method, context),
        message: isMessage(output, spec.method.output) ? output : create(spec.method.output, output),
      };
      return response;
    };
    const request: UnaryRequest = { stream: false, ...requestOf(spec.method, init, context), message: input };
    try {
      const res = await interceptors.reduceRight<AnyFn>((next, interceptor) => interceptor(next), impl)(request);
      if (res.stream) throw new ConnectError("a unary call answered a stream", Code.Internal);
      return { message: res.message, header: res.header, trailer: res.trailer };
    } finally {
      // Clears the deadline's timer and tells anything still listening that the call is over.
      context.abort(callEnded);
    }
  };
}

/**
 * Runs server-streaming RPCs in-process through the same interceptors as
 * the Connect router, as createInProcessCaller runs unary ones: the REST
 * gateway writes their messages as newline-delimited JSON. The handler's
 * messages reach the caller through the interceptors' own wrapping (so
 * metrics and the error catalog see the stream end); the call's signal
 * aborts, and the handler stops, when the caller ends the iteration.
 */
export function createInProcessStreamCaller(services: readonly ServiceImplSpec[], interceptors: readonly Interceptor[]): InProcessStreamCaller {
  const specs = methodSpecs(services);
  return async (method, input, init) => {
    const spec = specs.get(method);
    if (spec === undefined || spec.kind !== "server_streaming") {
      throw new ConnectError(`${method.parent.typeName}.${method.name} cannot be called in-process as a server stream`, Code.Unimplemented);
    }
    const context = handlerContext(method, init);
    const impl: AnyFn = async (req) => {
      if (!req.stream) throw new ConnectError("a server stream was sent a unary request", Code.Internal);
      const handlerContext: HandlerContext = { ...context, requestHeader: req.header, signal: req.signal, values: req.contextValues };
      let message: Message | undefined;
      for await (const m of req.message) message = m;
      if (message === undefined) throw new ConnectError("a server stream was sent no request", Code.Internal);
      const output = spec.impl(message, handlerContext);
      const response: StreamResponse = {
        stream: true,
        ...responseOf(spec.method, context),
        message: (async function* () {
          for await (const m of output) yield isMessage(m, spec.method.output) ? m : create(spec.method.output, m);
        })(),
      };
      return response;
    };
    const request: StreamRequest = { stream: true, ...requestOf(spec.method, init, context), message: once(input) };
    let res;
    try {
      res = await interceptors.reduceRight<AnyFn>((next, interceptor) => interceptor(next), impl)(request);
    } catch (error) {
      context.abort(callEnded);
      throw error;
    }
    if (!res.stream) {
      context.abort(callEnded);
      throw new ConnectError("a server stream answered a unary response", Code.Internal);
    }
    const messages = res.message;
    return {
      header: res.header,
      messages: (async function* () {
        try {
          yield* messages;
        } finally {
          // Clears the deadline's timer and tells the handler, if still running, that the call is over.
          context.abort(callEnded);
        }
      })(),
    };
  };
}
