// How the things the server tells the page change the cache: each event of a session's
// stream, and the answers of the mutations that start or end a run.
//
// Objects that come whole (a message, a run, a question, a tool call, a session) are simply
// written and normalise over what the cache holds. What no object carries is updated here:
// text chunks and tool output (placed at their offset), the edges of the session's
// `messages` connection (the current branch of the conversation's tree) and of the session
// list, the versions of a message (siblingIds), and the session's state (its active run,
// questions and tool calls waiting for the user, queued runs and status).

import { gql, type ApolloCache, type Reference } from '@apollo/client';
import {
  MessageFieldsFragmentDoc,
  MessageStreamDocument,
  QuestionFieldsFragmentDoc,
  RunFieldsFragmentDoc,
  SessionStateFieldsFragmentDoc,
  ToolCallFieldsFragmentDoc,
  type MessageFieldsFragment,
  type QuestionFieldsFragment,
  type RunFieldsFragment,
  type MessageStreamSubscription,
  type RunStatus,
  type SessionStateFieldsFragment,
  type SessionStatus,
  type ToolCallFieldsFragment,
  type ToolCallStatus,
} from '../gql/graphql';
import { branchTo, mergeSiblingIds } from './branch';
import { isFinishedRun } from './cache';
import { placeAt } from './text';

export type StreamEvent = MessageStreamSubscription['messageStream'];
export type SessionState = SessionStateFieldsFragment;

interface Connection {
  edges: { cursor?: string; node: Reference }[];
  [key: string]: unknown;
}

// Small fragments of our own for existence and status checks.
const MESSAGE_ID = gql`
  fragment MessageId on Message {
    id
  }
`;

const RUN_STATUS = gql`
  fragment RunStatusOnly on Run {
    status
  }
`;

const QUESTION_ANSWERED = gql`
  fragment QuestionAnsweredAt on Question {
    answeredAt
    withdrawn
  }
`;

const TOOL_CALL_STATUS = gql`
  fragment ToolCallStatusOnly on ToolCall {
    status
  }
`;

const RUN_PROMPT = gql`
  fragment RunPromptMessage on Run {
    promptMessageId @client
  }
`;

const sessionKey = (id: string) => `TalkSession:${id}`;
const messageKey = (id: string) => `Message:${id}`;

// ---------- pure rules ----------

type Pending = { __typename?: string; id: string; runId: string };

function statusOfRun(status: RunStatus): SessionStatus {
  if (status === 'WAITING_FOR_INPUT') return 'WAITING_FOR_INPUT';
  if (status === 'RUNNING' || status === 'QUEUED') return 'RUNNING';
  return 'IDLE';
}

/**
 * The session with these inputs waiting (oldest first): `pendingQuestion` is the oldest
 * question, and the session waits for input while anything waits. Once nothing is left,
 * a session that waited goes on (its run's RUNNING follows in the stream).
 */
function withPending(s: SessionState, questions: Pending[], approvals: Pending[]): SessionState {
  const waiting = questions.length > 0 || approvals.length > 0;
  const status: SessionStatus = waiting ? 'WAITING_FOR_INPUT' : s.status === 'WAITING_FOR_INPUT' ? 'RUNNING' : s.status;
  const first = questions[0];
  return {
    ...s,
    pendingQuestions: questions,
    pendingApprovals: approvals,
    pendingQuestion: first ? { __typename: 'Question', id: first.id, runId: first.runId } : null,
    status,
  } as SessionState;
}

const pendingQuestionsOf = (s: SessionState): Pending[] => s.pendingQuestions ?? [];
const pendingApprovalsOf = (s: SessionState): Pending[] => s.pendingApprovals ?? [];

type Queued = { __typename?: 'Run'; id: string; status: RunStatus };

/** The session's state once `run` has the given status. */
export function sessionAfterRun(s: SessionState, run: { id: string; status: RunStatus }): SessionState {
  const queuedRuns: Queued[] = (s.queuedRuns ?? []).filter((r) => r.id !== run.id);
  if (run.status === 'QUEUED') {
    // A queued run behind an idle session is about to start: the agent counts as busy.
    return {
      ...s,
      queuedRuns: [...queuedRuns, { __typename: 'Run', id: run.id, status: run.status }],
      status: s.status === 'IDLE' ? 'RUNNING' : s.status,
    } as SessionState;
  }
  if (isFinishedRun(run.status)) {
    const wasActive = !s.activeRun || s.activeRun.id === run.id;
    const activeRun = wasActive ? null : s.activeRun;
    // Whatever the run waited on is withdrawn with it.
    const questions = pendingQuestionsOf(s).filter((q) => q.runId !== run.id);
    const approvals = pendingApprovalsOf(s).filter((c) => c.runId !== run.id);
    const first = questions[0];
    const status: SessionStatus = activeRun
      ? statusOfRun(activeRun.status)
      : queuedRuns.length > 0
        ? 'RUNNING'
        : 'IDLE';
    return {
      ...s,
      activeRun,
      pendingQuestion: first ? { __typename: 'Question', id: first.id, runId: first.runId } : null,
      pendingQuestions: questions,
      pendingApprovals: approvals,
      queuedRuns,
      status,
    } as SessionState;
  }
  return { ...s, activeRun: { __typename: 'Run', id: run.id, status: run.status }, queuedRuns, status: statusOfRun(run.status) } as SessionState;
}

/** The session's state once the agent asks question `q` (it joins the others waiting). */
export function sessionAsked(s: SessionState, q: { id: string; runId: string }): SessionState {
  const questions = pendingQuestionsOf(s);
  if (questions.some((x) => x.id === q.id)) return s.status === 'WAITING_FOR_INPUT' ? s : withPending(s, questions, pendingApprovalsOf(s));
  return withPending(s, [...questions, { __typename: 'Question', id: q.id, runId: q.runId }], pendingApprovalsOf(s));
}

/** The session's state once question `questionId` is answered or withdrawn. */
export function sessionAnswered(s: SessionState, questionId: string): SessionState {
  const questions = pendingQuestionsOf(s);
  if (!questions.some((q) => q.id === questionId) && s.pendingQuestion?.id !== questionId) return s;
  return withPending(s, questions.filter((q) => q.id !== questionId), pendingApprovalsOf(s));
}

/** The session's state once tool call `call` waits for approval. */
export function sessionApprovalRequested(s: SessionState, call: { id: string; runId: string }): SessionState {
  const approvals = pendingApprovalsOf(s);
  if (approvals.some((x) => x.id === call.id)) return s.status === 'WAITING_FOR_INPUT' ? s : withPending(s, pendingQuestionsOf(s), approvals);
  return withPending(s, pendingQuestionsOf(s), [...approvals, { __typename: 'ToolCall', id: call.id, runId: call.runId }]);
}

/** The session's state once tool call `callId` no longer waits (decided, or withdrawn). */
export function sessionApprovalEnded(s: SessionState, callId: string): SessionState {
  const approvals = pendingApprovalsOf(s);
  if (!approvals.some((c) => c.id === callId)) return s;
  return withPending(s, pendingQuestionsOf(s), approvals.filter((c) => c.id !== callId));
}

// ---------- cache updates ----------

function updateSessionState(cache: ApolloCache, sessionId: string, fn: (s: SessionState) => SessionState) {
  const id = sessionKey(sessionId);
  const s = cache.readFragment({ id, fragment: SessionStateFieldsFragmentDoc, returnPartialData: false });
  // A session whose chat was never opened on this page has no such state to keep.
  if (!s) return;
  const next = fn(s);
  if (next !== s) cache.writeFragment({ id, fragment: SessionStateFieldsFragmentDoc, data: next });
}

/** The session's state once the run (as the cache now knows it) has its status. */
function applyRun(cache: ApolloCache, sessionId: string, runId: string) {
  const status = cache.readFragment<{ status: RunStatus }>({ id: `Run:${runId}`, fragment: RUN_STATUS });
  if (status) updateSessionState(cache, sessionId, (s) => sessionAfterRun(s, { id: runId, status: status.status }));
}

/**
 * Adds an edge for the message at the end of the current branch, unless it has one. A
 * message whose parent (`parentId`, when known) is not the branch's last message belongs
 * to another branch (an edited message queued, a reply of a branch left since): it stays
 * in the cache, and shows when the stream selects its branch.
 */
export function appendMessage(cache: ApolloCache, sessionId: string, messageId: string, parentId?: string | null) {
  cache.modify<{ messages: Connection }>({
    id: sessionKey(sessionId),
    fields: {
      messages(conn, { readField, toReference }) {
        const c = conn as unknown as Connection;
        if (!c?.edges || c.edges.some((e) => readField('id', e.node) === messageId)) return conn;
        if (parentId !== undefined) {
          const last = c.edges[c.edges.length - 1];
          const lastId = last ? readField<string>('id', last.node) : null;
          if (lastId !== parentId) return conn;
        }
        const node = toReference(messageKey(messageId));
        if (!node) return conn;
        // Events carry no history cursor; the page's cursors for paging back are the first
        // edge's, which the server gave.
        return { ...c, edges: [...c.edges, { __typename: 'MessageEdge', cursor: '', node }] } as unknown as typeof conn;
      },
    },
  });
}

/**
 * Shows the branch that ends with `leafId`, rebuilt from the parent links of the messages
 * in the cache (see branch.ts): the start it shares with the branch shown stays as loaded.
 * From the stream (`mode` 'event'), a leaf already shown cuts the branch after it; from a
 * mutation's answer ('answer'), which may come after newer events, a leaf already shown
 * changes nothing. False when a message of the branch is missing: the page has to fetch the
 * branch.
 */
export function showBranch(cache: ApolloCache, sessionId: string, leafId: string, mode: 'event' | 'answer' = 'event'): boolean {
  let found = true;
  cache.modify<{ messages: Connection }>({
    id: sessionKey(sessionId),
    fields: {
      messages(conn, { readField, toReference }) {
        const c = conn as unknown as Connection & { pageInfo?: Record<string, unknown> };
        // A history never loaded here has no branch to show.
        if (!c?.edges) return conn;
        const shown = c.edges.map((e) => readField<string>('id', e.node) ?? '');
        if (mode === 'answer' && shown.includes(leafId)) return conn;
        const branch = branchTo(leafId, shown, (id) => {
          const ref = toReference(messageKey(id));
          return ref ? readField<string | null>('parentId', ref) : undefined;
        });
        if (!branch) {
          found = false;
          return conn;
        }
        if (branch.ids.length === shown.length && branch.kept === shown.length) return conn;
        const kept = c.edges.slice(0, Math.max(branch.kept, 0));
        const added = branch.ids.slice(kept.length).map((id) => ({
          __typename: 'MessageEdge',
          cursor: '',
          node: toReference(messageKey(id)) as Reference,
        }));
        // Found up to its first message: nothing earlier to load.
        const pageInfo = branch.kept < 0 ? { ...c.pageInfo, hasPreviousPage: false, startCursor: null } : c.pageInfo;
        return { ...c, edges: [...kept, ...added], pageInfo } as unknown as typeof conn;
      },
    },
  });
  return found;
}

/** The other versions of a new message learn of it (their lists come from before it). */
function addSibling(cache: ApolloCache, message: { id: string; siblingIds?: string[] | null }) {
  const ids = message.siblingIds;
  if (!ids) return;
  for (const id of ids) {
    if (id === message.id) continue;
    cache.modify<{ siblingIds: string[] }>({
      id: messageKey(id),
      fields: { siblingIds: (known) => mergeSiblingIds(known as unknown as string[], ids) as unknown as typeof known },
    });
  }
}

/** Notes on a user message's run which message it answers (for the queue). */
function notePrompt(cache: ApolloCache, message: Pick<MessageFieldsFragment, 'id' | 'role' | 'kind' | 'runId'>) {
  if (message.role !== 'USER' || message.kind !== 'TEXT' || !message.runId) return;
  cache.writeFragment({ id: `Run:${message.runId}`, fragment: RUN_PROMPT, data: { __typename: 'Run', promptMessageId: message.id } });
}

/**
 * Puts the session first in the session list (it has just had a message: the server lists
 * by most recent activity) and moves its updatedAt to `at`. A session not listed yet (just
 * created) is added in front.
 */
export function moveSessionToTop(cache: ApolloCache, sessionId: string, at?: string) {
  if (at) {
    cache.modify<{ updatedAt: string }>({
      id: sessionKey(sessionId),
      fields: { updatedAt: (prev) => (Date.parse(at) > Date.parse(prev as string) ? at : prev) },
    });
  }
  cache.modify<{ sessions: Connection }>({
    id: 'ROOT_QUERY',
    fields: {
      sessions(conn, { readField, toReference }) {
        const c = conn as unknown as Connection;
        if (!c?.edges) return conn;
        const i = c.edges.findIndex((e) => readField('id', e.node) === sessionId);
        if (i === 0) return conn;
        const node = toReference(sessionKey(sessionId));
        if (i < 0 && !node) return conn;
        const edge = i >= 0 ? c.edges[i] : { __typename: 'TalkSessionEdge', cursor: '', node: node as Reference };
        return { ...c, edges: [edge, ...c.edges.filter((_, j) => j !== i)] } as unknown as typeof conn;
      },
    },
  });
}

/** The ID of the last message of the branch shown, or null. */
function lastShownId(cache: ApolloCache, sessionId: string): string | null {
  let last: string | null = null;
  cache.modify<{ messages: Connection }>({
    id: sessionKey(sessionId),
    fields: {
      messages(conn, { readField }) {
        const edges = (conn as unknown as Connection)?.edges;
        const edge = edges?.[edges.length - 1];
        if (edge) last = readField<string>('id', edge.node) ?? null;
        return conn;
      },
    },
  });
  return last;
}

/**
 * An empty streaming reply, for text or a tool call of a message the page has not seen
 * begin: a reply follows the branch's last message (its own event, when it comes, says).
 */
function ensureMessage(cache: ApolloCache, sessionId: string, messageId: string, at: string, runId: string | null) {
  const id = messageKey(messageId);
  if (cache.readFragment({ id, fragment: MESSAGE_ID })) return;
  const placeholder: MessageFieldsFragment & { __typename: 'Message' } = {
    __typename: 'Message',
    id: messageId,
    sessionId,
    role: 'ASSISTANT',
    kind: 'TEXT',
    content: '',
    status: 'STREAMING',
    error: null,
    runId,
    createdAt: at,
    parentId: lastShownId(cache, sessionId),
    siblingIds: [messageId],
    question: null,
    toolCalls: [],
  };
  cache.writeFragment({ id, fragment: MessageFieldsFragmentDoc, fragmentName: 'MessageFields', data: placeholder });
  appendMessage(cache, sessionId, messageId);
}

/** Lists the tool call among its message's calls, unless it is there. */
function addToolCall(cache: ApolloCache, messageId: string, callId: string) {
  cache.modify<{ toolCalls: Reference[] }>({
    id: messageKey(messageId),
    fields: {
      toolCalls: (refs, { toReference }) => {
        const list = refs as unknown as Reference[];
        const ref = toReference(`ToolCall:${callId}`);
        if (!ref || list.some((r) => r.__ref === ref.__ref)) return refs;
        return [...list, ref] as unknown as typeof refs;
      },
    },
  });
}

function activeRunId(cache: ApolloCache, sessionId: string): string | null {
  return cache.readFragment({ id: sessionKey(sessionId), fragment: SessionStateFieldsFragmentDoc })?.activeRun?.id ?? null;
}

/**
 * Applies one event of the session's stream to the cache, in one batch (one re-render).
 * False when the event selected a branch the cache cannot rebuild: the caller fetches it.
 */
export function applyEvent(cache: ApolloCache, sessionId: string, ev: StreamEvent): boolean {
  let complete = true;
  cache.batch({
    update: (c) => {
      // The objects the event carries normalise over what the cache holds.
      c.writeQuery({ query: MessageStreamDocument, variables: { sessionId }, data: { messageStream: ev } });
      complete = applyEventRelations(c, sessionId, ev);
    },
  });
  return complete;
}

function applyEventRelations(c: ApolloCache, sessionId: string, ev: StreamEvent): boolean {
  switch (ev.__typename) {
    case 'MessageAdded':
      addSibling(c, ev.message);
      notePrompt(c, ev.message);
      appendMessage(c, sessionId, ev.message.id, ev.message.parentId);
      moveSessionToTop(c, sessionId, ev.at);
      return true;
    case 'MessageCompleted':
      appendMessage(c, sessionId, ev.message.id, ev.message.parentId);
      return true;
    case 'BranchSelected':
      return showBranch(c, sessionId, ev.leafId, 'event');
    case 'MessageChunk':
      ensureMessage(c, sessionId, ev.messageId, ev.at, activeRunId(c, sessionId));
      c.modify<{ content: string }>({
        id: messageKey(ev.messageId),
        fields: { content: (text) => placeAt(text as string, ev.offset, ev.delta) },
      });
      return true;
    case 'RunStatusChanged':
      applyRun(c, sessionId, ev.run.id);
      return true;
    case 'QuestionAsked':
      updateSessionState(c, sessionId, (s) => sessionAsked(s, ev.question));
      return true;
    case 'QuestionAnswered':
    case 'QuestionWithdrawn':
      updateSessionState(c, sessionId, (s) => sessionAnswered(s, ev.question.id));
      return true;
    case 'ToolCallStarted':
    case 'ToolCallFinished':
    case 'ToolApprovalRequested':
    case 'ToolApprovalDecided': {
      const call = ev.toolCall;
      ensureMessage(c, sessionId, call.messageId, ev.at, call.runId);
      addToolCall(c, call.messageId, call.id);
      // A call waits for approval from its request to its decision, or its end (expired,
      // stopped: CANCELLED without running); its status as the cache now holds it (never
      // going back) says which.
      const status = c.readFragment<{ status: ToolCallStatus }>({ id: `ToolCall:${call.id}`, fragment: TOOL_CALL_STATUS })?.status ?? call.status;
      if (status === 'AWAITING_APPROVAL') {
        updateSessionState(c, sessionId, (s) => sessionApprovalRequested(s, call));
      } else {
        updateSessionState(c, sessionId, (s) => sessionApprovalEnded(s, call.id));
      }
      return true;
    }
    case 'ToolCallOutput':
      c.modify<{ output: string }>({
        id: `ToolCall:${ev.toolCallId}`,
        fields: { output: (text) => placeAt(text as string, ev.offset, ev.delta) },
      });
      return true;
    case 'SessionUpdated':
      // Title and settings normalised with the session; nothing else to do.
      return true;
  }
  return true;
}

// ---------- mutation answers ----------
//
// A mutation's answer is a snapshot taken when the server answered, and it may reach the
// page after later events of the stream (the agent can ask its question before addMessage's
// answer arrives). The stream is ordered and the answer is not, so an answer only tells the
// cache what the stream has not told yet; the mutations are sent with fetchPolicy
// 'no-cache' and these functions write what is news.

type RunAnswer = RunFieldsFragment;

function writeRun(cache: ApolloCache, run: RunAnswer) {
  cache.writeFragment({ id: `Run:${run.id}`, fragment: RunFieldsFragmentDoc, fragmentName: 'RunFields', data: run });
}

function known(cache: ApolloCache, id: string, fragment: typeof MESSAGE_ID): boolean {
  return cache.readFragment({ id, fragment }) !== null;
}

/**
 * addMessage was accepted: the message goes into the history at once (before its event),
 * the session to the top of the list, and the run it started or queued into the session's
 * state. When the stream has already brought the message, it is ahead of the answer and
 * what it told of the run stands.
 */
export function messageAccepted(cache: ApolloCache, message: MessageFieldsFragment, run: RunAnswer) {
  const streamAhead = known(cache, messageKey(message.id), MESSAGE_ID);
  if (!streamAhead) {
    cache.writeFragment({ id: messageKey(message.id), fragment: MessageFieldsFragmentDoc, fragmentName: 'MessageFields', data: message });
  }
  if (!streamAhead || !known(cache, `Run:${run.id}`, RUN_STATUS) || isFinishedRun(run.status)) writeRun(cache, run);
  addSibling(cache, message);
  notePrompt(cache, message);
  // On the branch when it follows its last message; an edited message (beside another)
  // shows when the stream selects its branch.
  appendMessage(cache, message.sessionId, message.id, message.parentId);
  moveSessionToTop(cache, message.sessionId, message.createdAt);
  applyRun(cache, message.sessionId, run.id);
}

/** A run was started or queued (regenerate): the session's state follows at once. */
export function runStarted(cache: ApolloCache, sessionId: string, run: RunAnswer) {
  if (!known(cache, `Run:${run.id}`, RUN_STATUS) || isFinishedRun(run.status)) writeRun(cache, run);
  applyRun(cache, sessionId, run.id);
}

/**
 * selectBranch answered with the branch: its messages go into the cache, and the branch
 * shows unless the stream has shown it already.
 */
export function branchSelected(cache: ApolloCache, sessionId: string, messages: MessageFieldsFragment[]) {
  for (const m of messages) {
    cache.writeFragment({ id: messageKey(m.id), fragment: MessageFieldsFragmentDoc, fragmentName: 'MessageFields', data: m });
  }
  const leaf = messages[messages.length - 1];
  if (leaf) showBranch(cache, sessionId, leaf.id, 'answer');
}

/**
 * The answer was accepted: the question form goes at once, and the run goes on, unless the
 * stream has already told of the answer (and so of what the run did next).
 */
export function questionAnswered(
  cache: ApolloCache,
  sessionId: string,
  question: QuestionFieldsFragment,
  run?: RunAnswer,
) {
  inputsAnswered(cache, sessionId, { questions: [question], toolCalls: [], run });
}

/**
 * Answers and decisions were accepted (respondToQuestion, decideToolCall,
 * respondToInputs): the cards go at once, and the run goes on. What the stream has
 * already told stands: a call it reported decided may have run and finished since the
 * answer was taken, and a run it moved on may already wait again.
 */
export function inputsAnswered(
  cache: ApolloCache,
  sessionId: string,
  answer: { questions: QuestionFieldsFragment[]; toolCalls: ToolCallFieldsFragment[]; run?: RunAnswer | null },
) {
  let streamAhead = false;
  for (const question of answer.questions) {
    const qid = `Question:${question.id}`;
    const known = cache.readFragment<{ answeredAt: string | null; withdrawn: boolean }>({ id: qid, fragment: QUESTION_ANSWERED });
    if (known?.answeredAt != null) streamAhead = true;
    cache.writeFragment({ id: qid, fragment: QuestionFieldsFragmentDoc, fragmentName: 'QuestionFields', data: question });
    updateSessionState(cache, sessionId, (s) => sessionAnswered(s, question.id));
  }
  for (const call of answer.toolCalls) {
    const cid = `ToolCall:${call.id}`;
    const known = cache.readFragment<{ status: ToolCallStatus }>({ id: cid, fragment: TOOL_CALL_STATUS });
    if (known && known.status !== 'AWAITING_APPROVAL') streamAhead = true;
    else cache.writeFragment({ id: cid, fragment: ToolCallFieldsFragmentDoc, fragmentName: 'ToolCallFields', data: call });
    updateSessionState(cache, sessionId, (s) => sessionApprovalEnded(s, call.id));
  }
  const run = answer.run;
  if (!run) return;
  if (!streamAhead || isFinishedRun(run.status)) writeRun(cache, run);
  applyRun(cache, sessionId, run.id);
}

/** The stop button ended a run: a finished status is final, whatever the stream says. */
export function runStopped(cache: ApolloCache, sessionId: string, run: RunAnswer) {
  if (isFinishedRun(run.status) || !known(cache, `Run:${run.id}`, RUN_STATUS)) writeRun(cache, run);
  applyRun(cache, sessionId, run.id);
}
