import { CombinedGraphQLErrors, ServerError } from '@apollo/client';
import { describe, expect, it } from 'vitest';
import { describeError, isNetworkError, isRetriable, isUnauthenticated, NETWORK_TROUBLE } from './errors';

const gqlError = (message: string, code: string) =>
  new CombinedGraphQLErrors({ data: null, errors: [{ message, extensions: { code } }] });

const serverError = (status: number) =>
  new ServerError('Response not successful', { response: new Response('', { status }), bodyText: '' });

describe('describeError', () => {
  it("shows the server's message as it comes, whatever its code", () => {
    expect(describeError(gqlError('this question was already answered', 'CONFLICT'))).toBe(
      'This question was already answered',
    );
    expect(describeError(gqlError('the agent is still working on this session', 'CONFLICT'))).toBe(
      'The agent is still working on this session',
    );
    expect(describeError(gqlError('too many messages are waiting in this session', 'RATE_LIMITED'))).toBe(
      'Too many messages are waiting in this session',
    );
    expect(describeError(gqlError('session not found', 'NOT_FOUND'))).toBe('Session not found');
  });

  it('says the server cannot be reached for network failures', () => {
    expect(describeError(new TypeError('Failed to fetch'))).toBe(NETWORK_TROUBLE);
    expect(describeError(serverError(502))).toBe(NETWORK_TROUBLE);
    expect(describeError(serverError(503))).toBe(NETWORK_TROUBLE);
  });

  it('names other HTTP failures and plain errors', () => {
    expect(describeError(serverError(413))).toBe('The server answered HTTP 413. Try again.');
    expect(describeError(new Error('guest sign-in is switched off'))).toBe('Guest sign-in is switched off');
    expect(describeError('?')).toBe('Something went wrong.');
  });
});

describe('isNetworkError', () => {
  it('is true for fetch failures and gateway errors only', () => {
    expect(isNetworkError(new TypeError('Failed to fetch'))).toBe(true);
    expect(isNetworkError(serverError(504))).toBe(true);
    expect(isNetworkError(serverError(400))).toBe(false);
    expect(isNetworkError(gqlError('x', 'INTERNAL'))).toBe(false);
  });
});

describe('isUnauthenticated', () => {
  it('recognises a refused token on every transport', () => {
    expect(isUnauthenticated(gqlError('sign in first', 'UNAUTHENTICATED'))).toBe(true);
    expect(isUnauthenticated(serverError(401))).toBe(true);
    expect(isUnauthenticated(new Error('Socket closed with event 4401 Unauthorized'))).toBe(true);
    expect(isUnauthenticated(gqlError('no', 'CONFLICT'))).toBe(false);
  });
});

describe('isRetriable', () => {
  it('retries queries and mutations with an idempotency key, nothing else', () => {
    expect(isRetriable({ operationType: 'query' as never, variables: {} })).toBe(true);
    expect(
      isRetriable({ operationType: 'mutation' as never, variables: { input: { sessionId: 's', idempotencyKey: 'k' } } }),
    ).toBe(true);
    expect(isRetriable({ operationType: 'mutation' as never, variables: { input: { questionId: 'q' } } })).toBe(false);
    expect(isRetriable({ operationType: 'subscription' as never, variables: {} })).toBe(false);
  });
});
