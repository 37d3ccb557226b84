import type { ApolloClient } from '@apollo/client';
import { useApolloClient } from '@apollo/client/react';
import { useCallback, useEffect, useRef, useState } from 'react';
import {
  AddMessageDocument,
  CancelRunDocument,
  EarlierMessagesDocument,
  MessageStreamDocument,
  RespondToQuestionDocument,
  SessionDocument,
} from '../gql/graphql';
import { isUnauthenticated } from './apollo';
import { getToken, renewToken } from './auth';
import {
  applyEvent,
  fromSession,
  messageAccepted,
  prependEarlier,
  questionAnswered,
  type ChatState,
  type StreamEvent,
} from './chat';
import { describeError, isNetworkError, randomId, sleep } from './errors';

export const HISTORY_PAGE = 200;

/**
 * Sends a message. A network failure may hide a message the server accepted, so it is
 * sent again (a few times, with backoff) under the same idempotency key, which cannot
 * create a second one.
 */
export async function addMessage(client: ApolloClient, sessionId: string, content: string) {
  const idempotencyKey = randomId();
  for (let attempt = 0; ; attempt++) {
    try {
      const res = await client.mutate({
        mutation: AddMessageDocument,
        variables: { input: { sessionId, content, idempotencyKey } },
      });
      return res.data?.addMessage ?? null;
    } catch (error) {
      if (attempt < 4 && isNetworkError(error)) {
        await sleep(400 * 2 ** attempt);
        continue;
      }
      throw error;
    }
  }
}

export type ChatPhase =
  | { kind: 'loading' }
  | { kind: 'ready' }
  | { kind: 'missing' }
  | { kind: 'retrying'; message: string };

export interface Chat {
  phase: ChatPhase;
  state: ChatState | null;
  send(content: string): Promise<void>;
  answer(questionId: string, answer: string): Promise<void>;
  stop(): Promise<void>;
  loadEarlier(): Promise<void>;
  /** Shows new settings at once, before their SessionUpdated event arrives. */
  settingsSaved(settings: ChatState['settings']): void;
}

/**
 * Loads a session's history and follows its event stream from the cursor that came with
 * it. A stream that ends or fails is started over from a fresh load (with backoff); a
 * dropped socket is resumed by the websocket client itself, after the last event seen.
 */
export function useChat(
  sessionId: string,
  onEvent?: (ev: StreamEvent) => void,
): Chat {
  const client = useApolloClient();
  const [state, setState] = useState<ChatState | null>(null);
  const [phase, setPhase] = useState<ChatPhase>({ kind: 'loading' });
  const stateRef = useRef<ChatState | null>(null);
  const onEventRef = useRef(onEvent);
  onEventRef.current = onEvent;

  const update = useCallback((fn: (s: ChatState) => ChatState) => {
    setState((s) => {
      const next = s ? fn(s) : s;
      stateRef.current = next;
      return next;
    });
  }, []);

  useEffect(() => {
    let cancelled = false;
    let attempt = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stream: { unsubscribe(): void } | undefined;
    let restartPending = false;

    setState(null);
    stateRef.current = null;
    setPhase({ kind: 'loading' });

    const fail = (error: unknown) => {
      stream?.unsubscribe();
      stream = undefined;
      // An error and the completion after it ask for one restart, not two.
      if (cancelled || restartPending) return;
      restartPending = true;
      const delay = Math.min(500 * 2 ** attempt++, 8_000);
      if (isUnauthenticated(error)) {
        // Sign in again, then load as the new identity (to which this chat may not belong).
        renewToken(getToken()).then(
          () => {
            if (!cancelled) timer = setTimeout(start, 0);
          },
          (e) => {
            if (cancelled) return;
            setPhase({ kind: 'retrying', message: describeError(e) });
            timer = setTimeout(start, delay);
          },
        );
        return;
      }
      setPhase({ kind: 'retrying', message: describeError(error) });
      timer = setTimeout(start, delay);
    };

    async function start() {
      restartPending = false;
      try {
        const res = await client.query({
          query: SessionDocument,
          variables: { id: sessionId, last: HISTORY_PAGE },
          fetchPolicy: 'network-only',
        });
        if (cancelled) return;
        const session = res.data?.session;
        if (!session) {
          setPhase({ kind: 'missing' });
          return;
        }
        const initial = fromSession(session);
        stateRef.current = initial;
        setState(initial);
        setPhase({ kind: 'ready' });

        stream = client
          .subscribe({
            query: MessageStreamDocument,
            variables: { sessionId, after: initial.cursor },
            fetchPolicy: 'no-cache',
          })
          .subscribe({
            next: (result) => {
              if (result.error) return fail(result.error);
              const ev = result.data?.messageStream;
              if (!ev || cancelled) return;
              attempt = 0;
              update((s) => applyEvent(s, ev));
              onEventRef.current?.(ev);
            },
            error: fail,
            complete: () => fail(new Error('The live updates stopped; reconnecting.')),
          });
      } catch (error) {
        fail(error);
      }
    }

    start();
    return () => {
      cancelled = true;
      clearTimeout(timer);
      stream?.unsubscribe();
    };
  }, [client, sessionId, update]);

  const send = useCallback(
    async (content: string) => {
      const payload = await addMessage(client, sessionId, content);
      if (payload) update((s) => messageAccepted(s, payload.message, payload.run));
    },
    [client, sessionId, update],
  );

  const answer = useCallback(
    async (questionId: string, text: string) => {
      await client.mutate({
        mutation: RespondToQuestionDocument,
        variables: { input: { questionId, answer: text } },
      });
      update((s) => questionAnswered(s, questionId));
    },
    [client, update],
  );

  const stop = useCallback(async () => {
    await client.mutate({ mutation: CancelRunDocument, variables: { sessionId } });
  }, [client, sessionId]);

  const loadEarlier = useCallback(async () => {
    const before = stateRef.current?.earlierCursor;
    if (!before) return;
    const res = await client.query({
      query: EarlierMessagesDocument,
      variables: { id: sessionId, last: HISTORY_PAGE, before },
      fetchPolicy: 'network-only',
    });
    const conn = res.data?.session?.messages;
    if (!conn) return;
    update((s) =>
      prependEarlier(
        s,
        conn.edges.map((e) => e.node),
        conn.pageInfo.hasPreviousPage,
        conn.pageInfo.startCursor ?? null,
      ),
    );
  }, [client, sessionId, update]);

  const settingsSaved = useCallback(
    (settings: ChatState['settings']) => update((s) => ({ ...s, settings })),
    [update],
  );

  return { phase, state, send, answer, stop, loadEarlier, settingsSaved };
}
