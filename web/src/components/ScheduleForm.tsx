import { useMutation, useQuery } from '@apollo/client/react';
import { useEffect, useId, useState, type FormEvent } from 'react';
import {
  CreateScheduleDocument,
  CronPreviewDocument,
  SchedulesDocument,
  SessionsDocument,
  type ScheduleCatchUp,
  type ScheduleOverlap,
} from '../gql/graphql';
import { describeError } from '../lib/errors';
import { browserZone, explainCron, formatInZone, inAnHour } from '../lib/schedules';
import { SESSIONS_PAGE } from '../lib/sessions';

const ZONES: string[] = (() => {
  try {
    return Intl.supportedValuesOf('timeZone');
  } catch {
    return [];
  }
})();

const OVERLAPS: { value: ScheduleOverlap; label: string }[] = [
  { value: 'SKIP', label: 'Skip that time' },
  { value: 'ENQUEUE', label: 'Wait its turn' },
  { value: 'INTERRUPT', label: 'Stop the agent and start over' },
];

const CATCH_UPS: { value: ScheduleCatchUp; label: string }[] = [
  { value: 'LATEST', label: 'Send the latest one' },
  { value: 'ALL', label: 'Send each one' },
  { value: 'SKIP', label: 'Skip them' },
];

/** The cron's next fires, from the server, as the reader types (a moment after they stop). */
function useCronPreview(cron: string, zone: string) {
  const [asked, setAsked] = useState({ cron, zone });
  useEffect(() => {
    const t = setTimeout(() => setAsked({ cron, zone }), 300);
    return () => clearTimeout(t);
  }, [cron, zone]);
  return useQuery(CronPreviewDocument, {
    variables: { cron: asked.cron.trim(), timezone: asked.zone.trim() || null, count: 3 },
    skip: asked.cron.trim() === '',
    fetchPolicy: 'network-only',
  });
}

/** The form that makes a schedule: what to send, where, and when. */
export function ScheduleForm() {
  const id = useId();
  const sessions = useQuery(SessionsDocument, { variables: { first: SESSIONS_PAGE }, fetchPolicy: 'cache-first' });
  const [create, { loading }] = useMutation(CreateScheduleDocument, { refetchQueries: [SchedulesDocument] });
  const [content, setContent] = useState('');
  const [target, setTarget] = useState('');
  const [kind, setKind] = useState<'cron' | 'once'>('cron');
  const [cron, setCron] = useState('0 9 * * MON-FRI');
  const [at, setAt] = useState(inAnHour);
  const [zone, setZone] = useState(browserZone);
  const [overlap, setOverlap] = useState<ScheduleOverlap>('SKIP');
  const [catchUp, setCatchUp] = useState<ScheduleCatchUp>('LATEST');
  const [error, setError] = useState<string | null>(null);
  const [made, setMade] = useState(false);
  const preview = useCronPreview(kind === 'cron' ? cron : '', zone);
  const explained = explainCron(cron);
  const chats = sessions.data?.sessions.edges.map((e) => e.node) ?? [];

  async function submit(e: FormEvent) {
    e.preventDefault();
    setError(null);
    setMade(false);
    if (!content.trim()) {
      setError('Write the message to send.');
      return;
    }
    const when = kind === 'cron' ? { cron: cron.trim(), timezone: zone.trim() || 'UTC' } : { at: new Date(at).toISOString() };
    try {
      await create({
        variables: { input: { content, ...(target ? { sessionId: target } : {}), ...when, overlap, catchUp } },
      });
      setContent('');
      setMade(true);
    } catch (err) {
      setError(describeError(err));
    }
  }

  const cronProblem = kind === 'cron' && preview.error ? describeError(preview.error) : null;
  return (
    <form className="schedule-form" onSubmit={submit} aria-labelledby={`${id}-title`}>
      <h2 id={`${id}-title`}>New schedule</h2>
      <div className="field">
        <label htmlFor={`${id}-content`}>Message</label>
        <textarea
          id={`${id}-content`}
          rows={2}
          value={content}
          placeholder="Summarise what happened yesterday"
          onChange={(e) => setContent(e.target.value)}
        />
      </div>
      <div className="field">
        <label htmlFor={`${id}-target`}>Send to</label>
        <select id={`${id}-target`} value={target} onChange={(e) => setTarget(e.target.value)}>
          <option value="">A new chat each time</option>
          {chats.map((s) => (
            <option key={s.id} value={s.id}>
              {s.title || 'Untitled chat'}
            </option>
          ))}
        </select>
      </div>
      <fieldset className="field when">
        <legend>When</legend>
        <div className="segmented">
          <label className="radio">
            <input type="radio" name={`${id}-kind`} checked={kind === 'cron'} onChange={() => setKind('cron')} />
            <span>Repeatedly</span>
          </label>
          <label className="radio">
            <input type="radio" name={`${id}-kind`} checked={kind === 'once'} onChange={() => setKind('once')} />
            <span>Once</span>
          </label>
        </div>
        {kind === 'cron' ? (
          <>
            <label htmlFor={`${id}-cron`}>Cron</label>
            <input
              id={`${id}-cron`}
              className="mono"
              value={cron}
              autoComplete="off"
              spellCheck={false}
              aria-describedby={`${id}-cron-help`}
              aria-invalid={cronProblem ? true : undefined}
              onChange={(e) => setCron(e.target.value)}
            />
            <div className="help cron-help" id={`${id}-cron-help`} aria-live="polite">
              {cronProblem ? (
                <span className="field-error">{cronProblem}</span>
              ) : (
                <>
                  <span className="cron-words">{explained ?? 'minute hour day-of-month month day-of-week, or @daily, @weekly…'}</span>
                  {preview.data && preview.data.cronPreview.length > 0 && (
                    <span className="cron-next">
                      Next: {preview.data.cronPreview.map((t) => formatInZone(t, browserZone())).join(' · ')}
                    </span>
                  )}
                </>
              )}
            </div>
            <label htmlFor={`${id}-zone`}>Time zone</label>
            <input id={`${id}-zone`} list={`${id}-zones`} value={zone} onChange={(e) => setZone(e.target.value)} />
            <datalist id={`${id}-zones`}>
              {ZONES.map((z) => (
                <option key={z} value={z} />
              ))}
            </datalist>
          </>
        ) : (
          <>
            <label htmlFor={`${id}-at`}>At</label>
            <input id={`${id}-at`} type="datetime-local" value={at} onChange={(e) => setAt(e.target.value)} />
          </>
        )}
      </fieldset>
      <details className="schedule-more">
        <summary>More options</summary>
        <div className="field">
          <label htmlFor={`${id}-overlap`}>If the agent is still working</label>
          <select id={`${id}-overlap`} value={overlap} onChange={(e) => setOverlap(e.target.value as ScheduleOverlap)}>
            {OVERLAPS.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </div>
        <div className="field">
          <label htmlFor={`${id}-catchup`}>Times missed while the server was down</label>
          <select id={`${id}-catchup`} value={catchUp} onChange={(e) => setCatchUp(e.target.value as ScheduleCatchUp)}>
            {CATCH_UPS.map((o) => (
              <option key={o.value} value={o.value}>
                {o.label}
              </option>
            ))}
          </select>
        </div>
      </details>
      {error && (
        <p className="form-error" role="alert">
          {error}
        </p>
      )}
      {made && (
        <p className="notice" role="status">
          Schedule created.
        </p>
      )}
      <div className="form-actions">
        <button type="submit" className="btn primary" disabled={loading}>
          {loading ? 'Creating…' : 'Create schedule'}
        </button>
      </div>
    </form>
  );
}
