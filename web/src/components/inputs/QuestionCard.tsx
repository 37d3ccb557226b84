import type { RJSFSchema } from '@rjsf/utils';
import { lazy, Suspense, useId, useMemo, useState, type FormEvent } from 'react';
import type { QuestionFieldsFragment as Question } from '../../gql/graphql';
import { describeError } from '../../lib/errors';
import { TimeLeft, useExpired } from './TimeLeft';

const SchemaForm = lazy(() => import('./SchemaForm'));

export interface QuestionCardProps {
  question: Question;
  onAnswer: (questionId: string, answer: string) => Promise<void>;
  /** The answer as it would be sent now (for "send all"), or null when there is none. */
  onDraft: (questionId: string, answer: string | null) => void;
}

function parseSchema(text: string | null | undefined): RJSFSchema | null {
  if (!text) return null;
  try {
    const s = JSON.parse(text) as unknown;
    return s && typeof s === 'object' ? (s as RJSFSchema) : null;
  } catch {
    return null;
  }
}

/**
 * The agent's question: a form generated from its answerSchema, checkboxes for a multiple
 * choice, or its choices as buttons and a box for an answer in the person's own words.
 */
export function QuestionCard({ question, onAnswer, onDraft }: QuestionCardProps) {
  const [text, setText] = useState('');
  const [picked, setPicked] = useState<string[]>([]);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const expired = useExpired(question.expiresAt);
  const uid = useId();
  const promptId = `${uid}-prompt`;
  const inputId = `${uid}-answer`;
  const schema = useMemo(() => parseSchema(question.answerSchema), [question.answerSchema]);
  const choices = question.choices ?? [];
  const multiple = question.multiple && choices.length > 0;
  const off = busy || expired;

  async function answer(value: string) {
    const v = value.trim();
    if (!v || off) return;
    setBusy(true);
    setError(null);
    try {
      await onAnswer(question.id, v);
    } catch (e) {
      setError(describeError(e));
    } finally {
      setBusy(false);
    }
  }

  function submitText(e: FormEvent) {
    e.preventDefault();
    void answer(text);
  }

  function submitPicked(e: FormEvent) {
    e.preventDefault();
    if (picked.length > 0) void answer(JSON.stringify(picked));
  }

  function toggle(choice: string, on: boolean) {
    // The answer keeps the order the choices were offered in.
    const next = choices.filter((c) => (c === choice ? on : picked.includes(c)));
    setPicked(next);
    onDraft(question.id, next.length > 0 ? JSON.stringify(next) : null);
  }

  let body;
  if (schema) {
    body = (
      <Suspense fallback={<p className="help">Loading the form…</p>}>
        <SchemaForm
          schema={schema}
          idPrefix={`q${question.id}`}
          disabled={off}
          serverError={error}
          onSubmit={(json) => void answer(json)}
          onDraft={(json) => onDraft(question.id, json)}
          onEdit={() => setError(null)}
        />
      </Suspense>
    );
  } else if (multiple) {
    body = (
      <form className="question" onSubmit={submitPicked}>
        <fieldset className="choices multi" disabled={off}>
          <legend className="visually-hidden">Pick one or more</legend>
          {choices.map((c) => (
            <label key={c} className="check">
              <input type="checkbox" checked={picked.includes(c)} onChange={(e) => toggle(c, e.target.checked)} />
              <span>{c}</span>
            </label>
          ))}
        </fieldset>
        <div className="answer-row">
          <button type="submit" className="btn primary" disabled={off || picked.length === 0}>
            {picked.length > 1 ? `Send ${picked.length} choices` : 'Send choice'}
          </button>
        </div>
      </form>
    );
  } else {
    body = (
      <form className="question" onSubmit={submitText}>
        {choices.length > 0 && (
          <div className="choices" role="group" aria-label="Choices">
            {choices.map((c) => (
              <button key={c} type="button" className="btn choice" disabled={off} onClick={() => answer(c)}>
                {c}
              </button>
            ))}
          </div>
        )}
        <div className="answer-row">
          <label htmlFor={inputId} className="visually-hidden">
            Your answer
          </label>
          <input
            id={inputId}
            className="answer-input"
            value={text}
            disabled={off}
            autoComplete="off"
            placeholder={choices.length > 0 ? 'Or answer in your own words…' : 'Type your answer…'}
            onChange={(e) => {
              setText(e.target.value);
              onDraft(question.id, e.target.value.trim() || null);
            }}
          />
          <button type="submit" className="btn primary" disabled={off || text.trim() === ''}>
            Answer
          </button>
        </div>
      </form>
    );
  }

  return (
    <section className="input-card question-card" aria-labelledby={promptId} data-question-id={question.id} data-input-card="">
      <div className="card-head">
        <p className="card-kicker">{expired ? 'Expired' : 'The agent asks'}</p>
        <TimeLeft expiresAt={question.expiresAt} />
      </div>
      <p className="question-prompt" id={promptId}>
        {question.prompt}
      </p>
      {body}
      {error && (
        <p className="question-error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}
