// Chat messages as a graph keeps them in state, and `messagesStateReducer`
// (alias `addMessages`), the reducer of a `messages` channel (LangGraph's
// `MessagesAnnotation`). The JSON is the same in the Rust, Python and
// JavaScript SDKs (guest-sdk/src/messages.rs is the reference):
//
//   {"type": "human" | "ai" | "system" | "tool", "content": "...", "id": "msg-0",
//    "name": "...",                              (optional; tool messages: the tool)
//    "tool_calls": [{"id", "name", "args"}],     (ai messages, maybe [])
//    "tool_call_id": "...", "status": "success" | "error"}   (tool messages)
//
// Absent optional keys are omitted. `{"type": "remove", "id": X}` removes the
// message X; with the id REMOVE_ALL_MESSAGES it clears the list. The message
// classes (HumanMessage, AIMessage, ...) are shaped like @langchain/core's and
// serialise to that JSON; state always holds the plain objects.
//
// The module has no imports: it runs unchanged under node and in the component.

/** The id of a remove marker that clears every message before it. */
export const REMOVE_ALL_MESSAGES = "__remove_all__";

/** Most messages one side of `messagesStateReducer` may hold. */
const MAX_MESSAGES = 100_000;

/** A role or type name as messages give it, to the JSON type. */
const TYPES = Object.freeze({
  human: "human",
  user: "human",
  ai: "ai",
  assistant: "ai",
  system: "system",
  developer: "system",
  tool: "tool",
  remove: "remove",
});

function typeOf(role) {
  return Object.hasOwn(TYPES, role) ? TYPES[role] : null;
}

function kindOf(value) {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  if (typeof value === "string") return "a string";
  if (typeof value === "number") return "a number";
  if (typeof value === "boolean") return "a boolean";
  return typeof value;
}

/** A value as serde names it in a type error ("invalid type: X, expected ..."). */
function serdeKind(value) {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return "sequence";
  if (typeof value === "object") return "map";
  if (typeof value === "string") return `string ${JSON.stringify(value)}`;
  if (typeof value === "boolean") return `boolean \`${value}\``;
  if (typeof value === "number") return Number.isInteger(value) ? `integer \`${value}\`` : `floating point \`${value}\``;
  return typeof value;
}

/** The string at `object[key]`, or null when absent; throws when not a string. */
function textField(object, key) {
  const value = object[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") throw new TypeError(`${key} must be a string, not ${kindOf(value)}`);
  return value;
}

/** The message in its JSON shape, keys in the documented order. */
function toPlain(type, fields) {
  if (type === "remove") return { type, id: fields.id };
  const out = { type, content: fields.content };
  if (fields.id !== null && fields.id !== undefined) out.id = fields.id;
  if (fields.name !== null && fields.name !== undefined) out.name = fields.name;
  if (type === "ai") out.tool_calls = (fields.tool_calls ?? []).map((c) => ({ id: c.id, name: c.name, args: c.args }));
  if (fields.tool_call_id !== null && fields.tool_call_id !== undefined) out.tool_call_id = fields.tool_call_id;
  if (fields.status !== null && fields.status !== undefined) out.status = fields.status;
  return out;
}

/** The tool calls of an ai message, checked as the Rust SDK's serde does. */
function toolCallsOf(calls) {
  if (!Array.isArray(calls)) throw new TypeError(`tool_calls: invalid type: ${serdeKind(calls)}, expected a sequence`);
  return calls.map((call) => {
    if (call === null || typeof call !== "object" || Array.isArray(call)) {
      throw new TypeError(`tool_calls: invalid type: ${serdeKind(call)}, expected struct ToolCall`);
    }
    for (const key of ["id", "name", "args"]) {
      if (call[key] === undefined) throw new TypeError(`tool_calls: missing field \`${key}\``);
    }
    for (const key of ["id", "name"]) {
      if (typeof call[key] !== "string") throw new TypeError(`tool_calls: invalid type: ${serdeKind(call[key])}, expected a string`);
    }
    return { id: call.id, name: call.name, args: call.args };
  });
}

function fromPair(pair) {
  if (pair.length !== 2 || typeof pair[0] !== "string" || typeof pair[1] !== "string") {
    throw new TypeError("a [role, content] pair needs exactly two strings");
  }
  const [role, content] = pair;
  const type = typeOf(role);
  if (type === "tool") throw new TypeError("a [role, content] pair cannot make a tool message (it needs a tool_call_id)");
  if (type === null || type === "remove") throw new TypeError(`unknown role ${JSON.stringify(role)}`);
  return toPlain(type, { content });
}

function fromObject(object) {
  const typeField = textField(object, "type");
  const roleField = textField(object, "role");
  const role = typeField ?? roleField;
  if (role === null) throw new TypeError("a message object needs a type or role");
  const type = typeOf(role);
  if (type === null) throw new TypeError(`unknown type ${JSON.stringify(role)}`);
  const id = textField(object, "id");
  if (type === "remove") {
    if (id === null) throw new TypeError("a remove marker needs an id");
    return toPlain(type, { id });
  }
  const content = textField(object, "content");
  if (content === null) throw new TypeError("a message object needs a string content");
  const fields = { content, id, name: textField(object, "name") };
  if (type === "ai" && object.tool_calls !== undefined && object.tool_calls !== null) {
    fields.tool_calls = toolCallsOf(object.tool_calls);
  }
  if (type === "tool") {
    fields.tool_call_id = textField(object, "tool_call_id");
    if (fields.tool_call_id === null) throw new TypeError("a tool message needs a tool_call_id");
    fields.status = textField(object, "status") ?? "success";
    if (fields.status !== "success" && fields.status !== "error") {
      throw new TypeError(`status must be success or error, not ${JSON.stringify(fields.status)}`);
    }
  }
  return toPlain(type, fields);
}

/**
 * One message in its JSON shape: a string (a user message), a
 * `[role, content]` pair, an object with `type` or `role` and `content`, or a
 * message class instance. Throws saying why `value` is not a message.
 */
function toMessage(value) {
  if (typeof value === "string") return toPlain("human", { content: value });
  if (Array.isArray(value)) return fromPair(value);
  if (value !== null && typeof value === "object") return fromObject(value);
  throw new TypeError(
    `expected a message (a string, a [role, content] pair or an object with type and content), not ${kindOf(value)}`,
  );
}

/**
 * Coerces one side of `messagesStateReducer` to plain messages: null is
 * empty, a non-array one item (so put a lone `[role, content]` pair in an
 * array). Throws naming the index of the first item that is not a message.
 */
export function coerceMessages(value) {
  if (value === null || value === undefined) return [];
  const items = Array.isArray(value) ? value : [value];
  if (items.length > MAX_MESSAGES) throw new RangeError(`more than ${MAX_MESSAGES} messages`);
  return items.map((item, i) => {
    try {
      return toMessage(item);
    } catch (err) {
      throw new TypeError(`message ${i}: ${err.message}`);
    }
  });
}

/** Gives each message of `right` without an id the next free `msg-<n>`. */
function assignIds(left, right) {
  const used = new Set([...left, ...right].map((m) => m.id).filter((id) => id !== undefined));
  let n = left.length;
  right.forEach((message, i) => {
    if (message.id !== undefined) return;
    let candidate;
    do candidate = `msg-${n++}`;
    while (used.has(candidate));
    used.add(candidate);
    right[i] = toPlain(message.type, { ...message, id: candidate });
  });
}

/**
 * Merges `right` into `left`, LangGraph's `addMessages` with deterministic
 * ids: a message whose id is in `left` replaces it in place, a new one is
 * appended, a remove marker deletes its id (an unknown id is an error), and
 * one with REMOVE_ALL_MESSAGES keeps only what follows it. A message without
 * an id gets `msg-<n>`, n counting from `left`'s length and skipping ids in
 * use. Both sides take anything `coerceMessages` accepts; the result is plain
 * message objects.
 */
export function messagesStateReducer(left, right) {
  let merged = coerceMessages(left);
  let updates = coerceMessages(right);
  assignIds(merged, updates);
  const lastClear = updates.findLastIndex((m) => m.type === "remove" && m.id === REMOVE_ALL_MESSAGES);
  if (lastClear >= 0) {
    merged = [];
    updates = updates.slice(lastClear + 1);
  }
  const at = new Map();
  merged.forEach((m, i) => {
    if (m.id !== undefined && !at.has(m.id)) at.set(m.id, i);
  });
  const removed = new Set();
  for (const message of updates) {
    const { id } = message;
    const index = at.get(id);
    if (message.type === "remove") {
      if (index === undefined) throw new Error(`attempting to delete a message with an id that doesn't exist ('${id}')`);
      removed.add(id);
    } else if (index !== undefined) {
      removed.delete(id);
      merged[index] = message;
    } else {
      at.set(id, merged.length);
      merged.push(message);
    }
  }
  return merged.filter((m) => !(m.id !== undefined && removed.has(m.id)));
}

/** LangGraph's other name for `messagesStateReducer`. */
export const addMessages = messagesStateReducer;

/**
 * A message, shaped like @langchain/core's: `new HumanMessage("hi")` or
 * `new HumanMessage({ content, id, name })`. Its own fields are the message's
 * JSON (checked when made) and `JSON.stringify` gives exactly that JSON.
 */
class BaseMessage {
  constructor(type, fields) {
    const given = typeof fields === "string" ? { content: fields } : { ...(fields ?? {}) };
    if (given.content === undefined && type !== "remove") given.content = "";
    let plain;
    try {
      plain = toMessage({ ...given, type });
    } catch (err) {
      throw new TypeError(`new ${this.constructor.name}(...): ${err.message}`);
    }
    Object.assign(this, plain);
  }

  /** LangChain's name for the type: "human", "ai", "system", "tool" or "remove". */
  getType() {
    return this.type;
  }

  /** LangChain's older name for `getType()`. */
  _getType() {
    return this.type;
  }

  /** The message's JSON shape (what state holds). */
  toJSON() {
    return toMessage({ ...this });
  }
}

/** A user message. */
export class HumanMessage extends BaseMessage {
  constructor(fields) {
    super("human", fields);
  }
}

/** A model message; `tool_calls` are `{ id, name, args }`. */
export class AIMessage extends BaseMessage {
  constructor(fields) {
    super("ai", fields);
  }
}

/** Instructions for the model. */
export class SystemMessage extends BaseMessage {
  constructor(fields) {
    super("system", fields);
  }
}

/**
 * A tool's result: `new ToolMessage({ content, tool_call_id, name, status })`
 * or, as LangChain allows, `new ToolMessage(content, toolCallId, name)`.
 */
export class ToolMessage extends BaseMessage {
  constructor(fields, toolCallId, name) {
    const given = typeof fields === "string" ? { content: fields, tool_call_id: toolCallId, name } : fields;
    super("tool", given);
  }
}

/** A marker removing the message `id` (or every one, with REMOVE_ALL_MESSAGES). */
export class RemoveMessage extends BaseMessage {
  constructor(fields) {
    super("remove", typeof fields === "string" ? { id: fields } : fields);
  }
}

function hasType(type) {
  return (message) => message !== null && typeof message === "object" && typeOf(message.type ?? message.role) === type;
}

/** True for a user message, plain or a HumanMessage. */
export const isHumanMessage = hasType("human");
/** True for a model message, plain or an AIMessage. */
export const isAIMessage = hasType("ai");
/** True for a system message, plain or a SystemMessage. */
export const isSystemMessage = hasType("system");
/** True for a tool message, plain or a ToolMessage. */
export const isToolMessage = hasType("tool");
