// @sandgraph/sdk/prebuilt: LangGraph's prebuilt agent blocks over the host's
// models and tools, as `@langchain/langgraph/prebuilt` offers them: `tool`,
// `ToolNode`, `toolsCondition` and `createReactAgent`. They keep the
// conversation in the `messages` channel (MessagesAnnotation) as the plain
// message JSON of ./messages.js; guest-sdk/src/prebuilt.rs is the reference.
//
// The model and the graph tools are the capability module's: a `ChatModel`
// (`new ChatModel(alias)`, `bindTools(definitions)`, `invoke(messages)`
// resolving to an ai message) and `tools` (`list()`, `call(name, args)`).

import { ChatModel, tools as graphTools } from "./capabilities.js";
import { Annotation, END, MessagesAnnotation, START, StateGraph } from "./index.js";
import { ToolMessage, coerceMessages } from "./messages.js";

/** The channel the blocks read and write. */
const MESSAGES = "messages";
/** Most tool calls one ToolNode run executes. */
const MAX_TOOL_CALLS = 128;
/** The path map of `toolsCondition` when none is given (read by addConditionalEdges). */
const PATH_MAP = Symbol.for("sandgraph.pathMap");

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function messageOf(err) {
  if (err instanceof Error) return err.message || err.name || "error";
  return typeof err === "string" ? err : String(err);
}

/**
 * A capability error as `<kind>: <text>` (the WIT error case first), the way
 * the Rust SDK reports a host tool's or model's failure.
 */
function withKind(err) {
  const text = messageOf(err);
  const kind = err?.kind;
  return typeof kind === "string" && kind !== "" && !text.startsWith(`${kind}: `) ? `${kind}: ${text}` : text;
}

/** A tool function defined in the graph: offered to a model and run by a ToolNode in the node's own task. */
export class StructuredTool {
  constructor(fn, { name, description = "", schema } = {}) {
    if (typeof fn !== "function") throw new TypeError("tool(fn, fields): fn must be a function");
    if (typeof name !== "string" || name === "") throw new TypeError("tool(fn, fields): fields.name must be a non-empty string");
    if (typeof description !== "string") throw new TypeError(`tool "${name}": description must be a string`);
    const parameters = schema ?? { type: "object", properties: {} };
    if (!isPlainObject(parameters)) {
      throw new TypeError(`tool "${name}": schema must be a JSON Schema object (zod schemas are not available)`);
    }
    this.name = name;
    this.description = description;
    this.schema = parameters;
    this.func = fn;
  }

  /** Runs the tool on the model's arguments; resolves to its result. */
  async invoke(args, config) {
    return this.func(args, config);
  }

  /** How the tool is offered to a model: `{ name, description, parameters }`. */
  definition() {
    return { name: this.name, description: this.description, parameters: this.schema };
  }
}

/**
 * LangChain's `tool(fn, { name, description, schema })`: `schema` is a JSON
 * Schema object for the arguments. `fn(args, config)` returns (or resolves
 * to) the result: a string is the tool message's content as it is, other
 * JSON its compact text. Throwing makes an error tool message (see ToolNode).
 */
export function tool(fn, fields) {
  return new StructuredTool(fn, fields);
}

/** The local tools (objects with a name and invoke) and graph tool names of a tools list. */
function splitTools(tools, what) {
  if (!Array.isArray(tools)) throw new TypeError(`${what}: tools must be an array of tools and graph tool names`);
  const local = [];
  const named = [];
  tools.forEach((t, i) => {
    if (typeof t === "string") named.push(t);
    else if (t !== null && typeof t === "object" && typeof t.name === "string" && typeof t.invoke === "function") local.push(t);
    else throw new TypeError(`${what}: tools[${i}] is neither a tool (made by tool()) nor a graph tool name`);
  });
  return { local, named };
}

/** The messages of a state with `messages`, or of a list. */
function messagesOf(input) {
  return coerceMessages(isPlainObject(input) && Object.hasOwn(input, MESSAGES) ? input[MESSAGES] : input);
}

/**
 * LangGraph's ToolNode: runs the tool calls of the latest ai message, in
 * order, one after another: local tools in the graph, any other name as a
 * graph tool through the host (`tools.call`) when `tools.list()` has it.
 * Resolves to `{ messages: [tool message, ...] }` in call order.
 *
 * A failing call becomes a tool message with status "error" and content
 * `Error: <message>\n Please fix your mistakes.` (a host tool error's message
 * is `<kind>: <text>`), unless `handleToolErrors` is false, when the node
 * fails. An unknown tool name or arguments that are not a JSON object are
 * always error messages. Add it as a node: `addNode("tools", new ToolNode(tools))`.
 */
export class ToolNode {
  constructor(tools = [], options = {}) {
    if (!isPlainObject(options)) throw new TypeError("new ToolNode(tools, options): options must be an object");
    this.tools = splitTools(tools, "new ToolNode(tools)").local;
    this.handleToolErrors = options.handleToolErrors ?? true;
    this.name = options.name ?? "tools";
  }

  /** Runs the calls for `input`: a state with `messages`, or a list of messages. */
  async invoke(input, config) {
    const ai = messagesOf(input).findLast((m) => m.type === "ai");
    if (ai === undefined) throw new Error("no ai message found in input");
    if (ai.tool_calls.length > MAX_TOOL_CALLS) {
      throw new Error(`the ai message has ${ai.tool_calls.length} tool calls, more than ${MAX_TOOL_CALLS}`);
    }
    let listed = null;
    const out = [];
    for (const call of ai.tool_calls) {
      const local = this.tools.find((t) => t.name === call.name);
      let result;
      if (!isPlainObject(call.args)) {
        result = { error: `Error: the arguments of ${call.name} are not a JSON object` };
      } else if (local !== undefined) {
        result = await this.handled(() => local.invoke(call.args, config), messageOf);
      } else {
        listed ??= await graphTools.list();
        if (listed.some((t) => t.name === call.name)) {
          result = await this.handled(() => graphTools.call(call.name, call.args), withKind);
        } else {
          const names = [...this.tools, ...listed].map((t) => t.name).join(", ");
          result = { error: `Error: ${call.name} is not a valid tool, try one of [${names}].` };
        }
      }
      out.push(toolMessage(call, result));
    }
    return { [MESSAGES]: out };
  }

  /** `{ value }` of a call, `{ error }` with the error message's content, or the node's failure. */
  async handled(run, describe) {
    try {
      return { value: await run() };
    } catch (err) {
      if (!this.handleToolErrors) throw new Error(describe(err));
      return { error: `Error: ${describe(err)}\n Please fix your mistakes.` };
    }
  }
}

/** A successful call's content: a string as it is, other JSON its compact text; null when it is not JSON. */
function resultText(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value ?? null) ?? null;
  } catch {
    return null;
  }
}

function toolMessage(call, result) {
  const fields = { name: call.name, tool_call_id: call.id };
  let error = result.error;
  if (error === undefined) {
    const content = resultText(result.value);
    if (content !== null) return new ToolMessage({ ...fields, content, status: "success" }).toJSON();
    error = `Error: the result of ${call.name} is not JSON`;
  }
  return new ToolMessage({ ...fields, content: error, status: "error" }).toJSON();
}

/**
 * LangGraph's toolsCondition: "tools" when the last message (of `messages`,
 * or of a list) is an ai message with tool calls, else END. Its path map,
 * used when addConditionalEdges gets none, is `{ tools: "tools", [END]: END }`.
 */
function tools_condition(state) {
  const messages = messagesOf(state);
  if (messages.length === 0) throw new Error("no messages found in input state");
  const last = messages[messages.length - 1];
  return last.type === "ai" && last.tool_calls.length > 0 ? "tools" : END;
}
Object.defineProperty(tools_condition, PATH_MAP, { value: Object.freeze({ tools: "tools", [END]: END }) });

export const toolsCondition = tools_condition;

/** The tool definitions to bind: local tools', then the listed schemas of the named graph tools, in the order given. */
async function definitions(tools) {
  let listed = null;
  const out = [];
  for (const t of tools) {
    if (typeof t !== "string") {
      out.push(typeof t.definition === "function" ? t.definition() : { name: t.name, description: t.description ?? "", parameters: t.schema ?? {} });
      continue;
    }
    listed ??= await graphTools.list();
    const info = listed.find((l) => l.name === t);
    if (info !== undefined) out.push({ name: info.name, description: info.description ?? null, parameters: info.parameters });
  }
  return out;
}

/** The instructions of `prompt`: a string or a SystemMessage. */
function promptOf(prompt) {
  if (prompt === undefined || prompt === null) return null;
  if (typeof prompt === "string") return prompt;
  if (isPlainObject(prompt) && prompt.type === "system" && typeof prompt.content === "string") return prompt.content;
  throw new TypeError("createReactAgent: prompt must be a string or a SystemMessage (prompt functions are not offered)");
}

/** The model of `llm` (a ChatModel) or `model` (an alias, or a ChatModel). */
function modelOf(llm, model) {
  const given = llm ?? model;
  if (typeof given === "string") return new ChatModel(given);
  if (given !== null && typeof given === "object" && typeof given.invoke === "function") return given;
  throw new TypeError('createReactAgent: give llm (a ChatModel) or model (an alias, e.g. "default")');
}

/** The agent's parameters: a question or a conversation. */
const PARAMETERS = {
  question: { type: "string", description: "What to ask the agent." },
  messages: { type: "array", description: "The conversation so far." },
};

/**
 * LangGraph's prebuilt ReAct agent, compiled: the `messages` channel (and
 * `question`), a node `agent` calling the model with the tools bound (and
 * `prompt` as a leading system message on every call, not stored) and, with
 * tools, a ToolNode `tools` with `agent -toolsCondition-> {tools, END}` and
 * `tools -> agent`.
 *
 * `llm` is a ChatModel, or `model` the alias of one (`"default"`); `tools`
 * mixes local tools (made by `tool()`) and names of granted graph tools,
 * whose schemas `tools.list()` gives at run time. The graph is named
 * `name` (default "agent"); other options (`description`, `asTool`, ...) go
 * to `compile`. Its input is a `question` (which starts the conversation as a
 * user message) or `messages`.
 */
export function createReactAgent({ llm, model, tools = [], prompt, name = "agent", ...compileOptions } = {}) {
  for (const key of ["checkpointer", "store"]) {
    if (compileOptions[key] !== undefined) {
      throw new Error(`createReactAgent({ ${key} }) is not offered: the host owns checkpoints and thread state (run with a thread: sandgraph run --thread)`);
    }
  }
  const chat = modelOf(llm, model);
  const { local } = splitTools(tools, "createReactAgent");
  const instructions = promptOf(prompt);
  const offered = [...tools];
  async function agent(state) {
    const history = Array.isArray(state[MESSAGES]) ? state[MESSAGES] : [];
    // Written back with the reply: a `question` starts the conversation.
    const fresh = history.length === 0 && typeof state.question === "string" ? [{ type: "human", content: state.question }] : [];
    const system = instructions === null ? [] : [{ type: "system", content: instructions }];
    const bound = chat.bindTools(await definitions(offered));
    let reply;
    try {
      reply = await bound.invoke([...system, ...history, ...fresh]);
    } catch (err) {
      throw new Error(withKind(err));
    }
    return { [MESSAGES]: [...fresh, reply] };
  }
  const State = Annotation.Root({ ...MessagesAnnotation.spec, question: Annotation() });
  const graph = new StateGraph(State).addNode("agent", agent).addEdge(START, "agent");
  if (tools.length === 0) graph.addEdge("agent", END);
  else {
    graph
      .addNode("tools", new ToolNode(local))
      .addConditionalEdges("agent", toolsCondition)
      .addEdge("tools", "agent");
  }
  return graph.compile({ name, parameters: PARAMETERS, ...compileOptions });
}
