import { CombinedGraphQLErrors, ServerError } from '@apollo/client';

export function errorCode(error: unknown): string | undefined {
  if (CombinedGraphQLErrors.is(error)) {
    const code = error.errors.find((e) => e.extensions?.code)?.extensions?.code;
    return typeof code === 'string' ? code : undefined;
  }
  return undefined;
}

/** True for failures of the network (the request may not have reached the server). */
export function isNetworkError(error: unknown): boolean {
  if (CombinedGraphQLErrors.is(error)) return false;
  if (ServerError.is(error)) return error.statusCode >= 502;
  return error instanceof TypeError || (error instanceof Error && /fetch|network/i.test(error.message));
}

/** A sentence fit to show a person. */
export function describeError(error: unknown): string {
  switch (errorCode(error)) {
    case 'CONFLICT':
      return 'The agent is still working and this chat does not take new messages until it finishes. Wait, or press Stop.';
    case 'RATE_LIMITED':
      return 'Too many requests at once. Try again in a moment.';
    case 'NOT_FOUND':
      return 'This chat no longer exists.';
    case 'UNAUTHENTICATED':
      return 'Your sign-in expired. Reload the page to continue.';
    case 'INTERNAL':
      return 'The server ran into a problem. Try again.';
  }
  if (CombinedGraphQLErrors.is(error) && error.errors[0]?.message) return error.errors[0].message;
  if (isNetworkError(error)) return 'Cannot reach the server. Check your connection and try again.';
  if (error instanceof Error && error.message) return error.message;
  return 'Something went wrong.';
}

export function sleep(ms: number) {
  return new Promise<void>((resolve) => setTimeout(resolve, ms));
}

/** A random ID, also where crypto.randomUUID is missing (plain http on a LAN address). */
export function randomId(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
