import { describe, expect, it } from 'vitest';
import { timeLeft } from './expiry';
import { relativeTime } from './time';

const now = Date.parse('2025-06-15T12:00:00Z');
const ago = (seconds: number) => new Date(now - seconds * 1000).toISOString();

describe('relativeTime', () => {
  it('says "now" for the last 45 seconds and for clocks a little ahead', () => {
    expect(relativeTime(ago(0), now, 'en')).toBe('now');
    expect(relativeTime(ago(44), now, 'en')).toBe('now');
    expect(relativeTime(ago(-30), now, 'en')).toBe('now');
  });

  it('counts minutes, hours and days', () => {
    expect(relativeTime(ago(50), now, 'en')).toBe('1 min. ago');
    expect(relativeTime(ago(5 * 60), now, 'en')).toBe('5 min. ago');
    expect(relativeTime(ago(3 * 3600), now, 'en')).toBe('3 hr. ago');
    expect(relativeTime(ago(24 * 3600), now, 'en')).toBe('yesterday');
    expect(relativeTime(ago(3 * 24 * 3600), now, 'en')).toBe('3 days ago');
  });

  it('speaks the given language', () => {
    expect(relativeTime(ago(5 * 60), now, 'de')).toBe('vor 5 Min.');
  });

  it('gives a date after a week, and nothing for a bad timestamp', () => {
    expect(relativeTime('2025-06-01T08:00:00Z', now, 'en-US')).toBe('6/1/2025');
    expect(relativeTime('not a time', now, 'en')).toBe('');
  });

  it('reads RFC 3339 with nanoseconds, as the server writes it', () => {
    expect(relativeTime('2025-06-15T11:55:00.123456789Z', now, 'en')).toBe('5 min. ago');
  });
});

describe('timeLeft', () => {
  const at = (seconds: number) => new Date(now + seconds * 1000).toISOString();
  it('counts down in minutes and seconds in the last hour', () => {
    expect(timeLeft(at(65), now)?.label).toBe('1:05 left');
    expect(timeLeft(at(0.2), now)?.label).toBe('0:01 left');
    expect(timeLeft(at(3599), now)?.label).toBe('59:59 left');
  });
  it('in hours and days further out', () => {
    expect(timeLeft(at(3 * 3600 + 5 * 60), now)?.label).toBe('3 h 5 min left');
    expect(timeLeft(at(24 * 3600), now)?.label).toBe('24 h 0 min left');
    expect(timeLeft(at(3 * 86400), now)?.label).toBe('3 days left');
  });
  it('says expired once past, and nothing without a time', () => {
    expect(timeLeft(at(-1), now)).toEqual({ ms: 0, label: 'expired' });
    expect(timeLeft(null, now)).toBeNull();
    expect(timeLeft('soon', now)).toBeNull();
  });
});
