import type { ApolloClient } from '@apollo/client';
import { useApolloClient, useQuery } from '@apollo/client/react';
import { useCallback, useEffect, useState } from 'react';
import {
  AddMessageDocument,
  CancelRunDocument,
  DecideToolCallDocument,
  RespondToInputsDocument,
  EarlierMessagesDocument,
  MessageStreamDocument,
  RespondToQuestionDocument,
  SessionDocument,
  type DecideToolCallInput,
  type RespondToQuestionInput,
  type SessionQuery,
} from '../gql/graphql';
import { getToken, renewToken } from './auth';
import { describeError, isUnauthenticated, randomId } from './errors';
import { applyEvent, inputsAnswered, messageAccepted, questionAnswered, runStopped } from './events';

export const HISTORY_PAGE = 200;

export type LoadedSession = NonNullable<SessionQuery['session']>;

/**
 * Sends a message under a new idempotency key. The HTTP link's RetryLink sends it again
 * on network errors under the same key, which cannot create a second message. Once
 * accepted, the message and its run go into the cache at once.
 */
export async function addMessage(client: ApolloClient, sessionId: string, content: string) {
  const res = await client.mutate({
    mutation: AddMessageDocument,
    variables: { input: { sessionId, content, idempotencyKey: randomId() } },
    // The answer may come after newer events: messageAccepted writes only what is news.
    fetchPolicy: 'no-cache',
    update(cache, { data }) {
      if (data) messageAccepted(cache, data.addMessage.message, data.addMessage.run);
    },
  });
  return res.data?.addMessage ?? null;
}

export type ChatPhase =
  | { kind: 'loading' }
  | { kind: 'ready' }
  | { kind: 'missing' }
  | { kind: 'retrying'; message: string };

export interface Chat {
  phase: ChatPhase;
  /** The session as the cache holds it, once loaded. */
  session: LoadedSession | null;
  send(content: string): Promise<void>;
  answer(questionId: string, answer: string): Promise<void>;
  /** Approves (maybe with edited arguments) or rejects a tool call awaiting approval. */
  decide(input: DecideToolCallInput): Promise<void>;
  /** Answers several questions and decides several calls in one request: all or none. */
  respondAll(answers: RespondToQuestionInput[], decisions: DecideToolCallInput[]): Promise<void>;
  stop(): Promise<void>;
  loadEarlier(): Promise<void>;
}

/**
 * Loads a session's history into the cache and follows its event stream from the cursor
 * that came with it, applying each event to the cache. A stream that ends or fails is
 * started over from a fresh load (with backoff); a dropped socket is resumed by the
 * websocket client itself, after the last event applied (see resume.ts).
 */
export function useChat(sessionId: string): Chat {
  // One chat per mount: the view is keyed by session, so the phase starts at 'loading'.
  const client = useApolloClient();
  const variables = { id: sessionId, last: HISTORY_PAGE };
  // What the page shows: the cache's copy, which the loader below and the events fill.
  const query = useQuery(SessionDocument, { variables, fetchPolicy: 'cache-first' });
  const [phase, setPhase] = useState<ChatPhase>({ kind: 'loading' });

  useEffect(() => {
    let cancelled = false;
    let attempt = 0;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stream: { unsubscribe(): void } | undefined;
    let restartPending = false;

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
        const res = await client.query({ query: SessionDocument, variables: { id: sessionId, last: HISTORY_PAGE }, fetchPolicy: 'network-only' });
        if (cancelled) return;
        const session = res.data?.session;
        if (!session) {
          setPhase({ kind: 'missing' });
          return;
        }
        setPhase({ kind: 'ready' });
        stream = client
          .subscribe({
            query: MessageStreamDocument,
            variables: { sessionId, after: session.streamCursor },
            // Events are written to the cache by applyEvent, in one batch each.
            fetchPolicy: 'no-cache',
          })
          .subscribe({
            next: (result) => {
              if (result.error) return fail(result.error);
              const ev = result.data?.messageStream;
              if (!ev || cancelled) return;
              attempt = 0;
              applyEvent(client.cache, sessionId, ev);
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
  }, [client, sessionId]);

  const send = useCallback(
    async (content: string) => {
      await addMessage(client, sessionId, content);
    },
    [client, sessionId],
  );

  const answer = useCallback(
    async (questionId: string, text: string) => {
      await client.mutate({
        mutation: RespondToQuestionDocument,
        variables: { input: { questionId, answer: text } },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) questionAnswered(cache, sessionId, data.respondToQuestion.question, data.respondToQuestion.run);
        },
      });
    },
    [client, sessionId],
  );

  const decide = useCallback(
    async (input: DecideToolCallInput) => {
      await client.mutate({
        mutation: DecideToolCallDocument,
        variables: { input },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) inputsAnswered(cache, sessionId, { questions: [], toolCalls: [data.decideToolCall.toolCall], run: data.decideToolCall.run });
        },
      });
    },
    [client, sessionId],
  );

  const respondAll = useCallback(
    async (answers: RespondToQuestionInput[], decisions: DecideToolCallInput[]) => {
      await client.mutate({
        mutation: RespondToInputsDocument,
        variables: { input: { sessionId, answers, decisions } },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) inputsAnswered(cache, sessionId, data.respondToInputs);
        },
      });
    },
    [client, sessionId],
  );

  const stop = useCallback(async () => {
    await client.mutate({
      mutation: CancelRunDocument,
      variables: { sessionId },
      fetchPolicy: 'no-cache',
      update(cache, { data }) {
        if (data?.cancelRun) runStopped(cache, sessionId, data.cancelRun);
      },
    });
  }, [client, sessionId]);

  const session = query.data?.session ?? null;
  const before = session?.messages.pageInfo.startCursor;
  const { fetchMore } = query;
  const loadEarlier = useCallback(async () => {
    if (!before) return;
    // relayStylePagination puts the older page in front of the loaded history.
    await fetchMore({ query: EarlierMessagesDocument, variables: { id: sessionId, last: HISTORY_PAGE, before } });
  }, [fetchMore, sessionId, before]);

  // A session deleted meanwhile reads as null once the cache learns it.
  const shownPhase: ChatPhase = query.data && query.data.session === null ? { kind: 'missing' } : phase;
  return { phase: shownPhase, session, send, answer, decide, respondAll, stop, loadEarlier };
}
