import { useFragment } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import { SessionStateFieldsFragmentDoc } from '../gql/graphql';
import { isFinishedRun } from '../lib/cache';
import { describeError } from '../lib/errors';
import { useChat } from '../lib/useChat';
import { Composer } from './Composer';
import { GearIcon, StopIcon } from './icons';
import { MessageList } from './MessageList';
import { QuestionForm } from './QuestionForm';
import { SettingsDialog } from './SettingsDialog';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

export function ChatView({ sessionId, bar }: { sessionId: string; bar: TopBarProps }) {
  const chat = useChat(sessionId);
  const { session, phase } = chat;
  // Runs queued behind the active one (busy policy ENQUEUE), a field the cache keeps.
  const state = useFragment({
    fragment: SessionStateFieldsFragmentDoc,
    from: { __typename: 'TalkSession', id: sessionId },
  });
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [stopError, setStopError] = useState<string | null>(null);
  const [stopping, setStopping] = useState(false);

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
  const queuedRunIds = state.complete ? state.data.queuedRunIds : [];
  const queued = activeRun ? queuedRunIds.filter((id) => id !== activeRun.id).length : 0;
  let statusText = '';
  if (session.status === 'WAITING_FOR_INPUT') statusText = 'Waiting for your answer';
  else if (session.status === 'RUNNING') statusText = 'Agent is working…';
  if (queued > 0) statusText += ` (${queued} message${queued > 1 ? 's' : ''} queued)`;

  async function stop() {
    setStopError(null);
    setStopping(true);
    try {
      await chat.stop();
    } catch (e) {
      setStopError(describeError(e));
    } finally {
      setStopping(false);
    }
  }

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
          className="icon-btn"
          aria-label="Chat settings"
          aria-haspopup="dialog"
          title="Settings"
          onClick={() => setSettingsOpen(true)}
        >
          <GearIcon />
        </button>
      </TopBar>
      <MessageList
        messages={session.messages.edges.map((e) => e.node)}
        hasEarlier={session.messages.pageInfo.hasPreviousPage}
        pendingQuestionId={session.pendingQuestion?.id ?? null}
        onLoadEarlier={chat.loadEarlier}
        emptyHint={
          demo
            ? 'Say something to the demo agent. It also knows /ask <question>, /slow <n> and /fail.'
            : 'Say something to start the conversation.'
        }
      />
      <div className="dock">
        <div className="statusbar">
          <p className={`status-text${statusText ? ' active' : ''}`} role="status" aria-live="polite" id="chat-status">
            {statusText && <span className="pulse" aria-hidden="true" />}
            {statusText}
            {phase.kind === 'retrying' && <span className="status-warn"> {phase.message}</span>}
          </p>
          {running && (
            <button type="button" className="btn stop-btn" onClick={stop} disabled={stopping}>
              <StopIcon /> Stop
            </button>
          )}
        </div>
        {stopError && (
          <p className="notice error" role="alert">
            {stopError}
          </p>
        )}
        {session.pendingQuestion && !session.pendingQuestion.answeredAt && (
          <QuestionForm key={session.pendingQuestion.id} question={session.pendingQuestion} onAnswer={chat.answer} />
        )}
        <Composer onSend={chat.send} autoFocus />
      </div>
      {settingsOpen && (
        <SettingsDialog sessionId={sessionId} settings={session.settings} onClose={() => setSettingsOpen(false)} />
      )}
    </>
  );
}
