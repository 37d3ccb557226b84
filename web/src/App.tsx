import { ApolloProvider } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import { Shell } from './components/Shell';
import { createApi, type Api } from './lib/apollo';
import { ensureToken, onTokenChange } from './lib/auth';
import { describeError } from './lib/errors';

type Boot = { kind: 'signing-in' } | { kind: 'failed'; message: string } | { kind: 'ready'; api: Api; epoch: number };

/**
 * Signs in (as a guest on the first visit) and then renders the app. When the token
 * changes (renewed after a refusal, or by another tab), the app starts over with a new
 * client, so that nothing of the old identity lingers.
 */
export function App() {
  const [boot, setBoot] = useState<Boot>({ kind: 'signing-in' });
  const [attempt, setAttempt] = useState(0);

  useEffect(() => {
    let cancelled = false;
    let api: Api | null = null;
    let epoch = 0;
    const start = () => {
      api?.ws.dispose();
      api?.client.stop();
      api = createApi();
      setBoot({ kind: 'ready', api, epoch: epoch++ });
    };
    ensureToken().then(
      () => {
        if (!cancelled) start();
      },
      (e) => {
        if (!cancelled) setBoot({ kind: 'failed', message: describeError(e) });
      },
    );
    const off = onTokenChange(() => {
      if (!cancelled && api) start();
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
      <Shell key={boot.epoch} />
    </ApolloProvider>
  );
}
