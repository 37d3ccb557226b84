import { ApolloClient, ApolloLink, HttpLink } from '@apollo/client';
import { SetContextLink } from '@apollo/client/link/context';
import { ErrorLink } from '@apollo/client/link/error';
import { RetryLink } from '@apollo/client/link/retry';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { isSubscriptionOperation } from '@apollo/client/utilities';
import { createClient, type Client } from 'graphql-ws';
import { Observable, from, mergeMap } from 'rxjs';
import { getToken, renewToken } from './auth';
import { createCache } from './cache';
import { setConnectionState } from './connection';
import { isNetworkError, isRetriable, isUnauthenticated } from './errors';
import { withResume } from './resume';

export interface Api {
  client: ApolloClient;
  ws: Client;
}

function wsUrl(): string {
  const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${scheme}//${location.host}/query`;
}

/**
 * One Apollo Client for the page: queries and mutations over HTTP POST /query with the
 * bearer token, subscriptions over a graphql-transport-ws websocket on /query that
 * reconnects forever and resumes each stream after the last event it delivered.
 */
export function createApi(): Api {
  let hadSocket = false;
  let pongTimer: ReturnType<typeof setTimeout> | undefined;
  const ws: Client = createClient({
    url: wsUrl(),
    // Without a token (a reader of a shared conversation) connection_init carries none.
    connectionParams: () => {
      const token = getToken();
      return token ? { Authorization: `Bearer ${token}` } : {};
    },
    lazy: true,
    keepAlive: 20_000,
    retryAttempts: Infinity,
    // Exponential backoff capped at 5 s, with jitter so that many tabs do not return at once.
    retryWait: (retries) =>
      new Promise((resolve) => setTimeout(resolve, Math.min(250 * 2 ** retries, 5_000) + Math.random() * 250)),
    shouldRetry: () => true,
    on: {
      // A socket that stops answering pings (a laptop waking up, a dead NAT entry) is
      // dropped and replaced rather than left to look connected.
      ping: (received) => {
        if (!received) pongTimer = setTimeout(() => ws.terminate(), 5_000);
      },
      pong: (received) => {
        if (received) clearTimeout(pongTimer);
      },
      connecting: (isRetry) => setConnectionState(isRetry || hadSocket ? 'reconnecting' : 'connecting'),
      connected: () => {
        hadSocket = true;
        setConnectionState('connected');
      },
      closed: (event) => {
        clearTimeout(pongTimer);
        const code = (event as CloseEvent | undefined)?.code;
        // 1000 is the client closing an idle socket (no subscription left): not a problem.
        setConnectionState(code === 1000 ? 'idle' : 'reconnecting');
      },
    },
  });

  const wsLink = new GraphQLWsLink(withResume(ws));

  const authLink = new SetContextLink((prev) => {
    const token = getToken();
    return {
      headers: { ...prev.headers, ...(token ? { Authorization: `Bearer ${token}` } : {}) },
    };
  });

  // A refused token (expired, or signed by a secret the server no longer has): sign in
  // as a new guest and send the operation once more.
  const retryAuthLink = new ErrorLink(({ error, operation, forward }) => {
    if (!isUnauthenticated(error) || operation.getContext().authRetried) return;
    const sentWith = getToken();
    return from(renewToken(sentWith)).pipe(
      mergeMap(() => {
        operation.setContext({ authRetried: true });
        return forward(operation);
      }),
    ) as Observable<ApolloLink.Result>;
  });

  // A network failure may hide a request the server handled: queries and idempotent
  // mutations (addMessage sends its key) are sent again, a few times with backoff.
  const retryLink = new RetryLink({
    delay: { initial: 400, max: 5_000, jitter: true },
    attempts: (count, operation, error) => count <= 5 && isNetworkError(error) && isRetriable(operation),
  });

  const httpLink = new HttpLink({ uri: '/query' });

  const link = ApolloLink.split(
    (op) => isSubscriptionOperation(op.query),
    wsLink,
    ApolloLink.from([retryAuthLink, retryLink, authLink, httpLink]),
  );

  const client = new ApolloClient({
    link,
    cache: createCache(),
    defaultOptions: {
      watchQuery: { fetchPolicy: 'cache-and-network' },
    },
  });

  return { client, ws };
}
