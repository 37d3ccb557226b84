import { useFragment } from '@apollo/client/react';
import { useState, type MouseEvent } from 'react';
import { MessageTextFieldsFragmentDoc, QueuedRunFieldsFragmentDoc } from '../gql/graphql';
import { describeError } from '../lib/errors';

/** The text of a message in the cache, or null. */
function useMessageText(messageId: string | null): string | null {
  const msg = useFragment({ fragment: MessageTextFieldsFragmentDoc, from: { __typename: 'Message', id: messageId ?? '' } });
  return messageId && msg.complete ? msg.data.content || null : null;
}

function QueuedRun({
  runId,
  shownPrompt,
  position,
  onCancel,
}: {
  runId: string;
  /** The run's message found among the messages shown (by its runId), when there. */
  shownPrompt: string | undefined;
  position: number;
  onCancel: (runId: string) => Promise<void>;
}) {
  const run = useFragment({ fragment: QueuedRunFieldsFragmentDoc, from: { __typename: 'Run', id: runId } });
  const [cancelling, setCancelling] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const promptId = (run.complete ? run.data.promptMessageId : null) ?? null;
  const fromCache = useMessageText(promptId);
  const text = shownPrompt ?? fromCache;

  async function cancel(ev: MouseEvent<HTMLButtonElement>) {
    const button = ev.currentTarget;
    const item = button.closest('li');
    const hadFocus = document.activeElement === button;
    setCancelling(true);
    setError(null);
    try {
      await onCancel(runId);
      // The item goes with its button: the focus goes to the next Cancel, else the box.
      if (hadFocus) {
        const next = item?.nextElementSibling?.querySelector('button') ?? item?.previousElementSibling?.querySelector('button');
        requestAnimationFrame(() => {
          if (document.activeElement && document.activeElement !== document.body) return;
          (next?.isConnected ? next : document.getElementById('composer-input'))?.focus();
        });
      }
    } catch (e) {
      setError(describeError(e));
      setCancelling(false);
    }
  }

  const name = text ? `“${text.length > 60 ? `${text.slice(0, 60)}…` : text}”` : `queued run ${position}`;
  return (
    <li className="queued-run" data-run-id={runId}>
      <span className="queued-text">{text ?? <em>A reply waiting its turn</em>}</span>
      <button type="button" className="btn small" aria-label={`Cancel ${name}`} disabled={cancelling} onClick={cancel}>
        Cancel
      </button>
      {error && (
        <p className="msg-action-error" role="alert">
          {error}
        </p>
      )}
    </li>
  );
}

/** The runs waiting their turn behind the agent, oldest first, each with Cancel. */
export function QueuedRuns({
  runIds,
  promptsByRun,
  onCancel,
}: {
  runIds: string[];
  promptsByRun: Map<string, string>;
  onCancel: (runId: string) => Promise<void>;
}) {
  if (runIds.length === 0) return null;
  return (
    <section className="queue" aria-labelledby="queue-heading">
      <h2 id="queue-heading" className="queue-heading">
        Queued ({runIds.length})
      </h2>
      <ol className="queue-list">
        {runIds.map((id, i) => (
          <QueuedRun key={id} runId={id} position={i + 1} shownPrompt={promptsByRun.get(id)} onCancel={onCancel} />
        ))}
      </ol>
    </section>
  );
}
