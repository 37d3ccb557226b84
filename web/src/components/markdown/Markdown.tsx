import { memo, useDeferredValue, useMemo, useState, type ReactNode } from 'react';
import ReactMarkdown, { type Components, type ExtraProps } from 'react-markdown';
import remarkGfm from 'remark-gfm';
import { safeHref } from '../../lib/links';
import { BlockSplitter } from '../../lib/markdownBlocks';
import { CodeBlock } from './CodeBlock';

type HastNode = { type: string; value?: string; tagName?: string; properties?: Record<string, unknown>; children?: HastNode[] };

function textOf(node: HastNode | undefined): string {
  if (!node) return '';
  if (node.type === 'text') return node.value ?? '';
  return (node.children ?? []).map(textOf).join('');
}

function Link({ href, children }: React.JSX.IntrinsicElements['a'] & ExtraProps) {
  // urlTransform has already dropped what is not http(s) or mailto.
  if (!href) return <span className="md-link-dropped">{children}</span>;
  return (
    <a href={href} target="_blank" rel="noopener noreferrer">
      {children}
    </a>
  );
}

/** Images are not loaded from wherever an agent points: they show as a link. */
function Image({ src, alt }: React.JSX.IntrinsicElements['img'] & ExtraProps) {
  const label = alt || 'image';
  if (typeof src !== 'string' || !src) return <span>[{label}]</span>;
  return (
    <a href={src} target="_blank" rel="noopener noreferrer">
      [image: {label}]
    </a>
  );
}

/** Task list boxes: read-only, named for screen readers. */
function Input({ type, checked }: React.JSX.IntrinsicElements['input'] & ExtraProps) {
  if (type !== 'checkbox') return null;
  return <input type="checkbox" checked={Boolean(checked)} disabled readOnly aria-label={checked ? 'Done' : 'Not done'} />;
}

function Table({ children }: React.JSX.IntrinsicElements['table'] & ExtraProps) {
  return (
    // Wide tables scroll sideways inside the message; the box takes the focus to scroll.
    <div className="table-wrap" tabIndex={0} role="group" aria-label="Table">
      <table>{children}</table>
    </div>
  );
}

// A reply's headings sit below the page's own (the chat's title is the h1).
const shifted = (Tag: 'h2' | 'h3' | 'h4' | 'h5' | 'h6') =>
  function Heading({ children }: { children?: ReactNode }) {
    return <Tag>{children}</Tag>;
  };

function components(final: boolean): Components {
  return {
    a: Link,
    img: Image,
    input: Input,
    table: Table,
    h1: shifted('h2'),
    h2: shifted('h3'),
    h3: shifted('h4'),
    h4: shifted('h5'),
    h5: shifted('h6'),
    h6: shifted('h6'),
    pre({ node }) {
      const code = (node as HastNode | undefined)?.children?.find((c) => c.tagName === 'code');
      const cls = code?.properties?.className;
      const lang = (Array.isArray(cls) ? cls : [])
        .map(String)
        .find((c) => c.startsWith('language-'))
        ?.slice('language-'.length);
      return <CodeBlock code={textOf(code).replace(/\n$/, '')} info={lang} final={final} />;
    },
  };
}

const FINAL = components(true);
const OPEN = components(false);
const PLUGINS = [remarkGfm];
const urlTransform = (url: string) => safeHref(url);

/** One block of Markdown, parsed again only when its text changes. */
const Block = memo(function Block({ text, final }: { text: string; final: boolean }) {
  return (
    <ReactMarkdown remarkPlugins={PLUGINS} components={final ? FINAL : OPEN} urlTransform={urlTransform}>
      {text}
    </ReactMarkdown>
  );
});

/**
 * An agent's reply as Markdown (GitHub's flavour: tables, task lists, strikethrough), with
 * no raw HTML. While it streams, the finished blocks are parsed once and only the last one
 * again as chunks arrive, and React may skip renders it cannot keep up with
 * (useDeferredValue), so a long reply costs the same per chunk at its end as at its start.
 */
export function Markdown({ text, streaming }: { text: string; streaming: boolean }) {
  const [splitter] = useState(() => new BlockSplitter());
  const shown = useDeferredValue(text);
  const { done, open } = useMemo(() => splitter.split(shown), [splitter, shown]);
  return (
    <div className="md" data-rendered-length={shown.length}>
      {done.map((b, i) => (
        <Block key={i} text={b} final />
      ))}
      {open && <Block key={done.length} text={open} final={!streaming} />}
    </div>
  );
}
