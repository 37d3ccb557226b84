// The agent's Markdown in headless Chromium against the real server: what it renders
// (headings, lists, task lists, tables, code with colours and a copy button, links), what it
// refuses (raw HTML, unsafe links), and a 20,000-word reply streamed word by word, whose
// figures are logged (not asserted: timings depend on the machine) while the test checks
// that what is finally shown is the whole reply.

import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  buildServer,
  currentSessionId,
  freePort,
  lastReply,
  launchFor,
  screenshot,
  sel,
  send,
  skipReason,
  startServer,
  tempDir,
  until,
  waitForReply,
} from './helpers.mjs';
import { formatMetrics, installStreamMetrics, measureUntilShown, resetStreamMetrics } from './stream-metrics.mjs';

const SKIP = skipReason();
if (SKIP) test('Markdown in Chromium', { skip: SKIP }, () => {});

const WORDS = Number(process.env.STREAM_WORDS || 20000);

if (!SKIP) describe('Markdown replies', { timeout: 900_000 }, () => {
  let dir;
  let server;
  let browser;
  let page;

  before(async () => {
    dir = tempDir('talkgraph-e2e-md-');
    const bin = buildServer(dir);
    // 1 ms a word: a 20,000-word reply streams in about 20 s, faster than any model writes.
    server = await startServer({ bin, port: await freePort(), dataDir: path.join(dir, 'data'), env: { DEMO_CHUNK_DELAY: '1ms' } });
    browser = await launchFor(server.url);
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: server.url });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => console.log(`# page error: ${e.message}`));
    await installStreamMetrics(page);
    await page.goto(server.url);
    await page.locator(sel.composer).waitFor();
  });

  after(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    if (dir && !process.env.KEEP_E2E_DATA) rmSync(dir, { recursive: true, force: true });
  });

  async function newChat() {
    await page.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(page);
    await page.locator('.empty-hint').waitFor();
  }

  const reply = () => page.locator(sel.assistant).last().locator('.md');

  test('renders headings, emphasis, lists, task lists, tables, code and links', async () => {
    await send(page, '/markdown 300');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'The end.' });
    const md = reply();
    // "## Section 1" is a heading below the page's own.
    await md.getByRole('heading', { name: 'Section 1', exact: true }).waitFor();
    assert.equal(await md.locator('h3', { hasText: 'Section 1' }).count(), 1);
    assert.equal(await md.locator('strong', { hasText: 'bold words' }).count() > 0, true);
    assert.equal(await md.locator('em', { hasText: 'some emphasis' }).count() > 0, true);
    assert.equal(await md.locator('del', { hasText: 'a struck word' }).count() > 0, true);
    assert.equal(await md.locator(':not(pre) > code', { hasText: 'inline code' }).count() > 0, true);
    await md.locator('ul li', { hasText: 'first point of 1' }).waitFor();
    await md.locator('ul ul li', { hasText: 'a nested point' }).waitFor();
    await md.locator('ol li', { hasText: 'step one' }).waitFor();
    // Task lists: read-only boxes with a name.
    const done = md.getByRole('checkbox', { name: 'Done' }).first();
    assert.equal(await done.isChecked(), true);
    assert.equal(await done.isDisabled(), true);
    assert.equal(await md.getByRole('checkbox', { name: 'Not done' }).first().isChecked(), false);
    // Tables, with the column alignment of the source.
    const table = md.locator('table').first();
    assert.deepEqual(await table.locator('th').allTextContents(), ['name', 'value', 'note']);
    assert.equal(await table.locator('tbody tr').count(), 3);
    // Links open in a new tab, without giving it this page.
    const link = md.getByRole('link', { name: 'a link to example 1', exact: true });
    assert.equal(await link.getAttribute('href'), 'https://example.com/1');
    assert.equal(await link.getAttribute('target'), '_blank');
    assert.equal(await link.getAttribute('rel'), 'noopener noreferrer');
    // Code blocks: coloured by Shiki once it has loaded, with the language and a copy button.
    const go = md.locator('.code-block[data-lang="go"]').first();
    await go.locator('pre.shiki').waitFor();
    assert.equal(await go.locator('.code-lang').textContent(), 'go');
    const coloured = await go.locator('pre.shiki span[style*="color"]').count();
    assert.ok(coloured > 3, `the Go code has coloured tokens (${coloured})`);
    const code = await go.locator('pre').textContent();
    assert.equal(code, 'func add(a, b int) int {\n\treturn a + b\n}');
    await go.getByRole('button', { name: 'Copy' }).click();
    await go.getByRole('button', { name: 'Copied' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), code);
    await screenshot(page, 'markdown');
  });

  test('raw HTML is shown as text and only http(s) and mailto links are links', async () => {
    await newChat();
    await send(
      page,
      'Look: <b>bold?</b> <img src="/nothing.png" onerror="window.__xss = 1"> <script>window.__xss = 2</script> ' +
        '[bad](javascript:window.__xss=3) [data](data:text/html,hi) [relative](#/c/x) [good](https://example.com/ok) [mail](mailto:a@example.com) done',
    );
    await waitForReply(page, { contains: 'done' });
    const md = reply();
    assert.equal(await md.locator('b, img, script').count(), 0, 'no element from raw HTML');
    const text = await lastReply(page);
    assert.ok(text.includes('<b>bold?</b>'), `the HTML is shown as text: ${text}`);
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    const hrefs = await md.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
    assert.deepEqual(hrefs, ['https://example.com/ok', 'mailto:a@example.com']);
    // The refused links keep their text.
    for (const name of ['bad', 'data', 'relative']) await md.locator('.md-link-dropped', { hasText: name }).waitFor();
  });

  test(`a ${WORDS}-word reply streams word by word and the page keeps up`, async () => {
    await newChat();
    await resetStreamMetrics(page);
    await send(page, `/markdown ${WORDS}`);
    const figures = await measureUntilShown(page, { marker: 'The end.' });
    console.log(`# ${formatMetrics(`/markdown ${WORDS}`, figures)}`);
    await waitForReply(page, { contains: 'The end.', timeout: 60_000 });

    // What is shown is the whole reply: as many sections, tables and code blocks as the
    // source has, and the same text as the same reply rendered afresh after a reload.
    const content = await page.evaluate(async (id) => {
      const token = localStorage.getItem('talkgraph.token');
      const res = await fetch('/query', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify({ query: 'query($id: ID!) { session(id: $id) { messages(last: 1) { edges { node { content } } } } }', variables: { id } }),
      });
      return (await res.json()).data.session.messages.edges[0].node.content;
    }, await currentSessionId(page));
    const sections = content.match(/^## Section \d+$/gm).length;
    const fences = content.match(/^```\w+$/gm).length;
    const tables = content.match(/^\| name \| value \| note \|$/gm).length;
    const counts = () =>
      reply().evaluate((md) => ({
        headings: md.querySelectorAll('h3').length,
        code: md.querySelectorAll('.code-block').length,
        tables: md.querySelectorAll('table').length,
        text: md.textContent,
      }));
    const streamed = await counts();
    assert.equal(streamed.headings, sections);
    assert.equal(streamed.code, fences);
    assert.equal(streamed.tables, tables);
    assert.ok(streamed.text.endsWith('The end.'));
    assert.ok(streamed.text.includes(`Paragraph ${sections} has bold words`), 'the last section is there');

    await page.reload();
    await waitForReply(page, { contains: 'The end.', timeout: 60_000 });
    await until(page, 'the reloaded reply', (n) => document.querySelectorAll('article.msg[data-role="ASSISTANT"] .md h3').length === n, sections, 60_000);
    const fresh = await counts();
    assert.deepEqual(fresh, streamed, 'the streamed reply ends as the same reply rendered at once');
  });
});
