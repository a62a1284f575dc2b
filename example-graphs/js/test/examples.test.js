// The JavaScript examples, off wasm: `node --test` in example-graphs/js (after
// `npm ci`, which links @sandgraph/sdk to guest-sdk/js). The same graphs run
// in the host through tests/conformance.
import assert from "node:assert/strict";
import { test } from "node:test";

import { graph as approval } from "../approval/graph.js";
import { graph as echo } from "../echo/graph.js";
import { graph as greet } from "../greet/graph.js";
import { graph as mapReduce } from "../map-reduce/graph.js";

const ctx = (resume = []) => ({ tool: "t", step: 0, resume: resume.map((v) => JSON.stringify(v)), configurable: "{}" });
const update = (result) => {
  assert.equal(result.tag, "update");
  return JSON.parse(result.val);
};

test("every example compiles clean under its Rust twin's name", () => {
  const names = [echo, greet, mapReduce, approval].map((g) => [g.name, g.check()]);
  assert.deepEqual(names, [
    ["echo_graph", []],
    ["greet_graph", []],
    ["map_reduce_graph", []],
    ["approval_graph", []],
  ]);
});

test("echo appends seen:<topic>", () => {
  assert.deepEqual(update(echo.runNode("echo", '{"topic":"wasm","log":[]}', ctx())), { log: ["seen:wasm"] });
});

test("greet greets, validates and fails on a negative count", () => {
  assert.deepEqual(update(greet.runNode("greet", '{"name":"Ada","style":"formal","times":2}', ctx())), {
    greeting: "Good day, Ada. Good day, Ada.",
    tags: [],
  });
  assert.deepEqual(update(greet.runNode("greet", '{"name":"Ada","style":"casual","tags":["t"]}', ctx())), {
    greeting: "Hey Ada!",
    tags: ["t"],
  });
  assert.throws(() => greet.runNode("greet", '{"name":"Ada","style":"formal","times":-1}', ctx()), /times must not be negative/);
  assert.throws(() => greet.validate('{"times":11}', ctx()), /times must be at most 10/);
  assert.equal(greet.validate('{"times":10}', ctx()), undefined);
});

test("map-reduce fans out one Send per item and sums", () => {
  assert.deepEqual(mapReduce.route("fan_out", '{"items":[1,2]}'), [
    { tag: "send", val: { node: "square", payload: '{"x":1}' } },
    { tag: "send", val: { node: "square", payload: '{"x":2}' } },
  ]);
  assert.deepEqual(update(mapReduce.runNode("square", '{"x":3}', ctx())), { results: [9] });
  assert.deepEqual(update(mapReduce.runNode("sum", '{"results":[1,4,9]}', ctx())), { total: 14 });
});

test("approval asks, then publishes or revises", () => {
  const state = '{"topic":"wasm","draft":"A short note about wasm.","revisions":0,"published":false}';
  assert.deepEqual(approval.runNode("review", state, ctx()), {
    tag: "interrupt",
    val: '{"question":"publish this draft?","draft":"A short note about wasm."}',
  });
  assert.deepEqual(update(approval.runNode("review", state, ctx(["yes"]))), { published: true });
  assert.deepEqual(update(approval.runNode("review", state, ctx(["no"]))), { revisions: 1 });
  assert.deepEqual(update(approval.runNode("draft", '{"topic":"wasm","revisions":1}', ctx())), {
    draft: "A short note about wasm (revision 1).",
  });
  assert.deepEqual(approval.route("after_review", '{"published":true}'), [{ tag: "node", val: "publish" }]);
});
