import type { Client, FormattedExecutionResult, Sink, SubscribePayload } from 'graphql-ws';

/**
 * Wraps a graphql-ws client so that subscriptions taking an `after:` cursor resume from
 * the last event they delivered when the socket reconnects.
 *
 * graphql-ws re-sends a subscription's original payload after every reconnect. For a
 * subscription whose variables include `after`, the payload handed to graphql-ws computes
 * its variables when it is serialised, with `after` set to the cursor of the latest event
 * delivered (the `cursor` field of the subscription's root field). A resumed stream thus
 * starts right after what the page has already applied: nothing lost, nothing twice.
 */
export function withResume(client: Client): Client {
  return {
    ...client,
    subscribe<Data = Record<string, unknown>, Extensions = unknown>(
      payload: SubscribePayload,
      sink: Sink<FormattedExecutionResult<Data, Extensions>>,
    ) {
      const variables = payload.variables;
      if (!variables || !('after' in variables)) return client.subscribe(payload, sink);

      let after = variables.after as string | null | undefined;
      const resumable: SubscribePayload = {
        ...payload,
        get variables() {
          return { ...variables, after };
        },
      };
      return client.subscribe<Data, Extensions>(resumable, {
        next(result) {
          const cursor = rootCursor(result.data);
          if (cursor) after = cursor;
          sink.next(result);
        },
        error: (err) => sink.error(err),
        complete: () => sink.complete(),
      });
    },
  };
}

function rootCursor(data: unknown): string | null {
  if (!data || typeof data !== 'object') return null;
  for (const value of Object.values(data)) {
    if (value && typeof value === 'object' && 'cursor' in value) {
      const cursor = (value as { cursor: unknown }).cursor;
      if (typeof cursor === 'string' && cursor) return cursor;
    }
  }
  return null;
}
