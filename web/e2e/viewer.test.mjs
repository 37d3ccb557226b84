// The chat list follows every chat of the user without a reload (viewerEvents), tells of a
// chat not on screen that needs an answer, and the webhooks page adds a webhook and shows
// its deliveries; in headless Chromium against the real server.

import assert from 'node:assert/strict';
import http from 'node:http';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  buildServer,
  currentSessionId,
  freePort,
  launchFor,
  screenshot,
  send,
  skipReason,
  startServer,
  tempDir,
  until,
} from './helpers.mjs';

const SKIP = skipReason();
if (SKIP) test('the chat list in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('the chat list lives from the viewer stream', { timeout: 600_000 }, () => {
  let dir;
  let server;
  let browser;
  let receiver;
  const received = [];
  let arrived = () => {};
  /** Resolves once the receiver has taken n requests; fails after 15 s. */
  const receivedAtLeast = (n) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the receiver took ${received.length} requests, want ${n}`)), 15_000);
      const check = () => {
        if (received.length < n) return;
        clearTimeout(timer);
        resolve();
      };
      const prev = arrived;
      arrived = () => (prev(), check());
      check();
    });

  before(async () => {
    dir = tempDir('talkgraph-viewer-');
    const bin = buildServer(dir);
    // The test's webhook receiver is on the loopback: the server may reach it here.
    server = await startServer({ bin, port: await freePort(), dataDir: path.join(dir, 'data'), env: { WEBHOOK_ALLOW_PRIVATE: 'true' } });
    receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        received.push({ id: req.headers['webhook-id'], signature: req.headers['webhook-signature'], body: JSON.parse(body) });
        res.writeHead(204).end();
        arrived();
      });
    });
    await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    browser = await launchFor(server.url);
    await browser.context.grantPermissions(['notifications'], { origin: server.url });
    // Notifications as the page makes them, recorded where the test reads them.
    await browser.context.addInitScript(() => {
      window.__notes = [];
      window.Notification = class {
        static permission = 'granted';
        static requestPermission = async () => 'granted';
        constructor(title, opts) {
          window.__notes.push({ title, body: opts?.body ?? '' });
        }
        close() {}
      };
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    receiver?.close();
    if (dir && !process.env.KEEP_E2E_DATA) rmSync(dir, { recursive: true, force: true });
  });

  /** The list's entry of a chat, by its title. */
  const entry = (page, title) => page.locator('.session-item', { hasText: title });

  /** Runs a GraphQL operation as the page's guest. */
  async function gql(page, query, variables) {
    const token = await page.evaluate(() => localStorage.getItem('talkgraph.token'));
    const res = await fetch(`${server.url}/query`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    const body = await res.json();
    assert.ok(!body.errors, JSON.stringify(body.errors));
    return body.data;
  }

  test('a chat made and waiting elsewhere shows in the list without a reload', async () => {
    const watching = await browser.context.newPage();
    await watching.goto(server.url);
    await send(watching, 'First chat here');
    await currentSessionId(watching);
    await until(watching, 'the first chat titled', () => document.querySelector('.session-item')?.textContent.includes('First chat here'));

    // Another client of the same user (nobody looks at this chat): a question waits.
    const made = await gql(watching, 'mutation { createTalkSession(input: {title: "Background chat"}) { id } }');
    const sid = made.createTalkSession.id;
    await gql(watching, 'mutation($s: ID!) { addMessage(input: {sessionId: $s, content: "/ask What is your name?"}) { run { id } } }', { s: sid });

    // The tab, which never reloaded, lists it as waiting for its user, new, and was told
    // (the first chat is on screen, not this one).
    await entry(watching, 'Background chat').locator('.waiting-label').waitFor();
    await entry(watching, 'Background chat').locator('.unread-dot').waitFor();
    await until(watching, 'a notification', () => window.__notes.some((n) => n.title.includes('needs your answer') && n.body === 'What is your name?'));
    await screenshot(watching, 'viewer-list-waiting');

    // Read and answered in another tab: the mark goes, and it is idle, in the first tab too.
    const other = await browser.context.newPage();
    await other.goto(`${server.url}/#/c/${sid}`);
    await entry(watching, 'Background chat').locator('.unread-dot').waitFor({ state: 'detached' });
    await other.locator('.question-card').getByLabel('Your answer').fill('Ada');
    await other.locator('.question-card').getByLabel('Your answer').press('Enter');
    await until(watching, 'the chat idle', (t) => {
      const item = [...document.querySelectorAll('.session-item')].find((e) => e.textContent.includes(t));
      return item && !item.querySelector('.waiting-label') && !item.textContent.includes('working');
    }, 'Background chat');

    // Deleted in the other tab, it leaves the first tab's list.
    await entry(other, 'Background chat').getByRole('button', { name: /Delete chat/ }).click();
    await other.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await until(watching, 'the deleted chat gone', (t) => ![...document.querySelectorAll('.session-item')].some((e) => e.textContent.includes(t)), 'Background chat');
    await other.close();
    await watching.close();
  });

  test('the webhooks page adds a webhook, shows its secret once, and lists its deliveries', async () => {
    const page = await browser.context.newPage();
    await page.goto(`${server.url}/#/settings/webhooks`);
    await page.getByRole('heading', { name: 'Add a webhook' }).waitFor();
    const url = `http://127.0.0.1:${receiver.address().port}/hook`;
    await page.getByLabel('URL').fill(url);
    await page.getByLabel('session.created').check();
    await page.getByRole('button', { name: 'Add webhook' }).click();
    const secret = await page.getByLabel('Signing secret').textContent();
    assert.match(secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    await page.getByRole('button', { name: 'Copy' }).waitFor();

    // A new chat: the receiver is sent session.created, and the page lists it delivered.
    await page.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(page);
    await page.goto(`${server.url}/#/settings/webhooks`);
    await until(page, 'a delivered delivery with its code', () => {
      const row = document.querySelector('tr.delivery.delivered');
      return row && row.textContent.includes('session.created') && row.textContent.includes('204');
    }, undefined, 20_000);
    assert.ok(received.some((r) => r.body.type === 'session.created' && r.id?.startsWith('msg_') && r.signature?.startsWith('v1,')));
    await screenshot(page, 'webhooks-page');

    // Redeliver: the receiver gets the same webhook-id again.
    const before = received.length;
    await page.getByRole('button', { name: /^Redeliver session.created/ }).first().click();
    await receivedAtLeast(before + 1);
    assert.equal(received.at(-1).id, received.find((r) => r.body.type === 'session.created').id);
    await page.close();
  });
});
