// GraphiQL's fetcher for talkgraph: queries and mutations over HTTP POST /query, and
// subscriptions over the transport the user picks: a graphql-transport-ws websocket
// (graphql-ws's client) or server-sent events (POST /query with Accept: text/event-stream).
// The signed-in token goes into the Authorization header, and into the websocket's
// connection_init payload.

import { Kind, getOperationAST, parse, print, visit, type ASTNode, type OperationTypeNode } from 'graphql';
import { createClient, type Client } from 'graphql-ws';
import { EventStreamParser } from './sse';

export type Transport = 'ws' | 'sse';

export interface FetcherParams {
  query: string;
  operationName?: string | null;
  variables?: unknown;
}

export interface FetcherOpts {
  headers?: Record<string, unknown>;
}

type Result = Record<string, unknown>;

export interface Sink {
  next(value: Result): void;
  error(error: unknown): void;
  complete(): void;
}

/** An Observable as GraphiQL takes it for a subscription's results. */
export interface ResultStream {
  subscribe(sink: Partial<Sink>): { unsubscribe(): void };
}

/** What the page says about the subscription running (GraphiQL shows only its latest result). */
export interface Activity {
  transport: Transport;
  results: number;
  state: 'open' | 'ended' | 'failed';
}

/** The operation's type, or null when the document does not parse or names no single operation. */
export function operationType(query: string, operationName?: string | null): OperationTypeNode | null {
  try {
    return getOperationAST(parse(query), operationName || undefined)?.operation ?? null;
  } catch {
    return null;
  }
}

/**
 * GraphiQL's introspection query nests `ofType` nine deep (15 levels in all), past the
 * server's depth limit (12), which refuses it and leaves the editor without a schema.
 * Type references here are at most a few wrappers deep (`[Edge!]!` is three), so the
 * query is sent with `ofType` cut at `maxOfType` levels, which fits the limit.
 */
export function shallowIntrospection(query: string, maxOfType = 5): string {
  try {
    const doc = visit(parse(query), {
      Field(node, _key, _parent, _path, ancestors) {
        if (node.name.value !== 'ofType') return undefined;
        const depth = ancestors.filter((a) => isField(a) && a.name.value === 'ofType').length;
        return depth >= maxOfType ? null : undefined;
      },
    });
    return print(doc);
  } catch {
    return query;
  }
}

function isField(node: ASTNode | readonly ASTNode[]): node is Extract<ASTNode, { kind: Kind.FIELD }> {
  return !Array.isArray(node) && (node as ASTNode).kind === Kind.FIELD;
}

/** Headers for a request: the user's from GraphiQL's headers editor win over the sign-in. */
export function requestHeaders(token: string | null, user: Record<string, unknown> | undefined, accept: string) {
  const headers: Record<string, string> = { 'Content-Type': 'application/json', Accept: accept };
  if (token) headers.Authorization = `Bearer ${token}`;
  for (const [k, v] of Object.entries(user ?? {})) if (v != null) headers[k] = String(v);
  return headers;
}

function body(params: FetcherParams) {
  return JSON.stringify({ query: params.query, variables: params.variables ?? {}, operationName: params.operationName || undefined });
}

async function postJSON(url: string, params: FetcherParams, headers: Record<string, string>): Promise<Result> {
  const res = await fetch(url, { method: 'POST', headers, body: body(params) });
  try {
    return (await res.json()) as Result;
  } catch {
    throw new Error(`The server answered HTTP ${res.status} without a GraphQL result.`);
  }
}

/** A subscription over server-sent events: `event: next` frames carry results, `event: complete` ends. */
export function sseSubscription(url: string, params: FetcherParams, headers: Record<string, string>, sink: Sink): () => void {
  const abort = new AbortController();
  (async () => {
    const res = await fetch(url, { method: 'POST', headers, body: body(params), signal: abort.signal });
    if (!(res.headers.get('content-type') ?? '').includes('text/event-stream') || !res.body) {
      // Refused before it started (sign-in, validation): a plain GraphQL result.
      sink.next((await res.json()) as Result);
      sink.complete();
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = new EventStreamParser();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const ev of parser.push(value)) {
        if (ev.event === 'next') sink.next(JSON.parse(ev.data) as Result);
        else if (ev.event === 'complete') {
          sink.complete();
          abort.abort();
          return;
        }
      }
    }
    sink.complete();
  })().catch((error) => {
    if (!abort.signal.aborted) sink.error(error);
  });
  return () => abort.abort();
}

function wsError(error: unknown): Error {
  if (Array.isArray(error)) return new Error(error.map((e) => (e as { message?: string }).message).join('; '));
  if (error instanceof Error) return error;
  const close = error as { code?: number; reason?: string };
  if (typeof close?.code === 'number') {
    return new Error(`The websocket closed (${close.code}${close.reason ? `: ${close.reason}` : ''}).`);
  }
  return new Error('The websocket failed.');
}

export interface PlaygroundFetcher {
  (params: FetcherParams, opts?: FetcherOpts): Promise<Result> | ResultStream;
  dispose(): void;
}

/**
 * The fetcher for one token and one subscription transport. `onActivity` hears about the
 * subscription that runs. dispose() closes its websocket.
 */
export function createFetcher(options: {
  token: string | null;
  transport: Transport;
  origin?: string;
  onActivity?: (a: Activity | null) => void;
}): PlaygroundFetcher {
  const { token, transport, onActivity } = options;
  const origin = options.origin ?? location.origin;
  const httpUrl = `${origin}/query`;
  let ws: Client | null = null;
  const socket = () =>
    (ws ??= createClient({
      url: httpUrl.replace(/^http/, 'ws'),
      connectionParams: () => (token ? { Authorization: `Bearer ${token}` } : {}),
      lazy: true,
      retryAttempts: 2,
    }));

  const fetcher = ((params: FetcherParams, opts?: FetcherOpts) => {
    if (operationType(params.query, params.operationName) !== 'subscription') {
      const sent = params.operationName === 'IntrospectionQuery' ? { ...params, query: shallowIntrospection(params.query) } : params;
      return postJSON(httpUrl, sent, requestHeaders(token, opts?.headers, 'application/json'));
    }
    const stream: ResultStream = {
      subscribe(observer) {
        let results = 0;
        const report = (state: Activity['state']) => onActivity?.({ transport, results, state });
        const sink: Sink = {
          next: (value) => {
            results++;
            report('open');
            observer.next?.(value);
          },
          error: (error) => {
            report('failed');
            observer.error?.(transport === 'ws' ? wsError(error) : error);
          },
          complete: () => {
            report('ended');
            observer.complete?.();
          },
        };
        report('open');
        const stop =
          transport === 'ws'
            ? socket().subscribe(
                { query: params.query, variables: (params.variables ?? {}) as Record<string, unknown>, operationName: params.operationName || undefined },
                sink,
              )
            : sseSubscription(httpUrl, params, requestHeaders(token, opts?.headers, 'text/event-stream'), sink);
        return {
          unsubscribe() {
            stop();
            report('ended');
          },
        };
      },
    };
    return stream;
  }) as PlaygroundFetcher;
  fetcher.dispose = () => {
    void ws?.dispose();
    ws = null;
  };
  return fetcher;
}
