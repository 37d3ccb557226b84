import type { Client, FormattedExecutionResult, Sink, SubscribePayload } from 'graphql-ws';
import { describe, expect, it } from 'vitest';
import { withResume } from './resume';

/** A graphql-ws client stand-in that records what it was handed. */
function fakeClient() {
  const calls: { payload: SubscribePayload; sink: Sink<FormattedExecutionResult> }[] = [];
  const client = {
    subscribe(payload: SubscribePayload, sink: Sink<FormattedExecutionResult>) {
      calls.push({ payload, sink });
      return () => {};
    },
  } as unknown as Client;
  return { client, calls };
}

const event = (cursor: string) => ({ data: { messageStream: { __typename: 'MessageChunk', cursor } } });

describe('withResume', () => {
  it('re-sends a subscription with after: the cursor of the last event delivered', () => {
    const { client, calls } = fakeClient();
    const delivered: unknown[] = [];
    withResume(client).subscribe(
      { query: 'subscription', variables: { sessionId: 's1', after: 'c0' } },
      { next: (r) => delivered.push(r), error: () => {}, complete: () => {} },
    );
    const { payload, sink } = calls[0];
    // What graphql-ws sends first: the cursor the history came with.
    expect(JSON.parse(JSON.stringify(payload)).variables).toEqual({ sessionId: 's1', after: 'c0' });
    sink.next(event('c1'));
    sink.next(event('c2'));
    expect(delivered).toHaveLength(2);
    // What it sends again after a reconnect: after the last event the page applied.
    expect(JSON.parse(JSON.stringify(payload)).variables).toEqual({ sessionId: 's1', after: 'c2' });
  });

  it('keeps the cursor when a result carries none (an error)', () => {
    const { client, calls } = fakeClient();
    withResume(client).subscribe(
      { query: 'subscription', variables: { after: 'c5' } },
      { next: () => {}, error: () => {}, complete: () => {} },
    );
    calls[0].sink.next({ errors: [{ message: 'boom' }] });
    expect(calls[0].payload.variables).toEqual({ after: 'c5' });
  });

  it('passes subscriptions without an after variable through untouched', () => {
    const { client, calls } = fakeClient();
    const payload = { query: 'subscription', variables: { sessionId: 's1' } };
    withResume(client).subscribe(payload, { next: () => {}, error: () => {}, complete: () => {} });
    expect(calls[0].payload).toBe(payload);
  });

  it('passes errors and completion on', () => {
    const { client, calls } = fakeClient();
    const seen: string[] = [];
    withResume(client).subscribe(
      { query: 'subscription', variables: { after: null } },
      { next: () => {}, error: () => seen.push('error'), complete: () => seen.push('complete') },
    );
    calls[0].sink.error(new Error('x'));
    calls[0].sink.complete();
    expect(seen).toEqual(['error', 'complete']);
  });
});
