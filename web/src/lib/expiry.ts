import { useSyncExternalStore } from 'react';

/**
 * How long until `expiresAt`, in words: "2 days left", "3 h 5 min left", "4:07 left"
 * (minutes and seconds in the last hour), "expired"; null when there is no time.
 */
export function timeLeft(expiresAt: string | null | undefined, now: number): { ms: number; label: string } | null {
  if (!expiresAt) return null;
  const t = Date.parse(expiresAt);
  if (Number.isNaN(t)) return null;
  const ms = t - now;
  if (ms <= 0) return { ms: 0, label: 'expired' };
  const s = Math.ceil(ms / 1000);
  if (s >= 48 * 3600) return { ms, label: `${Math.floor(s / 86400)} days left` };
  if (s >= 3600) return { ms, label: `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min left` };
  return { ms, label: `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')} left` };
}

// One clock for every countdown on the page, ticking each second while one is shown.
let now = Date.now();
let timer: ReturnType<typeof setInterval> | undefined;
const listeners = new Set<() => void>();

function subscribe(fn: () => void) {
  listeners.add(fn);
  if (!timer) {
    now = Date.now();
    timer = setInterval(() => {
      now = Date.now();
      for (const l of listeners) l();
    }, 1000);
  }
  return () => {
    listeners.delete(fn);
    if (listeners.size === 0) {
      clearInterval(timer);
      timer = undefined;
    }
  };
}

/** The time now, updated every second while the component is shown. */
export function useNow(): number {
  return useSyncExternalStore(subscribe, () => now);
}
