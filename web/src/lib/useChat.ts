import type { ApolloClient } from '@apollo/client';
import { useApolloClient, useQuery } from '@apollo/client/react';
import { useCallback, useEffect, useState } from 'react';
import {
  AddMessageDocument,
  CancelRunDocument,
  DecideToolCallDocument,
  EditMessageDocument,
  ForkSessionDocument,
  RegenerateDocument,
  RespondToInputsDocument,
  EarlierMessagesDocument,
  MessageStreamDocument,
  RespondToQuestionDocument,
  SelectBranchDocument,
  SessionBranchDocument,
  SessionDocument,
  type BusyPolicy,
  type DecideToolCallInput,
  type RespondToQuestionInput,
  type SessionQuery,
} from '../gql/graphql';
import { getToken, renewToken } from './auth';
import { describeError, isUnauthenticated, randomId } from './errors';
import {
  applyEvent,
  branchSelected,
  inputsAnswered,
  messageAccepted,
  moveSessionToTop,
  questionAnswered,
  runStarted,
  runStopped,
  type StreamEvent,
} from './events';

export const HISTORY_PAGE = 200;

export type LoadedSession = NonNullable<SessionQuery['session']>;

/**
 * Sends a message under a new idempotency key. The HTTP link's RetryLink sends it again
 * on network errors under the same key, which cannot create a second message. Once
 * accepted, the message and its run go into the cache at once. `busyPolicy` is what the
 * message does if the agent works (the session's policy when null).
 */
export async function addMessage(client: ApolloClient, sessionId: string, content: string, busyPolicy: BusyPolicy | null = null) {
  const res = await client.mutate({
    mutation: AddMessageDocument,
    variables: { input: { sessionId, content, idempotencyKey: randomId(), ...(busyPolicy ? { busyPolicy } : {}) } },
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
  /** Sends a message; `busyPolicy` (null: the session's) says what it does while the agent works. */
  send(content: string, busyPolicy?: BusyPolicy | null): Promise<void>;
  /** A new version of a user message (beside it); its branch becomes current. */
  edit(messageId: string, content: string): Promise<void>;
  /** A new reply beside an assistant message. */
  regenerate(messageId: string): Promise<void>;
  /** Makes the branch through the message current. */
  selectBranch(messageId: string): Promise<void>;
  /** A new chat holding the branch up to the message; resolves to its ID. */
  fork(messageId: string): Promise<string>;
  /** Cancels a queued run. */
  cancelQueued(runId: string): Promise<void>;
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
    // While the branch is fetched again (the stream selected one the cache cannot rebuild),
    // events wait here and are applied after it, as if they followed the fetched history.
    let held: StreamEvent[] | null = null;

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

    /** Applies an event; one that needs the branch from the server holds the rest until it comes. */
    const apply = (ev: StreamEvent) => {
      if (held) {
        held.push(ev);
        return;
      }
      if (!applyEvent(client.cache, sessionId, ev)) fetchBranch();
    };

    const fetchBranch = () => {
      const buffer: StreamEvent[] = [];
      held = buffer;
      client
        .query({ query: SessionBranchDocument, variables: { id: sessionId, last: HISTORY_PAGE }, fetchPolicy: 'network-only' })
        .then(
          () => {
            // A restart meanwhile loads everything afresh and drops this buffer.
            if (cancelled || held !== buffer) return;
            held = null;
            for (const ev of buffer) apply(ev);
          },
          (error) => {
            if (cancelled || held !== buffer) return;
            held = null;
            // Start over from a fresh load, which has the branch.
            fail(error);
          },
        );
    };

    async function start() {
      restartPending = false;
      held = null;
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
              apply(ev);
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
    async (content: string, busyPolicy: BusyPolicy | null = null) => {
      await addMessage(client, sessionId, content, busyPolicy);
    },
    [client, sessionId],
  );

  // The branch switches of edit and regenerate come with the stream (BranchSelected): an
  // edit queued behind the agent switches only when its run starts.
  const edit = useCallback(
    async (messageId: string, content: string) => {
      await client.mutate({
        mutation: EditMessageDocument,
        variables: { input: { messageId, content } },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) messageAccepted(cache, data.editMessage.message, data.editMessage.run);
        },
      });
    },
    [client],
  );

  const regenerate = useCallback(
    async (messageId: string) => {
      await client.mutate({
        mutation: RegenerateDocument,
        variables: { input: { messageId } },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) runStarted(cache, sessionId, data.regenerate.run);
        },
      });
    },
    [client, sessionId],
  );

  const selectBranch = useCallback(
    async (messageId: string) => {
      await client.mutate({
        mutation: SelectBranchDocument,
        variables: { input: { messageId }, last: HISTORY_PAGE },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data) branchSelected(cache, sessionId, data.selectBranch.messages.edges.map((e) => e.node));
        },
      });
    },
    [client, sessionId],
  );

  const fork = useCallback(
    async (messageId: string) => {
      const res = await client.mutate({
        mutation: ForkSessionDocument,
        variables: { input: { messageId } },
        update(cache, { data }) {
          if (data) moveSessionToTop(cache, data.forkSession.id);
        },
      });
      const id = res.data?.forkSession.id;
      if (!id) throw new Error('The new chat could not be created.');
      return id;
    },
    [client],
  );

  const cancelQueued = useCallback(
    async (runId: string) => {
      await client.mutate({
        mutation: CancelRunDocument,
        variables: { sessionId, runId },
        fetchPolicy: 'no-cache',
        update(cache, { data }) {
          if (data?.cancelRun) runStopped(cache, sessionId, data.cancelRun);
        },
      });
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
  return {
    phase: shownPhase,
    session,
    send,
    edit,
    regenerate,
    selectBranch,
    fork,
    cancelQueued,
    answer,
    decide,
    respondAll,
    stop,
    loadEarlier,
  };
}
