import { useApolloClient, useFragment, useMutation, useQuery } from '@apollo/client/react';
import { useCallback, useEffect, useRef, useState, type FormEvent } from 'react';
import {
  DeleteTalkSessionDocument,
  RenameTalkSessionDocument,
  SessionsDocument,
  type SessionListFieldsFragment,
} from '../gql/graphql';
import { describeError } from '../lib/errors';
import { chatHref, openChat, openHome, SCHEDULES_HREF, useSchedulesRoute } from '../lib/route';
import { createSession, forgetSession, SESSIONS_PAGE } from '../lib/sessions';
import { askForNotifications, useNotificationPermission } from '../lib/notify';
import { relativeTime } from '../lib/time';
import { LAST_RUN, useViewerEvents } from '../lib/viewer';
import { ConfirmDialog } from './ConfirmDialog';
import { ClockIcon, PencilIcon, PlusIcon, TrashIcon } from './icons';

type Item = SessionListFieldsFragment;

export function Sidebar({
  currentId,
  open,
  onClose,
}: {
  currentId: string | null;
  open: boolean;
  onClose: () => void;
}) {
  const client = useApolloClient();
  // In the server's order (most recent activity first); the cache moves a chat that gets a
  // message to the top, and "Show more" appends the next page.
  const { data, error, loading, fetchMore } = useQuery(SessionsDocument, {
    variables: { first: SESSIONS_PAGE },
  });
  const [creating, setCreating] = useState(false);
  const [loadingMore, setLoadingMore] = useState(false);
  const [deleteSession] = useMutation(DeleteTalkSessionDocument);
  const [renaming, setRenaming] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<Item | null>(null);
  const [problem, setProblem] = useState<string | null>(null);
  const [, tick] = useState(0);
  const onSchedules = useSchedulesRoute();
  const notifications = useNotificationPermission();

  // The list lives from the viewer's stream, from the cursor read with it: a chat that
  // changes in another tab, on another device or in the background shows here at once.
  const currentRef = useRef(currentId);
  useEffect(() => {
    currentRef.current = currentId;
  }, [currentId]);
  const onScreen = useCallback(
    () => ({ sessionId: currentRef.current, visible: document.visibilityState === 'visible' }),
    [],
  );
  useViewerEvents(data?.viewer.eventsCursor ?? null, onScreen);

  // The drawer (narrow screens) takes the focus when it opens.
  const newChatButton = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (open) newChatButton.current?.focus();
  }, [open]);

  // Keeps "5 min ago" current.
  useEffect(() => {
    const t = setInterval(() => tick((n) => n + 1), 60_000);
    return () => clearInterval(t);
  }, []);

  const sessions = data?.sessions.edges.map((e) => e.node) ?? [];
  const more = data?.sessions.pageInfo.hasNextPage ? data.sessions.pageInfo.endCursor : null;

  async function newChat() {
    setProblem(null);
    setCreating(true);
    try {
      const id = await createSession(client);
      openChat(id);
      onClose();
      setTimeout(() => document.getElementById('composer-input')?.focus(), 0);
    } catch (e) {
      setProblem(describeError(e));
    } finally {
      setCreating(false);
    }
  }

  async function showMore() {
    if (!more) return;
    setLoadingMore(true);
    try {
      await fetchMore({ variables: { after: more } });
    } catch (e) {
      setProblem(describeError(e));
    } finally {
      setLoadingMore(false);
    }
  }

  async function confirmDelete(item: Item) {
    setProblem(null);
    try {
      await deleteSession({ variables: { id: item.id } });
      if (currentId === item.id) openHome();
      forgetSession(client, item.id);
    } catch (e) {
      setProblem(describeError(e));
    }
  }

  return (
    <nav id="sidebar" className={`sidebar${open ? ' open' : ''}`} aria-label="Chats">
      <div className="sidebar-head">
        <a className="brand" href="#/">
          <span className="brand-mark" aria-hidden="true">
            tg
          </span>
          talkgraph
        </a>
      </div>
      <button
        type="button"
        ref={newChatButton}
        className="btn primary new-chat"
        onClick={newChat}
        disabled={creating}
      >
        <PlusIcon /> New chat
      </button>
      <a className={`sidebar-link${onSchedules ? ' current' : ''}`} href={SCHEDULES_HREF} aria-current={onSchedules ? 'page' : undefined}
        onClick={onClose}>
        <ClockIcon /> Schedules
      </a>
      {problem && (
        <p className="sidebar-error" role="alert">
          {problem}
        </p>
      )}
      <h2 className="sidebar-heading" id="chats-heading">
        Recent chats
      </h2>
      {error && !data && (
        <p className="sidebar-note" role="alert">
          Could not load your chats. {describeError(error)}
        </p>
      )}
      {!loading && !error && sessions.length === 0 && <p className="sidebar-note">No chats yet.</p>}
      <ul className="session-list" aria-labelledby="chats-heading">
        {sessions.map((s) =>
          renaming === s.id ? (
            <li key={s.id} className="session-item renaming">
              <RenameForm item={s} onDone={() => setRenaming(null)} />
            </li>
          ) : (
            <li key={s.id} className={`session-item${s.id === currentId ? ' current' : ''}`}>
              <a
                href={chatHref(s.id)}
                className="session-link"
                aria-current={s.id === currentId ? 'page' : undefined}
                onClick={onClose}
              >
                <span className="session-title">
                  {s.unread && s.id !== currentId && <span className="unread-dot" title="New" />}
                  {s.title || 'Untitled chat'}
                  {s.unread && s.id !== currentId && <span className="visually-hidden"> (new)</span>}
                </span>
                <span className="session-meta">
                  <StatusOf item={s} />
                  {relativeTime(s.updatedAt)}
                </span>
              </a>
              <span className="session-actions">
                <button
                  type="button"
                  className="icon-btn small"
                  aria-label={`Rename chat “${s.title || 'Untitled chat'}”`}
                  title="Rename"
                  onClick={() => setRenaming(s.id)}
                >
                  <PencilIcon />
                </button>
                <button
                  type="button"
                  className="icon-btn small danger"
                  aria-label={`Delete chat “${s.title || 'Untitled chat'}”`}
                  title="Delete"
                  onClick={() => setDeleting(s)}
                >
                  <TrashIcon />
                </button>
              </span>
            </li>
          ),
        )}
      </ul>
      {more && (
        <button type="button" className="btn subtle show-more" onClick={showMore} disabled={loadingMore}>
          {loadingMore ? 'Loading…' : 'Show more chats'}
        </button>
      )}
      <div className="sidebar-foot">
        {notifications === 'default' && (
          <button type="button" className="btn subtle small" onClick={() => askForNotifications()}>
            Notify me when a chat needs me
          </button>
        )}
        <a className="btn subtle small" href="#/settings/webhooks" onClick={onClose}>
          Webhooks
        </a>
      </div>
      <ConfirmDialog
        open={deleting !== null}
        title="Delete this chat?"
        confirmLabel="Delete"
        danger
        onCancel={() => setDeleting(null)}
        onConfirm={() => {
          const item = deleting;
          setDeleting(null);
          if (item) confirmDelete(item);
        }}
      >
        “{deleting?.title || 'Untitled chat'}” and its whole history will be removed. This cannot be undone.
      </ConfirmDialog>
    </nav>
  );
}

/** What a chat is doing, as the list shows it: working, waiting for you, failed. */
function StatusOf({ item }: { item: Item }) {
  const last = useFragment<{ lastRunStatus: string | null }>({ fragment: LAST_RUN, from: { __typename: 'TalkSession', id: item.id } });
  if (item.status === 'RUNNING') {
    return (
      <>
        <span className="dot running" aria-hidden="true" />
        working ·{' '}
      </>
    );
  }
  if (item.status === 'WAITING_FOR_INPUT') {
    return (
      <>
        <span className="dot waiting_for_input" aria-hidden="true" />
        <span className="waiting-label">waiting for you</span> ·{' '}
      </>
    );
  }
  if (last.data?.lastRunStatus === 'FAILED') {
    return (
      <>
        <span className="dot failed" aria-hidden="true" />
        failed ·{' '}
      </>
    );
  }
  return null;
}

function RenameForm({ item, onDone }: { item: Item; onDone: () => void }) {
  const [title, setTitle] = useState(item.title);
  const [rename, { loading, error }] = useMutation(RenameTalkSessionDocument);
  const input = useRef<HTMLInputElement>(null);

  useEffect(() => {
    input.current?.focus();
    input.current?.select();
  }, []);

  async function submit(e: FormEvent) {
    e.preventDefault();
    const next = title.trim();
    if (!next || next === item.title) return onDone();
    try {
      await rename({ variables: { input: { id: item.id, title: next } } });
      onDone();
    } catch {
      input.current?.focus();
    }
  }

  const inputId = `rename-${item.id}`;
  return (
    <form className="rename-form" onSubmit={submit}>
      <label htmlFor={inputId} className="visually-hidden">
        New title for “{item.title}”
      </label>
      <input
        id={inputId}
        ref={input}
        value={title}
        maxLength={200}
        disabled={loading}
        onChange={(e) => setTitle(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === 'Escape') {
            e.preventDefault();
            e.stopPropagation();
            onDone();
          }
        }}
        onBlur={(e) => {
          // Leaving the field for the Save button keeps the form; anywhere else cancels.
          if (!e.currentTarget.form?.contains(e.relatedTarget as Node | null)) onDone();
        }}
      />
      <button type="submit" className="btn small" disabled={loading}>
        Save
      </button>
      {error && (
        <p className="sidebar-error" role="alert">
          {describeError(error)}
        </p>
      )}
    </form>
  );
}
