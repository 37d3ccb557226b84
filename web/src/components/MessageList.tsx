import { useLayoutEffect, useRef, useState } from 'react';
import type { MessageFieldsFragment } from '../gql/graphql';
import { MessageView } from './MessageView';

/** The ID of each run's last reply shown (a steered reply is split in two). */
function lastReplies(messages: MessageFieldsFragment[]): Set<string> {
  const last = new Map<string, string>();
  for (const m of messages) if (m.role === 'ASSISTANT' && m.runId) last.set(m.runId, m.id);
  return new Set(last.values());
}

/**
 * The conversation, oldest first. Keeps the newest text in view while the reader is at the
 * bottom, and leaves the scroll position alone when they have scrolled up to read.
 */
export function MessageList({
  messages,
  hasEarlier,
  pendingCount,
  onLoadEarlier,
  emptyHint,
}: {
  messages: MessageFieldsFragment[];
  hasEarlier: boolean;
  pendingCount: number;
  onLoadEarlier: () => Promise<void>;
  emptyHint?: string;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const lastOfRunIds = lastReplies(messages);
  const pinned = useRef(true);
  const [loadingEarlier, setLoadingEarlier] = useState(false);

  const last = messages[messages.length - 1];
  const lastSize = last
    ? last.content.length + (last.error?.length ?? 0) + last.toolCalls.reduce((n, t) => n + t.output.length + 1, 0)
    : 0;

  useLayoutEffect(() => {
    const el = scroller.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [messages.length, lastSize, last?.status, pendingCount]);

  function onScroll() {
    const el = scroller.current;
    if (!el) return;
    pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
  }

  async function loadEarlier() {
    const el = scroller.current;
    const before = el ? el.scrollHeight - el.scrollTop : 0;
    setLoadingEarlier(true);
    try {
      await onLoadEarlier();
    } finally {
      setLoadingEarlier(false);
      // Keep the message that was at the top where it was.
      requestAnimationFrame(() => {
        if (el) el.scrollTop = el.scrollHeight - before;
      });
    }
  }

  return (
    <div className="messages" ref={scroller} onScroll={onScroll}>
      <div className="messages-inner" role="log" aria-label="Conversation" aria-live="polite" aria-relevant="additions">
        {hasEarlier && (
          <button type="button" className="btn subtle load-earlier" onClick={loadEarlier} disabled={loadingEarlier}>
            {loadingEarlier ? 'Loading…' : 'Show earlier messages'}
          </button>
        )}
        {messages.length === 0 && emptyHint && <p className="empty-hint">{emptyHint}</p>}
        {messages.map((m) => (
          <MessageView key={m.id} message={m} lastOfRun={!m.runId || lastOfRunIds.has(m.id)} />
        ))}
      </div>
    </div>
  );
}
