// Shared plumbing for the end-to-end tests: the real Go server (built from the repo root and
// run on a free port with its own data directory) and Debian's Chromium through playwright-core.

import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const WEB_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const REPO_ROOT = path.resolve(WEB_DIR, '..');
export const SCREENSHOTS = path.join(WEB_DIR, 'e2e', 'screenshots');
export const CHROMIUM = process.env.CHROMIUM_PATH || '/usr/bin/chromium';

const require = createRequire(import.meta.url);

/**
 * Why these tests cannot run here, or null when they can. Under CI=true nothing may be
 * missing: it throws instead, which fails the test file, so that a run without a browser
 * is never green.
 */
export function skipReason() {
  const reason = missing();
  if (reason && process.env.CI === 'true') {
    throw new Error(`the browser tests cannot run, and CI=true does not let them skip: ${reason}`);
  }
  return reason;
}

function missing() {
  if (!existsSync(CHROMIUM)) {
    return `Chromium not found at ${CHROMIUM} (apt-get install -y chromium, or set CHROMIUM_PATH)`;
  }
  try {
    require.resolve('playwright-core');
  } catch {
    return 'web/node_modules is missing playwright-core (run npm ci in web/)';
  }
  if (spawnSync('go', ['version'], { stdio: 'ignore' }).status !== 0) {
    return 'the Go toolchain is not on PATH';
  }
  return null;
}

/** A TCP port nobody listens on right now. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Compiles the server (what `go run .` would run) once per test file. Running the binary
 * rather than `go run` makes "kill the server" kill the server itself, not only the go
 * command in front of it, and a restart does not wait for the linker.
 */
export function buildServer(dir) {
  const bin = path.join(dir, 'talkgraph-server');
  const res = spawnSync('go', ['build', '-o', bin, '.'], {
    cwd: REPO_ROOT,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 600_000,
  });
  if (res.status !== 0) {
    throw new Error(`go build failed in ${REPO_ROOT}:\n${res.stderr || res.stdout || res.error}`);
  }
  return bin;
}

/**
 * Starts the server on `port` with its data in `dataDir` and resolves once POST
 * /auth/guest answers. The returned object's stop() ends it (SIGKILL by default: a crash).
 */
export async function startServer({ bin, port, dataDir, logName = 'server', env = {} }) {
  mkdirSync(dataDir, { recursive: true });
  const logPath = path.join(dataDir, `${logName}-${Date.now()}.log`);
  const log = createWriteStream(logPath);
  const proc = spawn(bin, [], {
    cwd: REPO_ROOT,
    env: {
      ...process.env,
      PORT: String(port),
      DATA_DIR: dataDir,
      DATABASE_URL: process.env.E2E_DATABASE_URL || `sqlite://${path.join(dataDir, 'db.sqlite')}`,
      DEMO_CHUNK_DELAY: '20ms',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  proc.stdout.pipe(log);
  proc.stderr.pipe(log);
  let exited = null;
  const exit = new Promise((resolve) => {
    proc.on('exit', (code, signal) => {
      exited = { code, signal };
      resolve(exited);
    });
  });

  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) {
      throw new Error(`the server exited (${JSON.stringify(exited)}) before answering; log: ${logPath}`);
    }
    try {
      const res = await fetch(`${url}/auth/guest`, { method: 'POST', signal: AbortSignal.timeout(2_000) });
      if (res.ok) {
        const body = await res.json();
        if (body.token) break;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`the server did not answer POST /auth/guest within 60 s; log: ${logPath}`);
    }
    await new Promise((r) => setTimeout(r, 150));
  }

  return {
    url,
    port,
    logPath,
    proc,
    async stop(signal = 'SIGKILL') {
      if (exited) return exited;
      proc.kill(signal);
      const timer = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      const result = await exit;
      clearTimeout(timer);
      return result;
    },
  };
}

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Chromium with a fresh profile directory; all its pages share one guest identity. */
export async function launchBrowser({ viewport = { width: 1200, height: 820 }, args = [] } = {}) {
  const { chromium } = await import('playwright-core');
  const profile = mkdtempSync(path.join(os.tmpdir(), 'talkgraph-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [...CHROMIUM_ARGS, ...args],
    viewport,
  });
  context.setDefaultTimeout(15_000);
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };

/** True when the server answers "/" with the app's index.html. */
export async function serverServesApp(serverUrl) {
  const res = await fetch(`${serverUrl}/`, { redirect: 'manual' });
  const body = res.status === 200 ? await res.text() : '';
  return body.includes('id="root"');
}

/**
 * Chromium for the app at serverUrl. The server serves the app at "/" once it embeds
 * web/dist. Until then, the browser is handed web/dist for "/" and "/assets/*" instead and
 * everything else still goes to the server. Such a page has no address Chromium can place,
 * so its local-network checks, which would refuse its websocket to 127.0.0.1, are off.
 */
export async function launchFor(serverUrl, options = {}) {
  if (await serverServesApp(serverUrl)) return launchBrowser(options);
  console.log('# the server does not serve the app at / yet: the browser gets web/dist from the test');
  const browser = await launchBrowser({ ...options, args: ['--disable-features=LocalNetworkAccessChecks'] });
  await serveDist(browser.context, serverUrl);
  return browser;
}

/**
 * Hands the browser the app from `dist` (web/dist by default) for "/" and "/assets/*" of
 * serverUrl; everything else still goes to the server. measure-stream.mjs uses it to
 * measure another build against the same server.
 */
export async function serveDist(context, serverUrl, dist = path.join(WEB_DIR, 'dist')) {
  const origin = new URL(serverUrl).origin;
  await context.route(
    (url) => url.origin === origin && (url.pathname === '/' || url.pathname === '/index.html' || url.pathname.startsWith('/assets/')),
    (route) => {
      const { pathname } = new URL(route.request().url());
      const file = path.join(dist, pathname === '/' ? 'index.html' : pathname);
      if (!file.startsWith(dist) || !existsSync(file)) return route.fulfill({ status: 404 });
      return route.fulfill({
        status: 200,
        contentType: TYPES[path.extname(file)] ?? 'application/octet-stream',
        body: readFileSync(file),
      });
    },
  );
}

export function tempDir(prefix) {
  return mkdtempSync(path.join(os.tmpdir(), prefix));
}

// openApp builds the server from this checkout and starts it on a free port with a data
// directory of its own under a new temporary directory named with prefix, then opens a
// Chromium page for it (page errors logged). close() ends the browser and the server and
// removes the directory, unless KEEP_E2E_DATA is set.
export async function openApp(prefix) {
  const dir = tempDir(prefix);
  const bin = buildServer(dir);
  const server = await startServer({ bin, port: await freePort(), dataDir: path.join(dir, 'data') });
  const browser = await launchFor(server.url);
  const page = await browser.context.newPage();
  page.on('pageerror', (e) => console.log(`# page error: ${e.message}`));
  return {
    dir,
    bin,
    server,
    browser,
    page,
    async close() {
      await browser.close();
      await server.stop('SIGTERM');
      if (!process.env.KEEP_E2E_DATA) rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: path.join(SCREENSHOTS, `${name}.png`) });
}

// ---------- page helpers ----------

export const sel = {
  composer: '#composer-input',
  status: '#chat-status',
  assistant: 'article.msg[data-role="ASSISTANT"]',
  user: 'article.msg[data-role="USER"]',
  question: '.question-card',
  approval: '.approval-card',
};

/** Waits until fn(arg) is truthy in the page; the error names what was awaited. */
export async function until(page, what, fn, arg, timeout = 15_000) {
  try {
    return await page.waitForFunction(fn, arg, { timeout, polling: 'raf' });
  } catch (e) {
    throw new Error(`timed out after ${timeout} ms waiting for ${what}: ${e.message.split('\n')[0]}`, { cause: e });
  }
}

/** Types a message in the composer and sends it with Enter. */
export async function send(page, text) {
  const box = page.locator(sel.composer);
  await box.waitFor();
  await box.fill(text);
  await box.press('Enter');
}

/** The text of the last assistant message, or null. */
export function lastReply(page) {
  return page.evaluate((s) => {
    const all = document.querySelectorAll(s);
    const last = all[all.length - 1];
    return last ? (last.querySelector('.msg-body')?.textContent ?? '') : null;
  }, sel.assistant);
}

/** Waits until the last assistant message has the given status and, optionally, contains text. */
export function waitForReply(page, { status = 'COMPLETE', contains = '', count, timeout = 20_000 } = {}) {
  return until(
    page,
    `an assistant message with status ${status}${contains ? ` containing ${JSON.stringify(contains)}` : ''}`,
    ({ s, status, contains, count }) => {
      const all = document.querySelectorAll(s);
      if (count !== undefined && all.length !== count) return false;
      const last = all[all.length - 1];
      if (!last || last.dataset.status !== status) return false;
      return (last.querySelector('.msg-body')?.textContent ?? '').includes(contains);
    },
    { s: sel.assistant, status, contains, count },
    timeout,
  );
}

/**
 * "chunk 1. chunk 2. … chunk n." as the chat shows what the demo agent's /slow writes (it
 * writes a space after the last chunk too, which a Markdown paragraph does not show).
 */
export function slowText(n) {
  let s = '';
  for (let i = 1; i <= n; i++) s += `chunk ${i}. `;
  return s.trimEnd();
}

/** The session ID in the page's address (#/c/<id>). */
export async function currentSessionId(page) {
  await until(page, 'a chat address', () => /^#\/c\//.test(location.hash));
  return page.evaluate(() => decodeURIComponent(location.hash.slice(4)));
}
