import { timeLeft, useNow } from '../../lib/expiry';
import { ClockIcon } from '../icons';

/** Time left before an input expires, counting down each second. */
export function TimeLeft({ expiresAt }: { expiresAt: string | null | undefined }) {
  const now = useNow();
  const left = timeLeft(expiresAt, now);
  if (!left || !expiresAt) return null;
  return (
    <span className={`time-left${left.ms < 60_000 ? ' soon' : ''}`}>
      <ClockIcon />
      <time dateTime={expiresAt} title={`Expires ${new Date(expiresAt).toLocaleString()}`}>
        {left.label}
      </time>
    </span>
  );
}

/** True once `expiresAt` has passed (the server's withdrawal follows). */
export function useExpired(expiresAt: string | null | undefined): boolean {
  const now = useNow();
  const left = timeLeft(expiresAt, now);
  return left !== null && left.ms === 0;
}
