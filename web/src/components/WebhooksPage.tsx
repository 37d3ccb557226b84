import { useMutation, useQuery } from '@apollo/client/react';
import { useEffect, useState, type FormEvent } from 'react';
import {
  CreateWebhookDocument,
  DeleteWebhookDocument,
  RedeliverWebhookDocument,
  RotateWebhookSecretDocument,
  UpdateWebhookDocument,
  WebhooksDocument,
  type WebhooksQuery,
} from '../gql/graphql';
import { describeError } from '../lib/errors';
import { relativeTime } from '../lib/time';
import { ConfirmDialog } from './ConfirmDialog';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

type Hook = WebhooksQuery['webhooks'][number];

/** The types offered checked when a webhook is added: what needs the user, and ends. */
const DEFAULT_EVENTS = ['input.requested', 'run.completed', 'run.failed'];

/**
 * The webhooks settings: add one (its secret shown once, with a copy button), pick its
 * events, and for each, its deliveries with their status and code, redeliver, pause,
 * rotate the secret, delete. Deliveries are read again every few seconds while it shows.
 */
export function WebhooksPage({ bar }: { bar: TopBarProps }) {
  const { data, error, refetch } = useQuery(WebhooksDocument, { pollInterval: 3_000, fetchPolicy: 'cache-and-network' });
  const [secret, setSecret] = useState<{ url: string; value: string } | null>(null);

  useEffect(() => {
    document.title = 'Webhooks · talkgraph';
  }, []);

  return (
    <>
      <TopBar bar={bar} title="Webhooks" />
      <div className="settings-page">
        <div className="settings-inner">
          <p className="settings-intro">
            When no tab of yours is open, a webhook tells an address of yours what your chats do: a signed POST of each
            event you pick (Standard Webhooks), tried again until your receiver answers 2xx. The body holds ids and
            states, never your text.
          </p>
          {error && !data && (
            <p className="sidebar-error" role="alert">
              Could not load your webhooks. {describeError(error)}
            </p>
          )}
          {secret && <SecretShown url={secret.url} secret={secret.value} onDone={() => setSecret(null)} />}
          <AddWebhook types={data?.webhookEventTypes ?? []} onAdded={(url, value) => (setSecret({ url, value }), refetch())} />
          <h2 className="settings-heading">Your webhooks</h2>
          {data && data.webhooks.length === 0 && <p className="sidebar-note">No webhooks yet.</p>}
          <ul className="webhook-list">
            {data?.webhooks.map((w) => (
              <WebhookItem key={w.id} hook={w} onSecret={(value) => setSecret({ url: w.url, value })} onChange={() => refetch()} />
            ))}
          </ul>
        </div>
      </div>
    </>
  );
}

function AddWebhook({ types, onAdded }: { types: string[]; onAdded: (url: string, secret: string) => void }) {
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  const [events, setEvents] = useState<string[]>(DEFAULT_EVENTS);
  const [create, { loading }] = useMutation(CreateWebhookDocument);
  const [problem, setProblem] = useState<string | null>(null);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setProblem(null);
    try {
      const res = await create({ variables: { input: { url: url.trim(), events, description: description.trim() || null } } });
      const made = res.data?.createWebhook;
      if (made) {
        onAdded(made.webhook.url, made.secret);
        setUrl('');
        setDescription('');
      }
    } catch (err) {
      setProblem(describeError(err));
    }
  }

  return (
    <form className="webhook-form" onSubmit={submit} aria-labelledby="add-webhook">
      <h2 className="settings-heading" id="add-webhook">
        Add a webhook
      </h2>
      <label htmlFor="webhook-url">URL</label>
      <input
        id="webhook-url"
        type="url"
        required
        placeholder="https://hooks.example.com/talkgraph"
        value={url}
        maxLength={2048}
        onChange={(e) => setUrl(e.target.value)}
      />
      <label htmlFor="webhook-description">Description (optional)</label>
      <input id="webhook-description" value={description} maxLength={500} onChange={(e) => setDescription(e.target.value)} />
      <fieldset className="event-picks">
        <legend>Events to send</legend>
        {types.map((t) => (
          <label key={t} className="event-pick">
            <input
              type="checkbox"
              checked={events.includes(t)}
              onChange={(e) => setEvents(e.target.checked ? [...events, t] : events.filter((x) => x !== t))}
            />
            <code>{t}</code>
          </label>
        ))}
      </fieldset>
      {problem && (
        <p className="sidebar-error" role="alert">
          {problem}
        </p>
      )}
      <button type="submit" className="btn primary" disabled={loading || events.length === 0}>
        {loading ? 'Adding…' : 'Add webhook'}
      </button>
    </form>
  );
}

/** The secret of a webhook just made or rotated: shown once, with a copy button. */
function SecretShown({ url, secret, onDone }: { url: string; secret: string; onDone: () => void }) {
  const [copied, setCopied] = useState(false);
  return (
    <div className="secret-box" role="status">
      <p>
        The signing secret of <code>{url}</code>. Copy it now: it is not shown again.
      </p>
      <div className="secret-row">
        <code className="secret" aria-label="Signing secret">
          {secret}
        </code>
        <button
          type="button"
          className="btn small"
          onClick={() => navigator.clipboard?.writeText(secret).then(() => setCopied(true), () => setCopied(false))}
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
        <button type="button" className="btn subtle small" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  );
}

function WebhookItem({ hook, onSecret, onChange }: { hook: Hook; onSecret: (secret: string) => void; onChange: () => void }) {
  const [update, updating] = useMutation(UpdateWebhookDocument);
  const [rotate, rotating] = useMutation(RotateWebhookSecretDocument);
  const [remove] = useMutation(DeleteWebhookDocument);
  const [redeliver] = useMutation(RedeliverWebhookDocument);
  const [confirm, setConfirm] = useState<'delete' | 'rotate' | null>(null);
  const [problem, setProblem] = useState<string | null>(null);

  async function act(f: () => Promise<unknown>) {
    setProblem(null);
    try {
      await f();
      onChange();
    } catch (err) {
      setProblem(describeError(err));
    }
  }

  const deliveries = hook.deliveries.edges.map((e) => e.node);
  return (
    <li className="webhook-item">
      <div className="webhook-head">
        <code className="webhook-url">{hook.url}</code>
        <span className={`badge${hook.enabled ? '' : ' warn'}`}>{hook.enabled ? 'on' : 'paused'}</span>
      </div>
      {hook.description && <p className="webhook-description">{hook.description}</p>}
      {hook.disabledReason && (
        <p className="webhook-disabled" role="note">
          Turned off by the server: {hook.disabledReason}
        </p>
      )}
      <p className="webhook-events">
        {hook.events.map((e) => (
          <code key={e}>{e}</code>
        ))}
      </p>
      <div className="webhook-actions">
        <button
          type="button"
          className="btn small"
          disabled={updating.loading}
          onClick={() => act(() => update({ variables: { input: { id: hook.id, enabled: !hook.enabled } } }))}
        >
          {hook.enabled ? 'Pause' : 'Turn on'}
        </button>
        <button type="button" className="btn small" disabled={rotating.loading} onClick={() => setConfirm('rotate')}>
          Rotate secret
        </button>
        <button type="button" className="btn small danger" onClick={() => setConfirm('delete')}>
          Delete
        </button>
      </div>
      {problem && (
        <p className="sidebar-error" role="alert">
          {problem}
        </p>
      )}
      <table className="deliveries">
        <caption>Recent deliveries</caption>
        <thead>
          <tr>
            <th scope="col">Event</th>
            <th scope="col">Status</th>
            <th scope="col">Code</th>
            <th scope="col">Attempts</th>
            <th scope="col">When</th>
            <th scope="col">
              <span className="visually-hidden">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {deliveries.length === 0 && (
            <tr>
              <td colSpan={6} className="sidebar-note">
                None yet.
              </td>
            </tr>
          )}
          {deliveries.map((d) => (
            <tr key={d.id} className={`delivery ${d.status.toLowerCase()}`}>
              <td>
                <code>{d.type}</code>
              </td>
              <td title={d.lastError ?? undefined}>
                {d.status === 'DELIVERED' ? 'delivered' : d.status === 'FAILED' ? 'failed' : 'pending'}
                {d.lastError && d.status !== 'DELIVERED' && <span className="delivery-error">{d.lastError}</span>}
              </td>
              <td>{d.lastStatusCode ?? '–'}</td>
              <td>{d.attempts}</td>
              <td>{relativeTime(d.createdAt)}</td>
              <td>
                <button
                  type="button"
                  className="btn subtle small"
                  aria-label={`Redeliver ${d.type} of ${relativeTime(d.createdAt)}`}
                  onClick={() => act(() => redeliver({ variables: { deliveryId: d.id } }))}
                >
                  Redeliver
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      <ConfirmDialog
        open={confirm !== null}
        title={confirm === 'delete' ? 'Delete this webhook?' : 'Rotate its secret?'}
        confirmLabel={confirm === 'delete' ? 'Delete' : 'Rotate'}
        danger={confirm === 'delete'}
        onCancel={() => setConfirm(null)}
        onConfirm={() => {
          const what = confirm;
          setConfirm(null);
          if (what === 'delete') act(() => remove({ variables: { id: hook.id } }));
          if (what === 'rotate') {
            act(async () => {
              const res = await rotate({ variables: { id: hook.id } });
              if (res.data) onSecret(res.data.rotateWebhookSecret.secret);
            });
          }
        }}
      >
        {confirm === 'delete'
          ? `${hook.url} and its deliveries will be removed.`
          : 'A new secret is shown once. For 24 hours each delivery is signed with both the old and the new one, so you can change your receiver meanwhile.'}
      </ConfirmDialog>
    </li>
  );
}
