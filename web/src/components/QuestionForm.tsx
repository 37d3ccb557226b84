import { useState, type FormEvent } from 'react';
import type { QuestionFieldsFragment as Question } from '../gql/graphql';
import { describeError } from '../lib/errors';

/** The agent's question: its choices as buttons, or an answer in the person's own words. */
export function QuestionForm({
  question,
  onAnswer,
}: {
  question: Question;
  onAnswer: (questionId: string, answer: string) => Promise<void>;
}) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const promptId = `question-${question.id}`;
  const inputId = `answer-${question.id}`;

  async function answer(value: string) {
    const v = value.trim();
    if (!v || busy) return;
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

  function submit(e: FormEvent) {
    e.preventDefault();
    void answer(text);
  }

  const choices = question.choices ?? [];
  return (
    <form className="question" aria-labelledby={promptId} onSubmit={submit} data-question-id={question.id}>
      <p className="question-kicker">The agent is waiting for your answer</p>
      <p className="question-prompt" id={promptId}>
        {question.prompt}
      </p>
      {choices.length > 0 && (
        <div className="choices" role="group" aria-label="Choices">
          {choices.map((c) => (
            <button key={c} type="button" className="btn choice" disabled={busy} onClick={() => answer(c)}>
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
          disabled={busy}
          placeholder={choices.length > 0 ? 'Or answer in your own words…' : 'Type your answer…'}
          onChange={(e) => setText(e.target.value)}
        />
        <button type="submit" className="btn primary" disabled={busy || text.trim() === ''}>
          Answer
        </button>
      </div>
      {error && (
        <p className="question-error" role="alert">
          {error}
        </p>
      )}
    </form>
  );
}
