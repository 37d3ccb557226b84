import { describe, expect, it } from 'vitest';
import type { MessageFieldsFragment, ToolCallFieldsFragment } from '../gql/graphql';
import { applySharedEvent, sharedToken, type Shared } from './shared';

function message(id: string, content: string, status: MessageFieldsFragment['status'] = 'COMPLETE'): MessageFieldsFragment {
  return {
    id,
    sessionId: '',
    role: 'ASSISTANT',
    kind: 'TEXT',
    content,
    status,
    error: null,
    runId: 'r',
    createdAt: '2026-01-01T00:00:00Z',
    parentId: null,
    siblingIds: [id],
    question: null,
    toolCalls: [],
  };
}

function call(id: string, messageId: string, status: ToolCallFieldsFragment['status']): ToolCallFieldsFragment {
  return { id, runId: 'r', messageId, name: 'echo', arguments: '', output: '', result: null, error: null, status, startedAt: '', finishedAt: null, approval: null };
}

const start: Shared = { title: 't', live: true, streamCursor: 'c0', messages: [message('m1', 'hello')] };

describe('applySharedEvent', () => {
  it('adds a message, streams its text once, and completes it', () => {
    let s = applySharedEvent(start, { __typename: 'MessageAdded', cursor: 'c1', message: message('m2', '', 'STREAMING') }).shared;
    s = applySharedEvent(s, { __typename: 'MessageChunk', cursor: 'c2', messageId: 'm2', delta: 'Hé', offset: 0 }).shared;
    s = applySharedEvent(s, { __typename: 'MessageChunk', cursor: 'c3', messageId: 'm2', delta: 'llo', offset: 2 }).shared;
    s = applySharedEvent(s, { __typename: 'MessageChunk', cursor: 'c3', messageId: 'm2', delta: 'llo', offset: 2 }).shared;
    expect(s.messages.map((m) => m.content)).toEqual(['hello', 'Héllo']);
    s = applySharedEvent(s, { __typename: 'MessageAdded', cursor: 'c1', message: message('m2', '', 'STREAMING') }).shared;
    expect(s.messages).toHaveLength(2);
    s = applySharedEvent(s, { __typename: 'ToolCallStarted', cursor: 'c4', toolCall: call('t1', 'm2', 'RUNNING') }).shared;
    s = applySharedEvent(s, { __typename: 'MessageCompleted', cursor: 'c5', message: message('m2', 'Héllo!') }).shared;
    expect(s.messages[1]).toMatchObject({ content: 'Héllo!', status: 'COMPLETE' });
    expect(s.messages[1].toolCalls.map((c) => c.status)).toEqual(['RUNNING']);
    s = applySharedEvent(s, { __typename: 'ToolCallFinished', cursor: 'c6', toolCall: call('t1', 'm2', 'COMPLETED') }).shared;
    expect(s.messages[1].toolCalls.map((c) => c.status)).toEqual(['COMPLETED']);
  });

  it('says when the agent works and when the branch changed', () => {
    expect(applySharedEvent(start, { __typename: 'RunStatusChanged', cursor: 'c', run: { id: 'r', status: 'RUNNING' } }).working).toBe(true);
    expect(applySharedEvent(start, { __typename: 'RunStatusChanged', cursor: 'c', run: { id: 'r', status: 'COMPLETED' } }).working).toBe(false);
    expect(applySharedEvent(start, { __typename: 'BranchSelected', cursor: 'c' }).reload).toBe(true);
  });
});

describe('sharedToken', () => {
  it('reads the token of /s/<token>', () => {
    expect(sharedToken('/s/abc_-12')).toBe('abc_-12');
    expect(sharedToken('/s/abc/')).toBe('abc');
    expect(sharedToken('/')).toBeNull();
    expect(sharedToken('/s/')).toBeNull();
  });
});
