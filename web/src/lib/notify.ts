// Browser notifications, once the user allowed them: a chat not on screen needs an answer
// or finished. Clicking one opens that chat.

import { useSyncExternalStore } from 'react';
import { openChat } from './route';

type Permission = NotificationPermission | 'unsupported';

const listeners = new Set<() => void>();

function permission(): Permission {
  return typeof Notification === 'undefined' ? 'unsupported' : Notification.permission;
}

/** Whether notifications are allowed, refused, not asked yet ('default'), or unsupported. */
export function useNotificationPermission(): Permission {
  return useSyncExternalStore(
    (fn) => {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    permission,
  );
}

/** Asks the user to allow notifications (from a click: browsers ask only then). */
export async function askForNotifications() {
  if (permission() !== 'default') return;
  await Notification.requestPermission();
  for (const fn of listeners) fn();
}

/** Shows a notification when the user allowed them; one per chat at a time (tag). */
export function notify(title: string, body: string, sessionId: string) {
  if (permission() !== 'granted') return;
  const n = new Notification(title, { body, tag: `talkgraph-${sessionId}` });
  n.onclick = () => {
    window.focus();
    openChat(sessionId);
    n.close();
  };
}
