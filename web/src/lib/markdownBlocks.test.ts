import { createElement } from 'react';
import { renderToStaticMarkup } from 'react-dom/server';
import ReactMarkdown from 'react-markdown';
import remarkGfm from 'remark-gfm';
import { describe, expect, it } from 'vitest';
import { BlockSplitter, splitBlocks } from './markdownBlocks';

const html = (md: string) =>
  renderToStaticMarkup(createElement(ReactMarkdown, { remarkPlugins: [remarkGfm] }, md)).replace(/>\s+</g, '><').trim();

const DOC = `# Title

A paragraph with **bold**, *em*, ~~gone~~ and \`code\`, and [a link](https://example.com).
Its second line.

- tight one
- tight two
  - nested

1. loose one

2. loose two

   continued inside item two

- [x] done
- [ ] open

| a | b |
| --- | ---: |
| 1 | 2 |

\`\`\`go
func main() {

	fmt.Println("blank lines inside a fence")

}
\`\`\`

    indented code

    still indented code

> quoted

> another quote

Setext heading
---

~~~
tilde fence

~~~

The end.`;

describe('Markdown blocks', () => {
  it('rendered block by block, a document is what it is rendered whole', () => {
    const { done, open } = splitBlocks(DOC);
    expect(done.length).toBeGreaterThan(8);
    expect([...done, open].map(html).join('')).toBe(html(DOC));
  });

  it('fences, loose lists and indented continuations stay in one block', () => {
    const { done, open } = splitBlocks(DOC);
    const blocks = [...done, open];
    const fence = DOC.slice(DOC.indexOf('```go'), DOC.indexOf('```\n', DOC.indexOf('```go') + 3) + 3);
    expect(blocks.some((b) => b.startsWith('```go') && b.includes(fence))).toBe(true);
    expect(blocks.some((b) => b.includes('1. loose one\n\n2. loose two\n\n   continued inside item two'))).toBe(true);
    expect(blocks.some((b) => b.includes('    indented code\n\n    still indented code'))).toBe(true);
    expect(blocks.some((b) => b.startsWith('~~~\ntilde fence\n\n~~~'))).toBe(true);
    expect(blocks).toContain('> quoted\n');
  });

  it('fed chunk by chunk, it ends where a whole split does, and finished blocks never change', () => {
    const whole = splitBlocks(DOC);
    for (const size of [1, 3, 7, 40]) {
      const s = new BlockSplitter();
      let text = '';
      let seen: string[] = [];
      for (let i = 0; i < DOC.length; i += size) {
        text = DOC.slice(0, i + size);
        const { done, open } = s.split(text);
        expect(done.slice(0, seen.length)).toEqual(seen);
        expect(done.join('').length + open.length).toBeLessThanOrEqual(text.length);
        seen = done;
      }
      expect(s.split(text)).toEqual(whole);
    }
  });

  it('hands out the same arrays while nothing changed (memoised blocks stay put)', () => {
    const s = new BlockSplitter();
    const a = s.split('one\n\ntwo');
    const b = s.split('one\n\ntwo and');
    expect(b.done).toBe(a.done);
    expect(b.open).toBe('two and');
    expect(s.split('one\n\ntwo and')).toBe(b);
  });

  it('starts over when the text is not a continuation', () => {
    const s = new BlockSplitter();
    s.split('first\n\nsecond\n\nthird');
    expect(s.split('other\n\nthing')).toEqual({ done: ['other\n'], open: 'thing' });
  });

  it('does not split a text with reference definitions, which apply everywhere', () => {
    const md = 'See [the docs][d].\n\nMore text.\n\n[d]: https://example.com/docs';
    expect(splitBlocks(md)).toEqual({ done: [], open: md });
    expect(html(splitBlocks(md).open)).toContain('href="https://example.com/docs"');
  });
});
