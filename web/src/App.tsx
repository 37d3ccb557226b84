import { ApolloProvider } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import { SharedPage } from './components/SharedPage';
import { Shell } from './components/Shell';
import { createApi, type Api } from './lib/apollo';
import { ensureToken, onTokenChange } from './lib/auth';
import { describeError } from './lib/errors';
import { sharedToken } from './lib/shared';

/** A page at /s/<token>: a shared conversation, read without signing in. */
function SharedApp({ token }: { token: string }) {
  // The page's one client, for as long as the page lives: it has no token to change.
  const [api] = useState(createApi);
  return (
    <ApolloProvider client={api.client}>
      <SharedPage token={token} />
    </ApolloProvider>
  );
}

type Boot = { kind: 'signing-in' } | { kind: 'failed'; message: string } | { kind: 'ready'; api: Api };

/**
 * The app: a shared conversation at /s/<token>, which needs no sign-in; anywhere else the
 * chat app, which signs in (as a guest on the first visit) and then renders. When the token
 * changes (renewed after a refusal, or by another tab), the websocket reconnects with it
 * and every query on screen is fetched again as the new identity.
 */
export function App() {
  const token = sharedToken(location.pathname);
  return token ? <SharedApp token={token} /> : <SignedInApp />;
}

function SignedInApp() {
  const [boot, setBoot] = useState<Boot>({ kind: 'signing-in' });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    let cancelled = false;
    let api: Api | null = null;
    ensureToken().then(
      () => {
        if (cancelled) return;
        api = createApi();
        setBoot({ kind: 'ready', api });
      },
      (e) => {
        if (!cancelled) setBoot({ kind: 'failed', message: describeError(e) });
      },
    );
    const off = onTokenChange(() => {
      if (cancelled || !api) return;
      api.ws.terminate();
      api.client.resetStore().catch(() => {
        // Queries that fail now show their own errors and retry.
      });
    });
    return () => {
      cancelled = true;
      off();
      api?.ws.dispose();
      api?.client.stop();
    };
  }, [attempt]);

  if (boot.kind === 'signing-in') {
    return (
      <div className="boot" role="status" aria-live="polite">
        Signing in…
      </div>
    );
  }
  if (boot.kind === 'failed') {
    return (
      <main className="boot">
        <h1>talkgraph</h1>
        <p role="alert">{boot.message}</p>
        <button type="button" className="btn primary" onClick={() => setAttempt((n) => n + 1)}>
          Try again
        </button>
      </main>
    );
  }
  return (
    <ApolloProvider client={boot.api.client}>
      <Shell />
    </ApolloProvider>
  );
}
