import type { MessageFieldsFragment, SharedSessionQuery, SharedStreamSubscription, ToolCallFieldsFragment } from '../gql/graphql';
import { placeAt } from './text';

/** A conversation as a share link shows it. */
export type Shared = NonNullable<SharedSessionQuery['sharedSession']>;
/** One event of a live link's stream. */
export type SharedEvent = SharedStreamSubscription['sharedStream'];

/** What applying an event asks of the page besides the new conversation. */
export interface Applied {
  shared: Shared;
  /** The agent's run is at work (queued, running or waiting), or null when the event says nothing of it. */
  working: boolean | null;
  /** The branch changed: read the conversation again. */
  reload: boolean;
}

const activeRun = new Set(['QUEUED', 'RUNNING', 'WAITING_FOR_INPUT']);

function withCall(calls: ToolCallFieldsFragment[], call: ToolCallFieldsFragment): ToolCallFieldsFragment[] {
  const i = calls.findIndex((c) => c.id === call.id);
  if (i < 0) return [...calls, call];
  const next = calls.slice();
  next[i] = call;
  return next;
}

function mapMessage(shared: Shared, id: string, f: (m: MessageFieldsFragment) => MessageFieldsFragment): Shared {
  let changed = false;
  const messages = shared.messages.map((m) => {
    if (m.id !== id) return m;
    changed = true;
    return f(m);
  });
  return changed ? { ...shared, messages } : shared;
}

/**
 * Applies one event of a live link's stream to the conversation it shows: a new message
 * at the end of the branch, a chunk of text at its offset, a finished message, a tool
 * call's start, output and end. The page keeps the result in Apollo's cache.
 */
export function applySharedEvent(shared: Shared, ev: SharedEvent): Applied {
  const out: Applied = { shared, working: null, reload: false };
  switch (ev.__typename) {
    case 'MessageAdded':
      if (!shared.messages.some((m) => m.id === ev.message.id)) {
        out.shared = { ...shared, messages: [...shared.messages, ev.message] };
      }
      break;
    case 'MessageCompleted':
      out.shared = mapMessage(shared, ev.message.id, (m) => ({ ...ev.message, toolCalls: m.toolCalls }));
      break;
    case 'MessageChunk':
      out.shared = mapMessage(shared, ev.messageId, (m) => ({ ...m, content: placeAt(m.content, ev.offset, ev.delta) }));
      break;
    case 'ToolCallStarted':
    case 'ToolCallFinished':
    case 'ToolApprovalDecided':
      out.shared = mapMessage(shared, ev.toolCall.messageId, (m) => ({ ...m, toolCalls: withCall(m.toolCalls, ev.toolCall) }));
      break;
    case 'ToolCallOutput':
      out.shared = mapMessage(shared, ev.messageId, (m) => ({
        ...m,
        toolCalls: m.toolCalls.map((c) => (c.id === ev.toolCallId ? { ...c, output: placeAt(c.output, ev.offset, ev.delta) } : c)),
      }));
      break;
    case 'RunStatusChanged':
      out.working = activeRun.has(ev.run.status);
      break;
    case 'BranchSelected':
      out.reload = true;
      break;
  }
  return out;
}

/** The token of the shared page at path, or null: /s/<token>. */
export function sharedToken(path: string): string | null {
  const m = /^\/s\/([^/?#]+)\/?$/.exec(path);
  return m ? decodeURIComponent(m[1]) : null;
}
