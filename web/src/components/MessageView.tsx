import { useQuery } from '@apollo/client/react';
import { memo, useContext, useEffect, useRef, useState, type FormEvent, type KeyboardEvent } from 'react';
import { RunDocument, type MessageFieldsFragment } from '../gql/graphql';
import { siblingPosition } from '../lib/branch';
import { describeError } from '../lib/errors';
import { ChevronIcon, ChevronLeftIcon, ForkIcon, PencilIcon, RegenerateIcon } from './icons';
import { Markdown } from './markdown/Markdown';
import { MessageActionsContext, SharedReadingContext, type MessageActions } from './messageActions';
import { ToolCallView } from './ToolCallView';

type Message = MessageFieldsFragment;

/** Whether the answer to the question picked `choice` (a JSON array for a multiple choice). */
function chosen(q: NonNullable<Message['question']>, choice: string): boolean {
  if (q.answer == null) return false;
  if (!q.multiple) return q.answer === choice;
  try {
    const picked = JSON.parse(q.answer) as unknown;
    return Array.isArray(picked) && picked.includes(choice);
  } catch {
    return false;
  }
}

function roleLabel(m: Message, shared: boolean): string {
  if (m.kind === 'QUESTION') return 'Agent asks';
  if (m.kind === 'ANSWER') return shared ? 'Answer' : 'Your answer';
  if (m.role === 'USER') return shared ? 'User' : 'You';
  return 'Agent';
}

/**
 * Why a message failed, from the message itself (the server stores it, so it survives a
 * reload), else from its run; a run already in the cache answers without a request.
 */
function FailureReason({ message: m }: { message: Message }) {
  const run = useQuery(RunDocument, {
    variables: { id: m.runId ?? '' },
    skip: Boolean(m.error) || !m.runId,
    fetchPolicy: 'cache-first',
  });
  const reason = m.error || run.data?.run?.error || (run.loading ? '' : 'The agent could not finish this reply.');
  if (!reason) return null;
  return (
    <p className="run-error" role="note">
      {reason}
    </p>
  );
}

const tokens = new Intl.NumberFormat();

/** The run's token usage, when the cache knows the run (it followed it live, or was asked). */
function Usage({ runId }: { runId: string }) {
  const run = useQuery(RunDocument, { variables: { id: runId }, fetchPolicy: 'cache-only' });
  const usage = run.data?.run?.usage;
  if (!usage) return null;
  const cached = usage.cachedInputTokens ? `, ${tokens.format(usage.cachedInputTokens)} of them cached` : '';
  return (
    <p className="msg-usage" title={`Agent ${run.data?.run?.agent ?? ''}: ${usage.inputTokens} input tokens${cached}, ${usage.outputTokens} output tokens`}>
      {tokens.format(usage.inputTokens)} in · {tokens.format(usage.outputTokens)} out
    </p>
  );
}

/**
 * Focuses the first element found for the selectors once it is on screen (a version just
 * selected renders in place of the one whose button had the focus), trying for a second.
 */
function focusWhenShown(selectors: string[]) {
  const deadline = performance.now() + 1_000;
  const attempt = () => {
    for (const s of selectors) {
      const el = document.querySelector<HTMLElement>(s);
      if (el && !(el as HTMLButtonElement).disabled) {
        el.focus();
        return;
      }
    }
    if (performance.now() < deadline) requestAnimationFrame(attempt);
  };
  requestAnimationFrame(attempt);
}

const inMessage = (id: string, rest: string) => `article[data-message-id="${CSS.escape(id)}"] ${rest}`;

/** "‹ 2 / 3 ›" between the versions of a message. */
function VersionNav({ message: m, actions }: { message: Message; actions: MessageActions }) {
  const [switching, setSwitching] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const pos = siblingPosition(m.id, m.siblingIds);
  if (!pos) return null;

  async function go(target: string | null, dir: 'previous' | 'next') {
    if (!target || switching) return;
    setSwitching(true);
    setError(null);
    try {
      await actions.selectBranch(target);
      // The same button of the version now shown keeps the focus (the other one at an end).
      const other = dir === 'previous' ? 'next' : 'previous';
      focusWhenShown([inMessage(target, `.version-nav .${dir}`), inMessage(target, `.version-nav .${other}`)]);
    } catch (e) {
      setError(describeError(e));
    } finally {
      setSwitching(false);
    }
  }

  return (
    <>
      <div className="version-nav" role="group" aria-label="Versions of this message">
        <button
          type="button"
          className="icon-btn small previous"
          aria-label="Previous version"
          title="Previous version"
          disabled={!pos.previousId || switching}
          onClick={() => go(pos.previousId, 'previous')}
        >
          <ChevronLeftIcon />
        </button>
        <span className="version-count">
          {pos.index} / {pos.count}
        </span>
        <button
          type="button"
          className="icon-btn small next"
          aria-label="Next version"
          title="Next version"
          disabled={!pos.nextId || switching}
          onClick={() => go(pos.nextId, 'next')}
        >
          <ChevronIcon />
        </button>
      </div>
      {error && (
        <p className="msg-action-error" role="alert">
          {error}
        </p>
      )}
    </>
  );
}

/** A user message being edited in place: Enter (or Save) sends the new version, Escape cancels. */
function MessageEditor({
  message: m,
  onSave,
  onCancel,
}: {
  message: Message;
  onSave: (content: string) => Promise<void>;
  onCancel: () => void;
}) {
  const [text, setText] = useState(m.content);
  const [saving, setSaving] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const area = useRef<HTMLTextAreaElement>(null);
  const boxId = `edit-${m.id}`;

  useEffect(() => {
    const el = area.current;
    if (!el) return;
    el.focus();
    el.setSelectionRange(el.value.length, el.value.length);
  }, []);

  async function save() {
    const content = text.trim();
    if (!content || saving) return;
    setSaving(true);
    setError(null);
    try {
      await onSave(content);
    } catch (e) {
      setError(describeError(e));
      setSaving(false);
      area.current?.focus();
    }
  }

  function onKeyDown(e: KeyboardEvent<HTMLTextAreaElement>) {
    if (e.key === 'Enter' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.nativeEvent.isComposing) {
      e.preventDefault();
      void save();
    } else if (e.key === 'Escape') {
      // Escape here cancels the edit; it does not stop the agent.
      e.preventDefault();
      e.stopPropagation();
      onCancel();
    }
  }

  function onSubmit(e: FormEvent) {
    e.preventDefault();
    void save();
  }

  return (
    <form className="msg-edit" onSubmit={onSubmit} aria-label="Edit message">
      <label htmlFor={boxId} className="visually-hidden">
        New version of your message
      </label>
      <textarea
        id={boxId}
        ref={area}
        rows={Math.min(8, Math.max(2, text.split('\n').length))}
        value={text}
        aria-describedby={`${boxId}-hint`}
        onChange={(e) => setText(e.target.value)}
        onKeyDown={onKeyDown}
      />
      {error && (
        <p className="msg-action-error" role="alert">
          {error}
        </p>
      )}
      <div className="msg-edit-foot">
        <span id={`${boxId}-hint`} className="hint">
          <kbd>Enter</kbd> to save · <kbd>Escape</kbd> to cancel
        </span>
        <button type="button" className="btn small" onClick={onCancel}>
          Cancel
        </button>
        <button type="submit" className="btn small primary" disabled={saving || text.trim() === ''}>
          Save
        </button>
      </div>
    </form>
  );
}

/** The buttons under a message: its versions, edit or regenerate, fork. */
function MessageToolbar({ message: m, actions, onEdit }: { message: Message; actions: MessageActions; onEdit?: () => void }) {
  const [busy, setBusy] = useState<'regenerate' | 'fork' | null>(null);
  const [error, setError] = useState<string | null>(null);
  const done = m.status !== 'STREAMING';
  const canRegenerate = m.role === 'ASSISTANT' && m.kind === 'TEXT' && done;

  async function run(what: 'regenerate' | 'fork') {
    if (busy) return;
    setBusy(what);
    setError(null);
    try {
      await (what === 'regenerate' ? actions.regenerate(m.id) : actions.fork(m.id));
    } catch (e) {
      setError(describeError(e));
    } finally {
      setBusy(null);
    }
  }

  return (
    <div className="msg-actions">
      <VersionNav message={m} actions={actions} />
      {onEdit && (
        <button type="button" className="icon-btn small edit-btn" aria-label="Edit message" title="Edit: send a new version of this message" onClick={onEdit}>
          <PencilIcon />
        </button>
      )}
      {canRegenerate && (
        <button
          type="button"
          className="icon-btn small regenerate-btn"
          aria-label="Regenerate reply"
          title="Regenerate: a new reply beside this one"
          disabled={busy !== null}
          onClick={() => run('regenerate')}
        >
          <RegenerateIcon />
        </button>
      )}
      {done && (
        <button
          type="button"
          className="icon-btn small fork-btn"
          aria-label="Fork from here"
          title="Fork: a new chat with the conversation up to here"
          disabled={busy !== null}
          onClick={() => run('fork')}
        >
          <ForkIcon />
        </button>
      )}
      {error && (
        <p className="msg-action-error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

export const MessageView = memo(function MessageView({ message: m, lastOfRun = true }: { message: Message; lastOfRun?: boolean }) {
  const actions = useContext(MessageActionsContext);
  const shared = useContext(SharedReadingContext);
  const [editing, setEditing] = useState(false);
  const editButtonFocus = useRef(false);
  const streaming = m.status === 'STREAMING';
  const content = m.kind === 'QUESTION' && !m.content && m.question ? m.question.prompt : m.content;
  const markdown = m.role === 'ASSISTANT' && m.kind === 'TEXT';
  const editable = m.role === 'USER' && m.kind === 'TEXT';
  const article = useRef<HTMLElement>(null);

  // A cancelled edit gives the focus back to the Edit button.
  useEffect(() => {
    if (editing || !editButtonFocus.current) return;
    editButtonFocus.current = false;
    article.current?.querySelector<HTMLElement>('.edit-btn')?.focus();
  }, [editing]);

  const cancelEdit = () => {
    editButtonFocus.current = true;
    setEditing(false);
  };
  const saveEdit = async (text: string) => {
    await actions?.edit(m.id, text);
    setEditing(false);
    // The new version shows in this one's place (now, or when its run starts).
    document.getElementById('composer-input')?.focus();
  };
  return (
    <article
      ref={article}
      className={`msg ${m.role.toLowerCase()} kind-${m.kind.toLowerCase()} status-${m.status.toLowerCase()}${editing ? ' editing' : ''}`}
      data-message-id={m.id}
      data-role={m.role}
      data-status={m.status}
      aria-busy={streaming || undefined}
    >
      <header className="msg-head">
        <span className="msg-author">{roleLabel(m, shared)}</span>
        {m.status === 'INTERRUPTED' && <span className="badge warn">interrupted</span>}
        {m.status === 'FAILED' && <span className="badge error">failed</span>}
        {streaming && <span className="visually-hidden">(writing)</span>}
        {m.kind === 'QUESTION' && m.question?.withdrawn && (
          <span className="badge warn" title="This question can no longer be answered">
            no answer: {m.question.withdrawnReason ?? 'withdrawn'}
          </span>
        )}
      </header>
      {m.toolCalls.length > 0 && (
        <div className="tool-calls">
          {m.toolCalls.map((t) => (
            <ToolCallView key={t.id} call={t} />
          ))}
        </div>
      )}
      {editing && actions ? (
        <MessageEditor message={m} onSave={saveEdit} onCancel={cancelEdit} />
      ) : (content || (streaming && m.toolCalls.length === 0)) && (
        <div className={`msg-body${streaming ? ' streaming' : ''}${markdown ? ' rich' : ''}`}>
          {/* The agent writes Markdown; what a person typed is shown as typed. */}
          {markdown ? <Markdown text={content} streaming={streaming} /> : content}
        </div>
      )}
      {m.kind === 'QUESTION' && m.question?.choices && m.question.choices.length > 0 && (
        <ul className="choice-list" aria-label="Choices offered">
          {m.question.choices.map((c) => (
            <li key={c} className={chosen(m.question!, c) ? 'chosen' : undefined}>
              {c}
            </li>
          ))}
        </ul>
      )}
      {m.status === 'FAILED' && <FailureReason message={m} />}
      {/* A run's usage, under its last reply. */}
      {m.role === 'ASSISTANT' && m.kind === 'TEXT' && m.status !== 'STREAMING' && m.runId && lastOfRun && <Usage runId={m.runId} />}
      {actions && !editing && (
        <MessageToolbar message={m} actions={actions} onEdit={editable ? () => setEditing(true) : undefined} />
      )}
    </article>
  );
});
