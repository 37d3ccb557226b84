import { describe, expect, test } from 'vitest';
import { explainCron, fireOutcome, formatInZone } from './schedules';

describe('schedules in words', () => {
  test('a cron is explained, and a bad one is not', () => {
    expect(explainCron('0 9 * * MON')).toMatch(/09:00.*Monday/);
    expect(explainCron('@daily')).toBeTruthy();
    expect(explainCron('61 * * * *')).toBeNull();
    expect(explainCron('')).toBeNull();
  });
  test('an instant shows on the clock of a zone', () => {
    expect(formatInZone('2026-05-04T07:00:00Z', 'Europe/Paris', 'en-GB')).toMatch(/09:00/);
    expect(formatInZone('2026-05-04T07:00:00Z', 'America/New_York', 'en-GB')).toMatch(/03:00/);
  });
  test('outcomes say why', () => {
    expect(fireOutcome('SKIPPED', 'dst')).toMatch(/daylight saving/);
    expect(fireOutcome('FAILED', 'the session was deleted')).toBe('Failed: the session was deleted');
    expect(fireOutcome('STARTED', null)).toBe('Sent');
  });
});
