import cronstrue from 'cronstrue';

// What a schedule's form and list say in words: its cron explained (cronstrue, the cron
// read in English), and instants on the reader's clock.

/** The browser's time zone, the default of a new schedule. */
export function browserZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** A cron in words ("At 09:00 AM, only on Monday"), or null when it cannot be read. */
export function explainCron(cron: string): string | null {
  const c = cron.trim();
  if (!c) return null;
  try {
    return cronstrue.toString(c, { throwExceptionOnParseError: true, use24HourTimeFormat: true, verbose: false });
  } catch {
    return null;
  }
}

/** An instant as the reader's clock shows it in zone: "Mon 4 May, 09:00". */
export function formatInZone(iso: string, zone: string, locale?: string): string {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return iso;
  try {
    return new Intl.DateTimeFormat(locale, {
      weekday: 'short',
      day: 'numeric',
      month: 'short',
      year: t.getFullYear() === new Date().getFullYear() ? undefined : 'numeric',
      hour: '2-digit',
      minute: '2-digit',
      timeZone: zone,
      timeZoneName: zone === browserZone() ? undefined : 'short',
    }).format(t);
  } catch {
    return t.toISOString();
  }
}

/** The value of a datetime-local input an hour from now, on the reader's clock. */
export function inAnHour(now = new Date()): string {
  const t = new Date(now.getTime() + 60 * 60 * 1000);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())}T${pad(t.getHours())}:${pad(t.getMinutes())}`;
}

/** What a fire did, in words. */
export function fireOutcome(outcome: string, reason: string | null | undefined): string {
  switch (outcome) {
    case 'STARTED':
      return 'Sent';
    case 'SKIPPED':
      if (reason === 'missed') return 'Skipped: the server was down';
      if (reason === 'dst') return 'Skipped: that time did not exist (daylight saving)';
      if (reason === 'busy') return 'Skipped: the agent was still working';
      return `Skipped${reason ? `: ${reason}` : ''}`;
    default:
      return `Failed${reason ? `: ${reason}` : ''}`;
  }
}
