import { useSyncExternalStore } from 'react';

/** The websocket's health, for the banner that says when live updates are paused. */
export type ConnectionState = 'idle' | 'connecting' | 'connected' | 'reconnecting';

let state: ConnectionState = 'idle';
const listeners = new Set<() => void>();

export function setConnectionState(next: ConnectionState) {
  if (next === state) return;
  state = next;
  for (const l of listeners) l();
}

export function getConnectionState(): ConnectionState {
  return state;
}

function subscribe(fn: () => void) {
  listeners.add(fn);
  return () => {
    listeners.delete(fn);
  };
}

export function useConnectionState(): ConnectionState {
  return useSyncExternalStore(subscribe, getConnectionState);
}
