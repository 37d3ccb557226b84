// Schedules and budgets in the chat app, in headless Chromium against the real server and
// its demo agent: making a schedule whose cron explains itself, pausing it, running it now
// and reading its history; a chat whose token budget pauses its agent, and raising it.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { currentSessionId, openApp, screenshot, sel, send, skipReason, until, waitForReply } from './helpers.mjs';

const SKIP = skipReason();
if (SKIP) test('schedules and budgets in Chromium', { skip: SKIP }, () => {});

if (!SKIP) describe('schedules and budgets', { timeout: 600_000 }, () => {
  let app;
  let page;

  before(async () => {
    app = await openApp('talkgraph-e2e-schedules-');
    page = app.page;
    await page.goto(app.server.url);
    await page.locator(sel.composer).waitFor();
  });

  after(async () => {
    await app?.close();
  });

  test('a schedule: the cron explains itself, then pause, run now, history and delete', async () => {
    await page.getByRole('link', { name: 'Schedules' }).click();
    await page.getByRole('heading', { name: 'New schedule' }).waitFor();
    const form = page.locator('.schedule-form');
    await form.getByLabel('Message').fill('Good morning, what is new?');
    const cron = form.getByLabel('Cron');
    await cron.fill('30 8 * * 1-5');
    // Said in words, and the next fires come from the server.
    await form.locator('.cron-words', { hasText: '08:30' }).waitFor();
    await form.locator('.cron-next', { hasText: 'Next:' }).waitFor();
    // A cron that does not parse says why, from the server.
    await cron.fill('61 8 * * *');
    await form.locator('.field-error', { hasText: 'cron' }).waitFor();
    assert.equal(await cron.getAttribute('aria-invalid'), 'true');
    await cron.fill('30 8 * * 1-5');
    await form.locator('.cron-next').waitFor();
    await form.getByLabel('Time zone').fill('Europe/Paris');
    await form.getByRole('button', { name: 'Create schedule' }).click();
    const card = page.locator('.schedule-card', { hasText: 'Good morning, what is new?' });
    await card.waitFor();
    await card.locator('.schedule-when', { hasText: 'Europe/Paris' }).waitFor();
    await card.getByText('Sent to a new chat each time').waitFor();
    await screenshot(page, 'schedules');

    await card.getByRole('button', { name: 'Pause' }).click();
    await card.locator('.badge', { hasText: 'Paused' }).waitFor();
    await card.locator('.help', { hasText: 'Will not fire again' }).waitFor();
    await card.getByRole('button', { name: 'Resume' }).click();
    await card.locator('.badge', { hasText: 'Paused' }).waitFor({ state: 'detached' });

    await card.getByRole('button', { name: 'Run now' }).click();
    await card.getByRole('status').filter({ hasText: 'Sent' }).waitFor();
    const fire = card.locator('.fire').first();
    await fire.locator('.fire-outcome', { hasText: 'Sent' }).waitFor();
    // The fire made a chat, where the message went as the user's.
    await fire.getByRole('link', { name: 'Open the chat' }).click();
    await currentSessionId(page);
    await page.locator(sel.user, { hasText: 'Good morning, what is new?' }).waitFor();
    await waitForReply(page, { contains: 'You said: Good morning' });

    await page.getByRole('link', { name: 'Schedules' }).click();
    await card.getByRole('button', { name: 'Delete' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Delete' }).click();
    await card.waitFor({ state: 'detached' });
    await page.getByText('No schedules yet.').waitFor();
  });

  test('a budget pauses the chat before its next reply, and raising it lets the same run go on', async () => {
    await page.getByRole('button', { name: 'New chat' }).click();
    await currentSessionId(page);
    await page.getByRole('button', { name: 'Chat settings' }).click();
    const dialog = page.getByRole('dialog');
    await dialog.getByLabel('Token budget').fill('4');
    await dialog.getByRole('button', { name: 'Save' }).click();
    await dialog.waitFor({ state: 'detached' });
    // The demo reads one word and writes three: 4 tokens, the whole budget.
    await send(page, 'hello');
    await waitForReply(page, { contains: 'You said: hello' });
    await send(page, 'again');
    await until(page, 'the paused status', (s) => document.querySelector(s)?.textContent?.includes('Paused: token budget reached'), sel.status);
    const pause = page.locator('.budget-pause');
    await pause.getByText('this chat has used its token budget').waitFor();
    await pause.getByText('It used 4 of 4 tokens').waitFor();
    await screenshot(page, 'budget-paused');
    await pause.getByRole('button', { name: 'Raise the budget' }).click();
    await pause.waitFor({ state: 'detached' });
    await waitForReply(page, { contains: 'You said: again' });
    // The settings show what the chat used, and its new budget.
    await page.getByRole('button', { name: 'Chat settings' }).click();
    await page.getByRole('dialog').getByText('Used so far:').waitFor();
    assert.ok(Number(await page.getByRole('dialog').getByLabel('Token budget').inputValue()) > 4);
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel' }).click();
  });
});
