// Drives the official Node SDK's Responses WebSocket client (ResponsesWS, from
// `openai/resources/responses/ws`) through a plan of turns and prints, as one JSON document on
// stdout, every frame the socket received (raw, for the Python side to validate), the events the
// SDK emitted, the errors it reported and the close.
//
//   node responses_ws.cjs PLAN.json      (run by tests/integration/test_websocket_node.py)
//
// PLAN: {"sdk_dir", "base_url", "api_key", "turns": [response.create bodies]}. In a body, the
// string "$RESPONSE_ID_<n>" is replaced by the id of turn n's response. A turn ends with its
// terminal event, or with a request-level error frame (type "error" without sequence_number).
// Installs nothing: the SDK comes from sdk_dir (.ci/install-node-sdk.sh).
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { createRequire } = require("node:module");

const GUARD_MS = 30000; // hang guard of the whole plan; each turn takes milliseconds
const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

async function main() {
  const plan = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
  const sdkRequire = createRequire(path.join(plan.sdk_dir, "package.json"));
  const { OpenAI } = sdkRequire("openai");
  const { ResponsesWS } = sdkRequire("openai/resources/responses/ws");
  const version = sdkRequire("openai/version").VERSION;

  const out = { version, frames: [], binary: 0, events: [], errors: [], results: [], close: null };
  const guard = setTimeout(() => { out.timeout = true; finish(2); }, GUARD_MS);
  let finished = false;
  function finish(code) {
    if (finished) return;
    finished = true;
    clearTimeout(guard);
    process.stdout.write(JSON.stringify(out));
    process.exitCode = code;
    setImmediate(() => process.exit(code));
  }

  const client = new OpenAI({ apiKey: plan.api_key, baseURL: plan.base_url, maxRetries: 0 });
  const rt = new ResponsesWS(client);
  const waiting = [];
  rt.socket.platformSocket.on("message", (data, isBinary) => {
    if (isBinary) { out.binary += 1; return; }
    const text = data.toString("utf8");
    out.frames.push(text);
    let frame;
    try { frame = JSON.parse(text); } catch { return; } // the Python side reports it
    const ended = TERMINAL.has(frame.type) || (frame.type === "error" && !("sequence_number" in frame));
    if (ended && waiting.length) waiting.shift()(frame);
  });
  rt.on("event", (event) => out.events.push(event.type));
  rt.on("error", (error) => out.errors.push({ message: error.message, code: error.error?.error?.code ?? null }));
  rt.on("close", (code, reason) => {
    out.close = { code, reason: String(reason) };
    while (waiting.length) waiting.shift()(null);
  });

  const ids = [];
  for (const body of plan.turns) {
    const text = JSON.stringify(body).replace(/\$RESPONSE_ID_(\d+)/g, (_, n) => ids[Number(n)] ?? "missing");
    const ended = new Promise((resolve) => waiting.push(resolve));
    rt.send({ type: "response.create", ...JSON.parse(text) });
    const last = await ended;
    if (last === null) break; // closed
    ids.push(last.response ? last.response.id : null);
    out.results.push(last.response ? { id: last.response.id, status: last.response.status } : { error: last.error });
  }
  if (out.close === null) {
    const closed = new Promise((resolve) => rt.on("close", resolve));
    rt.close({ code: 1000, reason: "done" });
    await closed;
  }
  finish(0);
}

main().catch((error) => {
  process.stdout.write(JSON.stringify({ crashed: String(error && error.stack || error) }));
  process.exit(3);
});
