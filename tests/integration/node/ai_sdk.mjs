// The Vercel AI SDK (`ai` + `@ai-sdk/openai`, its Responses and chat providers) as an app runs it, against
// crossfeed. One scenario per run: `node ai_sdk.mjs SCENARIO` with CROSSFEED_BASE_URL set; prints
// one JSON object with what the app saw. Run by tests/integration/test_ai_sdk.py.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.CROSSFEED_AI_SDK_DIR, "package.json"));
const { streamText, generateObject, tool, stepCountIs } = require("ai");
const { createOpenAI } = require("@ai-sdk/openai");
const { z } = require("zod");

const openai = createOpenAI({ baseURL: process.env.CROSSFEED_BASE_URL, apiKey: "sk-test" });
const model = openai.responses("deepseek-reasoner");

const weather = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `sunny in ${city}`,
});

async function tools() {
  const result = streamText({ model, prompt: "Weather in Paris?", tools: { weather }, stopWhen: stepCountIs(3) });
  const text = await result.text;
  const steps = await result.steps;
  return { text, steps: steps.length, calls: steps.flatMap((s) => s.toolCalls.map((c) => [c.toolName, c.input])),
           results: steps.flatMap((s) => s.toolResults.map((r) => r.output)) };
}

async function twoTurns() {
  const messages = [{ role: "user", content: "Say hello" }];
  const first = streamText({ model, messages });
  const firstText = await first.text;
  messages.push(...(await first.response).messages);
  messages.push({ role: "user", content: "Again" });
  const second = streamText({ model, messages });
  return { first: firstText, second: await second.text };
}

async function reasoning() {
  const result = streamText({ model, prompt: "Weather in Paris?",
                              // forceReasoning: the model name is not one of OpenAI's reasoning models
                              providerOptions: { openai: { forceReasoning: true, reasoningSummary: "auto",
                                                           reasoningEffort: "medium" } } });
  const parts = [];
  for await (const part of result.fullStream) {
    if (part.type === "reasoning-delta") parts.push(part.text);
    if (part.type === "error") throw part.error;
  }
  return { text: await result.text, reasoning: parts.join(""), reasoningText: await result.reasoningText };
}

async function object() {
  const { object } = await generateObject({ model, prompt: "The weather in Paris",
                                            schema: z.object({ city: z.string(), sunny: z.boolean() }) });
  return { object };
}

// Reverse: the AI SDK's chat provider (Chat Completions) on crossfeed in front of a Responses
// backend; a tool-only answer, then a text answer. Every stream part's type, in order.
async function chatTools() {
  const getCapital = tool({
    description: "The capital of a country",
    inputSchema: z.object({ country: z.string() }),
    execute: async ({ country }) => (country === "France" ? "Paris" : "unknown"),
  });
  const result = streamText({ model: openai.chat("gpt-4o"), prompt: "Capital of France?",
                              tools: { get_capital: getCapital }, stopWhen: stepCountIs(2) });
  const parts = [];
  for await (const part of result.fullStream) {
    if (part.type === "error") throw part.error;
    parts.push(part.type === "text-delta" ? [part.type, part.text] : [part.type]);
  }
  return { parts, text: await result.text };
}

const scenarios = { tools, two_turns: twoTurns, reasoning, object, chat_tools: chatTools };
try {
  const out = await scenarios[process.argv[2]]();
  process.stdout.write(JSON.stringify(out) + "\n");
} catch (err) {
  process.stdout.write(JSON.stringify({ error: String(err && (err.message || err)),
                                        body: err && err.responseBody }) + "\n");
  process.exitCode = 1;
}
