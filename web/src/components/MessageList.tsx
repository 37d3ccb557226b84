import { useLayoutEffect, useRef, useState } from 'react';
import type { ChatState } from '../lib/chat';
import { MessageView } from './MessageView';

/**
 * The conversation, oldest first. Keeps the newest text in view while the reader is at the
 * bottom, and leaves the scroll position alone when they have scrolled up to read.
 */
export function MessageList({
  state,
  onLoadEarlier,
  emptyHint,
}: {
  state: ChatState;
  onLoadEarlier: () => Promise<void>;
  emptyHint?: string;
}) {
  const scroller = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  const [loadingEarlier, setLoadingEarlier] = useState(false);

  const last = state.messages[state.messages.length - 1];
  const lastSize = last ? last.content.length + last.toolCalls.reduce((n, t) => n + t.output.length + 1, 0) : 0;

  useLayoutEffect(() => {
    const el = scroller.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [state.messages.length, lastSize, state.pendingQuestion, state.runErrors]);

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

  // A failed run's reason goes under its last message, or at the end when it wrote nothing.
  const lastOfRun = new Map<string, string>();
  for (const m of state.messages) if (m.runId) lastOfRun.set(m.runId, m.id);
  const orphanErrors = Object.entries(state.runErrors).filter(([runId]) => !lastOfRun.has(runId));

  return (
    <div className="messages" ref={scroller} onScroll={onScroll}>
      <div className="messages-inner" role="log" aria-label="Conversation" aria-live="polite" aria-relevant="additions">
        {state.hasEarlier && (
          <button type="button" className="btn subtle load-earlier" onClick={loadEarlier} disabled={loadingEarlier}>
            {loadingEarlier ? 'Loading…' : 'Show earlier messages'}
          </button>
        )}
        {state.messages.length === 0 && emptyHint && <p className="empty-hint">{emptyHint}</p>}
        {state.messages.map((m) => (
          <MessageView
            key={m.id}
            message={m}
            runError={m.runId && lastOfRun.get(m.runId) === m.id ? state.runErrors[m.runId] : undefined}
          />
        ))}
        {orphanErrors.map(([runId, err]) => (
          <p key={runId} className="run-error standalone" role="note">
            {err}
          </p>
        ))}
      </div>
    </div>
  );
}
