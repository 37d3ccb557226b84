// A talkgraph chat over AG-UI, with @ag-ui/client's HttpAgent: it signs in as a guest,
// sends its argument as a message, prints the reply as it streams, answers every
// interrupt from the terminal (approve with y, reject with n; a question's answer as
// typed, JSON for a form), and survives a dropped connection by resuming with the last
// SSE id it saw.
//
//   npm ci && node chat.mjs '/approve hello'        (TALKGRAPH=http://localhost:8080)
import { HttpAgent } from '@ag-ui/client';
import { createInterface } from 'node:readline/promises';

const base = process.env.TALKGRAPH || 'http://localhost:8080';
const { token } = await (await fetch(`${base}/auth/guest`, { method: 'POST' })).json();

let lastId = ''; // the last SSE id seen: a talkgraph cursor
const agent = new HttpAgent({
  url: `${base}/agui`,
  threadId: 'example', // any name of yours; talkgraph makes a session for it
  headers: { Authorization: `Bearer ${token}` },
  // HttpAgent drops SSE ids; this fetch notes them as they pass.
  fetch: async (url, init) => {
    const res = await fetch(url, init);
    const [mine, theirs] = res.body.tee();
    (async () => {
      const dec = new TextDecoder();
      for await (const chunk of mine) {
        for (const m of dec.decode(chunk, { stream: true }).matchAll(/^id: (.*)$/gm)) lastId = m[1];
      }
    })().catch(() => {});
    return new Response(theirs, { status: res.status, headers: res.headers });
  },
});

const print = { onTextMessageContentEvent: ({ event }) => { process.stdout.write(event.delta); },
  onToolCallStartEvent: ({ event }) => { console.log(`\n[calls ${event.toolCallName}]`); },
  onToolCallResultEvent: ({ event }) => { console.log(`[result: ${event.content}]`); } };

// run runs the agent once; a stream cut short is resumed from the last id.
async function run(params) {
  for (;;) {
    let finished = false;
    await agent.runAgent(params, { ...print, onRunFinishedEvent: () => { finished = true; }, onRunErrorEvent: ({ event }) => { console.log(`\n[error ${event.code}: ${event.message}]`); finished = true; } })
      .catch((e) => console.log(`\n[${e.message}]`));
    delete agent.headers['Last-Event-ID'];
    if (finished || !lastId) return;
    agent.headers['Last-Event-ID'] = lastId; // the same request again, resumed
  }
}

agent.addMessage({ id: crypto.randomUUID(), role: 'user', content: process.argv[2] || 'hello' });
await run({});
const rl = createInterface({ input: process.stdin, output: process.stdout });
while (agent.pendingInterrupts.length > 0) {
  const resume = [];
  for (const i of agent.pendingInterrupts) {
    const said = await rl.question(`\n${i.message} ${i.reason === 'tool_call' ? '(y/n) ' : ''}`);
    if (i.reason === 'tool_call') resume.push({ interruptId: i.id, status: said === 'y' ? 'resolved' : 'cancelled' });
    else resume.push({ interruptId: i.id, status: 'resolved', payload: i.responseSchema?.type === 'object' ? JSON.parse(said) : said });
  }
  await run({ resume });
}
rl.close();
console.log();
