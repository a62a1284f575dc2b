// Every rule of messagesStateReducer and of message coercion: the Rust SDK's
// messages_tests.rs, case for case, plus the message classes.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as sdk from "../index.js";
import {
  AIMessage,
  HumanMessage,
  REMOVE_ALL_MESSAGES,
  RemoveMessage,
  SystemMessage,
  ToolMessage,
  addMessages,
  coerceMessages,
  isAIMessage,
  isToolMessage,
  messagesStateReducer,
} from "../messages.js";

const remove = (id) => ({ type: "remove", id });

test("appends with deterministic ids", () => {
  assert.deepEqual(addMessages(null, "hi"), [{ type: "human", content: "hi", id: "msg-0" }]);
  const left = [{ type: "human", content: "a", id: "x" }];
  assert.deepEqual(addMessages(left, [["assistant", "b"], ["system", "c"]]), [
    { type: "human", content: "a", id: "x" },
    { type: "ai", content: "b", id: "msg-1", tool_calls: [] },
    { type: "system", content: "c", id: "msg-2" },
  ]);
});

test("assigned ids skip ids in use", () => {
  // msg-1 is taken on the left, msg-2 by an explicit right id.
  const left = [{ type: "human", content: "a", id: "msg-1" }];
  const right = ["b", { role: "user", content: "c", id: "msg-2" }, "d"];
  assert.deepEqual(
    addMessages(left, right).map((m) => m.id),
    ["msg-1", "msg-3", "msg-2", "msg-4"],
  );
});

test("a known id replaces in place and the last duplicate wins", () => {
  const left = [
    { type: "human", content: "a", id: "1" },
    { type: "human", content: "b", id: "2" },
  ];
  const right = [
    { type: "ai", content: "first", id: "1" },
    { type: "human", content: "new", id: "3" },
    { type: "ai", content: "last", id: "1" },
  ];
  assert.deepEqual(addMessages(left, right), [
    { type: "ai", content: "last", id: "1", tool_calls: [] },
    { type: "human", content: "b", id: "2" },
    { type: "human", content: "new", id: "3" },
  ]);
});

test("remove markers delete and a later message restores", () => {
  const left = [
    { type: "human", content: "a", id: "1" },
    { type: "human", content: "b", id: "2" },
  ];
  assert.deepEqual(addMessages(left, [new RemoveMessage({ id: "1" })]), [{ type: "human", content: "b", id: "2" }]);
  assert.deepEqual(addMessages(left, [remove("2"), { type: "human", content: "again", id: "2" }]), [
    { type: "human", content: "a", id: "1" },
    { type: "human", content: "again", id: "2" },
  ]);
  assert.throws(() => addMessages(left, { type: "remove", id: "9" }), {
    message: "attempting to delete a message with an id that doesn't exist ('9')",
  });
});

test("remove all keeps what follows the last marker", () => {
  const left = [{ type: "human", content: "a", id: "1" }];
  const right = [
    "dropped",
    remove(REMOVE_ALL_MESSAGES),
    "also dropped",
    new RemoveMessage({ id: REMOVE_ALL_MESSAGES }),
    { type: "human", content: "kept", id: "k" },
    "kept too",
  ];
  // Ids were assigned over the whole right side: "kept too" is msg-3.
  assert.deepEqual(addMessages(left, right), [
    { type: "human", content: "kept", id: "k" },
    { type: "human", content: "kept too", id: "msg-3" },
  ]);
  // After the marker, removes see an empty left.
  assert.throws(() => addMessages(left, [remove(REMOVE_ALL_MESSAGES), remove("1")]), {
    message: "attempting to delete a message with an id that doesn't exist ('1')",
  });
  assert.deepEqual(addMessages(left, [remove(REMOVE_ALL_MESSAGES)]), []);
});

test("objects coerce with their optional keys, in the documented key order", () => {
  const right = [
    {
      role: "assistant",
      content: "",
      tool_calls: [
        { id: "c1", name: "search", args: { q: "x" } },
        { id: "c2", name: "raw", args: "not json" },
      ],
    },
    { type: "tool", content: "42", name: "search", tool_call_id: "c1" },
    { role: "developer", content: "be brief", name: "ops", extra: 1 },
  ];
  const merged = addMessages([], right);
  assert.equal(
    JSON.stringify(merged),
    JSON.stringify([
      {
        type: "ai",
        content: "",
        id: "msg-0",
        tool_calls: [
          { id: "c1", name: "search", args: { q: "x" } },
          { id: "c2", name: "raw", args: "not json" },
        ],
      },
      { type: "tool", content: "42", id: "msg-1", name: "search", tool_call_id: "c1", status: "success" },
      { type: "system", content: "be brief", id: "msg-2", name: "ops" },
    ]),
  );
});

test("bad items name their index and why", () => {
  const cases = [
    [["ok", 7], "message 1: expected a message (a string, a [role, content] pair or an object with type and content), not a number"],
    [[["tool", "x"]], "message 0: a [role, content] pair cannot make a tool message (it needs a tool_call_id)"],
    [[["robot", "x"]], 'message 0: unknown role "robot"'],
    [[["human"]], "message 0: a [role, content] pair needs exactly two strings"],
    [[{ content: "x" }], "message 0: a message object needs a type or role"],
    [[{ type: "robot", content: "x" }], 'message 0: unknown type "robot"'],
    [[{ type: "human" }], "message 0: a message object needs a string content"],
    [[{ type: "human", content: 1 }], "message 0: content must be a string, not a number"],
    [[{ type: "tool", content: "x" }], "message 0: a tool message needs a tool_call_id"],
    [[{ type: "tool", content: "x", tool_call_id: "c", status: "ok" }], 'message 0: status must be success or error, not "ok"'],
    [[{ type: "remove" }], "message 0: a remove marker needs an id"],
    [[{ type: "ai", content: "", tool_calls: [{ id: "c" }] }], "message 0: tool_calls: missing field `name`"],
    [[{ type: "ai", content: "", tool_calls: [{ id: 1, name: "n", args: {} }] }], "message 0: tool_calls: invalid type: integer `1`, expected a string"],
    [[{ type: "ai", content: "", tool_calls: {} }], "message 0: tool_calls: invalid type: map, expected a sequence"],
  ];
  for (const [right, expected] of cases) {
    assert.throws(() => addMessages([], right), { message: expected });
    assert.ok(!expected.endsWith("."));
  }
  // The left side too.
  assert.throws(() => addMessages([1], []), {
    message: "message 0: expected a message (a string, a [role, content] pair or an object with type and content), not a number",
  });
});

test("null is empty and a non-array is one item", () => {
  assert.deepEqual(coerceMessages(null), []);
  assert.deepEqual(coerceMessages(undefined), []);
  assert.deepEqual(coerceMessages({ role: "user", content: "x" }), [{ type: "human", content: "x" }]);
  // A lone pair is two strings, not one message.
  assert.deepEqual(coerceMessages(["human", "x"]), [
    { type: "human", content: "human" },
    { type: "human", content: "x" },
  ]);
});

test("the message classes serialise to the plain JSON", () => {
  const call = { id: "c", name: "t", args: {} };
  const ai = new AIMessage({ content: "x", tool_calls: [call], id: "1" });
  assert.equal(JSON.stringify(ai), JSON.stringify({ type: "ai", content: "x", id: "1", tool_calls: [call] }));
  assert.equal(ai.getType(), "ai");
  assert.ok(isAIMessage(ai) && isAIMessage({ role: "assistant", content: "" }) && !isAIMessage("x"));
  const tool = new ToolMessage({ content: "r", name: "t", tool_call_id: "c", status: "error" });
  assert.deepEqual(tool.toJSON(), { type: "tool", content: "r", name: "t", tool_call_id: "c", status: "error" });
  assert.ok(isToolMessage(tool));
  assert.deepEqual(new ToolMessage("r", "c", "t").toJSON(), { type: "tool", content: "r", name: "t", tool_call_id: "c", status: "success" });
  assert.deepEqual(new RemoveMessage({ id: "z" }).toJSON(), { type: "remove", id: "z" });
  assert.deepEqual(new HumanMessage("hi").toJSON(), { type: "human", content: "hi" });
  assert.deepEqual(new SystemMessage({ content: "s", id: "s1" }).toJSON(), { type: "system", content: "s", id: "s1" });
  assert.deepEqual(new AIMessage("yo").toJSON(), { type: "ai", content: "yo", tool_calls: [] });
  // State holds plain objects: a class instance coerces to one.
  const [plain] = addMessages([], [new HumanMessage({ content: "hi", name: "ada" })]);
  assert.equal(Object.getPrototypeOf(plain), Object.prototype);
  assert.deepEqual(plain, { type: "human", content: "hi", id: "msg-0", name: "ada" });
  assert.throws(() => new ToolMessage({ content: "r" }), { message: "new ToolMessage(...): a tool message needs a tool_call_id" });
  assert.throws(() => new HumanMessage({ content: 3 }), { message: "new HumanMessage(...): content must be a string, not a number" });
});

test("MessagesAnnotation is a messages channel reduced in the graph", () => {
  assert.equal(sdk.addMessages, messagesStateReducer);
  const graph = new sdk.StateGraph(sdk.MessagesAnnotation)
    .addNode("reply", () => ({ messages: [new AIMessage("hello")] }))
    .addEdge(sdk.START, "reply")
    .compile({ name: "chat" });
  assert.deepEqual(graph.describe().channels, [{ name: "messages", reducer: "custom", default: "[]" }]);
  const reduced = JSON.parse(graph.reduce("messages", "[]", '["hi",{"type":"ai","content":"yo"}]'));
  assert.equal(reduced[1].id, "msg-1");
  assert.throws(() => graph.reduce("messages", "[]", '[{"type":"remove","id":"q"}]'), {
    message: "channel \"messages\": attempting to delete a message with an id that doesn't exist ('q')",
  });
  // A node's class instances reach the host as the plain JSON.
  const result = graph.runNode("reply", '{"messages":[]}', { tool: "t", step: 0, resume: [], configurable: "{}" });
  assert.deepEqual(result, { tag: "update", val: '{"messages":[{"type":"ai","content":"hello","tool_calls":[]}]}' });
});
