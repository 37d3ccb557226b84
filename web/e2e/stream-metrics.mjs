// Measures how well the chat keeps up with a long streamed reply, in the page itself:
//
// - every MessageChunk the websocket delivers is counted and timed (a wrapper around the
//   page's WebSocket, installed before the app starts);
// - each animation frame notes how much of the received text the reply shows
//   (`.md[data-rendered-length]`, or the text's length for a build without it, which
//   overstates its lag by the code fences' markers it does not show) and how long the frame
//   took;
// - long tasks (over 50 ms) come from a PerformanceObserver.
//
// Used by markdown.test.mjs, which logs the figures, and by measure-stream.mjs, which
// compares builds by hand. Nothing here waits for a fixed time.

/** Installs the counters; call before the page loads the app. */
export async function installStreamMetrics(page) {
  await page.addInitScript(() => {
    const m = {
      chunks: 0,
      received: 0,
      firstChunkAt: 0,
      lastChunkAt: 0,
      completedLength: -1,
      longTasks: [],
      frames: 0,
      slowFrames: 0,
      worstFrame: 0,
      lags: [],
      caughtUpAt: 0,
    };
    window.__stream = m;
    const Native = window.WebSocket;
    window.WebSocket = class extends Native {
      constructor(...args) {
        super(...args);
        this.addEventListener('message', (e) => {
          let ev;
          try {
            ev = JSON.parse(e.data)?.payload?.data?.messageStream;
          } catch {
            return;
          }
          if (!ev) return;
          const now = performance.now();
          if (ev.__typename === 'MessageChunk') {
            m.chunks++;
            m.received = Math.max(m.received, ev.offset + [...ev.delta].length);
            if (!m.firstChunkAt) m.firstChunkAt = now;
            m.lastChunkAt = now;
          } else if (ev.__typename === 'MessageCompleted' && ev.message?.role === 'ASSISTANT') {
            m.completedLength = [...ev.message.content].length;
            m.lastChunkAt = now;
          }
        });
      }
    };
    try {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) m.longTasks.push(Math.round(e.duration));
      }).observe({ type: 'longtask', buffered: true });
    } catch {
      // no long task timing here
    }
  });
}

/** Zeroes the counters: what follows is measured alone. */
export function resetStreamMetrics(page) {
  return page.evaluate(() => {
    const m = window.__stream;
    Object.assign(m, { chunks: 0, received: 0, firstChunkAt: 0, lastChunkAt: 0, completedLength: -1, longTasks: [], frames: 0, slowFrames: 0, worstFrame: 0, lags: [], caughtUpAt: 0 });
  });
}

/**
 * Starts sampling frames; resolves with the figures once the reply shows all of the
 * completed message's text and `done(page)` holds (checked each frame), or rejects after
 * `timeout` ms.
 */
export async function measureUntilShown(page, { marker, timeout = 300_000 }) {
  return page.evaluate(
    ({ marker, timeout }) =>
      new Promise((resolve, reject) => {
        const m = window.__stream;
        const started = performance.now();
        let last = started;
        const shown = () => {
          const all = document.querySelectorAll('article.msg[data-role="ASSISTANT"]');
          const body = all[all.length - 1]?.querySelector('.msg-body');
          if (!body) return { length: 0, text: '' };
          const md = body.querySelector('.md');
          const length = md ? Number(md.dataset.renderedLength) : body.textContent.length;
          return { length, body, md };
        };
        const frame = (t) => {
          const dt = t - last;
          last = t;
          m.frames++;
          if (dt > 50) m.slowFrames++;
          m.worstFrame = Math.max(m.worstFrame, dt);
          const s = shown();
          if (m.received > 0 && m.completedLength < 0) m.lags.push(Math.max(0, m.received - s.length));
          // A build without .md (plain text) shows fewer characters than it got (no fence
          // markers): there, the whole reply is shown once the marker is and it is complete.
          const whole = s.md ? s.length >= m.completedLength : s.body?.closest('article')?.dataset.status === 'COMPLETE';
          const complete = m.completedLength >= 0 && whole && s.body?.textContent.includes(marker);
          if (complete) {
            m.caughtUpAt = performance.now();
            const lags = m.lags.slice().sort((a, b) => a - b);
            const q = (p) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(p * lags.length))] : 0);
            resolve({
              chunks: m.chunks,
              characters: m.completedLength,
              streamSeconds: +((m.lastChunkAt - m.firstChunkAt) / 1000).toFixed(1),
              catchUpMs: Math.round(m.caughtUpAt - m.lastChunkAt),
              frames: m.frames,
              slowFrames: m.slowFrames,
              worstFrameMs: Math.round(m.worstFrame),
              longTasks: m.longTasks.length,
              longTaskMs: m.longTasks.reduce((a, b) => a + b, 0),
              worstLongTaskMs: Math.max(0, ...m.longTasks),
              lagMedianChars: q(0.5),
              lagP95Chars: q(0.95),
              lagMaxChars: lags.length ? lags[lags.length - 1] : 0,
            });
            return;
          }
          if (performance.now() - started > timeout) {
            reject(new Error(`the reply was not shown whole within ${timeout} ms (${s.length} of ${m.completedLength} characters, ${m.received} received)`));
            return;
          }
          requestAnimationFrame(frame);
        };
        requestAnimationFrame(frame);
      }),
    { marker, timeout },
  );
}

export function formatMetrics(label, f) {
  return (
    `${label}: ${f.characters} characters in ${f.chunks} chunks over ${f.streamSeconds} s; ` +
    `shown whole ${f.catchUpMs} ms after the last chunk; lag behind the received text: median ${f.lagMedianChars}, ` +
    `p95 ${f.lagP95Chars}, max ${f.lagMaxChars} characters; ${f.frames} frames, ${f.slowFrames} over 50 ms ` +
    `(worst ${f.worstFrameMs} ms); ${f.longTasks} long tasks, ${f.longTaskMs} ms in all (worst ${f.worstLongTaskMs} ms)`
  );
}
