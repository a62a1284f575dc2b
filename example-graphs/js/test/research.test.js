// The research example, off wasm, with a fake of the SDK's capability module
// (guest-sdk/js/fakes): the model answers what a test queues and the granted
// graph tools are fakes. The same graph runs in the host once built.
import assert from "node:assert/strict";
import { register } from "node:module";
import { beforeEach, test } from "node:test";

register("../../../guest-sdk/js/fakes/hooks.mjs", import.meta.url);
const { fake } = await import("../../../guest-sdk/js/fakes/capabilities.js");
// As `sandgraph build` does: compile() takes package.json's name.
globalThis.__SANDGRAPH_PACKAGE_NAME__ = "research";
const { agent, graph, next } = await import("../research/graph.js");

const SYSTEM = "You are a research assistant. Call the tools when they help, then answer the question in a few sentences.";
const GREET = { type: "object", properties: { name: { type: "string" } } };

beforeEach(() => {
  fake.reset();
  fake.graphTools.greet_graph = {
    description: "Greets someone.",
    parameters: GREET,
    run: ({ name }) => ({ greeting: `Good day, ${name}.` }),
  };
});

const callGreet = { type: "ai", content: "", tool_calls: [{ id: "c1", name: "greet_graph", args: { name: "Ada" } }] };

test("research is its Rust twin's graph", () => {
  assert.deepEqual(graph.check(), []);
  const spec = graph.describe();
  assert.equal(spec.name, "research");
  assert.deepEqual(spec.registration, { asTool: true, asGraphTool: true });
  assert.deepEqual(
    spec.channels.map((c) => [c.name, c.reducer, c.default]),
    [
      ["question", "last-value", null],
      ["max_steps", "last-value", "6"],
      ["messages", "custom", "[]"],
      ["steps", "last-value", "0"],
      ["answer", "last-value", null],
      ["error", "last-value", null],
    ],
  );
  assert.deepEqual(
    spec.conditionalEdges.map((c) => [c.source, c.router, c.pathMap.map((e) => e.key)]),
    [
      ["agent", "tools_condition", ["tools", "__end__"]],
      ["tools", "next", ["agent", "__end__"]],
    ],
  );
});

test("the first turn starts the conversation and offers the granted tools", async () => {
  fake.replies.push(callGreet);
  const update = await agent({ question: "Greet Ada formally.", max_steps: 6, steps: 0, messages: [] });
  assert.deepEqual(update, {
    steps: 1,
    messages: [{ type: "system", content: SYSTEM }, { type: "human", content: "Greet Ada formally." }, callGreet],
  });
  assert.deepEqual(fake.modelCalls, [
    {
      alias: "fast",
      tools: [{ name: "greet_graph", description: "Greets someone.", parameters: GREET }],
      messages: [{ type: "system", content: SYSTEM }, { type: "human", content: "Greet Ada formally." }],
    },
  ]);
  assert.deepEqual(graph.route("tools_condition", JSON.stringify({ messages: update.messages })), [{ tag: "node", val: "tools" }]);
});

test("the tools node runs the calls as graph tools and the loop goes back to the model", async () => {
  const tools = graph.nodes.find((n) => n.name === "tools").action;
  const out = await tools({ messages: [callGreet] }, {});
  assert.deepEqual(out, {
    messages: [{ type: "tool", content: '{"greeting":"Good day, Ada."}', name: "greet_graph", tool_call_id: "c1", status: "success" }],
  });
  assert.deepEqual(fake.toolCalls, [["greet_graph", { name: "Ada" }]]);
  assert.equal(next({ error: null }), "agent");
  assert.deepEqual(graph.route("next", '{"error":"out of turns"}'), [{ tag: "node", val: "__end__" }]);
});

test("an answer without tool calls ends the run", async () => {
  const answer = { type: "ai", content: "Good day, Ada.", tool_calls: [], usage_metadata: { input_tokens: 9, output_tokens: 4, total_tokens: 13 } };
  fake.replies.push(answer);
  const history = [{ type: "system", content: SYSTEM, id: "msg-0" }];
  const update = await agent({ question: "q", max_steps: 6, steps: 1, messages: history });
  assert.deepEqual(update, { steps: 2, messages: [answer], answer: "Good day, Ada." });
  assert.deepEqual(fake.modelCalls[0].messages, history);
  assert.deepEqual(graph.route("tools_condition", JSON.stringify({ messages: [answer] })), [{ tag: "node", val: "__end__" }]);
});

test("max_steps bounds the model turns, capped at 12", async () => {
  const history = [{ type: "human", content: "q", id: "msg-0" }];
  fake.replies.push(callGreet, callGreet, callGreet);
  assert.equal((await agent({ question: "q", max_steps: 2, steps: 1, messages: history })).error, "no answer after 2 model turns (max_steps is 2)");
  assert.equal((await agent({ question: "q", max_steps: 100, steps: 11, messages: history })).error, "no answer after 12 model turns (max_steps is 12)");
  assert.equal((await agent({ question: "q", max_steps: 0, steps: 0, messages: history })).error, "no answer after 1 model turns (max_steps is 1)");
});

test("a failed model call ends the run saying why", async () => {
  fake.replies.push(new Error("llm call failed (denied): no grant for model alias fast"));
  const update = await agent({ question: "q", max_steps: 6, steps: 0, messages: [] });
  assert.deepEqual(update, {
    steps: 1,
    messages: [{ type: "system", content: SYSTEM }, { type: "human", content: "q" }],
    error: "llm call failed (denied): no grant for model alias fast",
  });
});
