import { useEffect, useState } from 'react';
import type { ThemedToken } from 'shiki/core';
import { highlight, languageOf } from '../../lib/highlight';
import { CopyIcon } from '../icons';

/**
 * A fenced code block: the code as plain text at once, coloured by Shiki once it and the
 * language's grammar have loaded (not while the block is still being written), with a copy
 * button.
 */
export function CodeBlock({ code, info, final }: { code: string; info?: string; final: boolean }) {
  const lang = languageOf(info);
  const [colored, setColored] = useState<{ code: string; tokens: ThemedToken[][] } | null>(null);

  useEffect(() => {
    if (!final || !lang) return;
    let cancelled = false;
    highlight(code, lang).then(
      (tokens) => {
        if (!cancelled) setColored({ code, tokens });
      },
      () => {
        // No colours: the plain text stays.
      },
    );
    return () => {
      cancelled = true;
    };
  }, [code, lang, final]);

  const tokens = colored?.code === code ? colored.tokens : null;
  return (
    <div className="code-block" data-lang={info || undefined}>
      <div className="code-head">
        <span className="code-lang">{info || 'text'}</span>
        <CopyButton text={code} />
      </div>
      {/* Focusable: a long line scrolls sideways, and keyboard users can scroll it. */}
      <pre tabIndex={0} className={tokens ? 'shiki' : undefined}>
        <code>
          {tokens
            ? tokens.map((line, i) => (
                <span className="line" key={i}>
                  {line.map((t, j) => (
                    <span key={j} style={t.htmlStyle as React.CSSProperties}>
                      {t.content}
                    </span>
                  ))}
                  {i < tokens.length - 1 ? '\n' : null}
                </span>
              ))
            : code}
        </code>
      </pre>
    </div>
  );
}

async function copyText(text: string) {
  if (navigator.clipboard?.writeText) {
    try {
      await navigator.clipboard.writeText(text);
      return;
    } catch {
      // Refused (no permission, not a secure context): the older way below.
    }
  }
  const area = document.createElement('textarea');
  area.value = text;
  area.setAttribute('readonly', '');
  area.style.position = 'fixed';
  area.style.opacity = '0';
  document.body.appendChild(area);
  area.select();
  const ok = document.execCommand('copy');
  area.remove();
  if (!ok) throw new Error('copy refused');
}

function CopyButton({ text }: { text: string }) {
  const [state, setState] = useState<'idle' | 'copied' | 'failed'>('idle');
  useEffect(() => {
    if (state === 'idle') return;
    const t = setTimeout(() => setState('idle'), 2000);
    return () => clearTimeout(t);
  }, [state]);
  return (
    <button
      type="button"
      className="copy-btn"
      onClick={() => copyText(text).then(() => setState('copied'), () => setState('failed'))}
    >
      <CopyIcon />
      <span aria-live="polite">{state === 'copied' ? 'Copied' : state === 'failed' ? 'Copy failed' : 'Copy'}</span>
    </button>
  );
}
