// Accessibility in headless Chromium against the real server: axe-core (from npm) finds no
// serious or critical violation on a conversation with a Markdown reply, a tool call, an
// approval card, questions and a form, and on one with versions, a message being edited and
// a queue, in light and dark colours; and the chat works with the keyboard alone (no mouse
// click anywhere): send, stop, answer, approve, reject, edit, switch versions, regenerate,
// queue, cancel and steer, with the focus visible.

import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, describe, test } from 'node:test';
import {
  currentSessionId,
  lastReply,
  openApp,
  screenshot,
  sel,
  send,
  skipReason,
  until,
  waitForReply,
} from './helpers.mjs';

const require = createRequire(import.meta.url);
const SKIP = skipReason();
if (SKIP) test('accessibility in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('accessibility', { timeout: 600_000 }, () => {
  let app;
  let server;
  let page;

  before(async () => {
    app = await openApp('talkgraph-e2e-a11y-');
    ({ server, page } = app);
  });

  after(async () => {
    await app?.close();
  });

  /** Types a message and sends it with Enter, from wherever the focus is in the composer. */
  async function type(text) {
    const where = await page.evaluate(() => document.activeElement?.outerHTML.slice(0, 120));
    await until(page, `the message box to have the focus (it is on ${where})`, () => document.activeElement?.id === 'composer-input');
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  }

  /** The focused element: its accessible name (roughly), tag and whether its outline shows. */
  const focused = () =>
    page.evaluate(() => {
      const el = document.activeElement;
      return {
        tag: el?.tagName.toLowerCase(),
        name: (el?.getAttribute('aria-label') || el?.textContent || '').trim(),
        id: el?.id,
        outline: el ? getComputedStyle(el).outlineStyle !== 'none' && parseFloat(getComputedStyle(el).outlineWidth) > 0 : false,
      };
    });

  /** Runs axe-core on the page and fails on serious or critical violations. */
  async function axe(label) {
    if (!(await page.evaluate(() => 'axe' in window))) {
      await page.addScriptTag({ path: require.resolve('axe-core/axe.min.js') });
    }
    const result = await page.evaluate(() =>
      window.axe.run(document, { resultTypes: ['violations'], runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] } }),
    );
    const all = result.violations.map((v) => `${v.impact} ${v.id} (${v.nodes.length}): ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`);
    const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
    console.log(`# axe-core ${window_version(result)} on ${label}: ${result.violations.length} violations${all.length ? `: ${all.join('; ')}` : ''}`);
    for (const v of bad) for (const n of v.nodes.slice(0, 3)) console.log(`#   ${n.target.join(' ')}: ${n.failureSummary?.replace(/\s+/g, ' ')}`);
    assert.deepEqual(bad.map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`), [], `axe on ${label}`);
  }
  const window_version = (r) => r.testEngine?.version ?? '';

  /** Colours switched by a media change have finished their transitions. */
  const settled = () =>
    until(page, 'colour transitions to end', () => document.getAnimations().every((a) => !(a instanceof CSSTransition) || a.playState === 'finished'));

  /** axe in light and dark colours (reduced motion: no colour transitions half-way). */
  async function axeBoth(label) {
    await page.emulateMedia({ colorScheme: 'light', reducedMotion: 'reduce' });
    await settled();
    await axe(`${label} (light)`);
    await page.emulateMedia({ colorScheme: 'dark', reducedMotion: 'reduce' });
    await settled();
    await axe(`${label} (dark)`);
    await page.emulateMedia({ colorScheme: 'light', reducedMotion: 'no-preference' });
  }

  test('axe-core finds no serious or critical violation', async () => {
    await page.goto(server.url);
    await axeBoth('the start page');

    await type('/markdown 150');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'The end.' });
    await page.locator('.code-block pre.shiki').first().waitFor();
    await type('/tool checked by axe');
    await waitForReply(page, { contains: 'The echo tool printed' });
    await page.locator('.tool-call .tool-head').last().click();
    await page.locator(sel.composer).focus();
    await type('/approve something risky');
    const card = page.locator(sel.approval);
    await card.waitFor();
    await axeBoth('a reply, a tool call and an approval card');
    await card.getByRole('button', { name: 'Edit' }).click();
    await card.getByLabel('Arguments (JSON)').fill('{"text": 1}');
    await card.getByRole('button', { name: 'Approve with these arguments' }).click();
    await card.locator('.field-error').waitFor();
    await axe('an approval card with an error at its box');
    await card.getByRole('button', { name: 'Cancel' }).click();
    await card.getByRole('button', { name: 'Approve', exact: true }).click();
    await waitForReply(page, { contains: 'The echo tool printed: something risky' });

    await page.locator(sel.composer).focus();
    await type('/ask-many 2');
    await until(page, 'two questions', (s) => document.querySelectorAll(s).length === 2, sel.question);
    await axeBoth('two questions waiting');
    for (const prompt of ['Question 1 of 2', 'Question 2 of 2']) {
      const q = page.locator(sel.question, { hasText: prompt });
      await q.getByLabel('Your answer').fill('fine');
      await q.getByLabel('Your answer').press('Enter');
      await q.waitFor({ state: 'detached' });
    }
    await waitForReply(page, { contains: 'Your answers:' });

    await page.locator(sel.composer).focus();
    await type('/form');
    const form = page.locator(sel.question, { hasText: 'Who are you?' });
    await form.getByLabel(/^age/).fill('-1');
    await form.getByRole('button', { name: 'Send answer' }).click();
    await form.locator('.error-detail').first().waitFor();
    await axeBoth('a form with errors at its fields');
    await screenshot(page, 'a11y-form');

    await page.getByRole('button', { name: 'Chat settings' }).click();
    await page.getByRole('dialog', { name: 'Chat settings' }).getByRole('combobox', { name: /echo/ }).waitFor();
    await axe('the settings dialog');
    await page.keyboard.press('Escape');

    // A chat paused by its token budget, with the form that raises it.
    await page.getByRole('button', { name: 'Chat settings' }).click();
    await page.getByRole('dialog', { name: 'Chat settings' }).getByLabel('Token budget').fill('1');
    await page.getByRole('dialog', { name: 'Chat settings' }).getByRole('button', { name: 'Save' }).click();
    await page.getByRole('dialog', { name: 'Chat settings' }).waitFor({ state: 'detached' });
    await page.locator(sel.composer).focus();
    await type('paused by its budget');
    await page.locator('.budget-pause').getByRole('button', { name: 'Raise the budget' }).waitFor();
    await axeBoth('a chat paused by its token budget');
    await page.getByRole('button', { name: 'Stop' }).click();

    // The schedules page, with a schedule and its history.
    await page.getByRole('link', { name: 'Schedules' }).click();
    await page.locator('.schedule-form').getByLabel('Message').fill('checked by axe');
    await page.locator('.schedule-form .cron-next').waitFor();
    await page.getByRole('button', { name: 'Create schedule' }).click();
    const schedule = page.locator('.schedule-card', { hasText: 'checked by axe' });
    await schedule.getByRole('button', { name: 'Run now' }).click();
    await schedule.locator('.fire').first().waitFor();
    await axeBoth('the schedules page');
  });

  test('keyboard only: send, stop, answer, approve and reject, the focus visible', async () => {
    await page.goto(server.url);
    // Enter sends; Shift+Enter starts a new line.
    await until(page, 'the message box to have the focus', () => document.activeElement?.id === 'composer-input');
    await page.keyboard.type('first line');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('second line');
    await page.keyboard.press('Enter');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'second line' });
    assert.equal(await lastReply(page), 'You said: first line\nsecond line');

    // Stop: the button is in the tab order just before the message box.
    await type('/slow 100');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 2.' });
    await page.keyboard.press('Shift+Tab');
    let f = await focused();
    assert.equal(f.name, 'Stop');
    assert.ok(f.outline, 'the focused Stop button shows its outline');
    await page.keyboard.press('Enter');
    await until(page, 'the reply to stop', (s) => {
      const all = document.querySelectorAll(s);
      return all[all.length - 1]?.dataset.status === 'INTERRUPTED';
    }, sel.assistant);
    // The Stop button has gone, and the focus is back in the message box.
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');

    // Escape stops too, from the message box.
    await type('/slow 100');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 2.' });
    await page.keyboard.press('Escape');
    await until(page, 'Escape to stop the reply', (s) => {
      const all = document.querySelectorAll(s);
      return all[all.length - 1]?.dataset.status === 'INTERRUPTED';
    }, sel.assistant);

    // A question: its answer box is just before the message box.
    await type('/ask Which colour?');
    await page.locator(sel.question).waitFor();
    await page.keyboard.press('Shift+Tab');
    f = await focused();
    assert.equal(f.tag, 'input');
    assert.ok(f.outline, 'the answer box shows the focus');
    await page.keyboard.type('Green');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'Thank you!' });
    assert.equal(await lastReply(page), 'You answered "Green". Thank you!');
    // The answered card has gone and the focus with it to the message box.
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');

    // An approval: Shift+Tab walks back over Reject and Edit to Approve.
    await type('/approve by keyboard');
    await page.locator(sel.approval).waitFor();
    await page.keyboard.press('Shift+Tab');
    assert.equal((await focused()).name, 'Reject');
    await page.keyboard.press('Shift+Tab');
    assert.equal((await focused()).name, 'Edit');
    await page.keyboard.press('Shift+Tab');
    f = await focused();
    assert.equal(f.name, 'Approve');
    assert.ok(f.outline, 'the focused Approve button shows its outline');
    await screenshot(page, 'keyboard-approve');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'The echo tool printed: by keyboard' });
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');

    // Reject with a reason: Reject opens the reason box with the focus in it; Enter sends.
    await type('/approve not this');
    await page.locator(sel.approval).waitFor();
    await page.keyboard.press('Shift+Tab');
    assert.equal((await focused()).name, 'Reject');
    await page.keyboard.press('Enter');
    await until(page, 'the reason box to have the focus', () => document.activeElement?.closest('.approval-reject') !== null);
    await page.keyboard.type('by keyboard, no');
    await until(page, 'the reason typed in the box', () => document.activeElement?.value === 'by keyboard, no');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'did not run' });
    assert.equal(await lastReply(page), 'The echo tool did not run: the user rejected this call: by keyboard, no');
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');
  });

  /** Presses Shift+Tab (or Tab) until the focused element's name matches; fails after `max` presses. */
  async function tabTo(name, { back = true, max = 25 } = {}) {
    const seen = [];
    for (let i = 0; i < max; i++) {
      await page.keyboard.press(back ? 'Shift+Tab' : 'Tab');
      const f = await focused();
      seen.push(f.name || f.tag);
      if (typeof name === 'string' ? f.name === name : name.test(f.name)) return f;
    }
    throw new Error(`no ${name} within ${max} ${back ? 'Shift+Tab' : 'Tab'} presses; the focus went over ${JSON.stringify(seen)}`);
  }

  const versionText = (locator) => locator.locator('.version-count').textContent().then((t) => t.replace(/\s+/g, ' ').trim());

  test('axe-core on versions, a message being edited, the policy choice and a queue', async () => {
    await page.goto(server.url);
    await send(page, 'axe one');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'You said: axe one' });
    // Versions of a message and of a reply.
    const first = page.locator(sel.user).first();
    await first.getByRole('button', { name: 'Edit message' }).click();
    await first.getByLabel('New version of your message').fill('axe two');
    await first.getByRole('button', { name: 'Save' }).click();
    await waitForReply(page, { contains: 'You said: axe two' });
    await page.locator(sel.assistant).first().getByRole('button', { name: 'Regenerate reply' }).click();
    await until(page, 'a second version of the reply', (s) => document.querySelector(`${s} .version-count`)?.textContent.includes('2'), sel.assistant);
    await waitForReply(page, { contains: 'You said: axe two' });
    // The agent at work, with a message queued behind it.
    await send(page, '/slow 60');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await page.getByLabel('While the agent works').selectOption('ENQUEUE');
    await send(page, 'queued for axe');
    await page.getByRole('region', { name: /^Queued/ }).getByText('queued for axe').waitFor();
    await axeBoth('versions, the policy choice, Steer and a queue');
    await screenshot(page, 'a11y-tree');
    // A message being edited.
    await page.locator(sel.user).first().getByRole('button', { name: 'Edit message' }).click();
    await page.getByLabel('New version of your message').waitFor();
    await axe('a message being edited');
    await page.keyboard.press('Escape');
    await page.getByLabel('New version of your message').waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Stop' }).click();
    await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'detached' });
  });

  test('keyboard only: edit, versions, regenerate, queue and cancel, steer', async () => {
    await page.goto(server.url);
    await type('typed by keyboard');
    await currentSessionId(page);
    await waitForReply(page, { contains: 'You said: typed by keyboard' });
    await until(page, 'the focus in the message box', () => document.activeElement?.id === 'composer-input');

    // Edit: Shift+Tab back to the message's Edit button; Enter opens the box with the focus
    // in it; Enter saves; the focus comes back to the message box.
    let f = await tabTo('Edit message');
    assert.ok(f.outline, 'the focused Edit button shows its outline');
    await page.keyboard.press('Enter');
    await until(page, 'the focus in the edit box', () => document.activeElement?.id?.startsWith('edit-'));
    f = await focused();
    assert.ok(f.outline, 'the edit box shows the focus');
    await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.type('edited by keyboard');
    await screenshot(page, 'keyboard-edit');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'You said: edited by keyboard' });
    assert.equal(await versionText(page.locator(sel.user).first()), '2 / 2');
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');

    // Versions: Previous version, and the focus stays on the versions as they change.
    f = await tabTo('Previous version');
    assert.ok(f.outline, 'the focused Previous version button shows its outline');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'You said: typed by keyboard' });
    assert.equal(await versionText(page.locator(sel.user).first()), '1 / 2');
    await until(page, 'the focus on Next version', () => document.activeElement?.getAttribute('aria-label') === 'Next version');
    await page.keyboard.press('Enter');
    await waitForReply(page, { contains: 'You said: edited by keyboard' });
    await until(page, 'the focus on Previous version', () => document.activeElement?.getAttribute('aria-label') === 'Previous version');

    // Regenerate: Tab on to the reply's button.
    await tabTo('Regenerate reply', { back: false });
    await page.keyboard.press('Enter');
    await until(page, 'a second version of the reply', (s) => document.querySelector(`${s} .version-count`)?.textContent.replace(/\s+/g, ' ').trim() === '2 / 2', sel.assistant);
    await waitForReply(page, { contains: 'You said: edited by keyboard' });

    // Queue a message with the choice next to Send, then cancel it, by keyboard.
    await page.locator(sel.composer).focus();
    await type('/slow 60');
    await waitForReply(page, { status: 'STREAMING', contains: 'chunk 1.' });
    await page.keyboard.type('queued by keyboard');
    // Tab: Steer, Send, then the choice.
    for (let i = 0; i < 3; i++) await page.keyboard.press('Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'composer-policy');
    assert.ok((await focused()).outline, 'the focused choice shows its outline');
    await page.keyboard.type('Q'); // "Queue it", by its first letter
    assert.equal(await page.locator('#composer-policy').inputValue(), 'ENQUEUE');
    await page.keyboard.press('Shift+Tab'); // Send
    await page.keyboard.press('Shift+Tab'); // Steer
    await page.keyboard.press('Shift+Tab'); // the message box
    await page.keyboard.press('Enter');
    await page.getByRole('region', { name: /^Queued/ }).getByText('queued by keyboard').waitFor();
    f = await tabTo(/^Cancel/);
    assert.ok(f.outline, 'the focused Cancel button shows its outline');
    await page.keyboard.press('Enter');
    await page.getByRole('region', { name: /^Queued/ }).waitFor({ state: 'detached' });
    await until(page, 'the focus back in the message box', () => document.activeElement?.id === 'composer-input');

    // Steer: the button after the message box.
    await page.keyboard.type('steered by keyboard');
    f = await tabTo('Steer', { back: false, max: 2 });
    assert.ok(f.outline, 'the focused Steer button shows its outline');
    await page.keyboard.press('Enter');
    await until(page, 'the steer in the reply', (s) =>
      [...document.querySelectorAll(s)].some((a) => (a.querySelector('.msg-body')?.textContent ?? '').includes('[steered: steered by keyboard]')), sel.assistant, 20_000);
    await page.keyboard.press('Escape');
    await page.getByRole('button', { name: 'Stop' }).waitFor({ state: 'detached' });
  });
});
