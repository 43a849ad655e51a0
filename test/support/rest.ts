// REST through plain HTTP/1.1 (fetch), as a CLI would call it.

/** A REST response: status, parsed JSON body and headers. */
export interface RestResponse<T = any> {
  readonly status: number;
  readonly body: T;
  readonly headers: Headers;
}

/** Sees every answer, with the request's method and path; throws to fail the request. */
export type AnswerCheck = (method: string, path: string, res: RestResponse) => void;

/** A tiny REST client bound to a base URL. */
export class RestClient {
  constructor(
    readonly baseUrl: string,
    readonly defaultHeaders: Record<string, string> = {},
    readonly check?: AnswerCheck,
  ) {}

  async request<T = any>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<RestResponse<T>> {
    const init: RequestInit = { method, headers: { ...this.defaultHeaders, ...headers } };
    if (body !== undefined) {
      init.body = typeof body === "string" ? body : JSON.stringify(body);
      init.headers = { "content-type": "application/json", ...init.headers };
    }
    const res = await fetch(`${this.baseUrl}${path}`, init);
    const text = await res.text();
    let parsed: unknown = text;
    try {
      parsed = JSON.parse(text);
    } catch {
      // keep the text: the assertion will show it
    }
    const answer = { status: res.status, body: parsed as T, headers: res.headers };
    this.check?.(method, path, answer);
    return answer;
  }

  get<T = any>(path: string, headers?: Record<string, string>) {
    return this.request<T>("GET", path, undefined, headers);
  }
  post<T = any>(path: string, body: unknown, headers?: Record<string, string>) {
    return this.request<T>("POST", path, body, headers);
  }
  put<T = any>(path: string, body: unknown, headers?: Record<string, string>) {
    return this.request<T>("PUT", path, body, headers);
  }
  delete<T = any>(path: string, headers?: Record<string, string>) {
    return this.request<T>("DELETE", path, undefined, headers);
  }
}
