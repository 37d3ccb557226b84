// Human in the loop in the chat app, in headless Chromium against the real server and its
// demo agent: approval cards (approve, edit, reject), several inputs at once, questions with
// a form, expiry, and tool policies in the settings.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  currentSessionId,
  freePort,
  lastReply,
  openApp,
  screenshot,
  sel,
  send,
  skipReason,
  startServer,
  until,
  waitForReply,
} from './helpers.mjs';

const SKIP = skipReason();
if (SKIP) test('human in the loop in Chromium', { skip: SKIP }, () => {});

/** The text of the nth input card's time-left label. */
const timeLeftOf = (card) => card.locator('.time-left time').textContent();

if (!SKIP) describe('human in the loop', { timeout: 600_000 }, () => {
  let app;
  let dir;
  let bin;
  let server;
  let browser;
  let page;

  before(async () => {
    app = await openApp('talkgraph-e2e-hitl-');
    ({ dir, bin, server, browser, page } = app);
    await page.goto(server.url);
    await page.locator(sel.composer).waitFor();
  });

  after(async () => {
    await app?.close();
  });

  async function newChat(p = page) {
    await p.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(p);
    await p.locator('.empty-hint').waitFor();
  }

  /** The last tool call in the conversation, expanded. */
  async function lastCall() {
    const call = page.locator('.tool-call').last();
    const head = call.locator('.tool-head');
    if ((await head.getAttribute('aria-expanded')) !== 'true') await head.click();
    return call;
  }

  test('approve: the call waits with its name and arguments, and runs once approved', async () => {
    await newChat();
    await send(page, '/approve hello world');
    const card = page.locator(sel.approval);
    await card.waitFor();
    await card.locator('.tool-name', { hasText: 'echo' }).waitFor();
    // The arguments, pretty-printed.
    assert.equal(await card.locator('.approval-args').textContent(), '{\n  "text": "hello world"\n}');
    await until(page, '"Waiting for your approval"', (s) => document.querySelector(s)?.textContent?.includes('Waiting for your approval'), sel.status);
    // The call shows in the message, awaiting approval.
    await page.locator('.tool-call .tool-status', { hasText: 'awaiting approval' }).waitFor();
    await screenshot(page, 'approval');
    await card.getByRole('button', { name: 'Approve', exact: true }).click();
    await card.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'The echo tool printed: hello world' });
    const call = await lastCall();
    await call.locator('[data-approval="approved"]', { hasText: 'approved' }).waitFor();
    await call.locator('.tool-status', { hasText: 'done' }).waitFor();
    await call.locator('.tool-output', { hasText: 'hello world' }).waitFor();
  });

  test('edit then approve: the arguments are checked as JSON and against the schema, at the field', async () => {
    await newChat();
    await send(page, '/approve original text');
    const card = page.locator(sel.approval);
    await card.getByRole('button', { name: 'Edit' }).click();
    const box = card.getByLabel('Arguments (JSON)');
    assert.equal(await box.evaluate((el) => el === document.activeElement), true, 'the box takes the focus');
    assert.equal(await box.inputValue(), '{\n  "text": "original text"\n}');

    // Not JSON: the error is at the box, and nothing is sent.
    await box.fill('{"text": ');
    await card.getByRole('button', { name: 'Approve with these arguments' }).click();
    await card.locator('.field-error', { hasText: 'not JSON' }).waitFor();
    assert.equal(await box.getAttribute('aria-invalid'), 'true');
    const describedBy = await box.getAttribute('aria-describedby');
    assert.equal(await card.locator(`[id="${describedBy}"]`).count(), 1, 'the box is described by its error');

    // JSON that does not fit the echo tool's input schema (from the agents query).
    await box.fill('{"text": 3}');
    await card.getByRole('button', { name: 'Approve with these arguments' }).click();
    await card.locator('.field-error', { hasText: "do not fit the tool's input schema: at /text: must be string" }).waitFor();

    await box.fill('{"text": "edited text"}');
    assert.equal(await card.locator('.field-error').count(), 0, 'editing clears the error');
    await card.getByRole('button', { name: 'Approve with these arguments' }).click();
    await card.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'The echo tool printed: edited text' });
    assert.equal(await lastReply(page), 'The echo tool printed: edited text');
    const call = await lastCall();
    await call.locator('[data-approval="edited"]', { hasText: 'approved with edits' }).waitFor();
    await call.locator('.tool-args', { hasText: 'edited text' }).waitFor();
    await call.locator('.tool-args-requested', { hasText: 'original text' }).waitFor();
  });

  test('reject with a reason: the call never runs and the agent is told why', async () => {
    await newChat();
    await send(page, '/approve delete everything');
    const card = page.locator(sel.approval);
    await card.getByRole('button', { name: 'Reject' }).click();
    await card.getByLabel(/Reason/).fill('not today');
    await card.getByRole('button', { name: 'Reject call' }).click();
    await card.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'did not run' });
    assert.equal(await lastReply(page), 'The echo tool did not run: the user rejected this call: not today');
    const call = await lastCall();
    await call.locator('[data-approval="rejected"]').waitFor();
    await call.locator('.tool-status', { hasText: 'rejected' }).waitFor();
    await call.locator('.approval-note', { hasText: 'Rejected: not today' }).waitFor();
    assert.equal(await call.locator('.tool-output').count(), 0, 'it printed nothing');
  });

  test('several inputs wait together, oldest first, and are answered one by one', async () => {
    await newChat();
    await send(page, '/ask-many 3');
    const cards = page.locator(sel.question);
    await until(page, 'three question cards', (s) => document.querySelectorAll(s).length === 3, sel.question);
    assert.deepEqual(await cards.locator('.question-prompt').allTextContents(), ['Question 1 of 3', 'Question 2 of 3', 'Question 3 of 3']);
    await until(page, 'the status to count the inputs', (s) => document.querySelector(s)?.textContent?.includes('Waiting for you (3 inputs)'), sel.status);
    await page.getByRole('button', { name: 'Send all 3 answers' }).waitFor();
    // Each has its time left.
    assert.match(await timeLeftOf(cards.first()), /left$/);
    await screenshot(page, 'several-inputs');

    // Answered out of order: the second, then the first, then the third.
    for (const [n, answer] of [[2, 'two'], [1, 'one'], [3, 'three']]) {
      const card = page.locator(sel.question, { hasText: `Question ${n} of 3` });
      await card.getByLabel('Your answer').fill(answer);
      await card.getByLabel('Your answer').press('Enter');
      await card.waitFor({ state: 'detached' });
    }
    await waitForReply(page, { contains: 'Your answers:' });
    assert.equal(await lastReply(page), 'Your answers: 1. one 2. two 3. three');
    assert.equal(await page.locator('.pending-inputs').count(), 0);
  });

  test('several inputs answered all at once (respondToInputs)', async () => {
    await newChat();
    await send(page, '/ask-many 2');
    await until(page, 'two question cards', (s) => document.querySelectorAll(s).length === 2, sel.question);
    const sendAll = page.getByRole('button', { name: 'Send all 2 answers' });
    assert.equal(await sendAll.isDisabled(), true, 'not before every answer is filled in');
    await page.locator(sel.question, { hasText: 'Question 1 of 2' }).getByLabel('Your answer').fill('red');
    await page.locator(sel.question, { hasText: 'Question 2 of 2' }).getByLabel('Your answer').fill('blue');
    await sendAll.click();
    await page.locator('.pending-inputs').waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'Your answers:' });
    assert.equal(await lastReply(page), 'Your answers: 1. red 2. blue');
  });

  test('a form from the answer schema: a field error from bad input, then a valid answer', async () => {
    await newChat();
    await send(page, '/form');
    const card = page.locator(sel.question, { hasText: 'Who are you?' });
    const name = card.getByLabel(/^name/);
    const age = card.getByLabel(/^age/);
    await name.waitFor();
    await name.fill('Ada');
    await age.fill('-3');
    await card.getByRole('button', { name: 'Send answer' }).click();
    // The error is at the age field, tied to it for screen readers, and nothing was sent.
    const error = card.locator('.has-error .error-detail');
    await error.getByText('must be >= 0').waitFor();
    assert.equal(await card.locator('.has-error').count(), 1, 'only the age field is in error');
    const describedBy = (await age.getAttribute('aria-describedby')) ?? '';
    const errorId = await error.getAttribute('id');
    assert.ok(describedBy.split(' ').includes(errorId), `the field is described by its error (${describedBy} / ${errorId})`);
    assert.equal(await page.locator('article.msg.kind-answer').count(), 0);
    await screenshot(page, 'form-error');

    await age.fill('36');
    await card.getByRole('button', { name: 'Send answer' }).click();
    await card.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'Hello Ada' });
    assert.equal(await lastReply(page), 'Hello Ada, aged 36. Your answer was {"name":"Ada","age":36}');
  });

  test('tool policies in the settings: echo set to ASK waits for approval', async () => {
    await newChat();
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const dialog = page.getByRole('dialog', { name: 'Chat settings' });
    const policy = dialog.getByRole('combobox', { name: /echo/ });
    await policy.waitFor();
    assert.equal(await policy.inputValue(), 'ALLOW');
    await policy.selectOption('ASK');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'hidden' });

    await send(page, '/tool hi');
    const card = page.locator(sel.approval);
    await card.locator('.tool-name', { hasText: 'echo' }).waitFor();
    await card.getByRole('button', { name: 'Approve', exact: true }).click();
    await waitForReply(page, { contains: 'The echo tool printed: hi' });

    // Kept by the server: a reload shows it.
    await page.reload();
    await page.getByRole('button', { name: 'Chat settings' }).click();
    assert.equal(await dialog.getByRole('combobox', { name: /echo/ }).inputValue(), 'ASK');
    await dialog.getByRole('combobox', { name: /echo/ }).selectOption('DENY');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'hidden' });
    await send(page, '/tool never');
    await waitForReply(page, { contains: 'did not run' });
    const call = await lastCall();
    await call.locator('.tool-status', { hasText: 'rejected' }).waitFor();
    assert.equal(await page.locator(sel.approval).count(), 0, 'DENY never asks');
  });

  describe('with TOOL_POLICIES=echo=ASK', () => {
    let strictServer;
    let strict;

    before(async () => {
      strictServer = await startServer({
        bin,
        port: await freePort(),
        dataDir: path.join(dir, 'data-strict'),
        logName: 'strict',
        env: { TOOL_POLICIES: 'echo=ASK' },
      });
      strict = await browser.context.newPage();
      await strict.goto(strictServer.url);
      await strict.locator(sel.composer).waitFor();
    });

    after(async () => {
      await strict?.close();
      await strictServer?.stop('SIGTERM');
    });

    test("the settings offer nothing looser than the server's policy", async () => {
      await send(strict, 'hello');
      await waitForReply(strict, { contains: 'You said: hello' });
      await strict.getByRole('button', { name: 'Chat settings' }).click();
      const dialog = strict.getByRole('dialog', { name: 'Chat settings' });
      const policy = dialog.getByRole('combobox', { name: /echo/ });
      await policy.waitFor();
      assert.equal(await policy.inputValue(), 'ASK');
      const allow = policy.locator('option[value="ALLOW"]');
      assert.equal(await allow.isDisabled(), true, 'ALLOW is looser than the server allows');
      assert.match(await allow.textContent(), /not allowed on this server/);
      assert.equal(await policy.locator('option[value="DENY"]').isDisabled(), false, 'a chat may be stricter');
    });
  });

  describe('with INPUT_EXPIRY=6s', () => {
    let shortServer;
    let short;

    before(async () => {
      shortServer = await startServer({
        bin,
        port: await freePort(),
        dataDir: path.join(dir, 'data-expiry'),
        logName: 'expiry',
        env: { INPUT_EXPIRY: '6s' },
      });
      short = await browser.context.newPage();
      await short.goto(shortServer.url);
      await short.locator(sel.composer).waitFor();
    });

    after(async () => {
      await short?.close();
      await shortServer?.stop('SIGTERM');
    });

    test('time left counts down, and an expired input goes away with its reason', async () => {
      await send(short, '/approve too late');
      await currentSessionId(short);
      const card = short.locator(sel.approval);
      await card.waitFor();
      const first = await timeLeftOf(card);
      assert.match(first, /^0:0\d left$/);
      // It counts down while shown.
      await until(short, 'the time left to change', ({ s, first }) => {
        const t = document.querySelector(`${s} .time-left time`)?.textContent;
        return t && t !== first;
      }, { s: sel.approval, first });
      // Expired: the server withdraws it (ToolCallFinished CANCELLED) and the card goes.
      await card.waitFor({ state: 'detached', timeout: 20_000 });
      await waitForReply(short, { contains: 'did not run' });
      assert.equal(await lastReply(short), 'The echo tool did not run: this call was not run: expired');
      const call = short.locator('.tool-call').last();
      await call.locator('[data-approval="withdrawn"]', { hasText: 'withdrawn: expired' }).waitFor();
      await call.locator('.tool-status', { hasText: 'cancelled' }).waitFor();

      // A question expires the same way (QuestionWithdrawn).
      await send(short, '/ask-many 1');
      const q = short.locator(sel.question);
      await q.waitFor();
      assert.match(await timeLeftOf(q), /^0:0\d left$/);
      await q.waitFor({ state: 'detached', timeout: 20_000 });
      await waitForReply(short, { contains: 'Your answers:' });
      assert.equal(await lastReply(short), 'Your answers: 1. (no answer: expired)');
      await short.locator('article.msg.kind-question .badge', { hasText: 'no answer: expired' }).waitFor();
    });
  });
});
