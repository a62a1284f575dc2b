// ToolNode, toolsCondition and the ReAct agent graph with a fake capability
// module (../fakes): the Rust SDK's prebuilt_tests.rs, case for case.
import assert from "node:assert/strict";
import { register } from "node:module";
import { beforeEach, test } from "node:test";

register("../fakes/hooks.mjs", import.meta.url);
const { CapabilityError, fake } = await import("../fakes/capabilities.js");
const { ToolNode, createReactAgent, tool, toolsCondition } = await import("../prebuilt.js");
const { AIMessage, END, START, StateGraph, MessagesAnnotation, SystemMessage } = await import("../index.js");

/** Graph tools `search` and `broken` (which fails with a host error), as the Rust tests' FakeTools. */
function fakeHost() {
  fake.reset();
  for (const name of ["search", "broken"]) {
    fake.graphTools[name] = {
      description: `${name} things`,
      parameters: { type: "object" },
      run: (args) => {
        if (name === "search") return { hits: [args.q] };
        throw new CapabilityError("denied", "not granted");
      },
    };
  }
}
beforeEach(fakeHost);

const add = tool(
  ({ a, b }) => {
    if (!Number.isInteger(a) || !Number.isInteger(b)) throw new Error("a and b must be integers");
    return a + b;
  },
  { name: "add", description: "Adds.", schema: { type: "object" } },
);
const echo = tool(async ({ text }) => text, { name: "echo", description: "Echoes.", schema: { type: "object" } });

const stateCalling = (calls) => ({
  messages: [
    { type: "ai", content: "old", id: "0", tool_calls: [{ id: "z", name: "add", args: {} }] },
    { type: "human", content: "go", id: "1" },
    { type: "ai", content: "", id: "2", tool_calls: calls },
  ],
});

test("tool node runs every call of the latest ai message in order", async () => {
  const node = new ToolNode([add, echo, "search"]);
  const input = stateCalling([
    { id: "c1", name: "add", args: { a: 2, b: 3 } },
    { id: "c2", name: "echo", args: { text: "hi" } },
    { id: "c3", name: "search", args: { q: "rust" } },
  ]);
  const out = await node.invoke(input);
  assert.equal(
    JSON.stringify(out),
    JSON.stringify({
      messages: [
        { type: "tool", content: "5", name: "add", tool_call_id: "c1", status: "success" },
        { type: "tool", content: "hi", name: "echo", tool_call_id: "c2", status: "success" },
        { type: "tool", content: '{"hits":["rust"]}', name: "search", tool_call_id: "c3", status: "success" },
      ],
    }),
  );
  assert.deepEqual(fake.toolCalls, [["search", { q: "rust" }]]);
});

test("tool node turns mistakes into error messages", async () => {
  const node = new ToolNode([add, echo]);
  const input = stateCalling([
    { id: "c1", name: "nope", args: {} },
    { id: "c2", name: "add", args: "{bad" },
    { id: "c3", name: "add", args: { a: "x" } },
    { id: "c4", name: "broken", args: {} },
  ]);
  const out = await node.invoke(input);
  for (const m of out.messages) assert.equal(m.status, "error");
  assert.deepEqual(
    out.messages.map((m) => m.content),
    [
      "Error: nope is not a valid tool, try one of [add, echo, search, broken].",
      "Error: the arguments of add are not a JSON object",
      "Error: a and b must be integers\n Please fix your mistakes.",
      "Error: denied: not granted\n Please fix your mistakes.",
    ],
  );

  // Without handling, a failing call fails the node.
  const strict = new ToolNode([add, echo], { handleToolErrors: false });
  await assert.rejects(strict.invoke(stateCalling([{ id: "c", name: "broken", args: {} }])), { message: "denied: not granted" });
  await assert.rejects(strict.invoke(stateCalling([{ id: "c", name: "add", args: {} }])), { message: "a and b must be integers" });
});

test("tool node needs an ai message and takes a list too", async () => {
  const node = new ToolNode([add]);
  await assert.rejects(node.invoke({ messages: ["hi"] }), { message: "no ai message found in input" });
  const list = [{ type: "ai", content: "", tool_calls: [{ id: "c", name: "add", args: { a: 1, b: 1 } }] }];
  assert.equal((await node.invoke(list)).messages[0].content, "2");
  // A non-string result is compact JSON; nothing is null.
  const nothing = tool(() => undefined, { name: "nothing" });
  const out = await new ToolNode([nothing]).invoke([new AIMessage({ content: "", tool_calls: [{ id: "n", name: "nothing", args: {} }] })]);
  assert.equal(out.messages[0].content, "null");
  // A result that is not JSON is an error message.
  const cyclic = tool(() => {
    const o = {};
    o.self = o;
    return o;
  }, { name: "cyclic" });
  const [bad] = (await new ToolNode([cyclic]).invoke([["ai", ""], { type: "ai", content: "", tool_calls: [{ id: "y", name: "cyclic", args: {} }] }])).messages;
  assert.deepEqual(bad, { type: "tool", content: "Error: the result of cyclic is not JSON", name: "cyclic", tool_call_id: "y", status: "error" });
  assert.throws(() => new ToolNode([7]), { message: "new ToolNode(tools): tools[0] is neither a tool (made by tool()) nor a graph tool name" });
});

test("tools condition routes on the last message", () => {
  const calls = [{ id: "c", name: "add", args: {} }];
  assert.equal(toolsCondition(stateCalling(calls)), "tools");
  assert.equal(toolsCondition(stateCalling([])), END);
  assert.equal(toolsCondition([["ai", "done"]]), END);
  assert.throws(() => toolsCondition({ messages: [] }), { message: "no messages found in input state" });
});

test("a tool node is a node and tools condition brings its path map", async () => {
  const graph = new StateGraph(MessagesAnnotation)
    .addNode("agent", () => ({}))
    .addNode("tools", new ToolNode([add]))
    .addEdge(START, "agent")
    .addConditionalEdges("agent", toolsCondition)
    .addEdge("tools", "agent")
    .compile({ name: "g" });
  assert.deepEqual(graph.describe().conditionalEdges, [
    { source: "agent", router: "tools_condition", pathMap: [{ key: "tools", target: "tools" }, { key: END, target: END }] },
  ]);
  assert.deepEqual(graph.route("tools_condition", '{"messages":[["ai","done"]]}'), [{ tag: "node", val: END }]);
  const action = graph.nodes.find((n) => n.name === "tools").action;
  const out = await action({ messages: [{ type: "ai", content: "", tool_calls: [{ id: "c", name: "add", args: { a: 1, b: 2 } }] }] }, {});
  assert.equal(out.messages[0].content, "3");
});

test("tool() takes a JSON schema, not zod", () => {
  assert.deepEqual(add.definition(), { name: "add", description: "Adds.", parameters: { type: "object" } });
  assert.throws(() => tool(() => 1, { name: "z", schema: "x" }), {
    message: 'tool "z": schema must be a JSON Schema object (zod schemas are not available)',
  });
  assert.throws(() => tool(() => 1, {}), { message: "tool(fn, fields): fields.name must be a non-empty string" });
});

/** The agent graph's node `name`, to run as the host would (its action resolves to the update). */
const nodeOf = (graph, name) => graph.nodes.find((n) => n.name === name).action;

test("the agent graph has the react shape", async () => {
  const graph = createReactAgent({ model: "fast", tools: [add, "search"], prompt: "hi" });
  assert.deepEqual(graph.check(), []);
  const spec = graph.describe();
  assert.equal(spec.name, "agent");
  assert.deepEqual(spec.parameters, '{"question":{"type":"string","description":"What to ask the agent."},"messages":{"type":"array","description":"The conversation so far."}}');
  assert.deepEqual(spec.channels, [
    { name: "messages", reducer: "custom", default: "[]" },
    { name: "question", reducer: "last-value", default: null },
  ]);
  assert.deepEqual(spec.nodes.map((n) => n.name), ["agent", "tools"]);
  assert.deepEqual(spec.entryPoints, ["agent"]);
  assert.deepEqual(spec.conditionalEdges[0].pathMap, [{ key: "tools", target: "tools" }, { key: END, target: END }]);
  assert.deepEqual(spec.edges, [{ sources: ["tools"], target: "agent" }]);

  // A first turn: the prompt leads (not stored), the question starts the conversation.
  const reply = { type: "ai", content: "", tool_calls: [{ id: "c", name: "add", args: { a: 1, b: 2 } }], usage_metadata: { input_tokens: 1, output_tokens: 1, total_tokens: 2 } };
  fake.replies.push(reply);
  const update = await nodeOf(graph, "agent")({ messages: [], question: "1+2?" }, {});
  assert.deepEqual(update, { messages: [{ type: "human", content: "1+2?" }, reply] });
  const [call] = fake.modelCalls;
  assert.equal(call.alias, "fast");
  assert.deepEqual(call.messages, [{ type: "system", content: "hi" }, { type: "human", content: "1+2?" }]);
  // Local tools' definitions, then the listed schemas of the named graph tools.
  assert.deepEqual(call.tools, [
    { name: "add", description: "Adds.", parameters: { type: "object" } },
    { name: "search", description: "search things", parameters: { type: "object" } },
  ]);

  // Later turns: the history as it is, no question again.
  fake.replies.push({ type: "ai", content: "3", tool_calls: [] });
  const history = [{ type: "human", content: "1+2?", id: "msg-0" }];
  const next = await nodeOf(graph, "agent")({ messages: history, question: "1+2?" }, {});
  assert.deepEqual(next, { messages: [{ type: "ai", content: "3", tool_calls: [] }] });
  assert.deepEqual(fake.modelCalls[1].messages, [{ type: "system", content: "hi" }, ...history]);

  // A model error fails the node as "<kind>: <text>".
  fake.replies.push(new CapabilityError("quota", "llm tokens used up"));
  await assert.rejects(nodeOf(graph, "agent")({ messages: history }, {}), { message: "quota: llm tokens used up" });
});

test("an agent without tools ends after the model, and takes a model object", async () => {
  const { ChatModel } = await import("../fakes/capabilities.js");
  const bare = createReactAgent({ llm: new ChatModel("slow"), prompt: new SystemMessage("be brief"), name: "bare", description: "Asks." });
  assert.deepEqual(bare.check(), []);
  const spec = bare.describe();
  assert.deepEqual([spec.name, spec.description, spec.nodes.length, spec.finishPoints], ["bare", "Asks.", 1, ["agent"]]);
  fake.replies.push({ type: "ai", content: "ok", tool_calls: [] });
  await nodeOf(bare, "agent")({ messages: [["user", "q"]] }, {});
  assert.deepEqual(fake.modelCalls[0], { alias: "slow", tools: [], messages: [{ type: "system", content: "be brief" }, ["user", "q"]] });
  // Unlisted graph tools are not bound.
  const agent = createReactAgent({ model: "fast", tools: ["unlisted", "broken"] });
  fake.replies.push({ type: "ai", content: "ok", tool_calls: [] });
  await nodeOf(agent, "agent")({ messages: [], question: "q" }, {});
  assert.deepEqual(fake.modelCalls[1].tools.map((t) => t.name), ["broken"]);
  assert.throws(() => createReactAgent({ tools: [] }), { message: 'createReactAgent: give llm (a ChatModel) or model (an alias, e.g. "default")' });
  assert.throws(() => createReactAgent({ model: "m", checkpointer: {} }), /createReactAgent\(\{ checkpointer \}\) is not offered: the host owns checkpoints and thread state/);
  assert.throws(() => createReactAgent({ model: "m", prompt: () => [] }), /prompt must be a string or a SystemMessage/);
});
