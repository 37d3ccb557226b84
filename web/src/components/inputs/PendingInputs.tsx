import { useEffect, useRef, useState } from 'react';
import type {
  DecideToolCallInput,
  QuestionFieldsFragment as Question,
  RespondToQuestionInput,
  ToolCallFieldsFragment as ToolCall,
} from '../../gql/graphql';
import { describeError } from '../../lib/errors';
import { ApprovalCard, type ToolDetails } from './ApprovalCard';
import { QuestionCard } from './QuestionCard';

type Input = { kind: 'question'; at: string; question: Question } | { kind: 'approval'; at: string; call: ToolCall };

/** Questions and calls awaiting approval together, oldest first. */
export function orderInputs(questions: Question[], approvals: ToolCall[]): Input[] {
  const all: Input[] = [
    ...questions.map((q): Input => ({ kind: 'question', at: q.askedAt, question: q })),
    ...approvals.map((c): Input => ({ kind: 'approval', at: c.startedAt, call: c })),
  ];
  // A stable sort: the server's order stands among inputs of the same moment.
  return all.sort((a, b) => Date.parse(a.at) - Date.parse(b.at));
}

/**
 * Everything the agent waits on: each question and call awaiting approval as a card,
 * answerable one by one; when several wait, they can also be answered in one request
 * (respondToInputs: all or none).
 */
export function PendingInputs({
  questions,
  approvals,
  tools,
  onAnswer,
  onDecide,
  onRespondAll,
}: {
  questions: Question[];
  approvals: ToolCall[];
  tools: (name: string) => ToolDetails | undefined;
  onAnswer: (questionId: string, answer: string) => Promise<void>;
  onDecide: (input: DecideToolCallInput) => Promise<void>;
  onRespondAll: (answers: RespondToQuestionInput[], decisions: DecideToolCallInput[]) => Promise<void>;
}) {
  const [drafts, setDrafts] = useState<Record<string, string | null>>({});
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const box = useRef<HTMLElement>(null);
  const inputs = orderInputs(questions, approvals);
  const ids = inputs.map((i) => (i.kind === 'question' ? i.question.id : i.call.id)).join(' ');

  // When a card goes while the focus was in it (answered with the keyboard), the focus
  // moves to the next card, or back to the message box, rather than to the page's start.
  const hadFocus = useRef(false);
  useEffect(() => {
    const active = document.activeElement;
    if (!hadFocus.current || (active && active !== document.body)) return;
    const next = box.current?.querySelector<HTMLElement>('[data-input-card] :is(input, textarea, select, button):not(:disabled)');
    (next ?? document.getElementById('composer-input'))?.focus();
  }, [ids]);

  if (inputs.length === 0) return null;

  const draft = (id: string, value: string | null) => setDrafts((d) => (d[id] === value ? d : { ...d, [id]: value }));
  const answers = questions.map((q) => ({ questionId: q.id, answer: drafts[q.id] ?? null }));
  const allAnswered = answers.every((a) => a.answer);

  async function all(fn: () => Promise<void>) {
    setBusy(true);
    setError(null);
    try {
      await fn();
    } catch (e) {
      setError(describeError(e));
    } finally {
      setBusy(false);
    }
  }

  return (
    <section
      className="pending-inputs"
      aria-label="Waiting for you"
      ref={box}
      onFocusCapture={() => {
        hadFocus.current = true;
      }}
      onBlurCapture={(e) => {
        if (e.relatedTarget && !e.currentTarget.contains(e.relatedTarget)) hadFocus.current = false;
      }}
    >
      {inputs.length > 1 && (
        <div className="bulk-bar">
          <p className="bulk-note">
            {inputs.length} things wait for you: answer each on its own{questions.length > 1 || approvals.length > 1 ? ', or all at once' : ''}.
          </p>
          <div className="bulk-actions">
            {questions.length > 1 && (
              <button
                type="button"
                className="btn primary"
                disabled={busy || !allAnswered}
                title={allAnswered ? undefined : 'Fill in every answer first'}
                onClick={() =>
                  all(() => onRespondAll(answers.map((a) => ({ questionId: a.questionId, answer: a.answer as string })), []))
                }
              >
                Send all {questions.length} answers
              </button>
            )}
            {approvals.length > 1 && (
              <button
                type="button"
                className="btn"
                disabled={busy}
                onClick={() => all(() => onRespondAll([], approvals.map((c) => ({ toolCallId: c.id, decision: 'APPROVE' }))))}
              >
                Approve all {approvals.length} calls
              </button>
            )}
          </div>
          {error && (
            <p className="question-error" role="alert">
              {error}
            </p>
          )}
        </div>
      )}
      <div className="input-cards">
        {inputs.map((i) =>
          i.kind === 'question' ? (
            <QuestionCard key={i.question.id} question={i.question} onAnswer={onAnswer} onDraft={draft} />
          ) : (
            <ApprovalCard key={i.call.id} call={i.call} tool={tools(i.call.name)} onDecide={onDecide} />
          ),
        )}
      </div>
    </section>
  );
}
