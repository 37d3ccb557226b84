import { useApolloClient, useFragment } from '@apollo/client/react';
import { SessionListFieldsFragmentDoc } from '../gql/graphql';
import { useCallback, useEffect, useState } from 'react';
import type { StreamEvent } from '../lib/chat';
import { describeError } from '../lib/errors';
import { refreshSessions } from '../lib/sessions';
import { useChat } from '../lib/useChat';
import { Composer } from './Composer';
import { GearIcon, StopIcon } from './icons';
import { MessageList } from './MessageList';
import { QuestionForm } from './QuestionForm';
import { SettingsDialog } from './SettingsDialog';
import type { TopBarProps } from './Shell';
import { TopBar } from './TopBar';

export function ChatView({ sessionId, bar }: { sessionId: string; bar: TopBarProps }) {
  const client = useApolloClient();
  const onEvent = useCallback(
    (ev: StreamEvent) => {
      // The sidebar shows titles, order and status: refresh it on the events that change them.
      if (ev.__typename === 'SessionUpdated') {
        // The stream bypasses the cache; put the new title where the sidebar and header read it.
        client.cache.writeFragment({ fragment: SessionListFieldsFragmentDoc, data: ev.session });
      }
      if (
        ev.__typename === 'SessionUpdated' ||
        ev.__typename === 'RunStatusChanged' ||
        ev.__typename === 'QuestionAsked' ||
        ev.__typename === 'QuestionAnswered' ||
        (ev.__typename === 'MessageAdded' && ev.message.role === 'USER')
      ) {
        refreshSessions(client);
      }
    },
    [client],
  );
  const chat = useChat(sessionId, onEvent);
  // The title as the sidebar knows it: the server may name an untitled chat after its first message.
  const listed = useFragment({
    fragment: SessionListFieldsFragmentDoc,
    from: { __typename: 'TalkSession', id: sessionId },
  });
  const { state, phase } = chat;
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [stopError, setStopError] = useState<string | null>(null);
  const [stopping, setStopping] = useState(false);

  const title = (listed.complete ? listed.data.title : '') || state?.title || '';
  useEffect(() => {
    document.title = state ? `${title || 'Chat'} · talkgraph` : 'talkgraph';
  }, [title, state === null]); // eslint-disable-line react-hooks/exhaustive-deps

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

  if (!state) {
    return (
      <>
        <TopBar bar={bar} title="Loading…" />
        <div className="centered" role="status" aria-live="polite">
          {phase.kind === 'retrying' ? `${phase.message} Retrying…` : 'Loading the conversation…'}
        </div>
      </>
    );
  }

  const running = state.activeRun !== null && ['RUNNING', 'WAITING_FOR_INPUT', 'QUEUED'].includes(state.activeRun.status);
  // Runs waiting behind the active one (busy policy ENQUEUE).
  const queued = state.activeRun ? state.queuedRunIds.filter((id) => id !== state.activeRun?.id).length : 0;
  let statusText = '';
  if (state.status === 'WAITING_FOR_INPUT') statusText = 'Waiting for your answer';
  else if (state.status === 'RUNNING') statusText = 'Agent is working…';
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

  const demo = state.settings.agent === 'demo';
  return (
    <>
      <TopBar bar={bar} title={title || 'Untitled chat'}>
        <span className="agent-chip" title="Agent and model">
          {state.settings.agent}
          {state.settings.model ? ` · ${state.settings.model}` : ''}
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
        state={state}
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
        {state.pendingQuestion && (
          <QuestionForm key={state.pendingQuestion.id} question={state.pendingQuestion} onAnswer={chat.answer} />
        )}
        <Composer onSend={chat.send} autoFocus />
      </div>
      <SettingsDialog
        open={settingsOpen}
        sessionId={sessionId}
        settings={state.settings}
        onClose={() => setSettingsOpen(false)}
        onSaved={chat.settingsSaved}
      />
    </>
  );
}
