// What LangGraph.js authors reach for: compile() without a name, and the
// names sandgraph does not offer, each failing with what it does instead.
import assert from "node:assert/strict";
import { afterEach, test } from "node:test";

import {
  Annotation,
  CachePolicy,
  Command,
  END,
  InMemorySaver,
  InMemoryStore,
  MemorySaver,
  RetryPolicy,
  START,
  StateGraph,
} from "../index.js";

const builder = () =>
  new StateGraph(Annotation.Root({ x: Annotation() }))
    .addNode("a", () => ({ x: 1 }))
    .addEdge(START, "a")
    .addEdge("a", END);

afterEach(() => {
  delete globalThis.__SANDGRAPH_PACKAGE_NAME__;
});

test("compile() without a name takes the package's, scope dropped and normalised", () => {
  for (const [pkg, name] of [
    ["@acme/triage", "triage"],
    ["research", "research"],
    ["my.graph~2", "my_graph_2"],
    ["Echo-Graph_1", "Echo-Graph_1"],
  ]) {
    globalThis.__SANDGRAPH_PACKAGE_NAME__ = pkg;
    assert.equal(builder().compile().name, name);
  }
  // name overrides.
  assert.equal(builder().compile({ name: "mine" }).name, "mine");
  // Still a valid graph name, or a clear error naming where it came from.
  globalThis.__SANDGRAPH_PACKAGE_NAME__ = `@acme/${"x".repeat(65)}`;
  assert.throws(() => builder().compile(), {
    message: `the graph "${"x".repeat(65)}" is not valid:\n  graph name "${"x".repeat(65)}" is longer than 64 characters (from package.json "name" "@acme/${"x".repeat(65)}": pass compile({ name }))`,
  });
  globalThis.__SANDGRAPH_PACKAGE_NAME__ = "run_code";
  assert.throws(() => builder().compile(), /graph name "run_code" is reserved \(from package.json "name" "run_code": pass compile\(\{ name \}\)\)/);
});

test("compile() without a name: off the build it is unnamed, in a build without a package name it fails", () => {
  // Node tests of a graph compiled with compile(): the build names it.
  assert.equal(builder().compile().name, "");
  globalThis.__SANDGRAPH_PACKAGE_NAME__ = null;
  assert.throws(() => builder().compile(), {
    message: 'the graph "" is not valid:\n  graph name is empty: compile({ name: "my_graph" }), or give package.json a "name" (sandgraph build passes it in)',
  });
  globalThis.__SANDGRAPH_PACKAGE_NAME__ = "@acme/";
  assert.throws(() => builder().compile(), /graph name is empty/);
  // An explicit empty name is always wrong.
  delete globalThis.__SANDGRAPH_PACKAGE_NAME__;
  assert.throws(() => builder().compile({ name: "" }), /graph name is empty/);
});

test("checkpointers and stores are not offered: the host owns checkpoints and thread state", () => {
  for (const [Name, label] of [
    [MemorySaver, "MemorySaver"],
    [InMemorySaver, "InMemorySaver"],
  ]) {
    assert.throws(() => new Name(), {
      message: `${label} is not offered: the host owns checkpoints and thread state (run with a thread: sandgraph run --thread ID; a paused run resumes there)`,
    });
  }
  assert.throws(() => new InMemoryStore(), {
    message: "InMemoryStore is not offered: there is no long-term store in the guest; keep data in state (a thread keeps it between runs) or call a graph tool",
  });
  assert.throws(() => builder().compile({ name: "g", checkpointer: {} }), {
    message: "compile({ checkpointer }): checkpointers are not offered: the host owns checkpoints and thread state (run with a thread: sandgraph run --thread ID; a paused run resumes there)",
  });
  assert.throws(() => builder().compile({ name: "g", store: {} }), /^Error: compile\(\{ store \}\): stores are not offered: there is no long-term store/);
  assert.throws(() => builder().compile({ name: "g", interruptBefore: ["a"] }), /compile\(\{ interruptBefore \}\): interruptBefore is not offered: call interrupt\(value\) in the node/);
});

test("retry and cache policies are not offered", () => {
  assert.throws(() => new RetryPolicy(), { message: /^RetryPolicy is not offered: a failing node fails the run; retry inside the node/ });
  assert.throws(() => new CachePolicy(), { message: /^CachePolicy is not offered: node results are not cached/ });
  assert.throws(() => builder().addNode("b", () => ({}), { retryPolicy: { maxAttempts: 3 } }), {
    message: 'addNode("b", action, { retryPolicy }): RetryPolicy is not offered: a failing node fails the run; retry inside the node, or let the caller run the graph again',
  });
  assert.throws(() => builder().addNode("b", () => ({}), { cachePolicy: { ttl: 60 } }), /addNode\("b", action, \{ cachePolicy \}\): CachePolicy is not offered/);
  assert.throws(() => builder().compile({ name: "g", cache: {} }), /compile\(\{ cache \}\): caches are not offered/);
});

test("streaming, invoke and compiled graphs as nodes are not offered", () => {
  const graph = builder().compile({ name: "g" });
  assert.throws(() => graph.stream({ x: 1 }, { streamMode: "values" }), {
    message: "graph.stream() is not offered in the guest: streamMode is not offered: the host runs the graph and streams it (sandgraph run --stream prints one JSON line per superstep)",
  });
  assert.throws(() => graph.invoke({ x: 1 }), /graph.invoke\(\) is not offered in the guest: the host runs the graph/);
  assert.throws(() => builder().addNode("sub", graph), /addNode\("sub", graph\): a compiled graph as a node \(a subgraph\) is not offered: a component holds one graph/);
  assert.throws(() => new Command({ goto: "a", graph: Command.PARENT }), {
    message: "Command({ graph }) is not offered: there are no parent graphs (a component holds one graph; call another graph as a graph tool)",
  });
});

test("an object with invoke is a node (a Runnable, e.g. a ToolNode)", () => {
  const runnable = { invoke: (state, config) => ({ x: `${state.x}:${config.tool}` }) };
  const graph = new StateGraph(Annotation.Root({ x: Annotation() })).addNode("r", runnable).addEdge(START, "r").compile({ name: "g" });
  assert.deepEqual(graph.runNode("r", '{"x":"in"}', { tool: "t", step: 0, resume: [], configurable: "{}" }), { tag: "update", val: '{"x":"in:t"}' });
  assert.throws(() => builder().addNode("b", {}), { message: 'addNode("b", action): action must be a function or have an invoke method' });
});
