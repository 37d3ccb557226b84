// The GraphQL playground at /playground, in headless Chromium against the real server,
// with every host but the server's blocked: it must work offline (no CDN).

import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { buildServer, freePort, launchBrowser, screenshot, skipReason, startServer, tempDir, until } from './helpers.mjs';

const SKIP = skipReason();
if (SKIP) test('playground in Chromium', { skip: SKIP }, () => {});

const SUBSCRIPTION = `subscription Follow($sessionId: ID!, $after: String) {
  messageStream(sessionId: $sessionId, after: $after) {
    __typename
    cursor
    ... on MessageChunk { messageId offset delta }
    ... on MessageCompleted { message { id role status content } }
    ... on RunStatusChanged { run { id status } }
  }
}`;

if (!SKIP) describe('playground', { timeout: 300_000 }, () => {
  let dir;
  let server;
  let browser;
  let page;
  const offHost = []; // requests to any other host, which the page must not make
  const requests = [];
  const sockets = [];

  before(async () => {
    dir = tempDir('talkgraph-e2e-playground-');
    const bin = buildServer(dir);
    server = await startServer({ bin, port: await freePort(), dataDir: path.join(dir, 'data') });
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => console.log(`# page error: ${e.message}`));
    const origin = new URL(server.url).origin;
    // The network is the server and nothing else: anything else is refused and noted.
    await page.route(
      (url) => url.origin !== origin,
      (route) => {
        offHost.push(route.request().url());
        return route.abort('blockedbyclient');
      },
    );
    page.on('request', (r) => requests.push(r));
    page.on('websocket', (ws) => {
      const frames = [];
      sockets.push({ url: ws.url(), frames });
      ws.on('framesent', (f) => frames.push({ dir: 'sent', payload: String(f.payload) }));
      ws.on('framereceived', (f) => frames.push({ dir: 'received', payload: String(f.payload) }));
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop('SIGTERM');
    if (dir && !process.env.KEEP_E2E_DATA) rmSync(dir, { recursive: true, force: true });
  });

  /** Opens the playground with `query` (and variables) in the active tab. */
  async function open(query, variables) {
    const params = new URLSearchParams({ query });
    if (variables) params.set('variables', JSON.stringify(variables));
    await page.goto(`${server.url}/playground?${params}`);
    await page.locator('.graphiql-container').waitFor();
    await page.locator('.graphiql-query-editor .view-lines').waitFor();
  }

  const response = () => page.locator('.graphiql-response').innerText();

  async function run() {
    await page.getByRole('button', { name: /^Execute query/ }).click();
  }

  /** The GraphQL API as the playground's user, from Node. */
  async function api(token, query, variables) {
    const res = await fetch(`${server.url}/query`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
      body: JSON.stringify({ query, variables }),
    });
    const body = await res.json();
    assert.equal(body.errors, undefined, JSON.stringify(body.errors));
    return body.data;
  }

  /** A chat with one demo exchange; answers its id and the cursor before the exchange. */
  async function chatWithReply(token, text) {
    const { createTalkSession: s } = await api(token, 'mutation { createTalkSession { id streamCursor } }');
    await api(token, 'mutation($i: AddMessageInput!) { addMessage(input: $i) { run { id } } }', {
      i: { sessionId: s.id, content: text },
    });
    return s;
  }

  async function results() {
    return Number(await page.locator('.pg-activity').getAttribute('data-results'));
  }

  let token;
  let viewerId;

  test('opens offline and signs in as a guest', async () => {
    await page.goto(`${server.url}/playground`);
    await page.locator('.graphiql-container').waitFor({ timeout: 20_000 });
    await page.getByText('Not signed in').waitFor();
    // The default tab shows the example round trip.
    await until(page, 'the example in the editor', () =>
      document.querySelector('.graphiql-query-editor')?.textContent?.includes('createTalkSession'));
    await page.getByRole('button', { name: 'Sign in as guest' }).click();
    await page.getByText(/^Signed in as /).waitFor();
    viewerId = await page.locator('.pg-who').getAttribute('data-viewer');
    token = await page.evaluate(() => localStorage.getItem('talkgraph.playground.token'));
    assert.ok(token && token.split('.').length === 3, 'a JWT is kept under the playground key');
    assert.ok(viewerId);
    await screenshot(page, 'playground');
  });

  test('runs { viewer { id } } with the token', async () => {
    await open('{ viewer { id } }');
    await run();
    await until(page, 'the viewer id in the response', (id) =>
      document.querySelector('.graphiql-response')?.textContent?.includes(id), viewerId);
    assert.match(await response(), /"viewer"/);
    assert.doesNotMatch(await response(), /UNAUTHENTICATED/);
    // The schema loaded (introspection passed the server's depth limit): the docs show it.
    await page.locator('[aria-label="Show Documentation Explorer"]').click();
    const docs = page.locator('.graphiql-doc-explorer');
    await docs.getByText('Query', { exact: true }).first().waitFor();
    await docs.getByText('Query', { exact: true }).first().click();
    await docs.getByText('messageStream').or(docs.getByText('viewer')).first().waitFor();
  });

  for (const transport of ['WebSocket', 'Server-sent events']) {
    test(`runs a subscription over ${transport}`, async () => {
      const chat = await chatWithReply(token, `hello over ${transport}`);
      await open(SUBSCRIPTION, { sessionId: chat.id, after: chat.streamCursor });
      await page.getByRole('radio', { name: transport }).check();
      const before = { requests: requests.length, sockets: sockets.length };
      await run();
      // The stored exchange replays: the user's message, the reply in chunks, the run's end.
      await until(page, 'several events', () =>
        Number(document.querySelector('.pg-activity')?.getAttribute('data-results')) >= 5, undefined, 20_000);
      await until(page, 'an event in the response', () =>
        /"messageStream"/.test(document.querySelector('.graphiql-response')?.textContent ?? ''));
      // Then live ones: a new message in the chat arrives while the subscription runs.
      const replayed = await results();
      await api(token, 'mutation($i: AddMessageInput!) { addMessage(input: $i) { run { id } } }', {
        i: { sessionId: chat.id, content: 'a live one' },
      });
      await until(page, 'live events', (n) =>
        Number(document.querySelector('.pg-activity')?.getAttribute('data-results')) > n, replayed, 20_000);
      await until(page, 'the live reply in the response', () =>
        /a live one|RunStatusChanged|MessageCompleted|MessageChunk/.test(document.querySelector('.graphiql-response')?.textContent ?? ''));
      const over = await page.locator('.pg-activity').getAttribute('data-transport');
      assert.equal(over, transport === 'WebSocket' ? 'ws' : 'sse');
      await screenshot(page, `playground-${over}`);

      if (transport === 'WebSocket') {
        const ws = sockets.slice(before.sockets).find((s) => s.url.endsWith('/query'));
        assert.ok(ws, 'a websocket to /query');
        const init = ws.frames.find((f) => f.dir === 'sent' && JSON.parse(f.payload).type === 'connection_init');
        assert.equal(JSON.parse(init.payload).payload.Authorization, `Bearer ${token}`);
        assert.ok(ws.frames.some((f) => f.dir === 'received' && JSON.parse(f.payload).type === 'next'));
      } else {
        const sse = requests
          .slice(before.requests)
          .find((r) => r.method() === 'POST' && r.headers().accept === 'text/event-stream');
        assert.ok(sse, 'a POST /query asking for text/event-stream');
        assert.equal(sse.headers().authorization, `Bearer ${token}`);
        assert.match(sse.headers()['content-type'], /application\/json/);
      }
      // The run button stops the subscription.
      await page.getByRole('button', { name: /^Stop/ }).click();
      await page.getByText(/ended after/).waitFor();
    });
  }

  test('asked nothing of any other host', () => {
    assert.deepEqual(offHost, []);
    const origin = new URL(server.url).origin;
    assert.deepEqual(requests.map((r) => r.url()).filter((u) => !u.startsWith(origin) && !u.startsWith('data:') && !u.startsWith('blob:')), []);
    for (const s of sockets) assert.ok(s.url.startsWith(origin.replace(/^http/, 'ws')), s.url);
  });
});
