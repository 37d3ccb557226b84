import { useMutation, useQuery } from '@apollo/client/react';
import { useState, type FormEvent } from 'react';
import { SessionBudgetDocument, UpdateTalkSessionSettingsDocument, ViewerBudgetDocument, type BudgetScope } from '../gql/graphql';
import { describeError } from '../lib/errors';
import { formatInZone, browserZone } from '../lib/schedules';

/**
 * What a chat whose run waits for a token budget shows: which budget, what it has used,
 * and, for the chat's own, a way to raise it (the same run goes on).
 */
export function BudgetPause({ sessionId, scope }: { sessionId: string; scope: BudgetScope }) {
  return scope === 'SESSION' ? <SessionPause sessionId={sessionId} /> : <UserPause />;
}

function SessionPause({ sessionId }: { sessionId: string }) {
  const { data } = useQuery(SessionBudgetDocument, { variables: { id: sessionId }, fetchPolicy: 'network-only' });
  const [save, { loading }] = useMutation(UpdateTalkSessionSettingsDocument);
  const [value, setValue] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const s = data?.session;
  const used = s ? s.usage.inputTokens + s.usage.outputTokens : null;
  const limit = s?.settings.tokenBudget ?? null;
  // A first suggestion: twice the budget, and room for a reply more than what is used.
  const suggested = used !== null ? Math.max((limit ?? 0) * 2, used + 1000) : null;
  const shown = value ?? (suggested !== null ? String(suggested) : '');

  async function raise(e: FormEvent) {
    e.preventDefault();
    setError(null);
    const n = Number(shown);
    if (!Number.isInteger(n) || n <= 0) {
      setError('Give a whole number of tokens.');
      return;
    }
    try {
      await save({ variables: { input: { id: sessionId, settings: { tokenBudget: n } } } });
      setValue(null);
    } catch (err) {
      setError(describeError(err));
    }
  }

  return (
    <section className="budget-pause" aria-labelledby="budget-pause-title">
      <p id="budget-pause-title" className="budget-pause-title">
        Paused: this chat has used its token budget.
      </p>
      <p className="help">
        {used !== null && limit !== null
          ? `It used ${used.toLocaleString()} of ${limit.toLocaleString()} tokens. Raise the budget and the agent goes on where it stopped.`
          : 'Raise the budget and the agent goes on where it stopped.'}
      </p>
      <form className="budget-raise" onSubmit={raise}>
        <label htmlFor="budget-raise-input">New budget (tokens)</label>
        <input id="budget-raise-input" type="number" min={1} step={1} value={shown} onChange={(e) => setValue(e.target.value)} />
        <button type="submit" className="btn primary small" disabled={loading}>
          {loading ? 'Raising…' : 'Raise the budget'}
        </button>
      </form>
      {error && (
        <p className="form-error" role="alert">
          {error}
        </p>
      )}
    </section>
  );
}

function UserPause() {
  const { data } = useQuery(ViewerBudgetDocument, { fetchPolicy: 'network-only' });
  const v = data?.viewer;
  return (
    <section className="budget-pause" aria-labelledby="budget-pause-title">
      <p id="budget-pause-title" className="budget-pause-title">
        Paused: you have used your token budget for this period.
      </p>
      <p className="help">
        {v?.budgetResetsAt
          ? `The agent goes on by itself when it resets, ${formatInZone(v.budgetResetsAt, browserZone())}.`
          : 'The agent goes on by itself when it resets.'}
      </p>
    </section>
  );
}
