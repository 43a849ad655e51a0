import { create, type DescMethod, type DescService, isMessage, type Message } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createContextValues,
  createServiceImplSpec,
  type ContextValues,
  type HandlerContext,
  type Interceptor,
  type MethodImplSpec,
  type ServiceImpl,
  type UnaryRequest,
  type UnaryResponse,
} from "@connectrpc/connect";

/** A service and its implementation, as registered on the Connect router. */
export interface ServiceRegistration {
  readonly service: DescService;
  readonly impl: Partial<ServiceImpl<DescService>>;
}

/** What the in-process call needs from the HTTP request that carries it. */
export interface InProcessCallInit {
  readonly header: Headers;
  /**
   * The signal that aborts when the client goes away, made on first call
   * (lazyAbortSignal): most RPCs never read it.
   */
  readonly signal: () => AbortSignal;
  readonly requestMethod: string;
  readonly url: string;
  readonly contextValues?: ContextValues;
}

/**
 * Calls a unary RPC of a registered service in this process; the answer's
 * header is undefined when the handler set none.
 */
export type InProcessCaller = (
  method: DescMethod,
  input: Message,
  init: InProcessCallInit,
) => Promise<{ message: Message; header: Headers | undefined }>;

/**
 * Runs unary RPCs in-process through the same interceptors as the Connect
 * router, with the request already decoded: the REST gateway uses it so that
 * authentication, error mapping and metrics are the same code for every
 * protocol, without encoding the message to binary and back as
 * createRouterTransport would.
 */
export function createInProcessCaller(services: readonly ServiceRegistration[], interceptors: readonly Interceptor[]): InProcessCaller {
  const specs = new Map<DescMethod, MethodImplSpec>();
  for (const { service, impl } of services) {
    for (const spec of Object.values(createServiceImplSpec(service, impl).methods)) specs.set(spec.method, spec);
  }
  type Next = (req: UnaryRequest) => Promise<UnaryResponse>;
  const compose = (impl: Next): Next => interceptors.reduceRight<Next>((inner, interceptor) => interceptor(inner as never) as never, impl);
  return async (method, input, init) => {
    const spec = specs.get(method);
    if (spec === undefined || spec.kind !== "unary") {
      throw new ConnectError(`${method.parent.typeName}.${method.name} cannot be called in-process`, Code.Unimplemented);
    }
    // A plain context rather than createHandlerContext: no deadline timer
    // and no linked AbortControllers to build, and none to abort when the
    // call ends (aborting makes a DOMException), which was a tenth of a
    // REST call's CPU. The signal is the HTTP request's: it aborts when the
    // client goes away. It, and the response headers and trailers, are
    // getters that make their object on first use, which few calls make.
    const values = init.contextValues ?? createContextValues();
    let responseHeader: Headers | undefined;
    let responseTrailer: Headers | undefined;
    let produced: UnaryResponse | undefined;
    const header = () => (responseHeader ??= new Headers());
    const trailer = () => (responseTrailer ??= new Headers());
    const impl = async (req: UnaryRequest): Promise<UnaryResponse> => {
      const context: HandlerContext = {
        method,
        service: method.parent,
        get signal() {
          return req.signal;
        },
        timeoutMs: () => undefined,
        requestMethod: init.requestMethod,
        requestHeader: req.header,
        get responseHeader() {
          return header();
        },
        get responseTrailer() {
          return trailer();
        },
        protocolName: "rest",
        values: req.contextValues,
        url: init.url,
      };
      const output = await spec.impl(req.message, context);
      return (produced = {
        stream: false,
        service: method.parent,
        method: spec.method,
        get header() {
          return header();
        },
        get trailer() {
          return trailer();
        },
        message: (isMessage(output, spec.method.output) ? output : create(spec.method.output, output)) as Message,
      } as UnaryResponse);
    };
    const next = compose(impl);
    const res = await next({
      stream: false,
      service: method.parent,
      method: spec.method,
      requestMethod: init.requestMethod,
      url: init.url,
      get signal() {
        return init.signal();
      },
      header: init.header,
      contextValues: values,
      message: input,
    } as UnaryRequest);
    // Reading our own response's header would make the Headers when
    // nothing was set; an interceptor's own response is read as it is.
    return { message: res.message, header: res === produced ? responseHeader : res.header };
  };
}
