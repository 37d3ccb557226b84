import { useApolloClient, useFragment, useQuery } from '@apollo/client/react';
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { AgentsDocument, SessionStateFieldsFragmentDoc } from '../gql/graphql';
import { isFinishedRun } from '../lib/cache';
import { describeError } from '../lib/errors';
import { openChat } from '../lib/route';
import { useChat } from '../lib/useChat';
import { BudgetPause } from './BudgetPause';
import { markRead } from '../lib/viewer';
import { Composer } from './Composer';
import { GearIcon, StopIcon } from './icons';
import { MessageActionsContext, type MessageActions } from './messageActions';
import { MessageList } from './MessageList';
import { PendingInputs } from './inputs/PendingInputs';
import { QueuedRuns } from './QueuedRuns';
import { SettingsDialog } from './SettingsDialog';
import { ShareDialog } from './ShareDialog';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

export function ChatView({ sessionId, bar }: { sessionId: string; bar: TopBarProps }) {
  const chat = useChat(sessionId);
  const { session, phase } = chat;
  const { edit, regenerate, selectBranch, fork: forkChat } = chat;
  const actions = useMemo<MessageActions>(
    () => ({
      edit,
      regenerate,
      selectBranch,
      async fork(messageId) {
        openChat(await forkChat(messageId));
        setTimeout(() => document.getElementById('composer-input')?.focus(), 0);
      },
    }),
    [edit, regenerate, selectBranch, forkChat],
  );
  // Runs queued behind the active one (busy policies ENQUEUE and STEER), kept by the cache.
  const state = useFragment({
    fragment: SessionStateFieldsFragmentDoc,
    from: { __typename: 'TalkSession', id: sessionId },
  });
  const agents = useQuery(AgentsDocument, { fetchPolicy: 'cache-first' });
  const agentName = session?.settings.agent;
  // A tool's description and input schema, from the agent of the chat (else any agent).
  const toolDetails = useCallback(
    (name: string) => {
      const list = agents.data?.agents ?? [];
      const own = list.find((a) => a.name === agentName)?.tools.find((t) => t.name === name);
      return own ?? list.flatMap((a) => a.tools).find((t) => t.name === name);
    },
    [agents.data, agentName],
  );
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [shareOpen, setShareOpen] = useState(false);

  // A chat on screen is read: its unread flag is cleared (for every tab) when it shows,
  // and when the page comes back into view.
  const client = useApolloClient();
  const unread = session?.unread ?? false;
  useEffect(() => {
    if (!unread) return;
    const look = () => {
      if (document.visibilityState === 'visible') markRead(client, sessionId);
    };
    look();
    document.addEventListener('visibilitychange', look);
    return () => document.removeEventListener('visibilitychange', look);
  }, [client, sessionId, unread]);
  const [stopError, setStopError] = useState<string | null>(null);
  const [stopping, setStopping] = useState(false);

  // Escape stops the agent while it works, unless something else takes Escape first (a
  // dialog, the chat list's drawer, a box being edited in a card).
  const runningNow = session?.activeRun != null && !isFinishedRun(session.activeRun.status);
  const stopChat = chat.stop;
  const stop = useCallback(async () => {
    if (stopping) return;
    setStopError(null);
    setStopping(true);
    try {
      await stopChat();
    } catch (e) {
      setStopError(describeError(e));
    } finally {
      setStopping(false);
    }
  }, [stopChat, stopping]);
  useEffect(() => {
    if (!runningNow) return;
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== 'Escape' || e.defaultPrevented || e.repeat) return;
      if (document.querySelector('dialog[open], .app.menu-open')) return;
      const t = e.target as HTMLElement | null;
      if (t?.closest('.pending-inputs, .sidebar, .msg-edit')) return;
      e.preventDefault();
      void stop();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, [runningNow, stop]);

  // When the run ends while the focus was on its Stop button (which goes with it), the
  // focus goes back to the message box rather than to the start of the page.
  const stopFocused = useRef(false);
  useEffect(() => {
    if (runningNow || !stopFocused.current) return;
    stopFocused.current = false;
    const active = document.activeElement;
    if (!active || active === document.body) document.getElementById('composer-input')?.focus();
  }, [runningNow]);

  const title = session?.title ?? '';
  const loaded = session !== null;
  useEffect(() => {
    document.title = loaded ? `${title || 'Chat'} · talkgraph` : 'talkgraph';
  }, [title, loaded]);

  if (phase.kind === 'missing') {
    return (
      <>
        <TopBar bar={bar} title="Chat not found" />
        <div className="centered">
          <p>This chat does not exist, or it was deleted.</p>
          <a className="btn primary" href="#/">
            Start a new chat
          </a>
        </div>
      </>
    );
  }

  if (!session) {
    return (
      <>
        <TopBar bar={bar} title="Loading…" />
        <div className="centered" role="status" aria-live="polite">
          {phase.kind === 'retrying' ? `${phase.message} Retrying…` : 'Loading the conversation…'}
        </div>
      </>
    );
  }

  const activeRun = session.activeRun;
  const running = activeRun !== null && !isFinishedRun(activeRun.status);
  const queuedRunIds = (state.complete ? state.data.queuedRuns : []).map((r) => r.id).filter((id) => id !== activeRun?.id);
  const queued = queuedRunIds.length;
  const questions = session.pendingQuestions.filter((q) => !q.answeredAt && !q.withdrawn);
  const approvals = session.pendingApprovals.filter((c) => c.status === 'AWAITING_APPROVAL');
  let statusText = '';
  const budgetScope = activeRun?.status === 'WAITING_FOR_INPUT' ? activeRun.waitsForBudget : null;
  if (budgetScope) statusText = 'Paused: token budget reached';
  else if (session.status === 'WAITING_FOR_INPUT') {
    if (questions.length + approvals.length > 1) statusText = `Waiting for you (${questions.length + approvals.length} inputs)`;
    else if (approvals.length > 0) statusText = 'Waiting for your approval';
    else statusText = 'Waiting for your answer';
  }
  else if (session.status === 'RUNNING') statusText = 'Agent is working…';
  if (queued > 0) statusText += ` (${queued} message${queued > 1 ? 's' : ''} queued)`;

  const messages = session.messages.edges.map((e) => e.node);
  // What each queued run answers, when its message is shown (its runId names the run).
  const promptsByRun = new Map<string, string>();
  for (const m of messages) if (m.role === 'USER' && m.kind === 'TEXT' && m.runId) promptsByRun.set(m.runId, m.content);

  const demo = session.settings.agent === 'demo';
  return (
    <>
      <TopBar bar={bar} title={title || 'Untitled chat'}>
        <span className="agent-chip" title="Agent and model">
          {session.settings.agent}
          {session.settings.model ? ` · ${session.settings.model}` : ''}
        </span>
        <button
          type="button"
          className="btn small share-btn"
          aria-haspopup="dialog"
          title="Share a link to this chat"
          onClick={() => setShareOpen(true)}
        >
          Share
        </button>
        <button
          type="button"
          className="icon-btn"
          aria-label="Chat settings"
          aria-haspopup="dialog"
          title="Settings"
          onClick={() => setSettingsOpen(true)}
        >
          <GearIcon />
        </button>
      </TopBar>
      <MessageActionsContext.Provider value={actions}>
      <MessageList
        messages={messages}
        hasEarlier={session.messages.pageInfo.hasPreviousPage}
        pendingCount={questions.length + approvals.length}
        onLoadEarlier={chat.loadEarlier}
        emptyHint={
          demo
            ? 'Say something to the demo agent. It also knows /ask <question>, /approve <text>, /ask-many <n>, /form, /markdown <words>, /slow <n> and /fail.'
            : 'Say something to start the conversation.'
        }
      />
      </MessageActionsContext.Provider>
      <div className="dock">
        <QueuedRuns runIds={queuedRunIds} promptsByRun={promptsByRun} onCancel={chat.cancelQueued} />
        <div className="statusbar">
          <p className={`status-text${statusText ? ' active' : ''}`} role="status" aria-live="polite" id="chat-status">
            {statusText && <span className="pulse" aria-hidden="true" />}
            {statusText}
            {phase.kind === 'retrying' && <span className="status-warn"> {phase.message}</span>}
          </p>
          {running && (
            <button
              type="button"
              className="btn stop-btn"
              onClick={stop}
              disabled={stopping}
              title="Stop the agent (Escape)"
              aria-keyshortcuts="Escape"
              onFocus={() => {
                stopFocused.current = true;
              }}
              onBlur={(e) => {
                if (e.relatedTarget) stopFocused.current = false;
              }}
            >
              <StopIcon /> Stop
            </button>
          )}
        </div>
        {stopError && (
          <p className="notice error" role="alert">
            {stopError}
          </p>
        )}
        {budgetScope && <BudgetPause sessionId={sessionId} scope={budgetScope} />}
        <PendingInputs
          questions={questions}
          approvals={approvals}
          tools={toolDetails}
          onAnswer={chat.answer}
          onDecide={chat.decide}
          onRespondAll={chat.respondAll}
        />
        <Composer onSend={chat.send} autoFocus busy={session.status !== 'IDLE'} defaultPolicy={session.settings.busyPolicy} />
      </div>
      {shareOpen && <ShareDialog sessionId={sessionId} onClose={() => setShareOpen(false)} />}
      {settingsOpen && (
        <SettingsDialog sessionId={sessionId} settings={session.settings} onClose={() => setSettingsOpen(false)} />
      )}
    </>
  );
}
