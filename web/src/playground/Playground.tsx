import { GraphiQL } from 'graphiql';
import { useEffect, useMemo, useState, type ComponentProps, type FormEvent } from 'react';
import { APP_TOKEN_KEY, PLAYGROUND_TOKEN_KEY, cleanToken, readStored, signInAsGuest, storeToken } from './auth';
import { EXAMPLE_QUERY, EXAMPLE_VARIABLES } from './example';
import { createFetcher, type Activity, type Transport } from './fetcher';

const TRANSPORT_KEY = 'talkgraph.playground.transport';

// GraphiQL subscribes to a fetcher's Observable with an observer object only, which ours takes.
type GraphiQLFetcher = ComponentProps<typeof GraphiQL>['fetcher'];

const TRANSPORTS: { value: Transport; label: string }[] = [
  { value: 'ws', label: 'WebSocket' },
  { value: 'sse', label: 'Server-sent events' },
];

/** ?query=…&variables=… open in the active tab, for links to a ready operation. */
function fromAddress(name: string): string | undefined {
  return new URLSearchParams(location.search).get(name) ?? undefined;
}

function describeActivity(a: Activity | null): string {
  if (!a) return '';
  const over = a.transport === 'ws' ? 'WebSocket' : 'server-sent events';
  const n = `${a.results} result${a.results === 1 ? '' : 's'}`;
  if (a.state === 'open') return `Subscription over ${over}: ${n}, listening…`;
  if (a.state === 'failed') return `Subscription over ${over} failed after ${n}.`;
  return `Subscription over ${over} ended after ${n}.`;
}

/** GraphiQL with a sign-in bar and a choice of transport for subscriptions. */
export function Playground() {
  const [token, setToken] = useState<string | null>(() => readStored(PLAYGROUND_TOKEN_KEY));
  const [transport, setTransport] = useState<Transport>(() =>
    readStored(TRANSPORT_KEY) === 'sse' ? 'sse' : 'ws',
  );
  const [viewer, setViewer] = useState<{ token: string; id: string | null; error?: string } | null>(null);
  const [pasted, setPasted] = useState('');
  const [busy, setBusy] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const [activity, setActivity] = useState<Activity | null>(null);
  const appToken = readStored(APP_TOKEN_KEY);

  const fetcher = useMemo(() => createFetcher({ token, transport, onActivity: setActivity }), [token, transport]);
  useEffect(() => () => fetcher.dispose(), [fetcher]);

  // Who the token is: the bar says so (and whether the server took it).
  useEffect(() => {
    if (!token) return;
    let cancelled = false;
    fetch('/query', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ query: '{ viewer { id } }' }),
    })
      .then((r) => r.json())
      .then((r: { data?: { viewer?: { id: string } }; errors?: { message: string }[] }) => {
        if (!cancelled) setViewer({ token, id: r.data?.viewer?.id ?? null, error: r.errors?.[0]?.message });
      })
      .catch(() => {
        if (!cancelled) setViewer({ token, id: null, error: 'cannot reach the server' });
      });
    return () => {
      cancelled = true;
    };
  }, [token]);

  function adopt(next: string | null) {
    storeToken(next);
    setToken(next);
    setProblem(null);
  }

  async function guest() {
    setBusy(true);
    setProblem(null);
    try {
      adopt(await signInAsGuest());
    } catch (e) {
      setProblem(e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  }

  function submitPasted(e: FormEvent) {
    e.preventDefault();
    const t = cleanToken(pasted);
    if (!t) return;
    adopt(t);
    setPasted('');
  }

  function pick(t: Transport) {
    setTransport(t);
    try {
      localStorage.setItem(TRANSPORT_KEY, t);
    } catch {
      // not kept
    }
  }

  const known = viewer && viewer.token === token ? viewer : null;
  let who = 'Not signed in: operations answer UNAUTHENTICATED until you sign in.';
  if (token && !known) who = 'Signed in; checking the token…';
  if (token && known?.id) who = `Signed in as ${known.id}`;
  if (token && known && !known.id) who = `The server refused this token: ${known.error ?? 'unknown error'}. Sign in again.`;

  return (
    <div className="pg">
      <header className="pg-bar">
        <a className="pg-brand" href="./" title="The chat app">
          <span className="pg-mark" aria-hidden="true">
            tg
          </span>
          talkgraph
        </a>
        <h1 className="pg-title">GraphQL playground</h1>
        <section className="pg-auth" aria-label="Sign-in">
          <p className={`pg-who${token && known?.id ? ' ok' : ''}`} role="status" aria-live="polite" data-viewer={known?.id ?? ''}>
            {who}
          </p>
          <button type="button" className="pg-btn primary" onClick={guest} disabled={busy}>
            {busy ? 'Signing in…' : 'Sign in as guest'}
          </button>
          {appToken && appToken !== token && (
            <button type="button" className="pg-btn" onClick={() => adopt(appToken)} title="Act as the user of the chat app in this browser">
              Use the chat app's sign-in
            </button>
          )}
          <form className="pg-paste" onSubmit={submitPasted}>
            <label htmlFor="pg-token">Token</label>
            <input
              id="pg-token"
              type="password"
              autoComplete="off"
              spellCheck={false}
              placeholder="Paste a bearer token"
              value={pasted}
              onChange={(e) => setPasted(e.target.value)}
            />
            <button type="submit" className="pg-btn" disabled={!pasted.trim()}>
              Use token
            </button>
          </form>
          {token && (
            <button type="button" className="pg-btn subtle" onClick={() => adopt(null)}>
              Sign out
            </button>
          )}
        </section>
        <fieldset className="pg-transport">
          <legend>Subscriptions over</legend>
          {TRANSPORTS.map((t) => (
            <label key={t.value}>
              <input type="radio" name="transport" value={t.value} checked={transport === t.value} onChange={() => pick(t.value)} />
              {t.label}
            </label>
          ))}
        </fieldset>
        {problem && (
          <p className="pg-problem" role="alert">
            {problem}
          </p>
        )}
        <p className="pg-activity" role="status" aria-live="polite" data-results={activity?.results ?? 0} data-transport={activity?.transport ?? ''}>
          {describeActivity(activity)}
        </p>
      </header>
      <main className="pg-main">
        <GraphiQL
          fetcher={fetcher as unknown as GraphiQLFetcher}
          defaultQuery={EXAMPLE_QUERY}
          defaultTabs={[{ query: EXAMPLE_QUERY, variables: EXAMPLE_VARIABLES }]}
          initialQuery={fromAddress('query')}
          initialVariables={fromAddress('variables')}
        />
      </main>
    </div>
  );
}
