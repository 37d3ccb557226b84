// By hand: how well a build of the chat app keeps up with a long streamed reply.
//
//   node e2e/measure-stream.mjs [--words 20000] [--runs 3] [--delay 1ms] [--dist DIR]
//
// Builds and starts the server from the repo (demo agent, DEMO_CHUNK_DELAY=--delay), opens
// the app in headless Chromium (the server's own, or the build in DIR, e.g. an older
// web/dist checked out elsewhere) and has the demo agent stream /markdown <words>, --runs
// times in new chats; prints the figures of each run (see stream-metrics.mjs). Not a test:
// the browser tests run markdown.test.mjs.

import { rmSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { buildServer, currentSessionId, freePort, launchBrowser, sel, send, serveDist, startServer, tempDir } from './helpers.mjs';
import { formatMetrics, installStreamMetrics, measureUntilShown, resetStreamMetrics } from './stream-metrics.mjs';

const { values } = parseArgs({
  options: {
    words: { type: 'string', default: '20000' },
    runs: { type: 'string', default: '3' },
    delay: { type: 'string', default: '1ms' },
    dist: { type: 'string' },
  },
});

const dir = tempDir('talkgraph-measure-');
const server = await startServer({
  bin: buildServer(dir),
  port: await freePort(),
  dataDir: path.join(dir, 'data'),
  env: { DEMO_CHUNK_DELAY: values.delay },
});
const browser = await launchBrowser(values.dist ? { args: ['--disable-features=LocalNetworkAccessChecks'] } : {});
try {
  if (values.dist) await serveDist(browser.context, server.url, path.resolve(values.dist));
  const page = await browser.context.newPage();
  await installStreamMetrics(page);
  await page.goto(server.url);
  await page.locator(sel.composer).waitFor();
  for (let run = 1; run <= Number(values.runs); run++) {
    if (run > 1) {
      await page.getByRole('button', { name: 'New chat' }).click();
      await page.locator('.empty-hint').waitFor();
    }
    await resetStreamMetrics(page);
    await send(page, `/markdown ${values.words}`);
    await currentSessionId(page);
    const figures = await measureUntilShown(page, { marker: 'The end.' });
    console.log(formatMetrics(`run ${run}${values.dist ? ` (${values.dist})` : ''}`, figures));
  }
} finally {
  await browser.close();
  await server.stop('SIGTERM');
  rmSync(dir, { recursive: true, force: true });
}
