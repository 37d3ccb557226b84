import { gql, type ApolloCache, type DocumentNode } from '@apollo/client';
import { describe, expect, it } from 'vitest';
import {
  EarlierMessagesDocument,
  QueuedRunFieldsFragmentDoc,
  QuestionFieldsFragmentDoc,
  SessionBranchDocument,
  RunDocument,
  SessionDocument,
  SessionListFieldsFragmentDoc,
  SessionsDocument,
  SessionStateFieldsFragmentDoc,
  type MessageFieldsFragment,
  type RunFieldsFragment,
  type RunStatus,
} from '../gql/graphql';
import { buildSchema, type GraphQLInterfaceType } from 'graphql';
import { readFileSync } from 'node:fs';
import { createCache, SESSION_EVENT_TYPES } from './cache';
import {
  applyEvent,
  branchSelected,
  inputsAnswered,
  messageAccepted,
  moveSessionToTop,
  questionAnswered,
  runStarted,
  runStopped,
  sessionAfterRun,
  sessionAnswered,
  sessionApprovalEnded,
  sessionApprovalRequested,
  sessionAsked,
  type SessionState,
  type StreamEvent,
} from './events';

const AT = '2025-06-15T12:00:00Z';

const SIBLINGS = gql`
  fragment TestSiblingIds on Message {
    siblingIds
  }
`;

/** writeQuery without the generated result types, which leave out __typename. */
function write(cache: ApolloCache, options: { query: DocumentNode; variables: object; data: unknown }) {
  cache.writeQuery(options as Parameters<ApolloCache['writeQuery']>[0]);
}
const LATER = '2025-06-15T12:05:00.5Z';

function message(id: string, over: Partial<MessageFieldsFragment> = {}) {
  return {
    __typename: 'Message' as const,
    id,
    sessionId: 's1',
    role: 'ASSISTANT' as const,
    kind: 'TEXT' as const,
    content: '',
    status: 'STREAMING' as const,
    error: null,
    runId: 'r1',
    createdAt: AT,
    parentId: null as string | null,
    siblingIds: [id],
    question: null,
    toolCalls: [],
    ...over,
  };
}

function run(id: string, status: RunStatus, over: Partial<RunFieldsFragment> = {}) {
  return {
    __typename: 'Run' as const,
    id,
    sessionId: 's1',
    status,
    error: null,
    agent: 'demo',
    usage: null,
    createdAt: AT,
    startedAt: null,
    finishedAt: null,
    waitsForBudget: null,
    ...over,
  } as RunFieldsFragment & { __typename: 'Run' };
}

function question(id: string, over: Record<string, unknown> = {}) {
  return {
    __typename: 'Question' as const,
    id,
    runId: 'r1',
    sessionId: 's1',
    prompt: `${id}?`,
    choices: null,
    multiple: false,
    answerSchema: null,
    answer: null,
    askedAt: AT,
    answeredAt: null,
    expiresAt: LATER,
    withdrawn: false,
    withdrawnReason: null,
    ...over,
  };
}

const questionOf = question;

function toolCall(id: string, over: Record<string, unknown> = {}) {
  return {
    __typename: 'ToolCall' as const,
    id,
    runId: 'r1',
    messageId: 'm1',
    name: 'echo',
    arguments: '{"text":"hi"}',
    output: '',
    result: null,
    error: null,
    status: 'RUNNING' as const,
    startedAt: AT,
    finishedAt: null,
    approval: null,
    ...over,
  };
}

function listed(id: string, updatedAt = AT) {
  return { __typename: 'TalkSession' as const, id, title: id, updatedAt, status: 'IDLE' as const, unread: false };
}

/** A cache holding session s1 as the chat loads it, with the given messages, and the list. */
function loaded(messages: ReturnType<typeof message>[] = [], activeRun: ReturnType<typeof run> | null = null) {
  const cache = createCache();
  write(cache, {
    query: SessionsDocument,
    variables: { first: 50 },
    data: {
      viewer: { __typename: 'Viewer', id: 'u1', eventsCursor: 'v0' },
      sessions: {
        __typename: 'TalkSessionConnection',
        edges: ['s3', 's2', 's1'].map((id) => ({ __typename: 'TalkSessionEdge', cursor: `l:${id}`, node: listed(id) })),
        pageInfo: { __typename: 'PageInfo', hasNextPage: false, endCursor: 'l:s1' },
      },
    },
  });
  write(cache, {
    query: SessionDocument,
    variables: { id: 's1', last: 200 },
    data: {
      session: {
        ...listed('s1'),
        status: activeRun ? 'RUNNING' : 'IDLE',
        createdAt: AT,
        settings: { __typename: 'SessionSettings', agent: 'demo', model: null, systemPrompt: null, temperature: null, busyPolicy: 'INTERRUPT', toolPolicies: [], tokenBudget: null },
        activeRun,
        pendingQuestion: null,
        pendingQuestions: [],
        pendingApprovals: [],
        queuedRuns: [],
        streamCursor: 'c0',
        messages: {
          __typename: 'MessageConnection',
          edges: messages.map((m, i) => ({ __typename: 'MessageEdge', cursor: `m:${i + 10}`, node: m })),
          pageInfo: { __typename: 'PageInfo', hasPreviousPage: messages.length > 0, startCursor: messages.length ? 'm:10' : null },
        },
      },
    },
  });
  const read = () => cache.readQuery({ query: SessionDocument, variables: { id: 's1', last: 200 } })!.session!;
  const list = () => cache.readQuery({ query: SessionsDocument, variables: { first: 50 } })!.sessions.edges.map((e) => e.node.id);
  const apply = (ev: Record<string, unknown>) => applyEvent(cache, 's1', { cursor: 'c', at: AT, ...ev } as StreamEvent);
  return { cache, read, list, apply };
}

describe('stream events in the cache', () => {
  it('MessageAdded adds the message to the history and the chat to the top of the list', () => {
    const { read, list, apply } = loaded();
    apply({ __typename: 'MessageAdded', at: LATER, message: message('m1', { role: 'USER', content: 'hi', status: 'COMPLETE' }) });
    expect(read().messages.edges.map((e) => e.node.content)).toEqual(['hi']);
    expect(list()).toEqual(['s1', 's3', 's2']);
    expect(read().updatedAt).toBe(LATER);
    // The same event again (or the mutation's answer) adds no second edge.
    apply({ __typename: 'MessageAdded', message: message('m1', { role: 'USER', content: 'hi', status: 'COMPLETE' }) });
    expect(read().messages.edges).toHaveLength(1);
  });

  it('MessageChunk places text at its code-point offset; a replayed chunk changes nothing', () => {
    const { read, apply } = loaded([message('m1')]);
    apply({ __typename: 'MessageChunk', messageId: 'm1', offset: 0, delta: 'Emoji 😀' });
    apply({ __typename: 'MessageChunk', messageId: 'm1', offset: 7, delta: ' and 𝄞' });
    apply({ __typename: 'MessageChunk', messageId: 'm1', offset: 7, delta: ' and 𝄞' });
    expect(read().messages.edges[0].node.content).toBe('Emoji 😀 and 𝄞');
  });

  it('a chunk of a message not seen begin starts an empty streaming reply', () => {
    const { read, apply } = loaded();
    apply({ __typename: 'MessageChunk', messageId: 'm9', offset: 0, delta: 'late' });
    const node = read().messages.edges[0].node;
    expect(node).toMatchObject({ id: 'm9', role: 'ASSISTANT', status: 'STREAMING', content: 'late' });
  });

  it('MessageCompleted brings full content, status and the failure reason', () => {
    const { read, apply } = loaded([message('m1', { content: 'par' })]);
    apply({
      __typename: 'MessageCompleted',
      message: message('m1', { content: 'partial', status: 'FAILED', error: 'The demo agent failed, as you asked.' }),
    });
    expect(read().messages.edges[0].node).toMatchObject({
      content: 'partial',
      status: 'FAILED',
      error: 'The demo agent failed, as you asked.',
    });
  });

  it('a message never goes back to STREAMING and keeps a known error', () => {
    const { read, apply } = loaded([message('m1')]);
    apply({ __typename: 'MessageCompleted', message: message('m1', { status: 'FAILED', error: 'why' }) });
    apply({ __typename: 'MessageAdded', message: message('m1') });
    expect(read().messages.edges[0].node).toMatchObject({ status: 'FAILED', error: 'why' });
  });

  it('RunStatusChanged sets and clears the active run and the session status', () => {
    const { read, list, apply } = loaded();
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'RUNNING') });
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r1', status: 'RUNNING' } });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'FAILED', { error: 'boom' }) });
    expect(read()).toMatchObject({ status: 'IDLE', activeRun: null });
    // Status changes do not reorder the list.
    expect(list()).toEqual(['s3', 's2', 's1']);
  });

  it('queued runs are counted and the next one becomes active', () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    apply({ __typename: 'RunStatusChanged', run: run('r2', 'QUEUED') });
    const state = () => cache.readFragment({ id: 'TalkSession:s1', fragment: SessionStateFieldsFragmentDoc })!;
    expect(state().queuedRuns.map((r) => r.id)).toEqual(['r2']);
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'COMPLETED') });
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: null });
    apply({ __typename: 'RunStatusChanged', run: run('r2', 'RUNNING') });
    expect(state().queuedRuns).toEqual([]);
    expect(read().activeRun?.id).toBe('r2');
  });

  it("a late addMessage answer does not undo the stream's newer news", () => {
    const { cache, read, apply } = loaded();
    const user = message('u1', { role: 'USER', status: 'COMPLETE', runId: 'r1' });
    apply({ __typename: 'MessageAdded', message: user });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'FAILED', { error: 'boom' }) });
    // addMessage's answer arrives now, saying the run is RUNNING.
    messageAccepted(cache, user, run('r1', 'RUNNING'));
    expect(read()).toMatchObject({ status: 'IDLE', activeRun: null });
    expect(cache.readQuery({ query: RunDocument, variables: { id: 'r1' } })?.run).toMatchObject({ status: 'FAILED', error: 'boom' });
    expect(read().messages.edges).toHaveLength(1);
  });

  it('a late addMessage answer leaves a question the agent asked meanwhile waiting', () => {
    const { cache, read, apply } = loaded();
    const user = message('u1', { role: 'USER', status: 'COMPLETE', runId: 'r1' });
    apply({ __typename: 'MessageAdded', message: user });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'RUNNING') });
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    messageAccepted(cache, user, run('r1', 'RUNNING'));
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', activeRun: { id: 'r1', status: 'WAITING_FOR_INPUT' }, pendingQuestion: { id: 'q1' } });
  });

  it('an accepted message shows at once with its run', () => {
    const { read, list, cache } = loaded();
    // addMessage's answer, before any event of the stream.
    const user = message('u1', { role: 'USER', content: 'hello', status: 'COMPLETE', createdAt: LATER });
    messageAccepted(cache, user, run('r1', 'RUNNING'));
    expect(read().messages.edges.map((e) => e.node.content)).toEqual(['hello']);
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r1' }, updatedAt: LATER });
    expect(list()).toEqual(['s1', 's3', 's2']);
  });

  it('an answer accepted before its events resumes the run at once', () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    questionAnswered(cache, 's1', question('q1', { answer: 'blue', answeredAt: LATER }), run('r1', 'RUNNING'));
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r1', status: 'RUNNING' }, pendingQuestion: null });
  });

  it("a late respondToQuestion answer does not undo the run's end", () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    apply({ __typename: 'QuestionAnswered', question: question('q1', { answer: 'blue', answeredAt: LATER }) });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'RUNNING') });
    apply({ __typename: 'QuestionAsked', question: question('q2') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    // The first answer's reply comes only now: the agent already asks again.
    questionAnswered(cache, 's1', question('q1', { answer: 'blue', answeredAt: LATER }), run('r1', 'RUNNING'));
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: { id: 'q2' } });
  });

  it('a stop answer ends the run even when the stream has not said so yet', () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'RUNNING') });
    runStopped(cache, 's1', run('r1', 'CANCELLED'));
    expect(read()).toMatchObject({ status: 'IDLE', activeRun: null });
  });

  it('questions: asked waits for input, answered goes on', () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    const question = { ...questionOf('q1'), prompt: 'Colour?', choices: ['red', 'blue'] };
    apply({ __typename: 'MessageAdded', message: message('mq', { kind: 'QUESTION', status: 'COMPLETE', question }) });
    apply({ __typename: 'QuestionAsked', question });
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: { id: 'q1', prompt: 'Colour?' } });
    // Answered here: the form goes before the event comes.
    questionAnswered(cache, 's1', { ...question, answer: 'blue', answeredAt: LATER });
    expect(read()).toMatchObject({ status: 'RUNNING', pendingQuestion: null });
    apply({ __typename: 'QuestionAnswered', question: { ...question, answer: 'blue', answeredAt: LATER } });
    // The question message shows the answer: one Question object in the cache.
    expect(read().messages.edges[0].node.question?.answer).toBe('blue');
  });

  it('a finished run withdraws its pending question', () => {
    const { read, apply } = loaded([], run('r1', 'RUNNING'));
    const question = questionOf('q1');
    apply({ __typename: 'QuestionAsked', question });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'INTERRUPTED') });
    expect(read()).toMatchObject({ status: 'IDLE', pendingQuestion: null });
  });

  it('tool calls join their message and their output grows at its offset', () => {
    const { read, apply } = loaded([message('m1')]);
    const call = toolCall('t1');
    apply({ __typename: 'ToolCallStarted', toolCall: call });
    apply({ __typename: 'ToolCallOutput', toolCallId: 't1', messageId: 'm1', offset: 0, delta: 'alpha ' });
    apply({ __typename: 'ToolCallOutput', toolCallId: 't1', messageId: 'm1', offset: 0, delta: 'alpha ' });
    apply({ __typename: 'ToolCallOutput', toolCallId: 't1', messageId: 'm1', offset: 6, delta: 'beta' });
    apply({ __typename: 'ToolCallFinished', toolCall: { ...call, output: 'alpha beta', result: '"ok"', status: 'COMPLETED' } });
    const calls = read().messages.edges[0].node.toolCalls;
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ output: 'alpha beta', status: 'COMPLETED', result: '"ok"' });
    // A later copy of the message without the call keeps it.
    apply({ __typename: 'MessageCompleted', message: message('m1', { status: 'COMPLETE' }) });
    expect(read().messages.edges[0].node.toolCalls).toHaveLength(1);
  });

  it('SessionUpdated renames the session everywhere it shows', () => {
    const { cache, read, apply } = loaded();
    apply({
      __typename: 'SessionUpdated',
      session: {
        ...listed('s1'),
        title: 'Renamed',
        settings: { __typename: 'SessionSettings', agent: 'demo', model: 'm', systemPrompt: null, temperature: null, busyPolicy: 'ENQUEUE', toolPolicies: [], tokenBudget: null },
      },
    });
    expect(read()).toMatchObject({ title: 'Renamed', settings: { model: 'm', busyPolicy: 'ENQUEUE' } });
    const list = cache.readQuery({ query: SessionsDocument, variables: { first: 50 } })!;
    expect(list.sessions.edges.find((e) => e.node.id === 's1')?.node.title).toBe('Renamed');
  });
});

describe('human in the loop', () => {
  const state = (cache: ApolloCache) => cache.readFragment({ id: 'TalkSession:s1', fragment: SessionStateFieldsFragmentDoc })!;
  const waitingCall = (id: string, over: Record<string, unknown> = {}) =>
    toolCall(id, {
      status: 'AWAITING_APPROVAL',
      approval: { __typename: 'ToolApproval', requestedArguments: '{"text":"hi"}', decision: null, reason: null, decidedAt: null, expiresAt: LATER },
      ...over,
    });

  it('several questions wait together, oldest first, and go one by one', () => {
    const { cache, read, apply } = loaded([], run('r1', 'RUNNING'));
    for (const id of ['q1', 'q2', 'q3']) apply({ __typename: 'QuestionAsked', question: question(id) });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    expect(read().pendingQuestions.map((q) => q.id)).toEqual(['q1', 'q2', 'q3']);
    expect(read().pendingQuestion?.id).toBe('q1');
    // Replayed: no second copy.
    apply({ __typename: 'QuestionAsked', question: question('q2') });
    expect(read().pendingQuestions).toHaveLength(3);
    apply({ __typename: 'QuestionAnswered', question: question('q2', { answer: 'b', answeredAt: LATER }) });
    expect(read().pendingQuestions.map((q) => q.id)).toEqual(['q1', 'q3']);
    expect(read().status).toBe('WAITING_FOR_INPUT');
    questionAnswered(cache, 's1', question('q1', { answer: 'a', answeredAt: LATER }), run('r1', 'WAITING_FOR_INPUT'));
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: { id: 'q3' } });
    apply({ __typename: 'QuestionWithdrawn', question: question('q3', { withdrawn: true, withdrawnReason: 'expired' }) });
    expect(read()).toMatchObject({ status: 'RUNNING', pendingQuestion: null, pendingQuestions: [] });
    expect(state(cache).pendingQuestions).toEqual([]);
  });

  it('a withdrawn question stays withdrawn, with its reason', () => {
    const { cache, apply } = loaded([], run('r1', 'RUNNING'));
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'QuestionWithdrawn', question: question('q1', { withdrawn: true, withdrawnReason: 'expired' }) });
    // An older copy of the question (a late answer of a query) does not bring it back.
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    const q = cache.readFragment({ id: 'Question:q1', fragment: QuestionFieldsFragmentDoc, fragmentName: 'QuestionFields' });
    expect(q).toMatchObject({ withdrawn: true, withdrawnReason: 'expired' });
  });

  it('a multiple-choice question keeps its choices and takes a JSON array as its answer', () => {
    const { read, apply } = loaded([], run('r1', 'RUNNING'));
    const q = question('q1', { choices: ['red', 'green', 'blue'], multiple: true });
    apply({ __typename: 'MessageAdded', message: message('mq', { kind: 'QUESTION', status: 'COMPLETE', question: q }) });
    apply({ __typename: 'QuestionAsked', question: q });
    expect(read().pendingQuestions[0]).toMatchObject({ multiple: true, choices: ['red', 'green', 'blue'] });
    apply({ __typename: 'QuestionAnswered', question: { ...q, answer: '["red","blue"]', answeredAt: LATER } });
    expect(read().pendingQuestions).toEqual([]);
    expect(read().messages.edges[0].node.question).toMatchObject({ multiple: true, answer: '["red","blue"]' });
  });

  it('a call awaiting approval is pending until decided, and shows its decision', () => {
    const { cache, read, apply } = loaded([message('m1')], run('r1', 'RUNNING'));
    apply({ __typename: 'ToolCallStarted', toolCall: waitingCall('t1') });
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingApprovals: [{ id: 't1', name: 'echo', status: 'AWAITING_APPROVAL' }] });
    expect(read().messages.edges[0].node.toolCalls.map((t) => t.id)).toEqual(['t1']);
    const decided = waitingCall('t1', {
      status: 'RUNNING',
      arguments: '{"text":"edited"}',
      approval: { __typename: 'ToolApproval', requestedArguments: '{"text":"hi"}', decision: 'APPROVE', reason: null, decidedAt: LATER, expiresAt: LATER },
    });
    apply({ __typename: 'ToolApprovalDecided', toolCall: decided });
    expect(read()).toMatchObject({ status: 'RUNNING', pendingApprovals: [] });
    apply({ __typename: 'ToolCallOutput', toolCallId: 't1', messageId: 'm1', offset: 0, delta: 'edited' });
    // decideToolCall's answer comes after the output: the call keeps its output and status.
    inputsAnswered(cache, 's1', { questions: [], toolCalls: [{ ...decided, output: '' }], run: run('r1', 'RUNNING') });
    const call = read().messages.edges[0].node.toolCalls[0];
    expect(call).toMatchObject({
      status: 'RUNNING',
      output: 'edited',
      arguments: '{"text":"edited"}',
      approval: { decision: 'APPROVE', requestedArguments: '{"text":"hi"}' },
    });
  });

  it('a decision accepted before its event takes the card away at once', () => {
    const { cache, read, apply } = loaded([message('m1')], run('r1', 'RUNNING'));
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t1') });
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t2', { startedAt: LATER }) });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    const rejected = waitingCall('t1', {
      status: 'REJECTED',
      approval: { __typename: 'ToolApproval', requestedArguments: '{"text":"hi"}', decision: 'REJECT', reason: 'not now', decidedAt: LATER, expiresAt: LATER },
    });
    inputsAnswered(cache, 's1', { questions: [], toolCalls: [rejected], run: run('r1', 'WAITING_FOR_INPUT') });
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingApprovals: [{ id: 't2' }] });
    expect(read().messages.edges[0].node.toolCalls[0]).toMatchObject({ status: 'REJECTED', approval: { reason: 'not now' } });
    // The event comes later and changes nothing; an older copy does not undo the decision.
    apply({ __typename: 'ToolApprovalDecided', toolCall: rejected });
    apply({ __typename: 'ToolCallStarted', toolCall: waitingCall('t1') });
    expect(read().messages.edges[0].node.toolCalls[0]).toMatchObject({ status: 'REJECTED', approval: { decision: 'REJECT' } });
    expect(read().pendingApprovals.map((c) => c.id)).toEqual(['t2']);
  });

  it('an expired approval ends CANCELLED and leaves the pending list', () => {
    const { read, apply } = loaded([message('m1')], run('r1', 'RUNNING'));
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t1') });
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({
      __typename: 'ToolCallFinished',
      toolCall: waitingCall('t1', {
        status: 'CANCELLED',
        finishedAt: LATER,
        approval: { __typename: 'ToolApproval', requestedArguments: '{"text":"hi"}', decision: null, reason: 'expired', decidedAt: null, expiresAt: LATER },
      }),
    });
    expect(read()).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingApprovals: [], pendingQuestions: [{ id: 'q1' }] });
    expect(read().messages.edges[0].node.toolCalls[0]).toMatchObject({ status: 'CANCELLED', approval: { decision: null, reason: 'expired' } });
  });

  it('respondToInputs answers several at once', () => {
    const { cache, read, apply } = loaded([message('m1')], run('r1', 'RUNNING'));
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'QuestionAsked', question: question('q2') });
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'WAITING_FOR_INPUT') });
    inputsAnswered(cache, 's1', {
      questions: [question('q1', { answer: 'a', answeredAt: LATER }), question('q2', { answer: 'b', answeredAt: LATER })],
      toolCalls: [waitingCall('t1', { status: 'RUNNING', approval: { __typename: 'ToolApproval', requestedArguments: '{}', decision: 'APPROVE', reason: null, decidedAt: LATER, expiresAt: LATER } })],
      run: run('r1', 'RUNNING'),
    });
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { status: 'RUNNING' }, pendingQuestions: [], pendingApprovals: [] });
  });

  it('the end of a run withdraws everything it waited on', () => {
    const { read, apply } = loaded([message('m1')], run('r1', 'RUNNING'));
    apply({ __typename: 'QuestionAsked', question: question('q1') });
    apply({ __typename: 'ToolApprovalRequested', toolCall: waitingCall('t1') });
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'CANCELLED') });
    expect(read()).toMatchObject({ status: 'IDLE', pendingQuestion: null, pendingQuestions: [], pendingApprovals: [] });
  });
});

describe('the conversation as a tree', () => {
  const user = (id: string, parentId: string | null, over: Partial<MessageFieldsFragment> = {}) =>
    message(id, { role: 'USER', content: id, status: 'COMPLETE', parentId, runId: `r-${id}`, ...over });
  const reply = (id: string, parentId: string, over: Partial<MessageFieldsFragment> = {}) =>
    message(id, { content: `re ${id}`, status: 'COMPLETE', parentId, ...over });
  const shown = (read: () => { messages: { edges: { node: { id: string } }[] } }) => read().messages.edges.map((e) => e.node.id);
  const siblingsOf = (cache: ApolloCache, id: string) =>
    cache.readFragment<{ siblingIds: string[] }>({ id: `Message:${id}`, fragment: SIBLINGS })?.siblingIds;

  it('an edited message shows when its branch is selected, and the old branch comes back', () => {
    const { cache, read, apply } = loaded([user('u1', null), reply('a1', 'u1'), user('u2', 'a1'), reply('a2', 'u2')]);
    // editMessage on u2: its new version, beside it, is not on the branch shown yet.
    apply({ __typename: 'MessageAdded', message: user('u2x', 'a1', { siblingIds: ['u2', 'u2x'] }) });
    expect(shown(read)).toEqual(['u1', 'a1', 'u2', 'a2']);
    // u2 learns of its new version.
    expect(siblingsOf(cache, 'u2')).toEqual(['u2', 'u2x']);
    expect(applyEvent(cache, 's1', { __typename: 'BranchSelected', cursor: 'c', at: AT, leafId: 'u2x' } as StreamEvent)).toBe(true);
    expect(shown(read)).toEqual(['u1', 'a1', 'u2x']);
    // Its reply follows it.
    apply({ __typename: 'MessageAdded', message: reply('a2x', 'u2x', { status: 'STREAMING', content: '' }) });
    apply({ __typename: 'MessageChunk', messageId: 'a2x', offset: 0, delta: 'new' });
    expect(shown(read)).toEqual(['u1', 'a1', 'u2x', 'a2x']);
    // Another tab selects the old version: rebuilt from the parent links the cache has.
    apply({ __typename: 'BranchSelected', leafId: 'a2' });
    expect(shown(read)).toEqual(['u1', 'a1', 'u2', 'a2']);
    // The history's paging cursor stays the server's.
    expect(read().messages.pageInfo).toMatchObject({ hasPreviousPage: true, startCursor: 'm:10' });
  });

  it('a first message edited: the branch is found up to its start', () => {
    const { read, apply } = loaded([user('u1', null), reply('a1', 'u1')]);
    apply({ __typename: 'MessageAdded', message: user('u1x', null, { siblingIds: ['u1', 'u1x'] }) });
    expect(shown(read)).toEqual(['u1', 'a1']);
    apply({ __typename: 'BranchSelected', leafId: 'u1x' });
    expect(shown(read)).toEqual(['u1x']);
    expect(read().messages.pageInfo.hasPreviousPage).toBe(false);
  });

  it('regenerate: the branch is cut at the parent and the new reply follows', () => {
    const { cache, read, apply } = loaded([user('u1', null), reply('a1', 'u1')]);
    runStarted(cache, 's1', run('r2', 'RUNNING'));
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r2' } });
    apply({ __typename: 'BranchSelected', leafId: 'u1' });
    expect(shown(read)).toEqual(['u1']);
    apply({ __typename: 'MessageAdded', message: reply('a1x', 'u1', { siblingIds: ['a1', 'a1x'], status: 'STREAMING' }) });
    expect(shown(read)).toEqual(['u1', 'a1x']);
    expect(siblingsOf(cache, 'a1')).toEqual(['a1', 'a1x']);
  });

  it('a new reply selected after it was added (the other order) shows too', () => {
    const { read, apply } = loaded([user('u1', null), reply('a1', 'u1')]);
    apply({ __typename: 'MessageAdded', message: reply('a1x', 'u1', { siblingIds: ['a1', 'a1x'], status: 'STREAMING' }) });
    expect(shown(read)).toEqual(['u1', 'a1']);
    apply({ __typename: 'BranchSelected', leafId: 'a1x' });
    expect(shown(read)).toEqual(['u1', 'a1x']);
  });

  it('a branch with messages the page never had needs the server', () => {
    const { cache, read } = loaded([user('u1', null), reply('a1', 'u1')]);
    const ok = applyEvent(cache, 's1', { __typename: 'BranchSelected', cursor: 'c', at: AT, leafId: 'elsewhere' } as StreamEvent);
    expect(ok).toBe(false);
    expect(shown(read)).toEqual(['u1', 'a1']);
    // The branch fetched again replaces the history, as a first page does.
    write(cache, {
      query: SessionBranchDocument,
      variables: { id: 's1', last: 200 },
      data: {
        session: {
          __typename: 'TalkSession',
          id: 's1',
          messages: {
            __typename: 'MessageConnection',
            edges: [user('u1', null), reply('x1', 'u1'), user('elsewhere', 'x1')].map((m, i) => ({ __typename: 'MessageEdge', cursor: `b:${i}`, node: m })),
            pageInfo: { __typename: 'PageInfo', hasPreviousPage: false, startCursor: 'b:0' },
          },
        },
      },
    });
    expect(shown(read)).toEqual(['u1', 'x1', 'elsewhere']);
  });

  it('a completed reply of a branch left meanwhile does not join the branch shown', () => {
    const { read, apply } = loaded([user('u1', null), reply('a1', 'u1', { status: 'STREAMING' })]);
    apply({ __typename: 'MessageAdded', message: user('u1x', null, { siblingIds: ['u1', 'u1x'] }) });
    apply({ __typename: 'BranchSelected', leafId: 'u1x' });
    apply({ __typename: 'MessageCompleted', message: reply('a1', 'u1', { status: 'INTERRUPTED' }) });
    expect(shown(read)).toEqual(['u1x']);
  });

  it("selectBranch's answer shows the branch once, and not over newer news", () => {
    const { cache, read, apply } = loaded([user('u1', null), reply('a1', 'u1', { siblingIds: ['a1', 'a1x'] })]);
    // The other version was never loaded here: it comes with the answer.
    branchSelected(cache, 's1', [user('u1', null), reply('a1x', 'u1', { siblingIds: ['a1', 'a1x'] })]);
    expect(shown(read)).toEqual(['u1', 'a1x']);
    // The stream's own BranchSelected changes nothing.
    apply({ __typename: 'BranchSelected', leafId: 'a1x' });
    expect(shown(read)).toEqual(['u1', 'a1x']);
    // Back to a1; the stream is ahead of the answer: a message already follows a1.
    apply({ __typename: 'BranchSelected', leafId: 'a1' });
    apply({ __typename: 'MessageAdded', message: user('u2', 'a1') });
    branchSelected(cache, 's1', [user('u1', null), reply('a1', 'u1', { siblingIds: ['a1', 'a1x'] })]);
    expect(shown(read)).toEqual(['u1', 'a1', 'u2']);
  });

  it('an older copy of a streaming reply does not cut its text back', () => {
    const { read, apply, cache } = loaded([user('u1', null), reply('a1', 'u1', { status: 'STREAMING', content: '' })]);
    apply({ __typename: 'MessageChunk', messageId: 'a1', offset: 0, delta: 'chunk 1. chunk 2. ' });
    branchSelected(cache, 's1', [user('u1', null), reply('a1', 'u1', { status: 'STREAMING', content: 'chunk 1. ' })]);
    apply({ __typename: 'MessageChunk', messageId: 'a1', offset: 18, delta: 'chunk 3. ' });
    expect(read().messages.edges[1].node.content).toBe('chunk 1. chunk 2. chunk 3. ');
  });

  it('a reply the page did not see begin follows the branch shown', () => {
    const { read, apply } = loaded([user('u1', null)]);
    apply({ __typename: 'MessageChunk', messageId: 'a9', offset: 0, delta: 'late' });
    expect(read().messages.edges[1].node).toMatchObject({ id: 'a9', parentId: 'u1', siblingIds: ['a9'] });
  });

  it('queued runs are listed with the message they answer, and cancelled', () => {
    const { cache, read, apply } = loaded([user('u1', null), reply('a1', 'u1', { status: 'STREAMING' })], run('r1', 'RUNNING'));
    const state = () => cache.readFragment({ id: 'TalkSession:s1', fragment: SessionStateFieldsFragmentDoc })!;
    const queued = (id: string) => cache.readFragment({ id: `Run:${id}`, fragment: QueuedRunFieldsFragmentDoc });
    // addMessage with busyPolicy ENQUEUE answers with a queued run.
    messageAccepted(cache, user('u2', 'a1', { runId: 'r2' }), run('r2', 'QUEUED'));
    expect(state().queuedRuns.map((r) => r.id)).toEqual(['r2']);
    expect(queued('r2')).toMatchObject({ status: 'QUEUED', promptMessageId: 'u2' });
    expect(shown(read)).toEqual(['u1', 'a1', 'u2']);
    // Another tab queues one too: its events say so.
    apply({ __typename: 'MessageAdded', message: user('u3', 'u2', { runId: 'r3' }) });
    apply({ __typename: 'RunStatusChanged', run: run('r3', 'QUEUED') });
    expect(state().queuedRuns.map((r) => r.id)).toEqual(['r2', 'r3']);
    expect(queued('r3')).toMatchObject({ promptMessageId: 'u3' });
    // Cancel r2 (cancelRun with its runId).
    runStopped(cache, 's1', run('r2', 'CANCELLED'));
    expect(state().queuedRuns.map((r) => r.id)).toEqual(['r3']);
    expect(read()).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r1' } });
    // r3 starts when r1 ends.
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'COMPLETED') });
    apply({ __typename: 'RunStatusChanged', run: run('r3', 'RUNNING') });
    expect(state().queuedRuns).toEqual([]);
    expect(read().activeRun?.id).toBe('r3');
  });

  it('an edit queued behind the agent waits in the queue, off the branch', () => {
    const { cache, read, apply } = loaded([user('u1', null), reply('a1', 'u1', { status: 'STREAMING' })], run('r1', 'RUNNING'));
    messageAccepted(cache, user('u1x', null, { runId: 'r2', siblingIds: ['u1', 'u1x'] }), run('r2', 'QUEUED'));
    expect(shown(read)).toEqual(['u1', 'a1']);
    const state = cache.readFragment({ id: 'TalkSession:s1', fragment: SessionStateFieldsFragmentDoc })!;
    expect(state.queuedRuns.map((r) => r.id)).toEqual(['r2']);
    // Its run starts: the branch switches.
    apply({ __typename: 'RunStatusChanged', run: run('r1', 'COMPLETED') });
    apply({ __typename: 'RunStatusChanged', run: run('r2', 'RUNNING') });
    apply({ __typename: 'BranchSelected', leafId: 'u1x' });
    expect(shown(read)).toEqual(['u1x']);
  });
});

describe('pagination', () => {
  it('earlier messages go in front of the loaded history', () => {
    const { cache, read } = loaded([message('m3', { status: 'COMPLETE' })]);
    write(cache, {
      query: EarlierMessagesDocument,
      variables: { id: 's1', last: 200, before: 'm:10' },
      data: {
        session: {
          __typename: 'TalkSession',
          id: 's1',
          messages: {
            __typename: 'MessageConnection',
            edges: ['m1', 'm2'].map((id, i) => ({ __typename: 'MessageEdge', cursor: `m:${i + 1}`, node: message(id, { status: 'COMPLETE' }) })),
            pageInfo: { __typename: 'PageInfo', hasPreviousPage: false, startCursor: 'm:1' },
          },
        },
      },
    });
    const conn = read().messages;
    expect(conn.edges.map((e) => e.node.id)).toEqual(['m1', 'm2', 'm3']);
    expect(conn.pageInfo).toMatchObject({ hasPreviousPage: false, startCursor: 'm:1' });
  });

  it('a new chat goes first in the list; a listed one moves there', () => {
    const { cache, list } = loaded();
    cache.writeFragment({ id: 'TalkSession:s4', fragment: SessionListFieldsFragmentDoc, data: listed('s4') });
    moveSessionToTop(cache, 's4');
    expect(list()).toEqual(['s4', 's3', 's2', 's1']);
    moveSessionToTop(cache, 's2');
    expect(list()).toEqual(['s2', 's4', 's3', 's1']);
  });
});

describe('the cache knows the schema', () => {
  it('lists every type of SessionEvent', () => {
    const schema = buildSchema(readFileSync(new URL('../../../schema.graphqls', import.meta.url), 'utf8'));
    const event = schema.getType('SessionEvent') as GraphQLInterfaceType;
    const types = schema.getImplementations(event).objects.map((t) => t.name);
    expect([...SESSION_EVENT_TYPES].sort()).toEqual(types.sort());
  });
});

describe('session state rules', () => {
  const idle: SessionState = { id: 's', status: 'IDLE', activeRun: null, pendingQuestion: null, pendingQuestions: [], pendingApprovals: [], queuedRuns: [] };

  it('a running run becomes the active one', () => {
    expect(sessionAfterRun(idle, { id: 'r1', status: 'RUNNING' })).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r1' } });
    expect(sessionAfterRun(idle, { id: 'r1', status: 'WAITING_FOR_INPUT' }).status).toBe('WAITING_FOR_INPUT');
  });

  it('a queued run behind an idle session counts as busy', () => {
    expect(sessionAfterRun(idle, { id: 'r1', status: 'QUEUED' })).toMatchObject({ status: 'RUNNING', queuedRuns: [{ id: 'r1' }], activeRun: null });
  });

  it('the end of another run leaves the active one alone', () => {
    const busy = sessionAfterRun(idle, { id: 'r2', status: 'RUNNING' });
    expect(sessionAfterRun(busy, { id: 'r1', status: 'CANCELLED' })).toMatchObject({ status: 'RUNNING', activeRun: { id: 'r2' } });
  });

  it('asked and answered', () => {
    const asked = sessionAsked(sessionAfterRun(idle, { id: 'r1', status: 'RUNNING' }), { id: 'q', runId: 'r1' });
    expect(asked).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: { id: 'q' } });
    expect(sessionAnswered(asked, 'other')).toBe(asked);
    expect(sessionAnswered(asked, 'q')).toMatchObject({ status: 'RUNNING', pendingQuestion: null });
  });

  it('a session waits while any question or approval waits', () => {
    let s = sessionAfterRun(idle, { id: 'r1', status: 'RUNNING' });
    s = sessionApprovalRequested(s, { id: 't1', runId: 'r1' });
    s = sessionAsked(s, { id: 'q1', runId: 'r1' });
    expect(s).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: { id: 'q1' } });
    s = sessionAnswered(s, 'q1');
    expect(s).toMatchObject({ status: 'WAITING_FOR_INPUT', pendingQuestion: null, pendingApprovals: [{ id: 't1' }] });
    expect(sessionApprovalEnded(s, 'other')).toBe(s);
    expect(sessionApprovalEnded(s, 't1')).toMatchObject({ status: 'RUNNING', pendingApprovals: [] });
  });
});
