// The state of one open chat: the history loaded from `session(id)` and every event of
// `messageStream` applied to it, in order. Pure functions, so that the view only renders.

import type {
  MessageFieldsFragment,
  MessageStreamSubscription,
  QuestionFieldsFragment,
  RunFieldsFragment,
  SessionQuery,
  SessionStatus,
  SettingsFieldsFragment,
  ToolCallFieldsFragment,
} from '../gql/graphql';

export type Message = MessageFieldsFragment;
export type ToolCall = ToolCallFieldsFragment;
export type Run = RunFieldsFragment;
export type Question = QuestionFieldsFragment;
export type StreamEvent = MessageStreamSubscription['messageStream'];
type LoadedSession = NonNullable<SessionQuery['session']>;

export interface ChatState {
  sessionId: string;
  title: string;
  settings: SettingsFieldsFragment;
  status: SessionStatus;
  activeRun: Run | null;
  /** Runs waiting their turn (busy policy ENQUEUE). */
  queuedRunIds: string[];
  pendingQuestion: Question | null;
  messages: Message[];
  /** Why a run failed, by run ID, for runs that failed while the chat was open. */
  runErrors: Record<string, string>;
  hasEarlier: boolean;
  earlierCursor: string | null;
  /** The latest status seen for each run, so that a late mutation answer cannot undo an event. */
  runStatus: Record<string, Run['status']>;
  /** Cursor of the last event applied. */
  cursor: string;
}

const FINISHED_RUN = new Set(['COMPLETED', 'CANCELLED', 'INTERRUPTED', 'FAILED']);

export function fromSession(s: LoadedSession): ChatState {
  return {
    sessionId: s.id,
    title: s.title,
    settings: s.settings,
    status: s.status,
    activeRun: s.activeRun ?? null,
    queuedRunIds: [],
    pendingQuestion: s.pendingQuestion ?? null,
    messages: s.messages.edges.map((e) => e.node),
    runErrors: {},
    hasEarlier: s.messages.pageInfo.hasPreviousPage,
    earlierCursor: s.messages.pageInfo.startCursor ?? null,
    runStatus: s.activeRun ? { [s.activeRun.id]: s.activeRun.status } : {},
    cursor: s.streamCursor,
  };
}

/** Older history, fetched with `messages(last, before)`, goes in front. */
export function prependEarlier(
  state: ChatState,
  older: Message[],
  hasEarlier: boolean,
  earlierCursor: string | null,
): ChatState {
  const known = new Set(state.messages.map((m) => m.id));
  return {
    ...state,
    messages: [...older.filter((m) => !known.has(m.id)), ...state.messages],
    hasEarlier,
    earlierCursor,
  };
}

/**
 * Places `delta` at `offset` (counted in Unicode code points): the result is the first
 * `offset` code points of `text` followed by `delta`. Applying a chunk twice, or a
 * coalesced chunk that covers text already shown, therefore changes nothing.
 */
export function placeAt(text: string, offset: number, delta: string): string {
  let i = 0; // UTF-16 index
  let cp = 0; // code points passed
  while (cp < offset && i < text.length) {
    const c = text.charCodeAt(i);
    i += c >= 0xd800 && c <= 0xdbff && i + 1 < text.length ? 2 : 1;
    cp++;
  }
  // offset beyond the text we hold cannot happen on a gap-free stream; keep what we have.
  return text.slice(0, i) + delta;
}

function upsertMessage(messages: Message[], m: Message): Message[] {
  const i = messages.findIndex((x) => x.id === m.id);
  if (i < 0) return [...messages, m];
  const prev = messages[i];
  const next = { ...m, toolCalls: mergeToolCalls(prev.toolCalls, m.toolCalls) };
  const out = messages.slice();
  out[i] = next;
  return out;
}

function mergeToolCalls(prev: ToolCall[], incoming: ToolCall[]): ToolCall[] {
  if (prev.length === 0) return incoming;
  const out = incoming.slice();
  for (const p of prev) if (!out.some((t) => t.id === p.id)) out.push(p);
  return out;
}

function updateMessage(
  messages: Message[],
  id: string,
  fn: (m: Message) => Message,
  create?: () => Message,
): Message[] {
  const i = messages.findIndex((m) => m.id === id);
  if (i < 0) return create ? [...messages, fn(create())] : messages;
  const out = messages.slice();
  out[i] = fn(messages[i]);
  return out;
}

function upsertToolCall(calls: ToolCall[], call: ToolCall): ToolCall[] {
  const i = calls.findIndex((t) => t.id === call.id);
  if (i < 0) return [...calls, call];
  const out = calls.slice();
  out[i] = call;
  return out;
}

function placeholder(state: ChatState, id: string, at: string): Message {
  return {
    id,
    sessionId: state.sessionId,
    role: 'ASSISTANT',
    kind: 'TEXT',
    content: '',
    status: 'STREAMING',
    runId: state.activeRun?.id ?? null,
    createdAt: at,
    question: null,
    toolCalls: [],
  };
}

function statusForRun(run: Run | null): SessionStatus {
  if (!run) return 'IDLE';
  if (run.status === 'WAITING_FOR_INPUT') return 'WAITING_FOR_INPUT';
  if (run.status === 'RUNNING') return 'RUNNING';
  return 'IDLE';
}

function applyRun(prev: ChatState, run: Run): ChatState {
  const state = { ...prev, runStatus: { ...prev.runStatus, [run.id]: run.status } };
  const queuedRunIds = state.queuedRunIds.filter((id) => id !== run.id);
  if (run.status === 'QUEUED') {
    // A queued run behind an idle session is about to start: treat the agent as busy.
    return {
      ...state,
      queuedRunIds: [...queuedRunIds, run.id],
      status: state.status === 'IDLE' ? 'RUNNING' : state.status,
    };
  }
  const runErrors =
    run.status === 'FAILED' && run.error ? { ...state.runErrors, [run.id]: run.error } : state.runErrors;
  if (FINISHED_RUN.has(run.status)) {
    const wasActive = !state.activeRun || state.activeRun.id === run.id;
    const activeRun = wasActive ? null : state.activeRun;
    const pendingQuestion =
      state.pendingQuestion && state.pendingQuestion.runId === run.id ? null : state.pendingQuestion;
    const busy = activeRun !== null || queuedRunIds.length > 0;
    return {
      ...state,
      activeRun,
      queuedRunIds,
      pendingQuestion,
      runErrors,
      status: activeRun ? statusForRun(activeRun) : busy ? 'RUNNING' : 'IDLE',
    };
  }
  return { ...state, activeRun: run, queuedRunIds, runErrors, status: statusForRun(run) };
}

export function applyEvent(state: ChatState, ev: StreamEvent): ChatState {
  const next = applyEventInner(state, ev);
  return next === state ? { ...state, cursor: ev.cursor } : { ...next, cursor: ev.cursor };
}

function applyEventInner(state: ChatState, ev: StreamEvent): ChatState {
  switch (ev.__typename) {
    case 'MessageAdded':
    case 'MessageCompleted':
      return { ...state, messages: upsertMessage(state.messages, ev.message) };
    case 'MessageChunk':
      return {
        ...state,
        messages: updateMessage(
          state.messages,
          ev.messageId,
          (m) => ({ ...m, content: placeAt(m.content, ev.offset, ev.delta) }),
          () => placeholder(state, ev.messageId, ev.at),
        ),
      };
    case 'RunStatusChanged':
      return applyRun(state, ev.run);
    case 'QuestionAsked':
      return {
        ...state,
        pendingQuestion: ev.question,
        status: 'WAITING_FOR_INPUT',
        activeRun:
          state.activeRun && state.activeRun.id === ev.question.runId
            ? { ...state.activeRun, status: 'WAITING_FOR_INPUT' }
            : state.activeRun,
      };
    case 'QuestionAnswered': {
      const answered = state.pendingQuestion?.id === ev.question.id;
      return {
        ...state,
        pendingQuestion: answered ? null : state.pendingQuestion,
        status: answered && state.status === 'WAITING_FOR_INPUT' ? 'RUNNING' : state.status,
        messages: state.messages.map((m) =>
          m.question?.id === ev.question.id ? { ...m, question: ev.question } : m,
        ),
      };
    }
    case 'ToolCallStarted':
    case 'ToolCallFinished': {
      const call = ev.toolCall;
      return {
        ...state,
        messages: updateMessage(
          state.messages,
          call.messageId,
          (m) => ({ ...m, toolCalls: upsertToolCall(m.toolCalls, call) }),
          () => placeholder(state, call.messageId, ev.at),
        ),
      };
    }
    case 'ToolCallOutput':
      return {
        ...state,
        messages: updateMessage(state.messages, ev.messageId, (m) => ({
          ...m,
          toolCalls: m.toolCalls.map((t) =>
            t.id === ev.toolCallId ? { ...t, output: placeAt(t.output, ev.offset, ev.delta) } : t,
          ),
        })),
      };
    case 'SessionUpdated':
      return { ...state, title: ev.session.title, settings: ev.session.settings };
    default:
      return state;
  }
}

/** Answered or refused: clears the question form at once, before the event arrives. */
export function questionAnswered(state: ChatState, questionId: string): ChatState {
  if (state.pendingQuestion?.id !== questionId) return state;
  return { ...state, pendingQuestion: null, status: state.activeRun ? 'RUNNING' : state.status };
}

/** The reply the accepted message started, for instant feedback before the events arrive. */
export function messageAccepted(state: ChatState, message: Message, run: Run): ChatState {
  const withMessage = { ...state, messages: upsertMessage(state.messages, message) };
  if (run.id in state.runStatus) return withMessage;
  return applyRun(withMessage, run);
}
