import { CombinedGraphQLErrors, ServerError, type ApolloLink } from '@apollo/client';

/** The extensions.code of the first GraphQL error that has one. */
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

/** True when the error says the token was refused (a GraphQL error or HTTP 401). */
export function isUnauthenticated(error: unknown): boolean {
  if (CombinedGraphQLErrors.is(error)) {
    return error.errors.some((e) => e.extensions?.code === 'UNAUTHENTICATED');
  }
  if (ServerError.is(error)) return error.statusCode === 401;
  if (error instanceof Error) return /\b4401\b/.test(error.message);
  return false;
}

/**
 * Whether an operation may be sent again after a network failure: queries, and mutations
 * that carry an idempotency key (the server answers a repeat with the first answer).
 */
export function isRetriable(operation: Pick<ApolloLink.Operation, 'operationType' | 'variables'>): boolean {
  if (operation.operationType === 'query') return true;
  const input = (operation.variables as { input?: { idempotencyKey?: unknown } } | undefined)?.input;
  return operation.operationType === 'mutation' && typeof input?.idempotencyKey === 'string';
}

export const NETWORK_TROUBLE = 'Cannot reach the server. Check your connection and try again.';

/**
 * A sentence fit to show a person. The server's GraphQL error messages are written for
 * users and shown as they come (with a capital first letter); only failures that have no
 * such message get a sentence of ours.
 */
export function describeError(error: unknown): string {
  if (CombinedGraphQLErrors.is(error)) {
    const message = error.errors.find((e) => e.message)?.message;
    if (message) return sentence(message);
  }
  if (isNetworkError(error)) return NETWORK_TROUBLE;
  if (ServerError.is(error)) return `The server answered HTTP ${error.statusCode}. Try again.`;
  if (error instanceof Error && error.message) return sentence(error.message);
  return 'Something went wrong.';
}

function sentence(s: string): string {
  return s.charAt(0).toUpperCase() + s.slice(1);
}

/** A random ID, also where crypto.randomUUID is missing (plain http on a LAN address). */
export function randomId(): string {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}
