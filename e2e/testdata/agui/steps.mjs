// Runs @ag-ui/client's HttpAgent against a live talkgraph, step by step, and prints what
// each step saw as one JSON array on stdout. e2e/agui_test.go runs it; its one argument is
// a JSON object:
//
//   {"url": "<…/agui>", "token": "<bearer token>", "thread": "<threadId>", "steps": [step…]}
//
// A step runs the agent once (agent.runAgent); it may say
//   "fresh": true            a new agent first (no messages, no interrupts): another client
//                            of the thread, or the same one started again
//   "message": "<text>", "id": "<message id>"   adds a user message first
//   "resume": {"status": "resolved"|"cancelled", "payload": …}   answers every pending
//                            interrupt so (and is left out when none is pending)
//   "lastEventId": true | "<id>"   sends Last-Event-ID: the id remembered, or the one given
//   "url": "<…/agui>"        sends the step to this url (another replica's)
//   "replay": "<SSE text>"   answers the step with this text instead of asking the server:
//                            the agent applies it as a stream that broke where it ends
//   "cut": {"after": n} | {"before": "<TYPE>"} | {"after": "<TYPE>"}   breaks the stream at
//                            an SSE id, as a dropped connection does: after the n-th event
//                            with an id, or right before or right after the events that
//                            go with the first event of TYPE (the events up to and with
//                            the next id); the last id passed is remembered
// and prints {events, error, lastId, cut, frames, interrupts, messages}: the events the
// agent applied, the error runAgent ended with, the id remembered, whether the stream was
// cut, the SSE frames the agent got ({id, type}, id "" for none), agent.pendingInterrupts
// after the run, and agent.messages.
import { HttpAgent } from '@ag-ui/client';

const cfg = JSON.parse(process.argv[2]);
const newAgent = () => new HttpAgent({ url: cfg.url, threadId: cfg.thread, headers: { Authorization: `Bearer ${cfg.token}` } });
let agent = newAgent();
let lastId = '';
const out = [];
for (const step of cfg.steps) {
  if (step.fresh) agent = newAgent();
  agent.url = step.url || cfg.url;
  delete agent.headers['Last-Event-ID'];
  if (step.lastEventId) agent.headers['Last-Event-ID'] = step.lastEventId === true ? lastId : step.lastEventId;
  const seen = { frames: [], cut: false };
  agent.fetch = async (url, init) => {
    if (step.replay !== undefined) {
      return framed(new Response(step.replay, { status: 200, headers: { 'Content-Type': 'text/event-stream' } }), step.cut, seen);
    }
    return framed(await fetch(url, init), step.cut, seen);
  };
  if (step.message !== undefined) {
    agent.addMessage({ id: step.id || crypto.randomUUID(), role: 'user', content: step.message });
  }
  const params = {};
  if (step.resume && agent.pendingInterrupts.length > 0) {
    params.resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, ...step.resume }));
  }
  const events = [];
  let error = null;
  try {
    await agent.runAgent(params, { onEvent: ({ event }) => { events.push(event); } });
  } catch (e) {
    error = String(e && e.message ? e.message : e);
  }
  out.push({ events, error, lastId, cut: seen.cut, frames: seen.frames, interrupts: agent.pendingInterrupts, messages: agent.messages });
}
process.stdout.write(JSON.stringify(out) + '\n');

// framed returns res with its body passed on an SSE id at a time: the events up to and
// with the next id, together. Each frame passed is noted in seen.frames and each id passed
// is remembered; with cut, the body ends, as a dropped connection does, where cut says
// (seen.cut is then set).
function framed(res, cut, seen) {
  if (!res.ok || !res.body) return res;
  const reader = res.body.getReader();
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  let buf = '';
  let group = []; // frames since the last id
  let ids = 0;
  let ended = false;
  const parse = (text) => {
    const id = /^id: (.*)$/m.exec(text);
    const data = /^data: (.*)$/m.exec(text);
    return { text, id: id ? id[1] : '', type: data ? JSON.parse(data[1]).type : '' };
  };
  // take decides on a group that ends with an id: pass it (true) or not, and cut or not.
  const take = (g) => {
    const types = g.map((f) => f.type);
    if (cut && typeof cut.before === 'string' && types.includes(cut.before)) return [false, true];
    ids++;
    const stop = cut && (cut.after === ids || (typeof cut.after === 'string' && types.includes(cut.after)));
    return [true, !!stop];
  };
  const pass = (g, controller) => {
    let text = '';
    for (const f of g) {
      text += f.text + '\n\n';
      if (f.type) seen.frames.push({ id: f.id, type: f.type });
      if (f.id) lastId = f.id;
    }
    if (text) controller.enqueue(enc.encode(text));
  };
  const body = new ReadableStream({
    async pull(controller) {
      if (ended) return;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) {
          pass(group, controller); // the events after the last id: the end of a stream
          group = [];
          ended = true;
          controller.close();
          return;
        }
        buf += dec.decode(value, { stream: true });
        const texts = buf.split('\n\n');
        buf = texts.pop();
        let progressed = false;
        for (const t of texts) {
          const f = parse(t);
          if (!f.type && !f.id) continue; // a comment: a keep-alive
          group.push(f);
          if (!f.id) continue;
          const [ok, stop] = take(group);
          if (ok) pass(group, controller);
          group = [];
          progressed = true;
          if (stop) {
            seen.cut = true;
            ended = true;
            reader.cancel().catch(() => {});
            controller.close();
            return;
          }
        }
        if (progressed) return;
      }
    },
    cancel() { return reader.cancel(); },
  });
  return new Response(body, { status: res.status, headers: res.headers });
}
