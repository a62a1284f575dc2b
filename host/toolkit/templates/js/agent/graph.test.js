// Native unit tests of graph.js: `npm test` (node --test). Off wasm there
// is no host to ask: the tests hand `ask` a fake model.
import assert from "node:assert/strict";
import { test } from "node:test";

import { LlmError } from "@sandgraph/sdk";

import { ask, graph, messages } from "./graph.js";

const fake = (reply, error) => ({
  asked: null,
  async invoke(m) {
    this.asked = m;
    if (error) throw error;
    return { type: "ai", content: reply, tool_calls: [] };
  },
});

test("the graph compiles clean under its name", () => {
  assert.equal(graph.name, "{{graph}}");
  assert.deepEqual(graph.check(), []);
});

test("the answer is written trimmed", async () => {
  const model = fake(" Because. ");
  assert.deepEqual(await ask({ question: "Why wasm?" }, model), { answer: "Because." });
  assert.deepEqual(model.asked, messages("Why wasm?"));
});

test("a failed call is written as the error", async () => {
  const update = await ask({ question: "Why wasm?" }, fake(null, new LlmError("denied", "no grant")));
  assert.equal(update.answer, undefined);
  assert.match(update.error, /no grant/);
});
