import type { ApolloClient } from '@apollo/client';
import { SessionsDocument } from '../gql/graphql';

export const SESSIONS_PAGE = 50;

const pending = new WeakMap<ApolloClient, ReturnType<typeof setTimeout>>();

/** Refreshes the sidebar soon; calls within 400 ms share one request. */
export function refreshSessions(client: ApolloClient) {
  if (pending.has(client)) return;
  pending.set(
    client,
    setTimeout(() => {
      pending.delete(client);
      client.refetchQueries({ include: [SessionsDocument] }).catch(() => {
        // The next refresh or poll tries again.
      });
    }, 400),
  );
}


export function relativeTime(iso: string, now = Date.now()): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 45) return 'just now';
  const m = Math.round(s / 60);
  if (m < 60) return `${m} min ago`;
  const h = Math.round(m / 60);
  if (h < 24) return `${h} h ago`;
  const d = Math.round(h / 24);
  if (d < 7) return `${d} d ago`;
  return new Date(t).toLocaleDateString();
}
