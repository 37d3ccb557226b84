import { useId, useState } from 'react';
import type { ToolCallFieldsFragment as ToolCall } from '../gql/graphql';
import { ChevronIcon, ToolIcon } from './icons';

const STATUS_LABEL: Record<ToolCall['status'], string> = {
  RUNNING: 'running',
  COMPLETED: 'done',
  FAILED: 'failed',
  CANCELLED: 'cancelled',
};

function pretty(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

/** One tool call: name and status, then arguments, live output and result when expanded. */
export function ToolCallView({ call }: { call: ToolCall }) {
  const [expanded, setExpanded] = useState(call.status === 'RUNNING');
  const panelId = useId();
  return (
    <div className={`tool-call status-${call.status.toLowerCase()}`} data-tool-call={call.id}>
      <button
        type="button"
        className="tool-head"
        aria-expanded={expanded}
        aria-controls={panelId}
        onClick={() => setExpanded((x) => !x)}
      >
        <span className={`chev${expanded ? ' open' : ''}`}>
          <ChevronIcon />
        </span>
        <ToolIcon />
        <span className="tool-name">{call.name}</span>
        <span className={`badge tool-status ${call.status.toLowerCase()}`}>
          {call.status === 'RUNNING' && <span className="spinner small" aria-hidden="true" />}
          {STATUS_LABEL[call.status]}
        </span>
      </button>
      <div id={panelId} className="tool-body" hidden={!expanded}>
        <section>
          <h4>Arguments</h4>
          <pre className="tool-args">{pretty(call.arguments) || '—'}</pre>
        </section>
        {(call.output || call.status === 'RUNNING') && (
          <section>
            <h4>Output</h4>
            <pre className="tool-output">{call.output || '…'}</pre>
          </section>
        )}
        {call.result != null && (
          <section>
            <h4>Result</h4>
            <pre className="tool-result">{pretty(call.result)}</pre>
          </section>
        )}
        {call.error && (
          <section>
            <h4>Error</h4>
            <pre className="tool-error">{call.error}</pre>
          </section>
        )}
      </div>
    </div>
  );
}
