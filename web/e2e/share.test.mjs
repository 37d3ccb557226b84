// Sharing a conversation, in headless Chromium against the real server and its demo agent:
// the Share dialog makes a live link and a snapshot link; a fresh browser that never
// signed in reads them at /s/<token> (noindex), follows the live one as the owner goes
// on, sees the snapshot stay as it was, loses the live one when it is revoked, and
// continues the snapshot in an account of its own.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { currentSessionId, launchFor, openApp, screenshot, send, skipReason, slowText, until, waitForReply } from './helpers.mjs';

const SKIP = skipReason();
if (SKIP) test('sharing a conversation in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('sharing a conversation', { timeout: 600_000 }, () => {
  let app;
  let page;
  let reader;
  const links = {};

  before(async () => {
    app = await openApp('talkgraph-e2e-share-');
    page = app.page;
    await page.goto(app.server.url);
    await page.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(page);
    await send(page, 'hello readers');
    await waitForReply(page, { contains: 'readers' });
    reader = await launchFor(app.server.url); // a fresh profile: never signed in
  });

  after(async () => {
    await reader?.close();
    await app?.close();
  });

  /** Makes a link in the Share dialog and returns its URL. */
  async function makeLink({ live }) {
    const dialog = page.getByRole('dialog', { name: 'Share this chat' });
    if (!(await dialog.isVisible())) await page.getByRole('button', { name: 'Share' }).click();
    await dialog.waitFor();
    await dialog.getByLabel(live ? /^Live/ : /^Snapshot/).check();
    const made = Object.values(links).filter((v) => typeof v === 'string');
    await dialog.getByRole('button', { name: 'Create link' }).click();
    await until(page, 'the new link in the list', (n) => document.querySelectorAll('.share-link').length === n, made.length + 1);
    // The field shows the link made last: until the new one's answer arrives, it still
    // shows the one before.
    await until(page, "the new link's URL", (old) => {
      const url = document.querySelector('#share-url')?.value;
      return Boolean(url) && !old.includes(url);
    }, made);
    return dialog.locator('#share-url').inputValue();
  }

  async function closeDialog() {
    await page.getByRole('dialog', { name: 'Share this chat' }).getByRole('button', { name: 'Close' }).click();
  }

  test('the Share dialog makes a live link and a snapshot link, and lists them', async () => {
    links.live = await makeLink({ live: true });
    assert.match(links.live, /\/s\/[A-Za-z0-9_-]{43}$/);
    await screenshot(page, 'share-dialog');
    links.snapshot = await makeLink({ live: false });
    const listed = await page.locator('.share-link').allTextContents();
    assert.equal(listed.length, 2);
    assert.ok(listed.some((t) => t.startsWith('Live')) && listed.some((t) => t.startsWith('Snapshot')), listed.join(' | '));
    await closeDialog();
  });

  test('a fresh browser reads the live link without signing in, not indexed, and follows it', async () => {
    const p = await reader.context.newPage();
    const res = await p.goto(links.live);
    assert.match(res.headers()['x-robots-tag'] ?? '', /noindex/);
    assert.equal(await p.locator('meta[name="robots"]').getAttribute('content'), 'noindex, nofollow');
    await p.locator('article.msg').nth(1).waitFor();
    assert.equal(await p.locator('article.msg').count(), 2);
    assert.equal(await p.getByText('Live, read-only').count(), 1);
    assert.equal(await p.locator('#composer-input').count(), 0, 'a reader has no composer');
    assert.equal(await p.evaluate(() => localStorage.getItem('talkgraph.token')), null, 'the reader signed in');
    await send(page, '/slow 4');
    await waitForReply(p, { contains: slowText(4), count: 2 });
    await screenshot(p, 'shared-live');
    links.livePage = p;
  });

  test('the snapshot stays as it was while the chat goes on', async () => {
    const p = await reader.context.newPage();
    await p.goto(links.snapshot);
    await p.locator('article.msg').first().waitFor();
    const before = await p.locator('article.msg').count();
    assert.equal(before, 2);
    await send(page, 'one more');
    await waitForReply(page, { contains: 'more' });
    await p.reload();
    await p.locator('article.msg').first().waitFor();
    assert.equal(await p.locator('article.msg').count(), before);
    assert.equal(await p.getByText('Snapshot, read-only').count(), 1);
    links.snapshotPage = p;
  });

  test('revoking the live link ends it for the reader at once', async () => {
    await page.getByRole('button', { name: 'Share' }).click();
    const dialog = page.getByRole('dialog', { name: 'Share this chat' });
    await dialog.locator('.share-link', { hasText: 'Live' }).getByRole('button', { name: 'Revoke' }).click();
    await dialog.locator('.share-link', { hasText: 'revoked' }).waitFor();
    await closeDialog();
    await links.livePage.getByText('This shared conversation is not available').waitFor();
  });

  test('Continue in my account copies the snapshot into a chat of the reader', async () => {
    const p = links.snapshotPage;
    await p.getByRole('button', { name: 'Continue in my account' }).click();
    await until(p, 'a chat of the reader', () => /^#\/c\//.test(location.hash) && location.pathname === '/');
    await p.locator('article.msg').nth(1).waitFor();
    assert.equal(await p.locator('article.msg').count(), 2);
    assert.ok(await p.evaluate(() => localStorage.getItem('talkgraph.token')), 'the reader has an account now');
    await send(p, 'my own turn');
    await waitForReply(p, { contains: 'turn' });
  });
});
