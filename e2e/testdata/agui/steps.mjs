// Runs @ag-ui/client's HttpAgent against a live talkgraph, step by step, and prints what
// each step saw as one JSON array on stdout. e2e/agui_test.go runs it; its one argument is
// a JSON object:
//
//   {"url": "<…/agui>", "token": "<bearer token>", "thread": "<threadId>", "steps": [step…]}
//
// A step runs the agent once (agent.runAgent) and is one of
//   {"message": "<text>", "id": "<message id>"}  adds a user message first
//   {"resume": {"status": "resolved"|"cancelled", "payload": …}}  answers every pending interrupt so
//   {"dropAfter": n}   (with either) cuts the stream once n events with an id went through,
//                      as a dropped connection does, and remembers the last id
//   {"lastEventId": true, "url": "<…/agui of another replica>"}  sends Last-Event-ID: the id
//                      remembered, to the step's url when it names one
// and prints {events, error, lastId, interrupts, messages}: the events the agent applied, the
// error runAgent ended with, the id remembered, agent.pendingInterrupts after the run, and
// agent.messages.
import { HttpAgent } from '@ag-ui/client';

const cfg = JSON.parse(process.argv[2]);
const agent = new HttpAgent({ url: cfg.url, threadId: cfg.thread, headers: { Authorization: `Bearer ${cfg.token}` } });
let lastId = '';
const out = [];
for (const step of cfg.steps) {
  agent.url = step.url || cfg.url;
  delete agent.headers['Last-Event-ID'];
  if (step.lastEventId) agent.headers['Last-Event-ID'] = lastId;
  agent.fetch = step.dropAfter ? dropping(step.dropAfter) : (url, init) => fetch(url, init);
  if (step.message !== undefined) {
    agent.addMessage({ id: step.id || crypto.randomUUID(), role: 'user', content: step.message });
  }
  const params = {};
  if (step.resume) {
    params.resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, ...step.resume }));
  }
  const events = [];
  let error = null;
  try {
    await agent.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  out.push({ events, error, lastId, interrupts: agent.pendingInterrupts, messages: agent.messages });
}
process.stdout.write(JSON.stringify(out) + '\n');

// dropping is a fetch whose response body ends, as a dropped connection does, right after
// the n-th event with an id: the client has exactly the events up to it, and lastId is its id.
function dropping(n) {
  return async (url, init) => {
    const res = await fetch(url, init);
    const reader = res.body.getReader();
    const enc = new TextEncoder();
    const dec = new TextDecoder();
    let buf = '';
    let seen = 0;
    const body = new ReadableStream({
      async pull(controller) {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) { controller.close(); return; }
          buf += dec.decode(value, { stream: true });
          const frames = buf.split('\n\n');
          buf = frames.pop();
          let pass = '';
          for (const f of frames) {
            pass += f + '\n\n';
            const m = /^id: (.*)$/m.exec(f);
            if (m) {
              lastId = m[1];
              if (++seen === n) {
                controller.enqueue(enc.encode(pass));
                reader.cancel().catch(() => {});
                controller.close();
                return;
              }
            }
          }
          if (pass) { controller.enqueue(enc.encode(pass)); return; }
        }
      },
      cancel() { return reader.cancel(); },
    });
    return new Response(body, { status: res.status, headers: res.headers });
  };
}
