import { useSyncExternalStore } from 'react';

// Hash routes work behind any static file server: `#/` is the start page,
// `#/c/<session id>` one chat, `#/schedules` the schedules and `#/settings/webhooks` the
// webhooks.

function subscribe(fn: () => void) {
  window.addEventListener('hashchange', fn);
  return () => window.removeEventListener('hashchange', fn);
}

function currentSessionId(): string | null {
  const m = /^#\/c\/([^/?#]+)/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function onWebhooksPage(): boolean {
  return /^#\/settings\/webhooks\b/.test(location.hash);
}

/** Whether the page shows the webhooks settings (`#/settings/webhooks`). */
export function useWebhooksRoute(): boolean {
  return useSyncExternalStore(subscribe, onWebhooksPage);
}

export function useSessionRoute(): string | null {
  return useSyncExternalStore(subscribe, currentSessionId);
}

export function chatHref(id: string): string {
  return `#/c/${encodeURIComponent(id)}`;
}

export function openChat(id: string) {
  location.hash = chatHref(id);
}

export function openHome() {
  location.hash = '#/';
}

function onSchedules(): boolean {
  return /^#\/schedules\b/.test(location.hash);
}

/** Whether the schedules page is open. */
export function useSchedulesRoute(): boolean {
  return useSyncExternalStore(subscribe, onSchedules);
}

export const SCHEDULES_HREF = '#/schedules';
