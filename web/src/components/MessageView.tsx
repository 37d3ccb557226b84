import { useQuery } from '@apollo/client/react';
import { memo } from 'react';
import { RunDocument, type MessageFieldsFragment } from '../gql/graphql';
import { Markdown } from './markdown/Markdown';
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

function roleLabel(m: Message): string {
  if (m.kind === 'QUESTION') return 'Agent asks';
  if (m.kind === 'ANSWER') return 'Your answer';
  return m.role === 'USER' ? 'You' : 'Agent';
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

export const MessageView = memo(function MessageView({ message: m }: { message: Message }) {
  const streaming = m.status === 'STREAMING';
  const content = m.kind === 'QUESTION' && !m.content && m.question ? m.question.prompt : m.content;
  const markdown = m.role === 'ASSISTANT' && m.kind === 'TEXT';
  return (
    <article
      className={`msg ${m.role.toLowerCase()} kind-${m.kind.toLowerCase()} status-${m.status.toLowerCase()}`}
      data-message-id={m.id}
      data-role={m.role}
      data-status={m.status}
      aria-busy={streaming || undefined}
    >
      <header className="msg-head">
        <span className="msg-author">{roleLabel(m)}</span>
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
      {(content || (streaming && m.toolCalls.length === 0)) && (
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
      {m.role === 'ASSISTANT' && m.kind === 'TEXT' && m.status !== 'STREAMING' && m.runId && <Usage runId={m.runId} />}
    </article>
  );
});
