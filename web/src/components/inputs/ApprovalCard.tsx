import { useEffect, useId, useRef, useState, type FormEvent, type KeyboardEvent } from 'react';
import type { DecideToolCallInput, ToolCallFieldsFragment as ToolCall } from '../../gql/graphql';
import { prettyJson } from '../../lib/approval';
import { describeError } from '../../lib/errors';
import { checkArguments } from '../../lib/toolArgs';
import { ToolIcon } from '../icons';
import { TimeLeft, useExpired } from './TimeLeft';

export interface ToolDetails {
  description?: string;
  inputSchema?: string | null;
}

/**
 * A tool call waiting for the person's decision: the tool and its arguments, then Approve,
 * Edit (the arguments in a box, checked as JSON and against the tool's input schema before
 * they are sent) or Reject (with an optional reason, told to the agent).
 */
export function ApprovalCard({
  call,
  tool,
  onDecide,
}: {
  call: ToolCall;
  tool: ToolDetails | undefined;
  onDecide: (input: DecideToolCallInput) => Promise<void>;
}) {
  const requested = call.approval?.requestedArguments ?? call.arguments;
  const [mode, setMode] = useState<'view' | 'edit' | 'reject'>('view');
  const [args, setArgs] = useState(() => prettyJson(requested));
  const [reason, setReason] = useState('');
  const [argsError, setArgsError] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const expired = useExpired(call.approval?.expiresAt);
  const uid = useId();
  const titleId = `${uid}-title`;
  const argsId = `${uid}-args`;
  const argsErrorId = `${uid}-args-error`;
  const reasonId = `${uid}-reason`;
  const editBox = useRef<HTMLTextAreaElement>(null);
  const reasonBox = useRef<HTMLInputElement>(null);
  const off = busy || expired;

  // The box opened takes the focus; closing it gives it back to the button that opened it.
  const opener = useRef<'edit' | 'reject' | null>(null);
  const editBtn = useRef<HTMLButtonElement>(null);
  const rejectBtn = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (mode === 'edit') editBox.current?.focus();
    else if (mode === 'reject') reasonBox.current?.focus();
    else if (opener.current === 'edit') editBtn.current?.focus();
    else if (opener.current === 'reject') rejectBtn.current?.focus();
  }, [mode]);

  function open(next: 'edit' | 'reject') {
    opener.current = next;
    setError(null);
    setMode(next);
  }

  async function decide(input: DecideToolCallInput) {
    setBusy(true);
    setError(null);
    try {
      await onDecide(input);
    } catch (e) {
      const message = describeError(e);
      // The server's refusal of edited arguments belongs at the box.
      if (input.arguments != null && /arguments/i.test(message)) setArgsError(message);
      else setError(message);
    } finally {
      setBusy(false);
    }
  }

  async function approveEdited(e: FormEvent) {
    e.preventDefault();
    if (off) return;
    const problem = await checkArguments(args, tool?.inputSchema);
    setArgsError(problem);
    if (problem) {
      editBox.current?.focus();
      return;
    }
    // Sent compact, as the agent gave them; unchanged arguments are not an edit.
    const compact = JSON.stringify(JSON.parse(args));
    const same = compact === canonical(requested);
    await decide({ toolCallId: call.id, decision: 'APPROVE', ...(same ? {} : { arguments: compact }) });
  }

  function reject(e: FormEvent) {
    e.preventDefault();
    if (off) return;
    const r = reason.trim();
    void decide({ toolCallId: call.id, decision: 'REJECT', ...(r ? { reason: r } : {}) });
  }

  function cancelOnEscape(e: KeyboardEvent) {
    if (e.key === 'Escape') {
      e.preventDefault();
      e.stopPropagation();
      setArgsError(null);
      setMode('view');
    }
  }

  return (
    <section
      className={`input-card approval-card${expired ? ' expired' : ''}`}
      aria-labelledby={titleId}
      data-tool-call-id={call.id}
      data-input-card=""
    >
      <div className="card-head">
        <p className="card-kicker">{expired ? 'Expired' : 'Approve this tool call?'}</p>
        <TimeLeft expiresAt={call.approval?.expiresAt} />
      </div>
      <h2 className="approval-title" id={titleId}>
        <ToolIcon /> The agent wants to run <code className="tool-name">{call.name}</code>
      </h2>
      {tool?.description && <p className="help">{tool.description}</p>}

      {mode === 'edit' ? (
        <form className="approval-edit" onSubmit={approveEdited} onKeyDown={cancelOnEscape}>
          <label htmlFor={argsId}>Arguments (JSON)</label>
          <textarea
            id={argsId}
            ref={editBox}
            className="args-editor"
            rows={Math.min(12, Math.max(3, args.split('\n').length))}
            spellCheck={false}
            value={args}
            disabled={off}
            aria-invalid={argsError ? true : undefined}
            aria-describedby={argsError ? argsErrorId : undefined}
            onChange={(e) => {
              setArgs(e.target.value);
              setArgsError(null);
            }}
          />
          {argsError && (
            <p className="field-error" id={argsErrorId} role="alert">
              {argsError}
            </p>
          )}
          <div className="card-actions">
            <button type="submit" className="btn primary" disabled={off}>
              Approve with these arguments
            </button>
            <button type="button" className="btn" onClick={() => (setArgsError(null), setMode('view'))}>
              Cancel
            </button>
          </div>
        </form>
      ) : (
        <pre className="approval-args" tabIndex={0} aria-label="Arguments">
          {prettyJson(requested)}
        </pre>
      )}

      {mode === 'reject' && (
        <form className="approval-reject" onSubmit={reject} onKeyDown={cancelOnEscape}>
          <label htmlFor={reasonId}>Reason (optional, told to the agent)</label>
          <input
            id={reasonId}
            ref={reasonBox}
            className="answer-input"
            value={reason}
            disabled={off}
            autoComplete="off"
            onChange={(e) => setReason(e.target.value)}
          />
          <div className="card-actions">
            <button type="submit" className="btn danger" disabled={off}>
              Reject call
            </button>
            <button type="button" className="btn" onClick={() => setMode('view')}>
              Cancel
            </button>
          </div>
        </form>
      )}

      {mode === 'view' && (
        <div className="card-actions">
          <button
            type="button"
            className="btn primary"
            disabled={off}
            onClick={() => void decide({ toolCallId: call.id, decision: 'APPROVE' })}
          >
            Approve
          </button>
          <button type="button" className="btn" ref={editBtn} disabled={off} onClick={() => open('edit')}>
            Edit
          </button>
          <button type="button" className="btn danger-outline" ref={rejectBtn} disabled={off} onClick={() => open('reject')}>
            Reject
          </button>
        </div>
      )}
      {error && (
        <p className="question-error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}

/** JSON text without its layout, to compare; other text as it is. */
function canonical(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}
