const MINUTE = 60;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/**
 * How long ago `iso` was, in the reader's language through Intl.RelativeTimeFormat: "now",
 * "5 min. ago", "3 hr. ago", "yesterday"; a date after a week. `locale` is for tests.
 */
export function relativeTime(iso: string, now = Date.now(), locale?: string): string {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, (now - t) / 1000);
  if (s >= 7 * DAY) return new Date(t).toLocaleDateString(locale);
  const rtf = new Intl.RelativeTimeFormat(locale, { numeric: 'auto', style: 'short' });
  if (s < 45) return rtf.format(0, 'second');
  if (s < 45 * MINUTE) return rtf.format(-Math.max(1, Math.round(s / MINUTE)), 'minute');
  if (s < 22 * HOUR) return rtf.format(-Math.round(s / HOUR), 'hour');
  return rtf.format(-Math.max(1, Math.round(s / DAY)), 'day');
}
