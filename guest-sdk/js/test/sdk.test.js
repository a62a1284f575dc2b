// Unit tests of @sandgraph/sdk, off wasm: `node --test` in guest-sdk/js.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  Annotation,
  Command,
  CompiledStateGraph,
  END,
  GraphInterrupt,
  START,
  Send,
  StateGraph,
  __bindComponent,
  interrupt,
  reducers,
} from "../index.js";

const ctx = (resume = [], extra = {}) => ({ tool: "t", step: 0, resume: resume.map((v) => JSON.stringify(v)), configurable: "{}", ...extra });

function echo(options = {}) {
  const State = Annotation.Root({
    topic: Annotation(),
    log: Annotation({ reducer: reducers.append, default: () => [] }),
  });
  return new StateGraph(State)
    .addNode("echo", (s) => ({ log: [`seen:${s.topic}`] }))
    .addEdge(START, "echo")
    .addEdge("echo", END)
    .compile({ name: "echo_graph", description: "Echo the given topic.", asTool: true, ...options });
}

test("START and END are langgraph's names", () => {
  assert.equal(START, "__start__");
  assert.equal(END, "__end__");
});

test("describe gives the WIT graph-spec of the echo graph", () => {
  assert.deepEqual(echo().describe(), {
    name: "echo_graph",
    description: "Echo the given topic.",
    registration: { asTool: true, asGraphTool: true },
    parameters: null,
    timeoutMs: null,
    channels: [
      { name: "topic", reducer: "last-value", default: null },
      { name: "log", reducer: "append", default: "[]" },
    ],
    nodes: [{ name: "echo", description: null }],
    edges: [],
    conditionalEdges: [],
    entryPoints: ["echo"],
    finishPoints: ["echo"],
  });
});

test("annotations map to the host's reducers where exactly equivalent, else to custom", () => {
  const max = (a, b) => Math.max(a, b);
  const State = Annotation.Root({
    plain: Annotation,
    called: Annotation(),
    counted: Annotation({ default: () => 0 }),
    list: Annotation({ reducer: reducers.append }),
    obj: Annotation({ reducer: reducers.merge }),
    sum: Annotation({ reducer: reducers.add, default: () => 10 }),
    best: Annotation({ reducer: max }),
    older: Annotation({ value: max, default: 1 }),
  });
  const g = new StateGraph(State).addNode("a", () => {}).addEdge(START, "a").compile({ name: "g" });
  assert.deepEqual(
    g.describe().channels.map((c) => [c.name, c.reducer, c.default]),
    [
      ["plain", "last-value", null],
      ["called", "last-value", null],
      ["counted", "last-value", "0"],
      ["list", "append", "[]"],
      ["obj", "merge", "{}"],
      ["sum", "add", "10"],
      ["best", "custom", null],
      ["older", "custom", "1"],
    ],
  );
  // The helpers are the plain functions they stand for.
  assert.deepEqual(reducers.append([1], [2, 3]), [1, 2, 3]);
  assert.deepEqual(reducers.append([1], 2), [1, 2]);
  assert.deepEqual(reducers.append([1], [[2]]), [1, [2]]);
  assert.deepEqual(reducers.merge({ a: 1, b: 1 }, { b: 2 }), { a: 1, b: 2 });
  assert.equal(reducers.add(1, 2), 3);
});

test("custom reducers run through reduce, first write taken as it is", () => {
  const State = Annotation.Root({
    best: Annotation({ reducer: (a, b) => Math.max(a, b) }),
    joined: Annotation({ reducer: (a, b) => `${a}+${b}`, default: () => "" }),
    bad: Annotation({ reducer: () => { throw new Error("no"); }, default: 0 }),
  });
  const g = new StateGraph(State).addNode("a", () => {}).addEdge(START, "a").compile({ name: "g" });
  assert.equal(g.reduce("best", "null", "3"), "3");
  assert.equal(g.reduce("best", "5", "3"), "5");
  assert.equal(g.reduce("joined", '""', '"x"'), '"+x"');
  assert.throws(() => g.reduce("bad", "0", "1"), { tag: "failed", message: 'channel "bad": no' });
  assert.throws(() => g.reduce("best", "{", "1"), (e) => e.tag === "invalid-state" && e.message.startsWith("current value: "));
  assert.throws(() => g.reduce("best", "1", ""), (e) => e.tag === "invalid-state" && e.message.startsWith("update: "));
  assert.throws(() => g.reduce("ghost", "1", "1"), { tag: "unknown", message: 'no custom reducer for channel "ghost"' });
});

test("edges, joins, conditional edges and their router names", () => {
  const State = Annotation.Root({ x: Annotation() });
  function pick() {
    return "b";
  }
  const g = new StateGraph(State)
    .addNode({ a: () => {}, b: () => {} })
    .addNode("c", () => {}, { description: "the c node" })
    .addEdge(START, "a")
    .addEdge(START, "a")
    .addEdge("a", "b")
    .addEdge(["a"], "b")
    .addEdge(["a", "b"], "c")
    .addEdge(["b", "c"], END)
    .addConditionalEdges("a", pick, { x: "b", y: END })
    .addConditionalEdges("b", (s) => s.x, ["c", END])
    .addConditionalEdges(START, function pick() {
      return "a";
    })
    .compile({ name: "g" });
  const spec = g.describe();
  assert.deepEqual(spec.entryPoints, ["a"]);
  assert.deepEqual(spec.finishPoints, ["b", "c"]);
  assert.deepEqual(spec.edges, [
    { sources: ["a"], target: "b" },
    { sources: ["a", "b"], target: "c" },
  ]);
  assert.deepEqual(
    spec.conditionalEdges.map((c) => [c.source, c.router, c.pathMap.map((e) => `${e.key}->${e.target}`)]),
    [
      ["a", "pick", ["x->b", "y->__end__"]],
      ["b", "b_router", ["c->c", "__end__->__end__"]],
      [START, "pick_2", []],
    ],
  );
  assert.deepEqual(spec.nodes[2], { name: "c", description: "the c node" });
});

test("compile throws every problem, as the host would refuse the graph", () => {
  const State = Annotation.Root({ x: Annotation(), __strict__: Annotation() });
  const g = new StateGraph(State)
    .addNode("a", () => {})
    .addNode("a", () => {})
    .addNode(END, () => {})
    .addEdge("a", "b")
    .addConditionalEdges("q", () => "k", { k: "nowhere" });
  assert.throws(
    () => g.compile({ name: "bad name!" }),
    (e) => {
      assert.equal(
        e.message,
        [
          'the graph "bad name!" is not valid:',
          '  graph name "bad name!" may only contain ascii letters, digits, "_" and "-"',
          '  channel name "__strict__" is reserved (it marks a strict graph)',
          '  node "a" is declared twice',
          '  node name "__end__" is reserved',
          "  the graph has no entry point and no conditional edge from __start__ (add addEdge(START, node))",
          '  edge "a" -> "b": unknown target node "b"',
          '  conditional edge from "q": unknown source node "q"',
          '  conditional edge from "q": path-map key "k" leads to unknown node "nowhere"',
          '  node "a" is unreachable from __start__ (add an edge to it; for a Command\'s goto or a Send, addNode(source, fn, { ends: ["a"] }))',
        ].join("\n"),
      );
      return true;
    },
  );
  assert.throws(() => echo({ name: "" }), /graph name is empty/);
  assert.throws(() => echo({ parameters: "[1]" }), /parameters must be a json object, not an array/);
  assert.throws(() => echo({ checkpointer: {} }), /the host owns checkpoints and thread state/);
  assert.throws(() => echo({ nmae: "x" }), /unknown option "nmae"/);
  assert.throws(() => new StateGraph(Annotation.Root({ x: 5 })), /channel "x": expected Annotation/);
});

test("ends declares a node's Command destinations, so they are reachable", () => {
  const State = Annotation.Root({ x: Annotation() });
  const build = (options) =>
    new StateGraph(State)
      .addNode("fan", () => new Command({ goto: new Send("put", 1) }), options)
      .addNode("put", (n) => ({ x: n }))
      .addEdge(START, "fan");
  assert.throws(() => build().compile({ name: "g" }), /node "put" is unreachable from __start__/);
  const g = build({ ends: ["put", END] }).compile({ name: "g" });
  // As the Rust SDK's destinations: a conditional edge whose router is the
  // reserved "__goto__", each target its own key, never routed.
  assert.deepEqual(g.describe().conditionalEdges, [
    { source: "fan", router: "__goto__", pathMap: [{ key: "put", target: "put" }, { key: END, target: END }] },
  ]);
  assert.throws(() => g.route("__goto__", "{}"), { tag: "unknown", message: 'unknown router "__goto__"' });
  assert.throws(() => build({ ends: "put" }), /ends must be an array of node names/);
  // A router function named __goto__ is not the declaration's router.
  function __goto__() {
    return "put";
  }
  const routed = build({ ends: ["put"] }).addConditionalEdges("fan", __goto__, ["put"]).compile({ name: "g" });
  assert.deepEqual(
    routed.describe().conditionalEdges.map((c) => c.router),
    ["__goto__", "fan_router"],
  );
  assert.deepEqual(routed.route("fan_router", "{}"), [{ tag: "node", val: "put" }]);
});

test("parameters, strict, timeout and registration reach the spec", () => {
  const g = echo({
    parameters: { topic: { type: "string", required: true } },
    strict: true,
    timeoutMs: 500,
    asGraphTool: false,
  });
  const spec = g.describe();
  assert.equal(spec.parameters, '{"topic":{"type":"string","required":true}}');
  assert.equal(spec.timeoutMs, 500);
  assert.deepEqual(spec.registration, { asTool: true, asGraphTool: false });
  assert.deepEqual(spec.channels.at(-1), { name: "__strict__", reducer: "last-value", default: null });
  assert.equal(echo({ parameters: '{"b":{"type":"json"},"a":{"type":"json"}}' }).describe().parameters, '{"b":{"type":"json"},"a":{"type":"json"}}');
});

test("runNode returns updates and reports bad state and unknown nodes", () => {
  const g = echo();
  assert.deepEqual(g.runNode("echo", '{"topic":"hi","log":[]}', ctx()), { tag: "update", val: '{"log":["seen:hi"]}' });
  assert.throws(() => g.runNode("echo", "not json", ctx()), (e) => e.tag === "invalid-state" && e.message.startsWith('node "echo": state: '));
  assert.throws(() => g.runNode("nope", "{}", ctx()), { tag: "unknown", message: 'unknown node "nope"' });
});

test("node results: nothing, commands with goto and sends, failures, wrong types", () => {
  const State = Annotation.Root({ x: Annotation() });
  const g = new StateGraph(State)
    .addNode("none", () => undefined)
    .addNode("cmd", () => new Command({ update: { x: 1 }, goto: ["a", new Send("b", { n: 2 }), END] }))
    .addNode("one", () => new Command({ goto: "a" }))
    .addNode("fail", () => {
      throw new Error("bad input");
    })
    .addNode("list", () => [1])
    .addNode("async", async () => ({}))
    .addNode("bigint", () => ({ x: 1n }))
    .addNode("a", () => {})
    .addNode("b", (payload) => ({ x: payload.n }))
    .addConditionalEdges(START, () => [])
    .compile({ name: "g" });
  assert.deepEqual(g.runNode("none", "{}", ctx()), { tag: "update", val: "{}" });
  assert.deepEqual(g.runNode("cmd", "{}", ctx()), {
    tag: "command",
    val: { update: '{"x":1}', goto: ["a", END], sends: [{ node: "b", payload: '{"n":2}' }] },
  });
  assert.deepEqual(g.runNode("one", "{}", ctx()), { tag: "command", val: { update: "{}", goto: ["a"], sends: [] } });
  assert.throws(() => g.runNode("fail", "{}", ctx()), { message: "bad input" });
  assert.throws(() => g.runNode("list", "{}", ctx()), { tag: "failed", message: 'node "list" returned an array: return an object of state writes, a Command, or nothing' });
  // Under node the engine's own Promise is not the SDK's: nothing runs its jobs (see jobs.test.js).
  assert.throws(() => g.runNode("async", "{}", ctx()), { message: /^node "async": the promise never settled: / });
  assert.throws(() => g.runNode("bigint", "{}", ctx()), (e) => e.tag === "failed" && e.message.startsWith('node "bigint": the update is not JSON'));
  assert.deepEqual(g.runNode("b", '{"n":7}', ctx()), { tag: "update", val: '{"x":7}' });
});

test("interrupt pauses until resumed and resumes in order", () => {
  const State = Annotation.Root({ ab: Annotation() });
  const g = new StateGraph(State)
    .addNode("ask", () => {
      const a = interrupt("a?");
      const b = interrupt({ q: "b?" });
      return { ab: [a, b] };
    })
    .addNode("swallow", () => {
      try {
        interrupt("c?");
      } catch {
        // A node that catches the pause still pauses.
      }
      return { ab: "went on" };
    })
    .addConditionalEdges(START, () => [])
    .compile({ name: "g" });
  assert.deepEqual(g.runNode("ask", "{}", ctx()), { tag: "interrupt", val: '"a?"' });
  assert.deepEqual(g.runNode("ask", "{}", ctx([1])), { tag: "interrupt", val: '{"q":"b?"}' });
  assert.deepEqual(g.runNode("ask", "{}", ctx([1, "two"])), { tag: "update", val: '{"ab":[1,"two"]}' });
  assert.deepEqual(g.runNode("swallow", "{}", ctx()), { tag: "interrupt", val: '"c?"' });
  assert.throws(() => interrupt("outside"), /outside a node/);
  assert.throws(() => g.runNode("ask", "{}", ctx([], { resume: ["{"] })), (e) => e.tag === "invalid-state" && e.message.startsWith("call context: resume value 0: "));
  assert.ok(new GraphInterrupt(1) instanceof Error);
});

test("nodes get a langgraph-shaped config", () => {
  let seen;
  const g = new StateGraph(Annotation.Root({ x: Annotation() }))
    .addNode("a", (_s, config) => {
      seen = config;
    })
    .addEdge(START, "a")
    .compile({ name: "g" });
  g.runNode("a", "{}", { tool: "tool", request: "hi", threadId: "th", step: 3, resume: [], configurable: '{"k":1}' });
  assert.deepEqual(seen, { configurable: { k: 1, thread_id: "th" }, tool: "tool", request: "hi", threadId: "th", step: 3 });
  assert.throws(() => g.runNode("a", "{}", ctx([], { configurable: "[]" })), { tag: "invalid-state", message: "call context: configurable must be a JSON object, not an array" });
});

test("route answers node names, path-map keys, END and Sends", () => {
  const State = Annotation.Root({ items: Annotation() });
  function fan_out(s) {
    return s.items.map((x) => new Send("square", { x }));
  }
  const g = new StateGraph(State)
    .addNode("plan", () => {})
    .addNode("square", () => {})
    .addEdge(START, "plan")
    .addConditionalEdges("plan", fan_out)
    .addConditionalEdges("square", () => [END, 5])
    .compile({ name: "g" });
  assert.deepEqual(g.route("fan_out", '{"items":[1,2]}'), [
    { tag: "send", val: { node: "square", payload: '{"x":1}' } },
    { tag: "send", val: { node: "square", payload: '{"x":2}' } },
  ]);
  assert.deepEqual(g.route("fan_out", '{"items":[]}'), []);
  assert.throws(() => g.route("square_router", "{}"), { tag: "failed", message: 'router "square_router" returned a number at index 1: return a node name, END, a Send, or an array of those' });
  assert.throws(() => g.route("ghost", "{}"), { tag: "unknown", message: 'unknown router "ghost"' });
});

test("validate refuses with the reason the hook gives", () => {
  const g = echo({
    validate: (input) => {
      if (input.times > 10) return "times must be at most 10";
      if (input.times === 0) return false;
      if (input.times < 0) throw new Error("negative");
      return undefined;
    },
  });
  assert.equal(g.validate('{"times":3}', ctx()), undefined);
  assert.throws(() => g.validate('{"times":11}', ctx()), { message: "times must be at most 10" });
  assert.throws(() => g.validate('{"times":0}', ctx()), { message: "the input is not valid" });
  assert.throws(() => g.validate('{"times":-1}', ctx()), { message: "negative" });
  assert.equal(echo().validate("anything", ctx()), undefined);
});

test("the component binding turns every throw into the WIT error case", () => {
  const logged = [];
  const host = { log: (level, msg) => logged.push([level, msg]), cancelled: () => false };
  const State = Annotation.Root({ x: Annotation() });
  const g = new StateGraph(State)
    .addNode("boom", () => {
      throw new TypeError("x is undefined");
    })
    .addNode("text", () => {
      throw "plain text";
    })
    .addConditionalEdges(START, () => [])
    .compile({ name: "g", validate: () => "no" });
  const exports = __bindComponent({ graph: g }, host);
  assert.deepEqual(Object.keys(exports).sort(), ["describe", "reduce", "route", "runNode", "validate"]);
  const thrown = (fn) => {
    try {
      fn();
    } catch (e) {
      return e;
    }
    assert.fail("did not throw");
  };
  assert.deepEqual(thrown(() => exports.runNode("boom", "{}", ctx())), { tag: "failed", val: "x is undefined" });
  assert.deepEqual(thrown(() => exports.runNode("text", "{}", ctx())), { tag: "failed", val: "plain text" });
  assert.deepEqual(thrown(() => exports.runNode("ghost", "{}", ctx())), { tag: "unknown", val: 'unknown node "ghost"' });
  assert.deepEqual(thrown(() => exports.route("r", "{}")), { tag: "unknown", val: 'unknown router "r"' });
  assert.deepEqual(thrown(() => exports.reduce("x", "1", "2")), { tag: "unknown", val: 'no custom reducer for channel "x"' });
  assert.equal(thrown(() => exports.validate("{}", ctx())), "no");
  assert.equal(exports.describe().name, "g");
});

test("the component binding finds the graph: export graph, default, or the last compiled", () => {
  const g = echo();
  assert.equal(__bindComponent({ default: g }).describe().name, "echo_graph");
  const h = echo({ name: "last_one" });
  assert.equal(__bindComponent({}).describe().name, "last_one");
  assert.ok(h instanceof CompiledStateGraph);
});
