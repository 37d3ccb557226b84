import { useApolloClient, useQuery } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import { ForkSharedSessionDocument, SharedSessionDocument, SharedStreamDocument } from '../gql/graphql';
import { ensureToken } from '../lib/auth';
import { describeError, errorCode } from '../lib/errors';
import { chatHref } from '../lib/route';
import { applySharedEvent } from '../lib/shared';
import { MessageList } from './MessageList';
import { SharedReadingContext } from './messageActions';

/**
 * A conversation someone shared, read-only, at /s/<token>: no sign-in needed to read it. A
 * live link follows the conversation as it goes; "Continue in my account" copies it into
 * a chat of the reader's own (signing in as a guest first when needed).
 */
export function SharedPage({ token }: { token: string }) {
  const client = useApolloClient();
  const q = useQuery(SharedSessionDocument, { variables: { token }, fetchPolicy: 'network-only', notifyOnNetworkStatusChange: false });
  const [working, setWorking] = useState(false);
  const [gone, setGone] = useState(false);
  const [forking, setForking] = useState(false);
  const [forkError, setForkError] = useState<string | null>(null);
  const shared = q.data?.sharedSession;
  const cursor = shared?.live ? shared.streamCursor : null;
  const { refetch } = q;

  useEffect(() => {
    document.title = shared ? `${shared.title || 'Shared chat'} · talkgraph` : 'Shared chat · talkgraph';
  }, [shared]);

  // A live link's stream, applied to the conversation in Apollo's cache.
  useEffect(() => {
    if (!cursor) return;
    const end = (error: unknown) => {
      if (errorCode(error) === 'NOT_FOUND') setGone(true);
    };
    const sub = client
      .subscribe({ query: SharedStreamDocument, variables: { token, after: cursor }, fetchPolicy: 'no-cache' })
      .subscribe({
        next: (result) => {
          if (result.error) return end(result.error);
          const ev = result.data?.sharedStream;
          if (!ev) return;
          let reload = false;
          client.cache.updateQuery({ query: SharedSessionDocument, variables: { token } }, (data) => {
            if (!data?.sharedSession) return data;
            const applied = applySharedEvent(data.sharedSession, ev);
            if (applied.working !== null) setWorking(applied.working);
            reload = applied.reload;
            return { sharedSession: applied.shared };
          });
          if (reload) void refetch(); // the branch changed: read it again, and follow on from there
        },
        error: end,
      });
    return () => sub.unsubscribe();
  }, [client, token, cursor, refetch]);

  async function continueHere() {
    setForking(true);
    setForkError(null);
    try {
      await ensureToken();
      const res = await client.mutate({ mutation: ForkSharedSessionDocument, variables: { token }, fetchPolicy: 'no-cache' });
      const id = res.data?.forkSharedSession.id;
      if (id) location.assign('/' + chatHref(id));
    } catch (e) {
      setForkError(describeError(e));
      setForking(false);
    }
  }

  let body;
  if (q.loading && !shared) {
    body = (
      <p className="shared-note" role="status">
        Loading…
      </p>
    );
  } else if (q.error && !shared) {
    body = (
      <p className="notice error" role="alert">
        {describeError(q.error)}
      </p>
    );
  } else if (!shared || gone) {
    body = (
      <p className="shared-note" role="alert">
        This shared conversation is not available: the link is wrong, or it was revoked or has expired.
      </p>
    );
  }
  return (
    <div className="app shared-app">
      <main className="main shared-main" aria-labelledby="shared-title">
        <header className="topbar">
          <h1 className="topbar-title" id="shared-title">
            {shared && !gone ? shared.title || 'Untitled chat' : 'Shared chat'}
          </h1>
          <div className="topbar-actions">
            {shared && !gone && (
              <>
                <span className="agent-chip" title={shared.live ? 'It follows the conversation as it goes' : 'As it was when the link was made'}>
                  {shared.live ? 'Live, read-only' : 'Snapshot, read-only'}
                </span>
                <button type="button" className="btn primary continue-btn" onClick={continueHere} disabled={forking}>
                  Continue in my account
                </button>
              </>
            )}
          </div>
        </header>
        {forkError && (
          <p className="notice error" role="alert">
            {forkError}
          </p>
        )}
        {body ?? (
          <>
            <SharedReadingContext.Provider value={true}>
              <MessageList messages={shared!.messages} hasEarlier={false} pendingCount={0} onLoadEarlier={async () => {}} emptyHint="Nothing was said yet." />
            </SharedReadingContext.Provider>
            <p className={`status-text shared-status${working ? ' active' : ''}`} role="status" aria-live="polite">
              {working && <span className="pulse" aria-hidden="true" />}
              {working ? 'The agent is working…' : ''}
            </p>
          </>
        )}
      </main>
    </div>
  );
}
