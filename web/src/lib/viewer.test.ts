import { describe, expect, it } from 'vitest';
import { buildSchema, type GraphQLInterfaceType } from 'graphql';
import { readFileSync } from 'node:fs';
import { SessionsDocument, type SessionListFieldsFragment } from '../gql/graphql';
import { createCache, VIEWER_EVENT_TYPES } from './cache';
import { applyViewerEvent, LAST_RUN, type ViewerEvent } from './viewer';

const AT = '2026-11-29T10:00:00Z';

function listed(id: string, over: Partial<SessionListFieldsFragment> = {}) {
  return { __typename: 'TalkSession' as const, id, title: `chat ${id}`, updatedAt: AT, status: 'IDLE', unread: false, ...over };
}

function listedCache() {
  const cache = createCache();
  cache.writeQuery({
    query: SessionsDocument,
    variables: { first: 50 },
    data: ({
      viewer: { __typename: 'Viewer', id: 'u1', eventsCursor: 'v0' },
      sessions: {
        __typename: 'TalkSessionConnection',
        edges: ['s2', 's1'].map((id) => ({ __typename: 'TalkSessionEdge', cursor: `l:${id}`, node: listed(id) })),
        pageInfo: { __typename: 'PageInfo', hasNextPage: false, endCursor: 'l:s1' },
      },
    } as never),
  });
  const list = () => cache.readQuery({ query: SessionsDocument, variables: { first: 50 } })!.sessions.edges.map((e) => e.node);
  const elsewhere = { sessionId: 's9', visible: true };
  const apply = (ev: Record<string, unknown>, screen = elsewhere) => applyViewerEvent(cache, { cursor: 'v', at: AT, ...ev } as ViewerEvent, screen);
  return { cache, list, apply };
}

describe('the chat list follows the viewer stream', () => {
  it('a session changed in another tab shows as it is now, and activity moves it first', () => {
    const { list, apply } = listedCache();
    apply({ __typename: 'SessionChanged', session: listed('s1', { status: 'WAITING_FOR_INPUT', unread: true, updatedAt: '2026-11-29T10:05:00Z' }) });
    expect(list().map((s) => [s.id, s.status, s.unread])).toEqual([
      ['s1', 'WAITING_FOR_INPUT', true],
      ['s2', 'IDLE', false],
    ]);
  });

  it('a chat created elsewhere joins the list, a deleted one leaves it', () => {
    const { list, apply } = listedCache();
    apply({ __typename: 'SessionChanged', session: listed('s3') });
    expect(list().map((s) => s.id)).toEqual(['s3', 's2', 's1']);
    apply({ __typename: 'SessionRemoved', sessionId: 's2' });
    expect(list().map((s) => s.id)).toEqual(['s3', 's1']);
  });

  it('a failed run shows on its chat, and is told when the chat is not on screen', () => {
    const { cache, apply } = listedCache();
    const told = apply({ __typename: 'RunEnded', run: { __typename: 'Run', id: 'r1', sessionId: 's1', status: 'FAILED', error: 'boom' } });
    expect(told).toMatchObject({ sessionId: 's1', body: 'boom' });
    expect(cache.readFragment<{ lastRunStatus: string }>({ id: 'TalkSession:s1', fragment: LAST_RUN })?.lastRunStatus).toBe('FAILED');
    // A later SessionChanged keeps what the page knows of the last run.
    apply({ __typename: 'SessionChanged', session: listed('s1') });
    expect(cache.readFragment<{ lastRunStatus: string }>({ id: 'TalkSession:s1', fragment: LAST_RUN })?.lastRunStatus).toBe('FAILED');
  });

  it('a question tells the user unless its chat is on screen and seen', () => {
    const { apply } = listedCache();
    const ask = { __typename: 'InputRequested', sessionId: 's1', question: { __typename: 'Question', id: 'q', prompt: 'Name?' }, toolCall: null };
    expect(apply(ask)).toMatchObject({ title: '“chat s1” needs your answer', body: 'Name?' });
    expect(apply(ask, { sessionId: 's1', visible: true })).toBeNull();
    expect(apply(ask, { sessionId: 's1', visible: false })).not.toBeNull();
  });

  it('lists every type of ViewerEvent', () => {
    const schema = buildSchema(readFileSync(new URL('../../../schema.graphqls', import.meta.url), 'utf8'));
    const event = schema.getType('ViewerEvent') as GraphQLInterfaceType;
    expect([...VIEWER_EVENT_TYPES].sort()).toEqual(schema.getImplementations(event).objects.map((t) => t.name).sort());
  });
});
