// The server is killed and started again (same port, same data) while the page stays open.

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

const SKIP = skipReason();
// Without Chromium, playwright-core or Go, one skipped test says why.
if (SKIP) test('server restart in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('server restart', { timeout: 300_000 }, () => {
  let dir;
  let bin;
  let port;
  let server;
  let browser;

  before(async () => {
    dir = tempDir('talkgraph-e2e-restart-');
    bin = buildServer(dir);
    port = await freePort();
    server = await startServer({ bin, port, dataDir: path.join(dir, 'data') });
    browser = await launchFor(server.url);
  });

  after(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    if (dir && !process.env.KEEP_E2E_DATA) rmSync(dir, { recursive: true, force: true });
  });

  test('the page reconnects by itself and a new message streams', async () => {
    const page = await browser.context.newPage();
    await page.goto(server.url);
    await send(page, 'before the restart');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'before the restart' });
    const tokenBefore = await page.evaluate(() => localStorage.getItem('talkgraph.token'));

    // A crash: no goodbye to the websocket.
    await server.stop('SIGKILL');
    await page.getByText('Connection lost. Reconnecting…').waitFor();
    await screenshot(page, 'reconnecting');

    server = await startServer({ bin, port, dataDir: path.join(dir, 'data'), logName: 'server-restarted' });
    await page.getByText('Connection lost. Reconnecting…').waitFor({ state: 'detached', timeout: 30_000 });

    const words = Array.from({ length: 30 }, (_, i) => `w${i + 1}`).join(' ');
    await send(page, `after the restart ${words}`);
    await until(
      page,
      'the new reply to stream',
      (s) => {
        const all = document.querySelectorAll(s);
        const last = all[all.length - 1];
        return last?.dataset.status === 'STREAMING' && last.textContent.includes('after the restart');
      },
      sel.assistant,
    );
    await waitForReply(page, { contains: 'w30' });
    assert.equal(await lastReply(page), `You said: after the restart ${words}`);
    // Nothing doubled: two exchanges, two replies.
    assert.equal(await page.locator(sel.user).count(), 2);
    assert.equal(await page.locator(sel.assistant).count(), 2);
    // The same identity: the token survived the restart.
    assert.equal(await page.evaluate(() => localStorage.getItem('talkgraph.token')), tokenBefore);
    await page.close();
  });

  test('a question asked before a restart can be answered after it', async () => {
    const page = await browser.context.newPage();
    await page.goto(server.url);
    await send(page, '/ask Still there after the restart?');
    await currentSessionId(page);
    await page.locator(sel.question).getByText('Still there after the restart?').waitFor();

    await server.stop('SIGKILL');
    await page.getByText('Connection lost. Reconnecting…').waitFor();
    server = await startServer({ bin, port, dataDir: path.join(dir, 'data'), logName: 'server-restarted-2' });
    await page.getByText('Connection lost. Reconnecting…').waitFor({ state: 'detached', timeout: 30_000 });

    const form = page.locator(sel.question);
    await form.getByLabel('Your answer').fill('Yes');
    await form.getByRole('button', { name: 'Answer' }).click();
    await form.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'Thank you!' });
    assert.equal(await lastReply(page), 'You answered "Yes". Thank you!');
    await page.close();
  });

  test('a reply cut by a crash is settled after the restart and the chat goes on', async () => {
    const page = await browser.context.newPage();
    await page.goto(server.url);
    await send(page, '/slow 200');
    await currentSessionId(page);
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 3.' });

    await server.stop('SIGKILL');
    await page.getByText('Connection lost. Reconnecting…').waitFor();
    server = await startServer({ bin, port, dataDir: path.join(dir, 'data'), logName: 'server-restarted-3' });
    await page.getByText('Connection lost. Reconnecting…').waitFor({ state: 'detached', timeout: 30_000 });

    // The run the crash cut short ends one way or another; the page learns it from the stream.
    await until(
      page,
      'the cut reply to stop streaming',
      (s) => {
        const all = document.querySelectorAll(s);
        return all.length > 0 && all[all.length - 1].dataset.status !== 'STREAMING';
      },
      sel.assistant,
      30_000,
    );
    const text = await lastReply(page);
    assert.ok(text.startsWith('chunk 1. chunk 2. chunk 3.'), `the text written before the crash is kept: ${text}`);
    await send(page, 'after the crash');
    await waitForReply(page, { contains: 'You said: after the crash' });
    await page.close();
  });
});
