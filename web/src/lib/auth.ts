// Guest identity for this browser: a bearer token from POST /auth/guest, kept in
// localStorage so every tab of this origin acts as the same user.

const TOKEN_KEY = 'talkgraph.token';
const USER_KEY = 'talkgraph.userId';

let token: string | null = readStored();
let renewing: Promise<string> | null = null;
const listeners = new Set<() => void>();

function readStored(): string | null {
  try {
    return localStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

function notify() {
  for (const l of listeners) l();
}

export function getToken(): string | null {
  return token;
}

/** Calls fn whenever the token changes, here or in another tab. Returns an unsubscribe. */
export function onTokenChange(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

window.addEventListener('storage', (e) => {
  if (e.key === TOKEN_KEY && e.newValue && e.newValue !== token) {
    token = e.newValue;
    notify();
  }
});

/** Returns the current token, signing in as a new guest when there is none. */
export function ensureToken(): Promise<string> {
  return token ? Promise.resolve(token) : renewToken(null);
}

/**
 * Gets a fresh guest token because `stale` was refused. When the token has already
 * changed since `stale` was sent (another request renewed it), answers the current one
 * instead of creating yet another user. Concurrent callers share one sign-in.
 */
export function renewToken(stale: string | null): Promise<string> {
  if (token && token !== stale) return Promise.resolve(token);
  if (!renewing) {
    renewing = signInAsGuest().finally(() => {
      renewing = null;
    });
  }
  return renewing;
}

async function signInAsGuest(): Promise<string> {
  const res = await fetch('/auth/guest', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: '{}',
  });
  if (!res.ok) {
    throw new Error(
      res.status === 404 || res.status === 403
        ? 'Guest sign-in is switched off on this server.'
        : `Guest sign-in failed (HTTP ${res.status}).`,
    );
  }
  const body = (await res.json()) as { token?: string; userId?: string };
  if (!body.token) throw new Error('Guest sign-in answered without a token.');
  token = body.token;
  try {
    localStorage.setItem(TOKEN_KEY, body.token);
    if (body.userId) localStorage.setItem(USER_KEY, body.userId);
  } catch {
    // Private mode without storage: the token lives as long as the tab.
  }
  notify();
  return body.token;
}
