// The chat list lives from the viewer's stream: one subscription for every chat of the
// user (viewerEvents), whichever tab or replica changed it. Each SessionChanged is the
// session as it is then, normalised over the cached one; a chat made elsewhere joins the
// list, a deleted one leaves it. The stream follows on from the cursor read with the list
// (Sessions' viewer.eventsCursor), so nothing between the two is missed; when the server
// no longer has that far back (CURSOR_EXPIRED), the list is read again.

import { gql, type ApolloCache, type ApolloClient } from '@apollo/client';
import { useApolloClient } from '@apollo/client/react';
import { useEffect, useState } from 'react';
import {
  MarkSessionReadDocument,
  SessionListFieldsFragmentDoc,
  SessionsDocument,
  ViewerEventsDocument,
  type ViewerEventsSubscription,
} from '../gql/graphql';
import { errorCode } from './errors';
import { moveSessionToTop } from './events';
import { notify } from './notify';
import { SESSIONS_PAGE } from './sessions';

export type ViewerEvent = ViewerEventsSubscription['viewerEvents'];

/** How a chat's latest run ended, as the page was told (client-schema.graphql). */
export const LAST_RUN = gql`
  fragment LastRunStatus on TalkSession {
    lastRunStatus @client
  }
`;

/** What the page is showing: the chat on screen, if any, and whether the page is seen. */
export interface OnScreen {
  sessionId: string | null;
  visible: boolean;
}

/**
 * Applies one viewer event to the cache, and says what the user should be told when the
 * chat is not on screen (a notification), or null.
 */
export function applyViewerEvent(cache: ApolloCache, ev: ViewerEvent, screen: OnScreen): { title: string; body: string; sessionId: string } | null {
  const seen = (id: string) => screen.visible && screen.sessionId === id;
  switch (ev.__typename) {
    case 'SessionChanged': {
      const s = ev.session;
      const key = cache.identify({ __typename: 'TalkSession', id: s.id });
      const before = cache.readFragment({ id: key, fragment: SessionListFieldsFragmentDoc });
      cache.writeFragment({ id: key, fragment: SessionListFieldsFragmentDoc, data: s });
      if (!before || before.updatedAt !== s.updatedAt) moveSessionToTop(cache, s.id);
      return null;
    }
    case 'SessionRemoved':
      cache.evict({ id: cache.identify({ __typename: 'TalkSession', id: ev.sessionId }) });
      cache.gc();
      return null;
    case 'RunEnded': {
      const key = cache.identify({ __typename: 'TalkSession', id: ev.run.sessionId });
      cache.writeFragment({ id: key, fragment: LAST_RUN, data: { __typename: 'TalkSession', lastRunStatus: ev.run.status } });
      if (seen(ev.run.sessionId) || ev.run.status === 'CANCELLED' || ev.run.status === 'INTERRUPTED') return null;
      const title = titleOf(cache, ev.run.sessionId);
      return ev.run.status === 'FAILED'
        ? { title: `${title} failed`, body: ev.run.error ?? 'The agent stopped with an error.', sessionId: ev.run.sessionId }
        : { title: `${title} is done`, body: 'The agent finished its reply.', sessionId: ev.run.sessionId };
    }
    case 'InputRequested': {
      if (seen(ev.sessionId)) return null;
      const title = titleOf(cache, ev.sessionId);
      const body = ev.question ? ev.question.prompt : `Approve ${ev.toolCall?.name ?? 'a tool call'}?`;
      return { title: `${title} needs your answer`, body, sessionId: ev.sessionId };
    }
  }
  return null;
}

function titleOf(cache: ApolloCache, id: string): string {
  const s = cache.readFragment({ id: cache.identify({ __typename: 'TalkSession', id }), fragment: SessionListFieldsFragmentDoc });
  return s?.title ? `“${s.title}”` : 'A chat';
}

/** Clears the session's unread flag (every tab hears of it). */
export function markRead(client: ApolloClient, sessionId: string) {
  client.mutate({ mutation: MarkSessionReadDocument, variables: { sessionId } }).catch(() => {
    // Not read this time: the next look at the chat tries again.
  });
}

/**
 * Follows the viewer's stream while mounted, from listCursor (Sessions' viewer.eventsCursor
 * as the list was first read; pages read later do not move it), applying each event and
 * telling the user of chats not on screen. screen says what is on screen now. A stream that
 * fails is started again from a new read of the list, and its cursor.
 */
export function useViewerEvents(listCursor: string | null, screen: () => OnScreen) {
  const client = useApolloClient();
  // The cursor followed: the list's first, then that of each read the stream asked for.
  const [from, setFrom] = useState<{ cursor: string } | null>(null);
  if (listCursor && !from) setFrom({ cursor: listCursor }); // the list's first read, once

  useEffect(() => {
    if (!from) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let cancelled = false;
    const again = (error: unknown, attempt: number) => {
      stream.unsubscribe();
      if (cancelled) return;
      // A cursor the server no longer keeps: read the list again at once; anything else
      // after a pause. The new read's cursor starts a new stream.
      const delay = errorCode(error) === 'CURSOR_EXPIRED' ? 0 : Math.min(500 * 2 ** attempt, 8_000);
      timer = setTimeout(() => {
        client.query({ query: SessionsDocument, variables: { first: SESSIONS_PAGE }, fetchPolicy: 'network-only' }).then(
          (res) => {
            if (!cancelled && res.data) setFrom({ cursor: res.data.viewer.eventsCursor });
          },
          (e) => again(e, attempt + 1),
        );
      }, delay);
    };
    const stream = client
      .subscribe({ query: ViewerEventsDocument, variables: { after: from.cursor }, fetchPolicy: 'no-cache' })
      .subscribe({
        next: (result) => {
          if (result.error) return again(result.error, 0);
          const ev = result.data?.viewerEvents;
          if (!ev) return;
          const now = screen();
          const told = applyViewerEvent(client.cache, ev, now);
          if (told) notify(told.title, told.body, told.sessionId);
          if (ev.__typename === 'SessionChanged' && ev.session.unread && now.visible && now.sessionId === ev.session.id) {
            markRead(client, ev.session.id);
          }
        },
        error: (e) => again(e, 0),
        complete: () => again(new Error('The list stopped following; reconnecting.'), 0),
      });
    return () => {
      cancelled = true;
      clearTimeout(timer);
      stream.unsubscribe();
    };
  }, [client, from, screen]);
}
