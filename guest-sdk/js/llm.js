// Chat with a model through the host: the `llm` capability
// (`"capabilities": ["llm"]` in package.json's `sandgraph` field, and an
// `llm` grant in the operator's config). The graph names a model alias; the
// operator maps it to a provider's model, and the graph never sees the
// provider's address or key.
//
// `chat(request)` is the raw call; `ChatModel` reads like LangChain's chat
// models: `invoke(messages)` resolves to an ai message (the JSON the Rust
// SDK's `prebuilt::ChatModel::invoke` gives) and `bindTools(tools)` offers
// tools to the model.
import { coerceMessages } from "./messages.js";
import { capability, hostCall, LlmError, promised } from "./registry.js";
import { listNow } from "./tools.js";

function describeKind(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/** A state message as `sandgraph:graph/llm` takes it (as the Rust SDK's `to_wire`). */
function toWire(message) {
  switch (message.type) {
    case "human":
      return wire("user", message.content);
    case "tool":
      return { ...wire("tool", message.content), toolCallId: message.tool_call_id };
    case "ai":
      return {
        ...wire("assistant", message.content),
        toolCalls: (message.tool_calls ?? []).map((c) => ({
          id: String(c.id ?? ""),
          name: String(c.name),
          arguments: typeof c.args === "string" ? c.args : JSON.stringify(c.args ?? {}),
        })),
      };
    default:
      return wire("system", message.content);
  }
}

function wire(role, content) {
  return { role, content, toolCalls: [], toolCallId: undefined };
}

const EMPTY_SCHEMA = Object.freeze({ type: "object", properties: {} });

/**
 * `{ name, description, parameters }` of a tool offered to the model: a
 * graph tool's name (its schema from `tools.list()`), an object `{ name,
 * description, parameters }` (or OpenAI's `{ type: "function", function:
 * {...} }`), or a tool object with `name`, `description` and a JSON Schema
 * `schema`.
 */
export function toolDefinition(tool, granted) {
  if (typeof tool === "string") {
    const listed = granted ?? listNow();
    const info = listed.find((t) => t.name === tool);
    if (!info) {
      throw new LlmError("malformed", `no graph tool named "${tool}" is granted (granted: ${listed.map((t) => t.name).join(", ") || "none"})`);
    }
    return { name: info.name, description: info.description, parameters: info.parameters };
  }
  if (tool === null || typeof tool !== "object") {
    throw new LlmError("malformed", `cannot offer ${describeKind(tool)} as a tool: give a name or { name, description, parameters }`);
  }
  const spec = tool.type === "function" && tool.function ? tool.function : tool;
  if (typeof spec.name !== "string" || spec.name === "") throw new LlmError("malformed", "a tool needs a string name");
  const parameters = spec.parameters ?? spec.schema ?? EMPTY_SCHEMA;
  if (parameters === null || typeof parameters !== "object" || Array.isArray(parameters)) {
    throw new LlmError("malformed", `tool "${spec.name}": the parameters must be a JSON Schema object`);
  }
  return { name: spec.name, description: spec.description ?? null, parameters };
}

function parseArgs(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === "object" && !Array.isArray(value) ? value : text;
  } catch {
    return text;
  }
}

/** `chat`, answered at once. */
export function chatNow(request) {
  if (request === null || typeof request !== "object" || Array.isArray(request)) {
    throw new LlmError("malformed", `llm.chat(request): the request must be an object, not ${describeKind(request)}`);
  }
  let messages;
  try {
    messages = coerceMessages(request.messages);
  } catch (err) {
    throw new LlmError("malformed", err.message);
  }
  const offered = request.tools ?? [];
  const granted = offered.some((t) => typeof t === "string") ? listNow() : undefined;
  const wit = {
    model: request.model ?? undefined,
    messages: messages.map(toWire),
    tools: offered.map((t) => {
      const d = toolDefinition(t, granted);
      return { name: d.name, description: d.description ?? undefined, parameters: JSON.stringify(d.parameters) };
    }),
    temperature: request.temperature ?? undefined,
    maxTokens: request.maxTokens ?? undefined,
  };
  const response = hostCall(LlmError, () => capability("llm").chat(wit));
  const input = response.usage.promptTokens;
  const output = response.usage.completionTokens;
  return {
    content: response.content,
    toolCalls: response.toolCalls.map((c) => ({ id: c.id, name: c.name, args: parseArgs(c.arguments) })),
    finishReason: response.finishReason,
    usage: { input_tokens: input, output_tokens: output, total_tokens: input + output },
  };
}

/**
 * Sends `request` — `{ messages, model?, tools?, temperature?, maxTokens? }`
 * — to the model alias `model` (none: the operator's default) and resolves
 * to `{ content, toolCalls: [{ id, name, args }], finishReason, usage }`.
 * The wait holds no CPU and no fuel; it counts against the run's deadline.
 * Rejects with `LlmError` (kinds `denied`, `quota`, `timeout`, `provider`,
 * `malformed`).
 */
export function chat(request) {
  return promised(() => chatNow(request));
}

/** The answer as an ai message (contract section 7, without id). */
function aiMessage(answer) {
  return {
    type: "ai",
    content: answer.content,
    tool_calls: answer.toolCalls,
    usage_metadata: answer.usage,
    response_metadata: { finish_reason: answer.finishReason },
  };
}

/**
 * A chat model behind a model alias (none: the operator's default), shaped
 * like LangChain's: `invoke(messages)` resolves to an ai message,
 * `bindTools(tools)` gives a model offering those tools.
 */
export class ChatModel {
  /** `new ChatModel("fast")`, or `new ChatModel({ model, temperature, maxTokens })`. */
  constructor(options) {
    const o = typeof options === "string" || options === undefined || options === null ? { model: options ?? undefined } : options;
    if (typeof o !== "object" || Array.isArray(o)) throw new TypeError(`new ChatModel(options): give a model alias or { model, temperature, maxTokens }, not ${describeKind(o)}`);
    if (o.model !== undefined && o.model !== null && typeof o.model !== "string") throw new TypeError("new ChatModel(options): model must be a string alias");
    this.model = o.model ?? null;
    this.temperature = o.temperature ?? null;
    this.maxTokens = o.maxTokens ?? null;
    this.tools = Object.freeze([...(o.tools ?? [])]);
  }

  /**
   * A copy of this model that offers `tools`: graph tools by name (their
   * schema read from `tools.list()` at call time), or `{ name,
   * description, parameters }` objects.
   */
  bindTools(tools) {
    if (!Array.isArray(tools)) throw new TypeError("bindTools(tools): tools must be an array");
    return new ChatModel({ model: this.model, temperature: this.temperature, maxTokens: this.maxTokens, tools });
  }

  /**
   * The model's answer to `messages` as an ai message: `type`, `content`,
   * `tool_calls`, `usage_metadata`, `response_metadata`. Messages that do
   * not coerce reject with `LlmError` kind `malformed`.
   */
  invoke(messages) {
    return promised(() => this.invokeNow(messages));
  }

  /** `invoke`, answered at once. */
  invokeNow(messages) {
    return aiMessage(
      chatNow({ model: this.model, messages, tools: this.tools, temperature: this.temperature, maxTokens: this.maxTokens }),
    );
  }
}

/** The `llm` capability as one object: `llm.chat(request)`. */
export const llm = Object.freeze({ chat });
