// The Apollo cache is the page's one store: queries, mutation answers and every event of a
// session's stream are written into it, and the components read from it.
//
// Objects with an id (TalkSession, Message, Run, Question, ToolCall) are normalised by
// `__typename:id`. The field policies below say how lists grow (relay-style connections)
// and keep a late answer from undoing newer knowledge (a run, a message or a tool call
// never goes back to an earlier status, an error, an answer or a decision once known stays
// known).

import { InMemoryCache, type FieldMergeFunction, type Reference } from '@apollo/client';
import { relayStylePagination } from '@apollo/client/utilities';
import type { MessageStatus, RunStatus, ToolCallStatus } from '../gql/graphql';
import { longerText, mergeSiblingIds } from './branch';

/** How far a run has come: a run never goes back to a lower rank. */
export const RUN_RANK: Record<RunStatus, number> = {
  QUEUED: 0,
  RUNNING: 1,
  WAITING_FOR_INPUT: 1,
  COMPLETED: 2,
  CANCELLED: 2,
  INTERRUPTED: 2,
  FAILED: 2,
};

export const MESSAGE_RANK: Record<MessageStatus, number> = {
  STREAMING: 0,
  COMPLETE: 1,
  INTERRUPTED: 1,
  FAILED: 1,
};

/** A tool call waits for approval, then runs, then ends (or ends without running). */
export const TOOL_CALL_RANK: Record<ToolCallStatus, number> = {
  AWAITING_APPROVAL: 0,
  RUNNING: 1,
  COMPLETED: 2,
  FAILED: 2,
  CANCELLED: 2,
  REJECTED: 2,
};

export const isFinishedRun = (status: RunStatus) => RUN_RANK[status] === 2;

/** A merge that keeps the existing status when the incoming one is of a lower rank. */
export function monotonic<T extends string>(rank: Record<T, number>): FieldMergeFunction<T, T> {
  return (existing, incoming) => (existing !== undefined && rank[existing] > rank[incoming] ? existing : incoming);
}

/** A merge that keeps a known value when the incoming one is null (a stale answer). */
const keepKnown: FieldMergeFunction = (existing, incoming) => incoming ?? existing ?? null;

/** An approval once decided or withdrawn (it has a time or a reason) stays so. */
const settledApproval: FieldMergeFunction = (existing, incoming) => {
  const settled = (a: { decidedAt?: unknown; reason?: unknown } | null | undefined) => Boolean(a?.decidedAt || a?.reason);
  return settled(existing) && !settled(incoming) ? existing : incoming;
};

/** Tool calls of a message: the incoming list, then any known call it lacks. */
const unionOfRefs: FieldMergeFunction<Reference[], Reference[]> = (existing, incoming) => {
  if (!existing?.length) return incoming;
  const seen = new Set(incoming.map((r) => r.__ref));
  return [...incoming, ...existing.filter((r) => !seen.has(r.__ref))];
};

/** The types of SessionEvent (schema.graphqls), checked against the schema by a unit test. */
export const SESSION_EVENT_TYPES = [
  'MessageAdded',
  'MessageChunk',
  'MessageCompleted',
  'RunStatusChanged',
  'QuestionAsked',
  'QuestionAnswered',
  'QuestionWithdrawn',
  'ToolCallStarted',
  'ToolCallOutput',
  'ToolCallFinished',
  'ToolApprovalRequested',
  'ToolApprovalDecided',
  'SessionUpdated',
  'BranchSelected',
];

/** The types of ViewerEvent (schema.graphqls), checked against the schema by a unit test. */
export const VIEWER_EVENT_TYPES = ['SessionChanged', 'SessionRemoved', 'RunEnded', 'InputRequested'];

export function createCache(): InMemoryCache {
  return new InMemoryCache({
    // The stream's events are of an interface type; the cache matches each event's inline
    // fragments by its concrete type.
    possibleTypes: { SessionEvent: SESSION_EVENT_TYPES, ViewerEvent: VIEWER_EVENT_TYPES },
    typePolicies: {
      Query: {
        fields: {
          // The server orders the list (most recent activity first); pages are appended.
          sessions: relayStylePagination(),
          // run(id) answers from a Run already in the cache when it has every field asked for.
          run: {
            read(existing, { args, toReference }) {
              return existing ?? (args?.id ? toReference({ __typename: 'Run', id: args.id }) : undefined);
            },
          },
        },
      },
      Subscription: {
        // Each event replaces the previous one here; what it carries is normalised elsewhere.
        fields: {
          messageStream: { keyArgs: ['sessionId'], merge: (_, incoming) => incoming },
          viewerEvents: { keyArgs: false, merge: (_, incoming) => incoming },
        },
      },
      TalkSession: {
        fields: {
          settings: { merge: true },
          // History pages: messages(last) replaces, messages(last, before) goes in front.
          // The current branch: a first page (or the branch fetched again) replaces.
          messages: relayStylePagination(),
          // Kept by the events (see events.ts); each copy from the server replaces.
          queuedRuns: { merge: false },
          // Client-only (client-schema.graphql): how its latest run ended (viewer.ts).
          lastRunStatus: { read: (existing: RunStatus | undefined) => existing ?? null, merge: keepKnown },
        },
      },
      Run: {
        fields: {
          status: { merge: monotonic(RUN_RANK) },
          error: { merge: keepKnown },
          finishedAt: { merge: keepKnown },
          usage: { merge: keepKnown },
          // Client-only (client-schema.graphql): the user message this run answers.
          promptMessageId: { read: (existing: string | undefined) => existing ?? null, merge: keepKnown },
        },
      },
      Message: {
        fields: {
          status: { merge: monotonic(MESSAGE_RANK) },
          content: { merge: (existing: string | undefined, incoming: string) => longerText(existing, incoming) },
          // Versions are only added: an older copy of the list does not lose one.
          siblingIds: { merge: (existing: string[] | undefined, incoming: string[]) => mergeSiblingIds(existing, incoming) },
          error: { merge: keepKnown },
          toolCalls: { merge: unionOfRefs },
        },
      },
      Question: {
        fields: {
          answer: { merge: keepKnown },
          answeredAt: { merge: keepKnown },
          withdrawn: { merge: (existing: boolean | undefined, incoming: boolean) => Boolean(existing) || incoming },
          withdrawnReason: { merge: keepKnown },
        },
      },
      ToolCall: {
        fields: {
          status: { merge: monotonic(TOOL_CALL_RANK) },
          approval: { merge: settledApproval },
          result: { merge: keepKnown },
          error: { merge: keepKnown },
          finishedAt: { merge: keepKnown },
        },
      },
    },
  });
}
