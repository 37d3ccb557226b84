// The conversation as a tree, in headless Chromium against the real server and its demo
// agent: edit a message (a new version beside it, "2 / 2") and switch back, regenerate a
// reply, two tabs following each other's branch, fork into a new chat, steer the working
// agent, and queue a message with the per-message choice and cancel it.

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
if (SKIP) test('the conversation as a tree in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('the conversation as a tree', { timeout: 600_000 }, () => {
  let app;
  let server;
  let browser;
  let page;

  before(async () => {
    app = await openApp('talkgraph-e2e-tree-');
    ({ server, browser, page } = app);
    await page.goto(server.url);
  });

  after(async () => {
    await app?.close();
  });

  async function newChat(p = page) {
    await p.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(p);
    await p.locator('.empty-hint').waitFor();
    await p.locator(sel.composer).waitFor();
  }

  /** The texts of the conversation shown, oldest first, as "role: text". */
  const shown = (p = page) =>
    p.evaluate(() =>
      [...document.querySelectorAll('article.msg')].map(
        (a) => `${a.dataset.role === 'USER' ? 'user' : 'agent'}: ${(a.querySelector('.msg-body')?.textContent ?? '').trim()}`,
      ),
    );

  /** Waits until the conversation shown is exactly `expected`. */
  async function showsExactly(p, expected, what = JSON.stringify(expected)) {
    try {
      await until(
        p,
        `the conversation ${what}`,
        (exp) => {
          const got = [...document.querySelectorAll('article.msg')].map(
            (a) => `${a.dataset.role === 'USER' ? 'user' : 'agent'}: ${(a.querySelector('.msg-body')?.textContent ?? '').trim()}`,
          );
          const settled = [...document.querySelectorAll('article.msg')].every((a) => a.dataset.status !== 'STREAMING');
          return settled && JSON.stringify(got) === JSON.stringify(exp);
        },
        expected,
      );
    } catch (e) {
      throw new Error(`${e.message}; shown: ${JSON.stringify(await shown(p))}`, { cause: e });
    }
  }

  /** The "n / m" of the versions of the message at `locator`, or null without versions. */
  async function versionOf(locator) {
    const nav = locator.locator('.version-count');
    return (await nav.count()) ? (await nav.textContent()).replace(/\s+/g, ' ').trim() : null;
  }

  /** Edits the user message `locator` to `text` with the inline editor (Save). */
  async function edit(locator, text, { save = 'button' } = {}) {
    await locator.getByRole('button', { name: 'Edit message' }).click();
    const box = locator.getByLabel('New version of your message');
    await box.waitFor();
    await box.fill(text);
    if (save === 'enter') await box.press('Enter');
    else await locator.getByRole('button', { name: 'Save' }).click();
  }

  test('edit a message: a new branch with "2 / 2", and back to the old one', async () => {
    await newChat();
    await send(page, 'first question');
    await waitForReply(page, { contains: 'You said: first question' });
    await send(page, 'and a follow-up');
    await waitForReply(page, { contains: 'You said: and a follow-up' });

    // Edit the first message: the branch below it is replaced by the new version's.
    const first = page.locator(sel.user).first();
    await edit(first, 'second question');
    await showsExactly(page, ['user: second question', 'agent: You said: second question']);
    assert.equal(await versionOf(page.locator(sel.user).first()), '2 / 2');
    assert.equal(await versionOf(page.locator(sel.assistant).first()), null, 'the reply has no other version');
    await screenshot(page, 'tree-edited');

    // Previous version: the old branch, with its follow-up, comes back.
    await page.locator(sel.user).first().getByRole('button', { name: 'Previous version' }).click();
    await showsExactly(page, [
      'user: first question',
      'agent: You said: first question',
      'user: and a follow-up',
      'agent: You said: and a follow-up',
    ]);
    assert.equal(await versionOf(page.locator(sel.user).first()), '1 / 2');
    // At the first version, Previous is off and Next goes forward again.
    assert.ok(await page.locator(sel.user).first().getByRole('button', { name: 'Previous version' }).isDisabled());
    await page.locator(sel.user).first().getByRole('button', { name: 'Next version' }).click();
    await showsExactly(page, ['user: second question', 'agent: You said: second question']);

    // A reload shows the branch the server keeps current.
    await page.reload();
    await showsExactly(page, ['user: second question', 'agent: You said: second question']);
    assert.equal(await versionOf(page.locator(sel.user).first()), '2 / 2');
  });

  test('edit: Escape cancels and changes nothing; Enter saves', async () => {
    await newChat();
    await send(page, 'keep me');
    await waitForReply(page, { contains: 'You said: keep me' });
    const msg = page.locator(sel.user).first();
    await msg.getByRole('button', { name: 'Edit message' }).click();
    const box = msg.getByLabel('New version of your message');
    await box.fill('not this');
    await box.press('Escape');
    await box.waitFor({ state: 'detached' });
    assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Edit message', 'the focus goes back to Edit');
    await showsExactly(page, ['user: keep me', 'agent: You said: keep me']);
    assert.equal(await versionOf(msg), null);

    await edit(msg, 'this instead', { save: 'enter' });
    await showsExactly(page, ['user: this instead', 'agent: You said: this instead']);
    assert.equal(await versionOf(page.locator(sel.user).first()), '2 / 2');
  });

  /** Sets the open chat's busy policy through the settings dialog. */
  async function setBusyPolicy(name) {
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const dialog = page.getByRole('dialog', { name: 'Chat settings' });
    await dialog.getByRole('radio', { name: new RegExp(`^${name}`) }).check();
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'hidden' });
  }

  test('an edit while the agent works waits in the queue (Queue policy) and switches in its turn', async () => {
    await newChat();
    await setBusyPolicy('Queue');
    await send(page, 'base');
    await waitForReply(page, { contains: 'You said: base' });
    await send(page, '/slow 15');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await edit(page.locator(sel.user).first(), 'base edited');
    // Queued, shown with its text; the branch shown stays until its run starts.
    const queue = page.getByRole('region', { name: /^Queued/ });
    await queue.getByText('base edited').waitFor();
    assert.equal(await page.locator(sel.user).first().locator('.msg-body').textContent(), 'base');
    assert.equal(await page.locator(sel.assistant).last().getAttribute('data-status'), 'STREAMING', 'the agent goes on');
    await showsExactly(page, ['user: base edited', 'agent: You said: base edited']);
    assert.equal(await versionOf(page.locator(sel.user).first()), '2 / 2');
    await queue.waitFor({ state: 'detached' });
  });

  test('versions cannot be switched while the agent works: the server says why', async () => {
    await newChat();
    await send(page, 'v1');
    await waitForReply(page, { contains: 'You said: v1' });
    await edit(page.locator(sel.user).first(), 'v2');
    await showsExactly(page, ['user: v2', 'agent: You said: v2']);
    await send(page, '/slow 30');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await page.locator(sel.user).first().getByRole('button', { name: 'Previous version' }).click();
    await page.locator(sel.user).first().locator('.msg-action-error').waitFor();
    assert.equal(await versionOf(page.locator(sel.user).first()), '2 / 2');
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'detached' });
  });

  test('regenerate a reply: a new version beside it', async () => {
    await newChat();
    await send(page, 'say it again');
    await waitForReply(page, { contains: 'You said: say it again' });
    const before = await page.locator(sel.assistant).first().getAttribute('data-message-id');
    await page.locator(sel.assistant).first().getByRole('button', { name: 'Regenerate reply' }).click();
    await until(
      page,
      'a new reply, "2 / 2"',
      ({ s, before }) => {
        const a = document.querySelector(s);
        return a && a.dataset.messageId !== before && a.dataset.status === 'COMPLETE' && a.querySelector('.version-count')?.textContent.replace(/\s+/g, ' ').trim() === '2 / 2';
      },
      { s: sel.assistant, before },
    );
    await showsExactly(page, ['user: say it again', 'agent: You said: say it again']);
    assert.equal(await page.locator(sel.assistant).count(), 1, 'one reply shown: the new one');
    // The old one is the first version.
    await page.locator(sel.assistant).first().getByRole('button', { name: 'Previous version' }).click();
    await until(page, 'the first reply again', ({ s, before }) => document.querySelector(s)?.dataset.messageId === before, { s: sel.assistant, before });
    assert.equal(await versionOf(page.locator(sel.assistant).first()), '1 / 2');
  });

  test('two tabs: a branch selected in one is followed by the other', async () => {
    await newChat();
    const sessionId = await currentSessionId(page);
    await send(page, 'version one');
    await waitForReply(page, { contains: 'You said: version one' });
    await send(page, 'more on one');
    await waitForReply(page, { contains: 'You said: more on one' });

    const other = await browser.context.newPage();
    try {
      other.on('pageerror', (e) => console.log(`# page error (other tab): ${e.message}`));
      await other.goto(`${server.url}/#/c/${sessionId}`);
      await showsExactly(other, ['user: version one', 'agent: You said: version one', 'user: more on one', 'agent: You said: more on one']);

      // An edit in the first tab: the other follows to the new branch (its messages came
      // with the stream).
      await edit(page.locator(sel.user).first(), 'version two');
      const two = ['user: version two', 'agent: You said: version two'];
      await showsExactly(page, two);
      await showsExactly(other, two);
      assert.equal(await versionOf(other.locator(sel.user).first()), '2 / 2');

      // The other tab goes back to version one: the first tab follows.
      await other.locator(sel.user).first().getByRole('button', { name: 'Previous version' }).click();
      const one = ['user: version one', 'agent: You said: version one', 'user: more on one', 'agent: You said: more on one'];
      await showsExactly(other, one);
      await showsExactly(page, one);
      assert.equal(await versionOf(page.locator(sel.user).first()), '1 / 2');

      // A tab opened on version one follows to version two, whose messages it never loaded.
      const third = await browser.context.newPage();
      try {
        await third.goto(`${server.url}/#/c/${sessionId}`);
        await showsExactly(third, one);
        await page.locator(sel.user).first().getByRole('button', { name: 'Next version' }).click();
        await showsExactly(page, two);
        await showsExactly(third, two);
        await showsExactly(other, two);
      } finally {
        await third.close();
      }
    } finally {
      await other.close();
    }
  });

  test('fork into a new chat: it holds the branch up to the message', async () => {
    await newChat();
    const source = await currentSessionId(page);
    await send(page, 'fork base');
    await waitForReply(page, { contains: 'You said: fork base' });
    await send(page, 'not in the fork');
    await waitForReply(page, { contains: 'You said: not in the fork' });
    const chats = await page.locator('.session-item').count();

    await page.locator(sel.assistant).first().getByRole('button', { name: 'Fork from here' }).click();
    await until(page, 'another chat open', (src) => /^#\/c\//.test(location.hash) && decodeURIComponent(location.hash.slice(4)) !== src, source);
    const forked = await currentSessionId(page);
    assert.notEqual(forked, source);
    await showsExactly(page, ['user: fork base', 'agent: You said: fork base']);
    // Listed first in the sidebar, as the chat open; the source is still there.
    await until(page, 'one more chat in the list', (n) => document.querySelectorAll('.session-item').length === n + 1, chats);
    await page.locator(`.session-item.current .session-link[href="#/c/${forked}"]`).waitFor();
    await page.locator(`.session-link[href="#/c/${source}"]`).waitFor();
    // The fork goes on by itself; the source is unchanged.
    await send(page, 'only in the fork');
    await waitForReply(page, { contains: 'You said: only in the fork' });
    await page.goto(`${server.url}/#/c/${source}`);
    await showsExactly(page, ['user: fork base', 'agent: You said: fork base', 'user: not in the fork', 'agent: You said: not in the fork']);
  });

  test('steer: a message handed to the working agent shows in its reply', async () => {
    await newChat();
    await send(page, '/slow 40');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 2.' });
    await page.locator(sel.composer).fill('go left');
    await page.getByRole('button', { name: 'Steer' }).click();
    await until(
      page,
      'the steer in the reply',
      (s) => [...document.querySelectorAll(s)].some((a) => (a.querySelector('.msg-body')?.textContent ?? '').includes('[steered: go left]')),
      sel.assistant,
      20_000,
    );
    await waitForReply(page, { contains: 'chunk 40.', timeout: 30_000 });
    await screenshot(page, 'tree-steered');
    // The reply is split at the steer: the reply so far, the steer, the continuation.
    const all = await shown(page);
    assert.equal(all.length, 4, JSON.stringify(all));
    assert.equal(all[0], 'user: /slow 40');
    assert.match(all[1], /^agent: chunk 1\. chunk 2\./);
    assert.equal(all[2], 'user: go left');
    assert.match(all[3], /^agent: \[steered: go left\].*chunk 40\.$/);
    // No chunk is lost or repeated across the split.
    assert.equal(
      `${all[1].slice(7)} ${all[3].slice(7).replace('[steered: go left]', '')}`.replace(/\s+/g, ' ').trim(),
      slowText(40),
    );
  });

  test('queue: a message queued with the per-message choice waits and Cancel removes it', async () => {
    await newChat();
    await send(page, '/slow 40');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 2.' });
    const choice = page.getByLabel('While the agent works');
    assert.equal(await choice.inputValue(), '', 'the chat default is chosen');
    await choice.selectOption('ENQUEUE');
    await send(page, 'later please');
    const queue = page.getByRole('region', { name: /^Queued/ });
    await queue.getByText('later please').waitFor();
    await until(page, 'the queued note', (s) => document.querySelector(s)?.textContent?.includes('1 message queued'), sel.status);
    assert.equal(await choice.inputValue(), '', 'the choice goes back to the default once sent');
    assert.equal(await page.locator(sel.assistant).first().getAttribute('data-status'), 'STREAMING', 'the agent goes on');
    await screenshot(page, 'tree-queued');

    await queue.getByRole('button', { name: /^Cancel/ }).click();
    await queue.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'chunk 40.', timeout: 30_000 });
    // The cancelled message got no reply.
    await page.waitForTimeout(500);
    assert.equal(await lastReply(page), slowText(40));
    assert.ok(!(await shown(page)).some((t) => t.includes('You said: later please')));

    // A queued message that is not cancelled is answered after the reply.
    await send(page, '/slow 10');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await page.getByLabel('While the agent works').selectOption('ENQUEUE');
    await send(page, 'my turn');
    await page.getByRole('region', { name: /^Queued/ }).getByText('my turn').waitFor();
    await waitForReply(page, { contains: 'You said: my turn', timeout: 30_000 });
    await page.getByRole('region', { name: /^Queued/ }).waitFor({ state: 'detached' });
  });
});
