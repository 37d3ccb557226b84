import { useId, useState } from 'react';
import type { ToolCallFieldsFragment as ToolCall } from '../gql/graphql';
import { approvalOutcome, prettyJson } from '../lib/approval';
import { ChevronIcon, ToolIcon } from './icons';

const STATUS_LABEL: Record<ToolCall['status'], string> = {
  AWAITING_APPROVAL: 'awaiting approval',
  RUNNING: 'running',
  COMPLETED: 'done',
  FAILED: 'failed',
  CANCELLED: 'cancelled',
  REJECTED: 'rejected',
};

/**
 * One tool call: name, status and the decision it needed, then arguments (and the ones the
 * agent asked for, when an approval edited them), live output and result when expanded.
 */
export function ToolCallView({ call }: { call: ToolCall }) {
  const [expanded, setExpanded] = useState(call.status === 'RUNNING');
  const panelId = useId();
  const outcome = approvalOutcome(call);
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
        {outcome && outcome.kind !== 'waiting' && (
          <span className={`badge approval ${outcome.kind}`} data-approval={outcome.kind}>
            {outcome.label}
          </span>
        )}
        <span className={`badge tool-status ${call.status.toLowerCase()}`}>
          {call.status === 'RUNNING' && <span className="spinner small" aria-hidden="true" />}
          {STATUS_LABEL[call.status]}
        </span>
      </button>
      {outcome?.detail && <p className={`approval-note ${outcome.kind}`}>{outcome.detail}</p>}
      <div id={panelId} className="tool-body" hidden={!expanded}>
        <section>
          <h4>{outcome?.kind === 'edited' ? 'Arguments (as you edited them)' : 'Arguments'}</h4>
          <pre className="tool-args" tabIndex={0}>
            {prettyJson(call.arguments) || '—'}
          </pre>
        </section>
        {outcome?.kind === 'edited' && call.approval && (
          <section>
            <h4>Arguments the agent asked for</h4>
            <pre className="tool-args-requested" tabIndex={0}>
              {prettyJson(call.approval.requestedArguments)}
            </pre>
          </section>
        )}
        {(call.output || call.status === 'RUNNING') && (
          <section>
            <h4>Output</h4>
            <pre className="tool-output" tabIndex={0}>
              {call.output || '…'}
            </pre>
          </section>
        )}
        {call.result != null && (
          <section>
            <h4>Result</h4>
            <pre className="tool-result" tabIndex={0}>
              {prettyJson(call.result)}
            </pre>
          </section>
        )}
        {call.error && (
          <section>
            <h4>Error</h4>
            <pre className="tool-error" tabIndex={0}>
              {call.error}
            </pre>
          </section>
        )}
      </div>
    </div>
  );
}
