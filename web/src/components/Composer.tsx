import { useEffect, useLayoutEffect, useRef, useState, type FormEvent, type KeyboardEvent } from 'react';
import type { BusyPolicy } from '../gql/graphql';
import { describeError } from '../lib/errors';
import { busyPolicyLabel, MESSAGE_POLICIES } from '../lib/policies';
import { SendIcon, SteerIcon } from './icons';

const MAX_HEIGHT = 220;

/**
 * The message box: Enter sends, Shift+Enter starts a new line. The text is cleared when
 * sending starts and put back if the message was not accepted. While the agent works
 * (`busy`), a Steer button sends the message to the working agent, and a choice says what
 * the next message does (the chat's policy unless chosen; back to it once sent).
 */
export function Composer({
  onSend,
  placeholder = 'Message the agent…',
  autoFocus,
  busy = false,
  defaultPolicy,
}: {
  onSend: (text: string, busyPolicy: BusyPolicy | null) => Promise<void>;
  placeholder?: string;
  autoFocus?: boolean;
  busy?: boolean;
  /** The chat's busy policy, named in the choice that keeps it. */
  defaultPolicy?: BusyPolicy;
}) {
  const [text, setText] = useState('');
  const [sending, setSending] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [policy, setPolicy] = useState<BusyPolicy | ''>('');
  const area = useRef<HTMLTextAreaElement>(null);

  useLayoutEffect(() => {
    const el = area.current;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(el.scrollHeight, MAX_HEIGHT)}px`;
  }, [text]);

  useEffect(() => {
    if (autoFocus) area.current?.focus();
  }, [autoFocus]);

  async function send(how: BusyPolicy | null = policy || null) {
    const content = text.trim();
    if (!content || sending) return;
    setSending(true);
    setError(null);
    setText('');
    try {
      await onSend(content, how);
      setPolicy('');
    } catch (e) {
      setError(describeError(e));
      setText((t) => (t === '' ? content : t));
    } finally {
      setSending(false);
      area.current?.focus();
    }
  }

  function onKeyDown(e: KeyboardEvent<HTMLTextAreaElement>) {
    if (e.key === 'Enter' && !e.shiftKey && !e.altKey && !e.ctrlKey && !e.metaKey && !e.nativeEvent.isComposing) {
      e.preventDefault();
      void send();
    }
  }

  function onSubmit(e: FormEvent) {
    e.preventDefault();
    void send();
  }

  return (
    <form className="composer" onSubmit={onSubmit} aria-label="Send a message">
      {error && (
        <p className="composer-error" role="alert">
          {error}
        </p>
      )}
      <div className="composer-box">
        <label htmlFor="composer-input" className="visually-hidden">
          Message
        </label>
        <textarea
          id="composer-input"
          ref={area}
          rows={1}
          value={text}
          placeholder={placeholder}
          aria-describedby="composer-hint"
          onChange={(e) => setText(e.target.value)}
          onKeyDown={onKeyDown}
        />
        {busy && (
          <button
            type="button"
            className="btn small steer-btn"
            title="Send this to the working agent: it reads it at its next step"
            disabled={sending || text.trim() === ''}
            onClick={() => void send('STEER')}
          >
            <SteerIcon /> Steer
          </button>
        )}
        <button
          type="submit"
          className="send-btn"
          aria-label="Send message"
          title="Send (Enter)"
          disabled={sending || text.trim() === ''}
        >
          <SendIcon />
        </button>
      </div>
      <div className="composer-foot">
        <p id="composer-hint" className="hint">
          <kbd>Enter</kbd> to send · <kbd>Shift</kbd>+<kbd>Enter</kbd> for a new line
        </p>
        {busy && (
          <div className="composer-policy">
            <label htmlFor="composer-policy">While the agent works</label>
            <select id="composer-policy" value={policy} onChange={(e) => setPolicy(e.target.value as BusyPolicy | '')}>
              <option value="">Chat default{defaultPolicy ? ` (${busyPolicyLabel(defaultPolicy)})` : ''}</option>
              {MESSAGE_POLICIES.map((p) => (
                <option key={p.value} value={p.value}>
                  {p.label}
                </option>
              ))}
            </select>
          </div>
        )}
      </div>
    </form>
  );
}
