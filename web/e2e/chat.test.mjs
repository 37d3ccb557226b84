// The chat app in headless Chromium against the real server and its demo agent.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  currentSessionId,
  lastReply,
  openApp,
  screenshot,
  sel,
  send,
  skipReason,
  slowText,
  until,
  waitForReply,
} from './helpers.mjs';

const SKIP = skipReason();
// Without Chromium, playwright-core or Go, one skipped test says why.
if (SKIP) test('chat app in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('chat app', { timeout: 600_000 }, () => {
  let app;
  let server;
  let browser;
  let page;

  before(async () => {
    app = await openApp('talkgraph-e2e-');
    ({ server, browser, page } = app);
  });

  after(async () => {
    await app?.close();
  });

  /** Opens a new chat from the sidebar and waits for its empty conversation. */
  async function newChat(p = page) {
    await p.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(p);
    await p.locator('.empty-hint').waitFor();
    await p.locator(sel.composer).waitFor();
  }

  test('signs in as a guest and shows the start page', async () => {
    await page.goto(server.url);
    await page.getByRole('heading', { name: 'What would you like to talk about?' }).waitFor();
    const token = await page.evaluate(() => localStorage.getItem('talkgraph.token'));
    assert.ok(token && token.split('.').length === 3, 'a JWT is kept in localStorage');
    await page.getByRole('navigation', { name: 'Chats' }).waitFor();
    await page.getByRole('main').waitFor();
  });

  test('sends a message and sees the reply stream in', async () => {
    const words = Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' ');
    await send(page, `Hello ${words}`);
    await currentSessionId(page);
    // While the reply streams: partial text, the working status and the Stop button.
    await until(
      page,
      'a partly streamed reply',
      ({ s, status }) => {
        const all = document.querySelectorAll(s);
        const last = all[all.length - 1];
        const text = last?.querySelector('.msg-body')?.textContent ?? '';
        return (
          last?.dataset.status === 'STREAMING' &&
          text.startsWith('You said:') &&
          !text.includes('word40') &&
          document.querySelector(status)?.textContent?.includes('Agent is working')
        );
      },
      { s: sel.assistant, status: sel.status },
    );
    await page.getByRole('button', { name: 'Stop' }).waitFor();
    await screenshot(page, 'streaming');
    await waitForReply(page, { contains: 'word40' });
    assert.equal(await lastReply(page), `You said: Hello ${words}`);
    await until(page, 'the status line to clear', (s) => document.querySelector(s)?.textContent === '', sel.status);
    assert.equal(await page.getByRole('button', { name: 'Stop' }).count(), 0);
    // The new chat is listed in the sidebar, titled after the first message.
    await page.locator('.session-item.current .session-title', { hasText: 'Hello word1' }).waitFor();
  });

  test('Shift+Enter makes a new line and Enter sends', async () => {
    await newChat();
    const box = page.locator(sel.composer);
    await box.focus();
    await page.keyboard.type('first line');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('second line');
    assert.equal(await box.inputValue(), 'first line\nsecond line');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'second line' });
    assert.equal(await lastReply(page), 'You said: first line\nsecond line');
    assert.equal(await box.inputValue(), '');
  });

  test('text beyond the Basic Multilingual Plane streams intact (offsets in code points)', async () => {
    await newChat();
    const text = 'Emoji 😀 then 𝄞 music, 👩‍💻 coder, ✓ check, 🇫🇷 flag and 你好 done';
    await send(page, text);
    await waitForReply(page, { contains: 'done' });
    assert.equal(await lastReply(page), `You said: ${text}`);
  });

  test('asks a question and goes on with the answer', async () => {
    await newChat();
    await send(page, '/ask What is your favourite colour?');
    const form = page.locator(sel.question);
    await form.getByText('What is your favourite colour?').waitFor();
    await until(page, '"Waiting for your answer"', (s) =>
      document.querySelector(s)?.textContent?.includes('Waiting for your answer'), sel.status);
    await screenshot(page, 'question');
    await form.getByLabel('Your answer').fill('Blue');
    await form.getByRole('button', { name: 'Answer' }).click();
    await form.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'Thank you!' });
    assert.equal(await lastReply(page), 'You answered "Blue". Thank you!');
    // Question and answer stay in the history.
    await page.locator('article.msg.kind-question', { hasText: 'What is your favourite colour?' }).waitFor();
    await page.locator('article.msg.kind-answer', { hasText: 'Blue' }).waitFor();
  });

  test('Stop ends a long reply and keeps what was written', async () => {
    await newChat();
    await send(page, '/slow 100');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 3.' });
    await page.getByRole('button', { name: 'Stop' }).click();
    await until(
      page,
      'the reply to end',
      (s) => {
        const all = document.querySelectorAll(s);
        const last = all[all.length - 1];
        return last && last.dataset.status !== 'STREAMING';
      },
      sel.assistant,
    );
    await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'detached' });
    const text = await lastReply(page);
    assert.ok(text.startsWith(slowText(3)), `the partial reply is kept: ${text}`);
    assert.ok(!text.includes('chunk 100.'), 'the reply stopped early');
    const status = await page.locator(sel.assistant).last().getAttribute('data-status');
    assert.equal(status, 'INTERRUPTED');
    await page.locator(sel.assistant).last().getByText('interrupted').waitFor();
    await screenshot(page, 'stopped');
  });

  test('a reload in the middle of a reply shows it complete, without repeats', async () => {
    await newChat();
    await send(page, '/slow 40');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 5.' });
    await page.reload();
    await page.locator(sel.assistant).first().waitFor();
    await waitForReply(page, { contains: 'chunk 40.', timeout: 30_000 });
    assert.equal(await lastReply(page), slowText(40));
    assert.equal(await page.locator(sel.assistant).count(), 1);
  });

  test('a dropped connection resumes after the last event seen', async () => {
    await newChat();
    const sessionId = await currentSessionId(page);
    // Route the app's websocket through the test to watch its subscriptions and cut it.
    const sockets = [];
    await page.routeWebSocket(/\/query$/, (ws) => {
      const server = ws.connectToServer();
      const sent = [];
      sockets.push({ ws, sent });
      ws.onMessage((m) => {
        sent.push(JSON.parse(String(m)));
        server.send(m);
      });
    });
    await page.reload();
    await page.locator('.empty-hint').waitFor();
    await send(page, '/slow 40');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 8.' });
    assert.equal(sockets.length, 1, 'one websocket so far');
    // 1012 "service restart": the client reconnects by itself.
    await sockets[0].ws.close({ code: 1012, reason: 'test drop' });
    await waitForReply(page, { contains: 'chunk 40.', timeout: 30_000 });
    assert.equal(await lastReply(page), slowText(40));
    assert.ok(sockets.length >= 2, 'the client opened a new websocket');

    const subscribes = (s) =>
      s.sent.filter((m) => m.type === 'subscribe' && m.payload?.variables?.sessionId === sessionId);
    const first = subscribes(sockets[0]);
    const resumed = subscribes(sockets[1]);
    assert.equal(first.length, 1);
    assert.equal(resumed.length, 1, 'the stream was subscribed again on the new socket');
    assert.ok(first[0].payload.variables.after, 'the first subscription starts after the loaded history');
    assert.notEqual(
      resumed[0].payload.variables.after,
      first[0].payload.variables.after,
      'the resumed subscription starts after the last event seen, not at the start',
    );
    const auth = sockets[1].sent.find((m) => m.type === 'connection_init')?.payload?.Authorization;
    assert.match(auth ?? '', /^Bearer \S+/);
    await page.unrouteAll({ behavior: 'ignoreErrors' }).catch(() => {});
    await page.reload();
  });

  test('two tabs on one chat stay in sync', async () => {
    await newChat();
    const sessionId = await currentSessionId(page);
    const other = await browser.context.newPage();
    try {
      await other.goto(`${server.url}/#/c/${sessionId}`);
      await other.locator('.empty-hint').waitFor();
      await send(page, '/ask Pick a number');
      await page.locator(sel.question).getByText('Pick a number').waitFor();
      await other.locator(sel.question).getByText('Pick a number').waitFor();
      // Answering in the second tab clears the form in the first.
      const form = other.locator(sel.question);
      await form.getByLabel('Your answer').fill('7');
      await form.getByLabel('Your answer').press('Enter');
      await page.locator(sel.question).waitFor({ state: 'detached' });
      await other.locator(sel.question).waitFor({ state: 'detached' });
      await waitForReply(page, { contains: 'Thank you!' });
      await waitForReply(other, { contains: 'Thank you!' });
      assert.equal(await lastReply(page), 'You answered "7". Thank you!');
      assert.equal(await lastReply(other), 'You answered "7". Thank you!');
      // A message typed in one tab appears in the other.
      await send(other, 'hello from the other tab');
      await waitForReply(page, { contains: 'hello from the other tab' });
    } finally {
      await other.close();
    }
  });

  /** Sets the open chat's busy policy through the settings dialog. */
  async function setBusyPolicy(name) {
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const dialog = page.getByRole('dialog', { name: 'Chat settings' });
    await dialog.getByRole('radio', { name: new RegExp(name) }).check();
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'hidden' });
  }

  test('a new message while the agent works interrupts it (the default)', async () => {
    await newChat();
    await send(page, '/slow 50');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 2.' });
    await send(page, 'never mind');
    await waitForReply(page, { contains: 'You said: never mind' });
    const first = page.locator(sel.assistant).first();
    assert.equal(await first.getAttribute('data-status'), 'INTERRUPTED');
    assert.ok(!(await first.textContent()).includes('chunk 50.'));
  });

  test('with the Queue policy a new message waits its turn', async () => {
    await newChat();
    await setBusyPolicy('Queue');
    await send(page, '/slow 15');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await send(page, 'my turn next');
    await until(page, 'the queued note', (s) =>
      document.querySelector(s)?.textContent?.includes('1 message queued'), sel.status);
    await waitForReply(page, { contains: 'You said: my turn next', timeout: 30_000 });
    const first = page.locator(sel.assistant).first();
    assert.equal(await first.getAttribute('data-status'), 'COMPLETE');
    assert.equal(await first.locator('.msg-body').textContent(), slowText(15));
  });

  test('with the Reject policy a message sent while busy is refused and kept in the box', async () => {
    await newChat();
    await setBusyPolicy('Reject');
    await send(page, '/slow 30');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await send(page, 'too early');
    await page.locator('.composer-error', { hasText: 'still working' }).waitFor();
    assert.equal(await page.locator(sel.composer).inputValue(), 'too early');
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'detached' });
    await page.locator(sel.composer).press('Enter');
    await waitForReply(page, { contains: 'You said: too early' });
    assert.equal(await page.locator('.composer-error').count(), 0);
  });

  test('a chat deleted in one tab says so in the other', async () => {
    await newChat();
    await send(page, 'short-lived');
    await waitForReply(page, { contains: 'short-lived' });
    const sessionId = await currentSessionId(page);
    const other = await browser.context.newPage();
    try {
      await other.goto(`${server.url}/#/c/${sessionId}`);
      await waitForReply(other, { contains: 'short-lived' });
      await page.locator('.session-item.current').getByRole('button', { name: /^Delete chat/ }).click();
      await page.getByRole('dialog', { name: 'Delete this chat?' }).getByRole('button', { name: 'Delete' }).click();
      await other.getByText('This chat does not exist').waitFor({ timeout: 20_000 });
    } finally {
      await other.close();
    }
  });

  test('shows tool calls with arguments, output and result', async () => {
    await newChat();
    await send(page, '/tool alpha beta gamma');
    const call = page.locator('.tool-call').last();
    await call.locator('.tool-name', { hasText: 'echo' }).waitFor();
    await waitForReply(page, { contains: 'The echo tool printed: alpha beta gamma' });
    const head = call.locator('.tool-head');
    if ((await head.getAttribute('aria-expanded')) !== 'true') await head.click();
    await call.locator('.tool-args', { hasText: 'alpha beta gamma' }).waitFor();
    await call.locator('.tool-output', { hasText: 'alpha beta gamma' }).waitFor();
    await call.locator('.tool-result', { hasText: 'alpha beta gamma' }).waitFor();
    await call.locator('.tool-status', { hasText: 'done' }).waitFor();
  });

  const FAIL_REASON = 'The demo agent failed, as you asked.';

  /** Waits for the last assistant message to be FAILED and show why. */
  async function failedWithReason(p = page) {
    const failed = p.locator(sel.assistant).last();
    await until(p, 'a failed reply', (s) => {
      const all = document.querySelectorAll(s);
      return all[all.length - 1]?.dataset.status === 'FAILED';
    }, sel.assistant);
    await failed.locator('.badge.error', { hasText: 'failed' }).waitFor();
    await failed.locator('.run-error', { hasText: FAIL_REASON }).waitFor();
  }

  test('a failure started from the start page says why, also after a reload', async () => {
    await page.goto(server.url);
    await page.getByRole('heading', { name: 'What would you like to talk about?' }).waitFor();
    await send(page, '/fail');
    await currentSessionId(page);
    await failedWithReason();
    await screenshot(page, 'failed');
    await page.reload();
    await failedWithReason();
    assert.equal(await page.locator(sel.assistant).count(), 1);
  });

  test('a failure in an existing chat says why, also after a reload, and the chat goes on', async () => {
    await newChat();
    await send(page, 'before the failure');
    await waitForReply(page, { contains: 'before the failure' });
    await send(page, '/fail');
    await failedWithReason();
    // Only the failed message carries a reason.
    assert.equal(await page.locator('.run-error').count(), 1);
    await page.reload();
    await failedWithReason();
    assert.equal(await page.locator(sel.assistant).first().getAttribute('data-status'), 'COMPLETE');
    await send(page, 'still there?');
    await waitForReply(page, { contains: 'still there?' });
    await page.locator('.run-error', { hasText: FAIL_REASON }).waitFor();
  });

  test('renames, configures and deletes chats', async () => {
    await newChat();
    const sessionId = await currentSessionId(page);
    const item = page.locator('.session-item.current');
    await item.getByRole('button', { name: /^Rename chat/ }).click();
    const input = page.getByLabel(/^New title for/);
    await input.fill('Renamed by the test');
    await input.press('Enter');
    await page.locator('.session-item.current .session-title', { hasText: 'Renamed by the test' }).waitFor();
    await page.getByRole('heading', { level: 1, name: 'Renamed by the test' }).waitFor();

    // Settings: the agents come from the server; the busy policy is saved.
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const dialog = page.getByRole('dialog', { name: 'Chat settings' });
    await dialog.waitFor();
    await dialog.locator('#settings-agent option[value="demo"]').waitFor({ state: 'attached' });
    await dialog.getByLabel('Model').fill('test-model');
    await dialog.getByLabel('System prompt').fill('Be brief.');
    await dialog.getByRole('radio', { name: /Queue/ }).check();
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await page.locator('.agent-chip', { hasText: 'test-model' }).waitFor();
    await page.reload();
    await page.getByRole('button', { name: 'Chat settings' }).click();
    await dialog.waitFor();
    assert.equal(await dialog.getByLabel('Model').inputValue(), 'test-model');
    assert.equal(await dialog.getByLabel('System prompt').inputValue(), 'Be brief.');
    assert.ok(await dialog.getByRole('radio', { name: /Queue/ }).isChecked());
    await page.keyboard.press('Escape');
    await dialog.waitFor({ state: 'hidden' });

    // Delete, after confirming.
    await page.locator('.session-item.current').getByRole('button', { name: /^Delete chat/ }).click();
    const confirm = page.getByRole('dialog', { name: 'Delete this chat?' });
    await confirm.getByRole('button', { name: 'Delete' }).click();
    await until(page, 'the start page', () => location.hash === '#/' || location.hash === '');
    await page.locator(`.session-link[href="#/c/${sessionId}"]`).waitFor({ state: 'detached' });
    await page.goto(`${server.url}/#/c/${sessionId}`);
    await page.getByText('This chat does not exist').waitFor();
  });

  test('works at 375 px wide with the chat list behind a button', async () => {
    await page.setViewportSize({ width: 375, height: 740 });
    try {
      await page.goto(server.url);
      const menu = page.getByRole('button', { name: 'Chats' });
      await menu.waitFor();
      assert.equal(await menu.getAttribute('aria-expanded'), 'false');
      assert.equal(await page.locator('#sidebar').isVisible(), false, 'the list is hidden');
      await menu.click();
      await page.locator('#sidebar').waitFor({ state: 'visible' });
      await until(page, 'the drawer to slide in', () => {
        const r = document.getElementById('sidebar').getBoundingClientRect();
        return r.left >= 0 && r.right <= 375;
      });
      assert.equal(await menu.getAttribute('aria-expanded'), 'true');
      assert.match(await page.evaluate(() => document.activeElement?.className ?? ''), /new-chat/,
        'the opened list takes the focus');
      await screenshot(page, 'mobile-menu');
      await page.keyboard.press('Escape');
      await page.locator('#sidebar').waitFor({ state: 'hidden' });
      assert.equal(await page.evaluate(() => document.activeElement?.id), 'menu-button', 'focus goes back');
      await send(page, 'Hello from a phone');
      await waitForReply(page, { contains: 'Hello from a phone' });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth > window.innerWidth);
      assert.equal(overflow, false, 'nothing is wider than the screen');
      await screenshot(page, 'mobile-chat');
    } finally {
      await page.setViewportSize({ width: 1200, height: 820 });
    }
  });

  test('keyboard only: skip link, composer, visible focus', async () => {
    await page.goto(server.url);
    await page.locator(sel.composer).waitFor();
    // The skip link is the first stop in the tab order and shows itself when focused.
    const firstFocusable = await page.evaluate(
      () => document.querySelector('a[href], button, input, textarea, select')?.className,
    );
    assert.equal(firstFocusable, 'skip-link');
    await page.locator('.skip-link').focus();
    const box = await page.locator('.skip-link').boundingBox();
    assert.ok(box && box.y >= 0, 'the focused skip link is on screen');
    await page.keyboard.press('Enter');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'composer-input');
    await page.keyboard.type('hi');
    await page.keyboard.press('Tab');
    const focused = await page.evaluate(() => {
      const el = document.activeElement;
      return { label: el?.getAttribute('aria-label'), outline: el ? getComputedStyle(el).outlineStyle : 'none' };
    });
    assert.equal(focused.label, 'Send message');
    assert.notEqual(focused.outline, 'none', 'the focused button shows an outline');
    await page.keyboard.press('Enter');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'You said: hi' });
  });

  test('a refused token is replaced by a new guest sign-in', async () => {
    await page.goto(server.url);
    await page.locator(sel.composer).waitFor();
    await page.evaluate(() => localStorage.setItem('talkgraph.token', 'not-a-valid.token.at-all'));
    await page.reload();
    await send(page, 'new identity');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'You said: new identity' });
    const token = await page.evaluate(() => localStorage.getItem('talkgraph.token'));
    assert.notEqual(token, 'not-a-valid.token.at-all');
    assert.equal(token.split('.').length, 3);
    // Only this identity's chats are listed.
    await until(page, 'one chat in the list', () => document.querySelectorAll('.session-item').length === 1);
  });

  test('a good-looking state for the README', async () => {
    await page.setViewportSize({ width: 1280, height: 860 });
    try {
      await page.goto(server.url);
      await send(page, 'Hello! What can you do?');
      await currentSessionId(page);
      await waitForReply(page, { contains: 'What can you do?' });
      await send(page, '/tool Tools report their output as they run');
      await waitForReply(page, { contains: 'The echo tool printed' });
      await send(page, '/ask Which topping would you like on your pizza?');
      await page.locator(sel.question).waitFor();
      await page.locator(sel.question).getByLabel('Your answer').fill('Mushrooms and olives');
      // The chat list follows: this chat needs an answer.
      await page.locator('.session-item.current .session-meta', { hasText: 'waiting for you' }).waitFor();
      await page.mouse.move(0, 0);
      await screenshot(page, 'overview');
      // The whole app fits the window: header and composer in view, only the messages scroll.
      const fits = await page.evaluate(() => {
        const bar = document.querySelector('.topbar').getBoundingClientRect();
        const box = document.querySelector('.composer-box').getBoundingClientRect();
        return bar.top >= 0 && box.bottom <= window.innerHeight && document.scrollingElement.scrollTop === 0;
      });
      assert.ok(fits, 'the header and the message box are both on screen');
      // Reduced motion turns colour transitions off, so the picture shows the dark colours.
      await page.emulateMedia({ colorScheme: 'dark', reducedMotion: 'reduce' });
      await screenshot(page, 'overview-dark');
      await page.emulateMedia({ colorScheme: 'light', reducedMotion: 'no-preference' });
      await page.locator(sel.question).getByRole('button', { name: 'Answer' }).click();
      await waitForReply(page, { contains: 'Thank you!' });
    } finally {
      await page.setViewportSize({ width: 1200, height: 820 });
    }
  });
});
