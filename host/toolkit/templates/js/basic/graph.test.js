// Native unit tests of graph.js: `npm test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { count, graph, report } from "./graph.js";

test("the graph compiles clean under its name", () => {
  assert.equal(graph.name, "{{graph}}");
  assert.deepEqual(graph.check(), []);
});

test("count counts words", () => {
  assert.deepEqual(count({ text: "hello  wasm\nworld" }), { words: 3 });
});

test("report says word or words", () => {
  assert.deepEqual(report({ words: 1 }), { log: ["1 word"] });
  assert.deepEqual(report({ words: 0 }), { log: ["0 words"] });
});
