import type { ApolloClient } from '@apollo/client';
import { CreateTalkSessionDocument } from '../gql/graphql';
import { moveSessionToTop } from './events';

export const SESSIONS_PAGE = 50;

/** Creates an untitled chat and puts it first in the cached session list. */
export async function createSession(client: ApolloClient): Promise<string> {
  const res = await client.mutate({
    mutation: CreateTalkSessionDocument,
    variables: { input: {} },
    update(cache, { data }) {
      if (data) moveSessionToTop(cache, data.createTalkSession.id);
    },
  });
  const id = res.data?.createTalkSession.id;
  if (!id) throw new Error('The chat could not be created.');
  return id;
}

/** Removes a deleted chat from the cache: the list and anything that showed it. */
export function forgetSession(client: ApolloClient, id: string) {
  client.cache.evict({ id: client.cache.identify({ __typename: 'TalkSession', id }) });
  client.cache.gc();
}
