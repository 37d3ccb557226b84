// The playground's sign-in: a bearer token of its own in localStorage (so signing in here
// does not change who the chat app is), from POST /auth/guest or pasted by the user.

export const PLAYGROUND_TOKEN_KEY = 'talkgraph.playground.token';
/** The chat app's token, which the playground offers to reuse. */
export const APP_TOKEN_KEY = 'talkgraph.token';

export function readStored(key: string): string | null {
  try {
    return localStorage.getItem(key);
  } catch {
    return null;
  }
}

export function storeToken(token: string | null) {
  try {
    if (token) localStorage.setItem(PLAYGROUND_TOKEN_KEY, token);
    else localStorage.removeItem(PLAYGROUND_TOKEN_KEY);
  } catch {
    // Private mode without storage: the token lives as long as the page.
  }
}

/** Strips a pasted "Bearer " prefix, quotes and whitespace. */
export function cleanToken(pasted: string): string {
  return pasted.trim().replace(/^bearer\s+/i, '').replace(/^["']|["']$/g, '').trim();
}

export async function signInAsGuest(): Promise<string> {
  const res = await fetch('/auth/guest', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: '{}',
  });
  const body = (await res.json().catch(() => ({}))) as { token?: string; errors?: { message?: string }[] };
  if (!res.ok || !body.token) {
    throw new Error(body.errors?.[0]?.message ?? `Guest sign-in failed (HTTP ${res.status}).`);
  }
  return body.token;
}
