import { useMutation, useQuery } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import {
  DeleteScheduleDocument,
  RunScheduleNowDocument,
  ScheduleFiresDocument,
  SchedulesDocument,
  UpdateScheduleDocument,
  type ScheduleFieldsFragment,
} from '../gql/graphql';
import { describeError } from '../lib/errors';
import { chatHref } from '../lib/route';
import { browserZone, explainCron, fireOutcome, formatInZone } from '../lib/schedules';
import { ConfirmDialog } from './ConfirmDialog';
import { ScheduleForm } from './ScheduleForm';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

/** The schedules page: a form to make one, and the list with what each did. */
export function SchedulesPage({ bar }: { bar: TopBarProps }) {
  const { data, error, loading } = useQuery(SchedulesDocument, { fetchPolicy: 'cache-and-network' });
  useEffect(() => {
    document.title = 'Schedules · talkgraph';
  }, []);
  const list = data?.schedules ?? [];
  return (
    <>
      <TopBar bar={bar} title="Schedules" />
      <div className="page">
        <div className="page-inner">
          <p className="page-lead">
            Messages sent as yours on their own time: every morning, each Monday, or once. Times show on your clock ({browserZone()}).
          </p>
          <ScheduleForm />
          <h2 id="schedules-heading">Your schedules</h2>
          {error && !data && (
            <p className="notice error" role="alert">
              Could not load your schedules. {describeError(error)}
            </p>
          )}
          {!loading && !error && list.length === 0 && <p className="help">No schedules yet.</p>}
          <ul className="schedule-list" aria-labelledby="schedules-heading">
            {list.map((s) => (
              <li key={s.id}>
                <ScheduleCard schedule={s} />
              </li>
            ))}
          </ul>
        </div>
      </div>
    </>
  );
}

/** When a schedule fires, in words. */
function describeWhen(s: ScheduleFieldsFragment): string {
  if (s.at) return `Once, ${formatInZone(s.at, browserZone())}`;
  const words = s.cron ? explainCron(s.cron) : null;
  return `${words ?? s.cron} (${s.timezone})`;
}

function ScheduleCard({ schedule: s }: { schedule: ScheduleFieldsFragment }) {
  const refetch = [SchedulesDocument, ScheduleFiresDocument];
  const [update, updating] = useMutation(UpdateScheduleDocument);
  const [runNow, running] = useMutation(RunScheduleNowDocument, { refetchQueries: refetch });
  const [remove] = useMutation(DeleteScheduleDocument, { refetchQueries: [SchedulesDocument] });
  const [problem, setProblem] = useState<string | null>(null);
  const [note, setNote] = useState<string | null>(null);
  const [confirming, setConfirming] = useState(false);
  const [history, setHistory] = useState(false);

  async function act(f: () => Promise<unknown>) {
    setProblem(null);
    setNote(null);
    try {
      await f();
    } catch (e) {
      setProblem(describeError(e));
    }
  }

  return (
    <article className={`schedule-card${s.enabled ? '' : ' paused'}`} aria-label={`Schedule: ${s.content}`}>
      <div className="schedule-head">
        <p className="schedule-content">{s.content}</p>
        {!s.enabled && <span className="badge">Paused</span>}
      </div>
      <p className="schedule-when">{describeWhen(s)}</p>
      <p className="help">
        {s.sessionId ? (
          <>
            Sent to <a href={chatHref(s.sessionId)}>its chat</a>
          </>
        ) : (
          'Sent to a new chat each time'
        )}
        {s.nextFireAt ? ` · Next: ${s.upcoming.map((t) => formatInZone(t, browserZone())).join(' · ')}` : ' · Will not fire again'}
      </p>
      {s.disabledReason && <p className="notice warn">Paused by the server: {s.disabledReason}</p>}
      <div className="schedule-actions">
        <button
          type="button"
          className="btn small"
          disabled={updating.loading}
          onClick={() => act(() => update({ variables: { input: { id: s.id, enabled: !s.enabled } } }))}
        >
          {s.enabled ? 'Pause' : 'Resume'}
        </button>
        <button
          type="button"
          className="btn small"
          disabled={running.loading}
          onClick={() =>
            act(async () => {
              const res = await runNow({ variables: { id: s.id } });
              const f = res.data?.runScheduleNow;
              if (f) setNote(fireOutcome(f.outcome, f.reason));
              setHistory(true);
            })
          }
        >
          Run now
        </button>
        <button type="button" className="btn small" aria-expanded={history} onClick={() => setHistory(!history)}>
          History
        </button>
        <button type="button" className="btn small danger-outline" onClick={() => setConfirming(true)}>
          Delete
        </button>
      </div>
      {note && (
        <p className="notice" role="status">
          {note}
        </p>
      )}
      {problem && (
        <p className="notice error" role="alert">
          {problem}
        </p>
      )}
      {history && <FireHistory scheduleId={s.id} />}
      <ConfirmDialog
        open={confirming}
        title="Delete this schedule?"
        confirmLabel="Delete"
        danger
        onCancel={() => setConfirming(false)}
        onConfirm={() => {
          setConfirming(false);
          void act(() => remove({ variables: { id: s.id } }));
        }}
      >
        It will not fire again. The chats it made stay.
      </ConfirmDialog>
    </article>
  );
}

/** A schedule's latest fires, newest first. */
function FireHistory({ scheduleId }: { scheduleId: string }) {
  const { data, error, loading } = useQuery(ScheduleFiresDocument, { variables: { first: 20 }, fetchPolicy: 'cache-and-network' });
  const fires = data?.schedules.find((s) => s.id === scheduleId)?.fires.edges.map((e) => e.node) ?? [];
  if (error && !data) return <p className="notice error">{describeError(error)}</p>;
  if (loading && !data) return <p className="help">Loading…</p>;
  if (fires.length === 0) return <p className="help">It has not fired yet.</p>;
  return (
    <ol className="fire-list" aria-label="History">
      {fires.map((f) => (
        <li key={f.id} className="fire" data-outcome={f.outcome}>
          <time dateTime={f.scheduledAt}>{formatInZone(f.scheduledAt, browserZone())}</time>
          <span className="fire-outcome">{fireOutcome(f.outcome, f.reason)}</span>
          {f.sessionId && f.run && <a href={chatHref(f.sessionId)}>Open the chat</a>}
        </li>
      ))}
    </ol>
  );
}
