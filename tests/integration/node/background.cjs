// Drives the official Node SDK through background mode against crossfeed and prints what it saw,
// one JSON document per line on stdout (run by tests/integration/test_background_node.py):
//
//   {"step": "mid", ...}     the resumed stream of run 1 has begun: the Python side lets the
//                            held backend go on
//   {"step": "done", ...}    everything: the Responses and every stream's events as the SDK
//                            parsed them (the Python side validates them)
//
//   node background.cjs PLAN.json      PLAN: {"sdk_dir", "base_url", "api_key", "model"}
//
// Run 1 (its backend held half way): responses.create({background: true}), retrieve while it
// runs, retrieve(id, {stream: true, starting_after: 3}) mid-run read to its end, retrieve until
// completed, the whole stream and starting_after=N after the end. Run 2 (held for ever): cancel,
// cancel again, retrieve, its whole stream. Installs nothing: the SDK comes from sdk_dir.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const GUARD_MS = 45000; // hang guard of the whole plan

function say(doc) {
  process.stdout.write(JSON.stringify(doc) + "\n");
}

async function collect(stream, onEvent) {
  const events = [];
  for await (const event of stream) {
    events.push(event);
    if (onEvent) onEvent(event, events.length);
  }
  return events;
}

async function untilStatus(client, id, wanted) {
  for (let i = 0; i < 400; i++) {
    const r = await client.responses.retrieve(id);
    if (r.status === wanted) return r;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`${id} never became ${wanted}`);
}

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const sdkRequire = createRequire(path.join(plan.sdk_dir, "package.json"));
  const { OpenAI } = sdkRequire("openai");
  const version = sdkRequire("openai/version").VERSION;
  const guard = setTimeout(() => { say({ step: "timeout" }); process.exit(2); }, GUARD_MS);
  const client = new OpenAI({ apiKey: plan.api_key, baseURL: plan.base_url, maxRetries: 0 });
  const out = { step: "done", version };

  // Run 1: the backend is held half way until the Python side lets it go.
  const created = await client.responses.create({ model: plan.model, input: "hi", background: true });
  out.created = created;
  out.polled = await client.responses.retrieve(created.id);
  const mid = await client.responses.retrieve(created.id, { stream: true, starting_after: 3 });
  out.mid = await collect(mid, (_, n) => { if (n === 1) say({ step: "mid", id: created.id }); });
  out.final = await untilStatus(client, created.id, "completed");
  out.whole = await collect(await client.responses.retrieve(created.id, { stream: true }));
  out.after_end = await collect(await client.responses.retrieve(created.id, { stream: true, starting_after: 7 }));

  // Run 2: held for ever; cancelled twice.
  const second = await client.responses.create({ model: plan.model, input: "again", background: true });
  out.second = second;
  out.cancelled = await client.responses.cancel(second.id);
  out.cancelled_again = await client.responses.cancel(second.id);
  out.second_final = await client.responses.retrieve(second.id);
  out.second_whole = await collect(await client.responses.retrieve(second.id, { stream: true }));
  clearTimeout(guard);
  say(out);
}

main().catch((error) => {
  say({ step: "crashed", error: String((error && error.stack) || error) });
  process.exit(3);
});
