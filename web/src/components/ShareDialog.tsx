import { useMutation, useQuery } from '@apollo/client/react';
import { useEffect, useRef, useState, type FormEvent } from 'react';
import { CreateShareLinkDocument, RevokeShareLinkDocument, ShareLinksDocument, type ShareLinkFieldsFragment } from '../gql/graphql';
import { describeError } from '../lib/errors';

/** How long a new link opens the chat, in hours; 0 for ever. */
const EXPIRIES = [
  { hours: 0, label: 'Never' },
  { hours: 1, label: 'In an hour' },
  { hours: 24, label: 'In a day' },
  { hours: 24 * 7, label: 'In a week' },
  { hours: 24 * 30, label: 'In 30 days' },
];

const when = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

function state(l: ShareLinkFieldsFragment, now: number): string {
  if (l.revokedAt) return 'revoked';
  if (l.expiresAt && Date.parse(l.expiresAt) <= now) return 'expired';
  return l.expiresAt ? `open until ${when.format(new Date(l.expiresAt))}` : 'open';
}

/**
 * Sharing a chat: a link anyone can read without signing in, a snapshot of the chat as it
 * is now or live as it goes, with or without the tools' details, for a while or for ever;
 * then the link to copy, and the chat's links with Revoke. Render it to open it.
 */
export function ShareDialog({ sessionId, onClose }: { sessionId: string; onClose: () => void }) {
  const ref = useRef<HTMLDialogElement>(null);
  const links = useQuery(ShareLinksDocument, { variables: { id: sessionId }, fetchPolicy: 'cache-and-network' });
  const [create, { loading: creating }] = useMutation(CreateShareLinkDocument);
  const [revoke] = useMutation(RevokeShareLinkDocument);
  const [live, setLive] = useState(false);
  const [tools, setTools] = useState(false);
  const [hours, setHours] = useState(0);
  const [made, setMade] = useState<string | null>(null);
  const [copied, setCopied] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const urlBox = useRef<HTMLInputElement>(null);
  const [now] = useState(() => Date.now());

  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);

  async function submit(e: FormEvent) {
    e.preventDefault();
    setError(null);
    setCopied(false);
    try {
      const expiresAt = hours > 0 ? new Date(Date.now() + hours * 3_600_000).toISOString() : null;
      const res = await create({ variables: { input: { sessionId, live, includeTools: tools, expiresAt } } });
      setMade(res.data?.createShareLink.url ?? null);
      await links.refetch();
      requestAnimationFrame(() => urlBox.current?.select());
    } catch (err) {
      setError(describeError(err));
    }
  }

  async function copy() {
    if (!made) return;
    try {
      await navigator.clipboard.writeText(made);
      setCopied(true);
    } catch {
      urlBox.current?.select(); // no clipboard here (plain http): the reader copies it
      setError('Copy the selected link by hand: this page may not use the clipboard.');
    }
  }

  async function revokeLink(id: string) {
    setError(null);
    try {
      await revoke({ variables: { id } });
    } catch (err) {
      setError(describeError(err));
    }
  }

  const list = links.data?.session?.shareLinks ?? [];
  return (
    <dialog
      ref={ref}
      className="dialog share"
      aria-labelledby="share-title"
      onCancel={(e) => {
        e.preventDefault();
        onClose();
      }}
    >
      <form onSubmit={submit}>
        <h2 id="share-title">Share this chat</h2>
        <p className="help">Anyone with the link can read the chat, without signing in, and continue it in a chat of their own. Nothing else of yours shows: not your settings, your other chats or what the agent waits on.</p>
        <fieldset className="field">
          <legend>What the link shows</legend>
          <label className="radio">
            <input type="radio" name="share-kind" checked={!live} onChange={() => setLive(false)} />
            <span>
              <strong>Snapshot</strong> the chat as it is now
            </span>
          </label>
          <label className="radio">
            <input type="radio" name="share-kind" checked={live} onChange={() => setLive(true)} />
            <span>
              <strong>Live</strong> the chat as it goes on, replies streamed
            </span>
          </label>
        </fieldset>
        <label className="check">
          <input type="checkbox" checked={tools} onChange={(e) => setTools(e.target.checked)} /> Show the tools' arguments and output
        </label>
        <div className="field">
          <label htmlFor="share-expiry">The link stops working</label>
          <select id="share-expiry" value={hours} onChange={(e) => setHours(Number(e.target.value))}>
            {EXPIRIES.map((x) => (
              <option key={x.hours} value={x.hours}>
                {x.label}
              </option>
            ))}
          </select>
        </div>
        {made && (
          <div className="field share-made">
            <label htmlFor="share-url">The link (shown once: copy it now)</label>
            <div className="share-url-row">
              <input id="share-url" ref={urlBox} readOnly value={made} onFocus={(e) => e.target.select()} />
              <button type="button" className="btn" onClick={copy}>
                {copied ? 'Copied' : 'Copy link'}
              </button>
            </div>
          </div>
        )}
        {error && (
          <p className="notice error" role="alert">
            {error}
          </p>
        )}
        <div className="dialog-actions">
          <button type="button" className="btn" onClick={onClose}>
            Close
          </button>
          <button type="submit" className="btn primary" disabled={creating}>
            Create link
          </button>
        </div>
      </form>
      <h3 className="share-list-title">Links to this chat</h3>
      {list.length === 0 ? (
        <p className="help">{links.loading ? 'Loading…' : 'None yet.'}</p>
      ) : (
        <ul className="share-links" aria-label="Links to this chat">
          {list.map((l) => {
            const s = state(l, now);
            const open = s.startsWith('open');
            return (
              <li key={l.id} className={`share-link${open ? '' : ' closed'}`} data-link-id={l.id}>
                <span>
                  <strong>{l.live ? 'Live' : 'Snapshot'}</strong>
                  {l.includeTools ? ', with tools' : ''} · made {when.format(new Date(l.createdAt))} · {s} · {l.views} {l.views === 1 ? 'view' : 'views'}
                </span>
                {open && (
                  <button type="button" className="btn small danger revoke-btn" onClick={() => revokeLink(l.id)}>
                    Revoke
                  </button>
                )}
              </li>
            );
          })}
        </ul>
      )}
    </dialog>
  );
}
