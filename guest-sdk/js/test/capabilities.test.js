// Unit tests of the SDK's own Promise (jobs.js), async nodes and the
// capabilities (llm.js, tools.js) against fake host imports, off wasm.
//
// The SDK's Promise is installed as the global one, as the component's
// entry module does. Async functions are written as `lowered(function*
// ...)`, the shape `sandgraph build` lowers `async` functions to (a
// generator driven by the global Promise): node's own `async` would use the
// engine's promise, whose jobs only node runs.
import assert from "node:assert/strict";
import { test } from "node:test";

import { SandPromise, installPromise, queueMicrotask as sandMicrotask, runJobs, settle } from "../jobs.js";
import { bindCapabilities } from "../registry.js";
import {
  Annotation,
  CapabilityError,
  CapabilityNotImported,
  ChatModel,
  END,
  LlmError,
  START,
  StateGraph,
  ToolError,
  __bindComponent,
  interrupt,
  llm,
  tools,
} from "../index.js";

installPromise();

const ctx = (resume = []) => ({ tool: "t", step: 0, resume: resume.map((v) => JSON.stringify(v)), configurable: "{}" });

/** What `async function` becomes in the bundle: a generator over the global Promise. */
function lowered(gen) {
  return (...args) =>
    new Promise((resolve, reject) => {
      const it = gen(...args);
      const step = (method, value) => {
        let r;
        try {
          r = it[method](value);
        } catch (err) {
          reject(err);
          return;
        }
        if (r.done) resolve(r.value);
        else Promise.resolve(r.value).then((v) => step("next", v), (e) => step("throw", e));
      };
      step("next", undefined);
    });
}

test("the installed Promise is the SDK's and its jobs run only in runJobs, in order", () => {
  assert.equal(globalThis.Promise, SandPromise);
  const seen = [];
  Promise.resolve(1).then((v) => seen.push(`then ${v}`));
  sandMicrotask(() => seen.push("microtask"));
  new Promise((_, reject) => reject(new Error("no"))).catch((e) => seen.push(`catch ${e.message}`)).finally(() => seen.push("finally"));
  seen.push("sync");
  assert.deepEqual(seen, ["sync"]);
  runJobs();
  assert.deepEqual(seen, ["sync", "then 1", "microtask", "catch no", "finally"]);
  assert.equal(Object.prototype.toString.call(Promise.resolve()), "[object Promise]");
});

test("settle gives a promise's value or throws its reason; a pending one is refused", () => {
  assert.equal(settle(7, "x"), 7);
  assert.deepEqual(settle(Promise.all([1, Promise.resolve(2), { then: (r) => r(3) }]), "all"), [1, 2, 3]);
  assert.deepEqual(settle(Promise.allSettled([Promise.reject(new Error("e")), 1]), "allSettled").map((r) => r.status), ["rejected", "fulfilled"]);
  assert.equal(settle(Promise.race([new Promise(() => {}), Promise.resolve("fast")]), "race"), "fast");
  assert.equal(settle(Promise.any([Promise.reject(1), Promise.resolve(2)]), "any"), 2);
  assert.throws(() => settle(Promise.any([Promise.reject(1)]), "any"), AggregateError);
  assert.throws(() => settle(Promise.reject(new TypeError("bad")), "x"), { name: "TypeError", message: "bad" });
  assert.throws(() => settle(new Promise(() => {}), 'node "n"'), { message: /^node "n": the promise never settled: nothing was left to run/ });
  const self = Promise.resolve().then(() => self);
  assert.throws(() => settle(self, "self"), { message: "a promise cannot be resolved with itself" });
  const { promise, resolve } = Promise.withResolvers();
  resolve("later");
  assert.equal(settle(promise, "w"), "later");
});

test("async nodes, routers, reducers and validators run to completion in the call", () => {
  const State = Annotation.Root({
    n: Annotation(),
    total: Annotation({ reducer: lowered(function* (a, b) { return (yield a) + b; }), default: () => 0 }),
  });
  const g = new StateGraph(State)
    .addNode("add", lowered(function* (state) {
      const [a, b] = yield Promise.all([Promise.resolve(state.n), lowered(function* () { return 2; })()]);
      return { n: a + b };
    }))
    .addNode("fail", lowered(function* () {
      yield 1;
      throw new Error("failed after an await");
    }))
    .addNode("hang", () => new Promise(() => {}))
    .addEdge(START, "add")
    .addConditionalEdges("add", lowered(function* (state) { return (yield state.n) > 2 ? END : "fail"; }), ["fail", END])
    .addEdge("fail", "hang")
    .compile({ name: "g", validate: lowered(function* (input) { yield null; return input.ok === true || "not ok"; }) });
  assert.deepEqual(g.runNode("add", '{"n":1}', ctx()), { tag: "update", val: '{"n":3}' });
  assert.throws(() => g.runNode("fail", "{}", ctx()), { message: "failed after an await" });
  assert.throws(() => g.runNode("hang", "{}", ctx()), { message: /^node "hang": the promise never settled/ });
  assert.deepEqual(g.route("add_router", '{"n":3}'), [{ tag: "node", val: END }]);
  assert.equal(g.reduce("total", "1", "2"), "3");
  assert.doesNotThrow(() => g.validate('{"ok":true}', ctx()));
  assert.throws(() => g.validate("{}", ctx()), { message: "not ok" });
});

test("interrupt after an await pauses the async node, and resumes it", () => {
  const State = Annotation.Root({ answer: Annotation() });
  const g = new StateGraph(State)
    .addNode("ask", lowered(function* () {
      yield Promise.resolve();
      return { answer: interrupt("name?") };
    }))
    .addEdge(START, "ask")
    .compile({ name: "g" });
  assert.deepEqual(g.runNode("ask", "{}", ctx()), { tag: "interrupt", val: '"name?"' });
  assert.deepEqual(g.runNode("ask", "{}", ctx(["ada"])), { tag: "update", val: '{"answer":"ada"}' });
});

test("a timer the graph calls fails the node with an explanation", () => {
  const State = Annotation.Root({ x: Annotation() });
  const compiled = new StateGraph(State)
    .addNode("t", () => {
      throw new ReferenceError("setTimeout is not defined");
    })
    .addEdge(START, "t")
    .compile({ name: "g" });
  const exports = __bindComponent({ graph: compiled }, null, {});
  assert.throws(() => exports.runNode("t", "{}", ctx()), {
    tag: "failed",
    val: "setTimeout is not available in a graph: a node runs to completion within its call, so nothing may run later (await the sdk's calls instead)",
  });
});

/** A fake `sandgraph:graph/llm` import: records requests, answers `reply` or throws `error`. */
function fakeLlm(reply, error) {
  const requests = [];
  return {
    requests,
    chat(request) {
      requests.push(request);
      if (error) throw Object.assign(new Error("[object Object] (see error.payload)"), { payload: error });
      return reply;
    },
  };
}

const INFO = [
  { name: "echo_graph", description: "echoes", parameters: '{"type":"object","properties":{"text":{"type":"string"}}}' },
  { name: "bare", description: undefined, parameters: "not json" },
];

function fakeTools() {
  const calls = [];
  return {
    calls,
    list: () => INFO,
    call(name, args) {
      calls.push([name, args]);
      if (name === "missing") throw Object.assign(new Error("x"), { payload: { tag: "not-found", val: "no tool missing" } });
      return JSON.stringify({ log: [`seen:${JSON.parse(args).text}`] });
    },
  };
}

test("ChatModel.invoke sends the coerced messages and resolves to the ai message of contract 7", () => {
  const fake = fakeLlm({
    content: "",
    toolCalls: [
      { id: "c1", name: "echo_graph", arguments: '{"text":"hi"}' },
      { id: "c2", name: "raw", arguments: "[1,2]" },
    ],
    finishReason: "tool_calls",
    usage: { promptTokens: 10, completionTokens: 4 },
  });
  bindCapabilities({ llm: fake, tools: fakeTools() });
  const model = new ChatModel({ model: "fast", temperature: 0.5, maxTokens: 50 }).bindTools(["echo_graph", { name: "local", description: "a local tool", parameters: { type: "object" } }]);
  const answer = settle(
    model.invoke([
      ["system", "be brief"],
      "hello",
      { type: "ai", content: "", tool_calls: [{ id: "c0", name: "echo_graph", args: { text: "x" } }] },
      { type: "tool", content: "done", tool_call_id: "c0" },
    ]),
    "invoke",
  );
  assert.equal(
    JSON.stringify(answer),
    '{"type":"ai","content":"","tool_calls":[{"id":"c1","name":"echo_graph","args":{"text":"hi"}},{"id":"c2","name":"raw","args":"[1,2]"}],"usage_metadata":{"input_tokens":10,"output_tokens":4,"total_tokens":14},"response_metadata":{"finish_reason":"tool_calls"}}',
  );
  const [sent] = fake.requests;
  assert.equal(sent.model, "fast");
  assert.equal(sent.maxTokens, 50);
  assert.equal(sent.temperature, 0.5);
  assert.deepEqual(sent.messages.map((m) => [m.role, m.content, m.toolCallId]), [
    ["system", "be brief", undefined],
    ["user", "hello", undefined],
    ["assistant", "", undefined],
    ["tool", "done", "c0"],
  ]);
  assert.deepEqual(sent.messages[2].toolCalls, [{ id: "c0", name: "echo_graph", arguments: '{"text":"x"}' }]);
  assert.deepEqual(sent.tools, [
    { name: "echo_graph", description: "echoes", parameters: '{"type":"object","properties":{"text":{"type":"string"}}}' },
    { name: "local", description: "a local tool", parameters: '{"type":"object"}' },
  ]);
  assert.deepEqual(model.tools.length, 2, "bindTools returns a new model");
  assert.equal(new ChatModel("fast").tools.length, 0);
});

test("llm errors are typed: the host's cases, bad messages as malformed", () => {
  bindCapabilities({ llm: fakeLlm(null, { tag: "quota", val: "no calls left" }) });
  const err = (p) => {
    try {
      settle(p, "call");
    } catch (e) {
      return e;
    }
    assert.fail("expected a rejection");
  };
  const quota = err(new ChatModel().invoke("hi"));
  assert.ok(quota instanceof LlmError && quota instanceof CapabilityError);
  assert.deepEqual([quota.name, quota.kind, quota.detail, quota.message], ["LlmError", "quota", "no calls left", "quota: no calls left"]);
  const bad = err(llm.chat({ messages: ["ok", { role: "robot", content: "x" }] }));
  assert.deepEqual([bad.kind, bad.message], ["malformed", 'malformed: message 1: unknown type "robot"']);
  assert.equal(err(llm.chat({ messages: [["tool", "x"]] })).message, 'malformed: message 0: a [role, content] pair cannot make a tool message (it needs a tool_call_id)');
  assert.equal(err(llm.chat({ messages: "hi", tools: ["nope"] })).name, "CapabilityNotImported", "graph tools by name need the tools capability");
  bindCapabilities({ llm: fakeLlm(null, { tag: "quota", val: "x" }), tools: fakeTools() });
  assert.equal(err(llm.chat({ messages: "hi", tools: ["nope"] })).message, 'malformed: no graph tool named "nope" is granted (granted: echo_graph, bare)');
});

test("tools.list and tools.call go through the host; failures are ToolErrors", () => {
  const fake = fakeTools();
  bindCapabilities({ tools: fake });
  assert.deepEqual(settle(tools.list(), "list"), [
    { name: "echo_graph", description: "echoes", parameters: { type: "object", properties: { text: { type: "string" } } } },
    { name: "bare", description: null, parameters: { type: "object" } },
  ]);
  const both = settle(Promise.all([tools.call("echo_graph", { text: "a" }), tools.call("echo_graph", { text: "b" })]), "all");
  assert.deepEqual(both, [{ log: ["seen:a"] }, { log: ["seen:b"] }]);
  assert.deepEqual(fake.calls, [["echo_graph", '{"text":"a"}'], ["echo_graph", '{"text":"b"}']]);
  assert.throws(() => settle(tools.call("missing"), "call"), (e) => e instanceof ToolError && e.kind === "not_found" && e.message === "not_found: no tool missing");
  assert.throws(() => settle(tools.call("echo_graph", [1]), "call"), { name: "TypeError", message: 'tools.call("echo_graph"): args must be an object, not an array' });
});

test("a capability the build did not import is CapabilityNotImported", () => {
  bindCapabilities({});
  assert.throws(() => settle(tools.list(), "list"), (e) => e instanceof CapabilityNotImported && e.capability === "tools" && e.message === 'this graph was built without the "tools" capability: add "tools" to "sandgraph": { "capabilities": [...] } in package.json');
  assert.throws(() => settle(new ChatModel().invoke("hi"), "invoke"), { name: "CapabilityNotImported" });
});

test("an uncaught capability error fails the node with kind: text", () => {
  const State = Annotation.Root({ answer: Annotation() });
  const compiled = new StateGraph(State)
    .addNode("ask", lowered(function* () {
      return { answer: yield new ChatModel("fast").invoke("hi") };
    }))
    .addEdge(START, "ask")
    .compile({ name: "g" });
  const exports = __bindComponent({ graph: compiled }, null, { llm: fakeLlm(null, { tag: "denied", val: "no llm grant" }) });
  assert.throws(() => exports.runNode("ask", "{}", ctx()), { tag: "failed", val: "denied: no llm grant" });
});
