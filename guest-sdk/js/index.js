// @sandgraph/sdk: sandgraph state graphs in JavaScript, shaped like
// @langchain/langgraph. `sandgraph build` bundles this file with the graph and
// compiles both into one wasm component; the compiled graph answers the WIT
// world `sandgraph:graph/graph` (describe, run-node, route, reduce, validate).
//
// The SDK's modules import each other only, so they run unchanged under
// node (for unit tests) and inside the component (QuickJS). The host
// imports are handed in by the build's entry module through
// `__bindComponent`.
import { bindCapabilities } from "./registry.js";
import { installFetch } from "./http.js";
import { settle } from "./jobs.js";

export { CapabilityError, CapabilityNotImported, HttpError, LlmError, ToolError } from "./registry.js";
export { fetch, Headers, Request, Response } from "./http.js";
export { ChatModel, llm } from "./llm.js";
export { tools } from "./tools.js";
import { messagesStateReducer } from "./messages.js";

export {
  AIMessage,
  HumanMessage,
  REMOVE_ALL_MESSAGES,
  RemoveMessage,
  SystemMessage,
  ToolMessage,
  addMessages,
  coerceMessages,
  isAIMessage,
  isHumanMessage,
  isSystemMessage,
  isToolMessage,
  messagesStateReducer,
} from "./messages.js";

/** The virtual node a run starts from. */
export const START = "__start__";
/** The virtual node a run ends at. */
export const END = "__end__";

/** The router of the conditional edge declaring a node's goto targets; never routed. */
const GOTO_ROUTER = "__goto__";
/** A router function's default path map (toolsCondition's), used when addConditionalEdges gets none. */
const PATH_MAP = Symbol.for("sandgraph.pathMap");

/** The channel a strict graph's spec carries to say it is strict. */
const STRICT_MARKER = "__strict__";
/** Longest graph name, in characters (the host's limit). */
const MAX_NAME_LEN = 64;

const BUILTIN = Symbol.for("sandgraph.builtinReducer");

function builtin(kind, fn, initial) {
  Object.defineProperty(fn, BUILTIN, { value: { kind, initial } });
  return fn;
}

/**
 * Reducers the host runs itself (no call into the graph per write). Each is
 * also a plain function with the same meaning, so it works in tests.
 */
export const reducers = Object.freeze({
  /** An array update is concatenated, any other value is pushed. Starts at []. */
  append: builtin("append", (current, update) => (current ?? []).concat(update), () => []),
  /** Shallow-merges an object update into the current object. Starts at {}. */
  merge: builtin("merge", (current, update) => ({ ...(current ?? {}), ...update }), () => ({})),
  /** Adds a number update to the current number. Starts at 0. */
  add: builtin("add", (current, update) => (current ?? 0) + update, () => 0),
});

class ChannelAnnotation {
  constructor(options) {
    this.reducer = options?.reducer ?? options?.value ?? null;
    this.default = options?.default;
  }
}

/**
 * A state key. `Annotation<T>()` (or `Annotation<T>` uncalled) keeps the last
 * value written; `Annotation<T>({ reducer, default })` combines writes with
 * `reducer(current, update)` and starts at `default()`.
 */
export function Annotation(options) {
  if (options !== undefined && options !== null && typeof options !== "object") {
    throw new TypeError("Annotation(options): options must be an object with reducer and/or default");
  }
  return new ChannelAnnotation(options ?? undefined);
}

class AnnotationRoot {
  constructor(spec) {
    if (spec === null || typeof spec !== "object" || Array.isArray(spec)) {
      throw new TypeError("Annotation.Root(spec): spec must be an object of channel annotations");
    }
    this.spec = spec;
  }
}

/** The state's channels, keyed by name, in declaration order. */
Annotation.Root = (spec) => new AnnotationRoot(spec);

/**
 * LangGraph's `MessagesAnnotation`: the channel `messages`, starting at [],
 * whose writes `messagesStateReducer` merges (in the graph, as a custom
 * reducer). Extend it with `Annotation.Root({ ...MessagesAnnotation.spec, ... })`.
 */
export const MessagesAnnotation = Annotation.Root({
  messages: Annotation({ reducer: messagesStateReducer, default: () => [] }),
});

/**
 * LangGraph names sandgraph does not offer, and what it does instead: each
 * fails with `<name> is not offered: <this>`.
 */
const NOT_OFFERED = Object.freeze({
  checkpointer: "checkpointers are not offered: the host owns checkpoints and thread state (run with a thread: sandgraph run --thread ID; a paused run resumes there)",
  store: "stores are not offered: there is no long-term store in the guest; keep data in state (a thread keeps it between runs) or call a graph tool",
  retryPolicy: "RetryPolicy is not offered: a failing node fails the run; retry inside the node, or let the caller run the graph again",
  cachePolicy: "CachePolicy is not offered: node results are not cached; the host runs every node it schedules",
  cache: "caches are not offered: node results are not cached; the host runs every node it schedules",
  streamMode: "streamMode is not offered: the host runs the graph and streams it (sandgraph run --stream prints one JSON line per superstep)",
  interruptBefore: "interruptBefore is not offered: call interrupt(value) in the node; the host keeps the paused thread",
  interruptAfter: "interruptAfter is not offered: call interrupt(value) in the node; the host keeps the paused thread",
});

function notOffered(name, key) {
  return class {
    constructor() {
      throw new Error(`${name} is not offered: ${NOT_OFFERED[key].replace(/^[^:]*: /, "")}`);
    }
  };
}

/** Not offered: the host owns checkpoints and thread state. Constructing it throws saying so. */
export const MemorySaver = notOffered("MemorySaver", "checkpointer");
/** Not offered (LangGraph's newer name for MemorySaver): the host owns checkpoints. */
export const InMemorySaver = notOffered("InMemorySaver", "checkpointer");
/** Not offered: there is no long-term store. Constructing it throws saying so. */
export const InMemoryStore = notOffered("InMemoryStore", "store");
/** Not offered: nodes are not retried. Constructing it throws saying so. */
export const RetryPolicy = notOffered("RetryPolicy", "retryPolicy");
/** Not offered: node results are not cached. Constructing it throws saying so. */
export const CachePolicy = notOffered("CachePolicy", "cachePolicy");

/** A dynamic task: run `node` in the next superstep with `arg` as its input. */
export class Send {
  constructor(node, arg) {
    this.lg_name = "Send";
    this.node = node;
    this.args = arg;
  }
}

/** An update plus dynamic control flow, returned by a node. */
export class Command {
  constructor({ update, goto, resume, graph } = {}) {
    if (graph !== undefined && graph !== null) {
      throw new Error("Command({ graph }) is not offered: there are no parent graphs (a component holds one graph; call another graph as a graph tool)");
    }
    this.lg_name = "Command";
    this.update = update;
    this.goto = goto ?? [];
    this.resume = resume;
    this.graph = graph;
  }
}

/** LangGraph's `Command.PARENT`; a Command with `graph` set throws (not offered). */
Command.PARENT = "__parent__";

/** Thrown by `interrupt` to pause the run; do not catch it. */
export class GraphInterrupt extends Error {
  constructor(value) {
    super("the graph paused for a human (interrupt)");
    this.name = "GraphInterrupt";
    this.value = value;
  }
}

// The task being run: its resume values and how many interrupts it asked.
let currentTask = null;

/**
 * Pauses the run for a human, as LangGraph's `interrupt`: the k-th call in a
 * task returns the caller's k-th resume value once there is one, and until
 * then throws a `GraphInterrupt` that pauses the run with `value` shown to
 * the caller. When the caller resumes, the node runs again from the top.
 */
export function interrupt(value) {
  if (currentTask === null) {
    throw new Error("interrupt() was called outside a node");
  }
  const index = currentTask.interrupts++;
  if (index < currentTask.resume.length) {
    return currentTask.resume[index];
  }
  const pause = new GraphInterrupt(value);
  currentTask.pending ??= pause;
  throw pause;
}

// Where `log` writes: the host's import inside the component, stderr off it.
let hostImports = null;

const LEVELS = ["trace", "debug", "info", "warn", "error"];

/** Writes `message` to the host log at `level` (trace..error); stderr off wasm. */
export function log(level, message) {
  const lvl = LEVELS.includes(level) ? level : "info";
  const text = String(message);
  if (hostImports?.log) {
    hostImports.log(lvl, text);
  } else if (typeof console !== "undefined") {
    console.error(`[${lvl}] ${text}`);
  }
}

/** True once the run's deadline passed or it was cancelled; false off wasm. */
export function cancelled() {
  return hostImports?.cancelled ? hostImports.cancelled() === true : false;
}

/** A failure the graph reports with a WIT error case: `failed`, `unknown` or `invalid-state`. */
class GraphError extends Error {
  constructor(tag, message) {
    super(message);
    this.name = "GraphError";
    this.tag = tag;
  }
}

function kindOf(value) {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  switch (typeof value) {
    case "string":
      return "a string";
    case "number":
      return "a number";
    case "boolean":
      return "a boolean";
    case "object":
      return "an object";
    default:
      return typeof value;
  }
}

function isPlainObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function messageOf(err) {
  if (err instanceof Error) return err.message || err.name || "error";
  if (typeof err === "string") return err;
  try {
    return JSON.stringify(err) ?? String(err);
  } catch {
    return String(err);
  }
}

/** JSON text of `value`; `what` names it in the error. */
function toJson(value, what) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new GraphError("failed", `${what} is not JSON: ${messageOf(err)}`);
  }
  if (text === undefined) {
    throw new GraphError("failed", `${what} is not JSON: ${kindOf(value)}`);
  }
  return text;
}

function parseJson(text, tag, what) {
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new GraphError(tag, `${what}: ${messageOf(err)}`);
  }
}

function pushUnique(list, item, same = (a, b) => a === b) {
  if (!list.some((x) => same(x, item))) list.push(item);
}

function sameEdge(a, b) {
  return a.target === b.target && a.sources.length === b.sources.length && a.sources.every((s, i) => s === b.sources[i]);
}

/** The reducer kind and default (JSON text or null) of one annotation. */
function channelOf(name, annotation) {
  if (annotation === Annotation || annotation === undefined || annotation === null) {
    return { name, reducer: "last-value", default: null, custom: null };
  }
  if (!(annotation instanceof ChannelAnnotation)) {
    throw new TypeError(`channel "${name}": expected Annotation() or Annotation({ reducer, default })`);
  }
  const { reducer } = annotation;
  if (reducer !== null && typeof reducer !== "function") {
    throw new TypeError(`channel "${name}": reducer must be a function`);
  }
  const fixed = reducer?.[BUILTIN];
  let initial = annotation.default;
  if (initial === undefined && fixed) initial = fixed.initial;
  let defaultJson = null;
  if (initial !== undefined) {
    const value = typeof initial === "function" ? initial() : initial;
    defaultJson = toJson(value, `channel "${name}": default`);
  }
  if (reducer === null) {
    return { name, reducer: "last-value", default: defaultJson, custom: null };
  }
  if (fixed) {
    return { name, reducer: fixed.kind, default: defaultJson, custom: null };
  }
  return { name, reducer: "custom", default: defaultJson, custom: reducer };
}

function routerName(path, source, taken) {
  let base = typeof path.name === "string" && /^[A-Za-z_$][\w$-]*$/.test(path.name) ? path.name : "";
  if (base === "" || base === "path" || base === "anonymous" || base === GOTO_ROUTER) base = `${source === START ? "start" : source}_router`;
  let name = base;
  for (let i = 2; taken.has(name); i++) name = `${base}_${i}`;
  return name;
}

/**
 * A state graph: channels from an `Annotation.Root`, nodes, and the edges
 * between them. Build it, then `compile()` it.
 */
export class StateGraph {
  constructor(state, _options) {
    const root = state instanceof AnnotationRoot ? state : Annotation.Root(state);
    this.channels = Object.entries(root.spec).map(([name, a]) => channelOf(name, a));
    this.nodes = [];
    this.edges = [];
    this.conditionalEdges = [];
    this.entryPoints = [];
    this.finishPoints = [];
    this.problems = [];
  }

  /**
   * Adds a node: `action(state, config)` returns an update object, a
   * `Command`, or nothing; an object with `invoke(state, config)` (a
   * ToolNode) works too. `addNode({ a: fnA, b: fnB })` adds several.
   * Options: `description` (shown in tool descriptions and diagrams) and
   * `ends` (where the node's Commands may go).
   */
  addNode(name, action, options) {
    if (isPlainObject(name) && action === undefined) {
      for (const [key, fn] of Object.entries(name)) this.addNode(key, fn);
      return this;
    }
    if (typeof name !== "string") throw new TypeError("addNode(name, action): name must be a string");
    if (action instanceof CompiledStateGraph) {
      throw new Error(
        `addNode("${name}", graph): a compiled graph as a node (a subgraph) is not offered: a component holds one graph; add its nodes to this graph, or build it as its own graph and call it from a node as a graph tool (the tools capability)`,
      );
    }
    if (action !== null && typeof action === "object" && typeof action.invoke === "function") {
      const runnable = action;
      action = (state, config) => runnable.invoke(state, config);
    }
    if (typeof action !== "function") {
      throw new TypeError(`addNode("${name}", action): action must be a function or have an invoke method`);
    }
    if (options !== undefined && options !== null) {
      for (const key of ["retryPolicy", "cachePolicy"]) {
        if (options[key] !== undefined) throw new Error(`addNode("${name}", action, { ${key} }): ${NOT_OFFERED[key]}`);
      }
    }
    this.nodes.push({ name, action, description: options?.description ?? null });
    const ends = options?.ends;
    if (ends !== undefined) {
      if (!Array.isArray(ends) || ends.some((e) => typeof e !== "string")) {
        throw new TypeError(`addNode("${name}", action, { ends }): ends must be an array of node names`);
      }
      this.declareGoto(name, ends);
    }
    return this;
  }

  /**
   * LangGraph's `ends`: where `node`'s Commands may go. The host needs every
   * destination declared: a conditional edge whose router is the reserved
   * `__goto__` (never routed) and whose path map lists each target as itself.
   */
  declareGoto(node, targets) {
    if (targets.length === 0) return;
    let edge = this.conditionalEdges.find((c) => c.source === node && c.router === GOTO_ROUTER);
    if (edge === undefined) {
      edge = { source: node, router: GOTO_ROUTER, path: null, pathMap: [] };
      this.conditionalEdges.push(edge);
    }
    for (const t of targets) pushUnique(edge.pathMap, [t, t], (a, b) => a[0] === b[0]);
  }

  /**
   * A static edge: `end` runs in the superstep after `start` ran. With an
   * array of starts, `end` waits until all of them have run (a join).
   */
  addEdge(start, end) {
    if (typeof end !== "string") throw new TypeError("addEdge(start, end): end must be a node name or END");
    if (Array.isArray(start)) {
      if (start.length === 1) return this.addEdge(start[0], end);
      if (end === END) {
        // The run ends when nothing is left to run: a barrier before END is
        // the same as every source being a finish point.
        for (const s of start) pushUnique(this.finishPoints, s);
        return this;
      }
      pushUnique(this.edges, { sources: [...start], target: end }, sameEdge);
      return this;
    }
    if (typeof start !== "string") throw new TypeError("addEdge(start, end): start must be a node name, START or an array");
    if (start === START) pushUnique(this.entryPoints, end);
    else if (end === END) pushUnique(this.finishPoints, start);
    else pushUnique(this.edges, { sources: [start], target: end }, sameEdge);
    return this;
  }

  /**
   * A conditional edge: after `source` runs (or, from START, before
   * anything runs) `path(state)` picks where to go: a node name or END, a
   * `pathMap` key, a `Send`, or an array of those. `pathMap` is an object
   * from answer to node, or an array of node names. The router's name (in
   * the spec) is the function's name.
   */
  addConditionalEdges(source, path, pathMap) {
    if (isPlainObject(source) && path === undefined) {
      return this.addConditionalEdges(source.source, source.path, source.pathMap);
    }
    if (typeof source !== "string") throw new TypeError("addConditionalEdges(source, path): source must be a node name or START");
    if (typeof path !== "function") throw new TypeError(`addConditionalEdges("${source}", path): path must be a function`);
    let entries = [];
    pathMap ??= path[PATH_MAP];
    if (Array.isArray(pathMap)) entries = pathMap.map((t) => [String(t), String(t)]);
    else if (isPlainObject(pathMap)) entries = Object.entries(pathMap).map(([k, t]) => [k, String(t)]);
    else if (pathMap !== undefined && pathMap !== null) {
      throw new TypeError(`addConditionalEdges("${source}", path, pathMap): pathMap must be an object or an array`);
    }
    const taken = new Set(this.conditionalEdges.map((c) => c.router));
    this.conditionalEdges.push({ source, router: routerName(path, source, taken), path, pathMap: entries });
    return this;
  }

  /** LangGraph's older `setEntryPoint(node)`: `addEdge(START, node)`. */
  setEntryPoint(node) {
    return this.addEdge(START, node);
  }

  /** LangGraph's older `setFinishPoint(node)`: `addEdge(node, END)`. */
  setFinishPoint(node) {
    return this.addEdge(node, END);
  }

  /**
   * The graph, checked and ready to be the component's export. Options:
   * `name` (the tool name; required), `description`, `parameters` (the
   * value-schema DSL, an object or JSON text), `asTool`, `asGraphTool`,
   * `strict`, `timeoutMs`, `validate(input, config)`. Throws listing every
   * problem, as the host would refuse the graph.
   */
  compile(options = {}) {
    if (isPlainObject(options)) {
      for (const key of ["checkpointer", "store", "cache", "interruptBefore", "interruptAfter"]) {
        if (options[key] !== undefined) throw new Error(`compile({ ${key} }): ${NOT_OFFERED[key]}`);
      }
    }
    const compiled = new CompiledStateGraph(this, options);
    const problems = compiled.check();
    if (problems.length > 0) {
      throw new Error(`the graph "${compiled.name}" is not valid:\n  ${problems.join("\n  ")}`);
    }
    lastCompiled = compiled;
    return compiled;
  }
}

let lastCompiled = null;

/**
 * The package's name, which `sandgraph build` hands in before the graph's
 * module runs (package.json "name"): null when the package has none,
 * undefined off the build (node tests).
 */
function packageName() {
  if (!Object.hasOwn(globalThis, "__SANDGRAPH_PACKAGE_NAME__")) return undefined;
  const name = globalThis.__SANDGRAPH_PACKAGE_NAME__;
  return typeof name === "string" ? name : null;
}

/**
 * A graph name from a package name: the scope dropped ("@acme/triage" is
 * "triage") and every character a graph name may not hold ("." and "~" in
 * npm names) made "_".
 */
function graphNameOf(packageName) {
  if (typeof packageName !== "string") return "";
  return packageName.replace(/^@[^/]*\//, "").replace(/[^A-Za-z0-9_-]/g, "_");
}

/** A compiled graph: what the component exports. */
export class CompiledStateGraph {
  constructor(builder, options) {
    if (!isPlainObject(options)) throw new TypeError("compile(options): options must be an object");
    const known = ["name", "description", "parameters", "asTool", "asGraphTool", "strict", "timeoutMs", "validate"];
    for (const key of Object.keys(options)) {
      if (!known.includes(key)) throw new TypeError(`compile(options): unknown option "${key}" (known: ${known.join(", ")})`);
    }
    this.nameSource = options.name === undefined ? packageName() : null;
    this.name = options.name ?? graphNameOf(this.nameSource);
    this.description = options.description ?? null;
    this.asTool = options.asTool === true;
    this.asGraphTool = options.asGraphTool !== false;
    this.strict = options.strict === true;
    this.timeoutMs = options.timeoutMs ?? null;
    this.validator = options.validate ?? null;
    this.problems = [];
    if (options.parameters === undefined || options.parameters === null) this.parameters = null;
    else if (typeof options.parameters === "string") this.parameters = options.parameters;
    else this.parameters = toJson(options.parameters, "parameters");
    if (this.validator !== null && typeof this.validator !== "function") this.problems.push("validate must be a function");
    this.channels = builder.channels.map((c) => ({ ...c }));
    this.nodes = builder.nodes.map((n) => ({ ...n }));
    this.edges = builder.edges.map((e) => ({ sources: [...e.sources], target: e.target }));
    this.conditionalEdges = builder.conditionalEdges.map((c) => ({ ...c, pathMap: c.pathMap.map((e) => [...e]) }));
    this.entryPoints = [...builder.entryPoints];
    this.finishPoints = [...builder.finishPoints];
  }

  /** Every problem the host would refuse the graph for, one string each. */
  check() {
    const problems = [...this.problems];
    const name = this.name;
    const from = typeof this.nameSource === "string" ? ` (from package.json "name" ${JSON.stringify(this.nameSource)}: pass compile({ name }))` : "";
    if (name === "" && this.nameSource === undefined) {
      // Off the build (node tests) the package's name is unknown: the build names it.
    } else if (typeof name !== "string" || name === "") {
      problems.push('graph name is empty: compile({ name: "my_graph" }), or give package.json a "name" (sandgraph build passes it in)');
    } else if ([...name].length > MAX_NAME_LEN) problems.push(`graph name "${name}" is longer than ${MAX_NAME_LEN} characters${from}`);
    else if (!/^[A-Za-z0-9_-]+$/.test(name)) problems.push(`graph name "${name}" may only contain ascii letters, digits, "_" and "-"`);
    else if (name === "run_code") problems.push(`graph name "run_code" is reserved${from}`);
    if (this.parameters !== null) {
      try {
        const p = JSON.parse(this.parameters);
        if (!isPlainObject(p)) problems.push(`parameters must be a json object, not ${kindOf(p)}`);
      } catch (err) {
        problems.push(`parameters are not json: ${messageOf(err)}`);
      }
    }
    if (this.timeoutMs !== null && !(Number.isSafeInteger(this.timeoutMs) && this.timeoutMs > 0)) {
      problems.push("timeoutMs must be a positive integer");
    }
    const channels = new Set();
    for (const c of this.channels) {
      if (c.name === "") problems.push("channel name is empty");
      if (c.name === STRICT_MARKER) problems.push(`channel name "${STRICT_MARKER}" is reserved (it marks a strict graph)`);
      if (channels.has(c.name)) problems.push(`channel "${c.name}" is declared twice`);
      channels.add(c.name);
    }
    if (this.nodes.length === 0) problems.push("the graph has no nodes");
    const nodes = new Set();
    for (const n of this.nodes) {
      if (n.name === "") problems.push("node name is empty");
      else if (n.name === START || n.name === END) {
        problems.push(`node name "${n.name}" is reserved`);
        continue;
      }
      if (nodes.has(n.name)) problems.push(`node "${n.name}" is declared twice`);
      nodes.add(n.name);
    }
    if (this.entryPoints.length === 0 && !this.conditionalEdges.some((c) => c.source === START)) {
      problems.push("the graph has no entry point and no conditional edge from __start__ (add addEdge(START, node))");
    }
    for (const e of this.entryPoints) if (!nodes.has(e)) problems.push(`edge "__start__" -> "${e}": unknown target node "${e}"`);
    for (const f of this.finishPoints) if (!nodes.has(f)) problems.push(`edge "${f}" -> "__end__": unknown source node "${f}"`);
    for (const edge of this.edges) {
      const label = edge.sources.length === 1 ? `edge "${edge.sources[0]}" -> "${edge.target}"` : `edge [${edge.sources.map((s) => `"${s}"`).join(", ")}] -> "${edge.target}"`;
      const seen = new Set();
      for (const s of edge.sources) {
        if (s === START) problems.push(`${label}: __start__ cannot be in a join; add an edge from START on its own`);
        else if (s === END) problems.push(`${label}: __end__ cannot be an edge source`);
        else if (!nodes.has(s)) problems.push(`${label}: unknown source node "${s}"`);
        if (seen.has(s)) problems.push(`${label}: source "${s}" is listed twice`);
        seen.add(s);
      }
      if (edge.target !== END && !nodes.has(edge.target)) problems.push(`${label}: unknown target node "${edge.target}"`);
    }
    for (const c of this.conditionalEdges) {
      const label = `conditional edge from "${c.source}"`;
      if (c.source !== START && !nodes.has(c.source)) problems.push(`${label}: unknown source node "${c.source}"`);
      const keys = new Set();
      for (const [key, target] of c.pathMap) {
        if (keys.has(key)) problems.push(`${label}: path-map key "${key}" is listed twice`);
        keys.add(key);
        if (target !== END && !nodes.has(target)) problems.push(`${label}: path-map key "${key}" leads to unknown node "${target}"`);
      }
    }
    this.checkReachability(problems);
    return problems;
  }

  /**
   * Every node must be reachable from START (the host's rule): a join
   * reaches its target once all its sources are reached; a conditional edge
   * without a path map may reach any node. A Command's goto and a node's
   * Sends do not count: declare them with `addNode(name, fn, { ends })`.
   */
  checkReachability(problems) {
    const reached = new Set([START]);
    for (;;) {
      const before = reached.size;
      for (const e of this.entryPoints) reached.add(e);
      for (const edge of this.edges) {
        if (edge.sources.every((s) => reached.has(s))) reached.add(edge.target);
      }
      for (const c of this.conditionalEdges) {
        if (!reached.has(c.source)) continue;
        if (c.pathMap.length === 0) for (const n of this.nodes) reached.add(n.name);
        else for (const [, target] of c.pathMap) reached.add(target);
      }
      if (reached.size === before) break;
    }
    const reported = new Set();
    for (const n of this.nodes) {
      if (n.name === START || n.name === END || reached.has(n.name) || reported.has(n.name)) continue;
      reported.add(n.name);
      problems.push(`node "${n.name}" is unreachable from __start__ (add an edge to it; for a Command's goto or a Send, addNode(source, fn, { ends: ["${n.name}"] }))`);
    }
  }

  /** Not offered: the host runs the graph (sandgraph run, sandgraph call); node tests call runNode. */
  invoke() {
    throw new Error("graph.invoke() is not offered in the guest: the host runs the graph (sandgraph run, sandgraph call); unit-test nodes with runNode");
  }

  /** Not offered: the host runs and streams the graph. */
  stream() {
    throw new Error(`graph.stream() is not offered in the guest: ${NOT_OFFERED.streamMode}`);
  }

  /** The WIT `graph-spec` record (option fields are null when unset). */
  describe() {
    const channels = this.channels.map((c) => ({ name: c.name, reducer: c.reducer, default: c.default }));
    if (this.strict) channels.push({ name: STRICT_MARKER, reducer: "last-value", default: null });
    return {
      name: this.name,
      description: this.description,
      registration: { asTool: this.asTool, asGraphTool: this.asGraphTool },
      parameters: this.parameters,
      timeoutMs: this.timeoutMs,
      channels,
      nodes: this.nodes.map((n) => ({ name: n.name, description: n.description })),
      edges: this.edges.map((e) => ({ sources: [...e.sources], target: e.target })),
      conditionalEdges: this.conditionalEdges.map((c) => ({
        source: c.source,
        router: c.router,
        pathMap: c.pathMap.map(([key, target]) => ({ key, target })),
      })),
      entryPoints: [...this.entryPoints],
      finishPoints: [...this.finishPoints],
    };
  }

  /**
   * Runs node `node` on `state` (JSON text) with the WIT call context;
   * returns the WIT `node-result` or throws a GraphError.
   */
  runNode(node, state, context) {
    const entry = this.nodes.find((n) => n.name === node);
    if (!entry) throw new GraphError("unknown", `unknown node "${node}"`);
    const input = parseJson(state, "invalid-state", `node "${node}": state`);
    const { config, resume } = configOf(context);
    const task = { resume, interrupts: 0, pending: null };
    const outer = currentTask;
    currentTask = task;
    let result;
    try {
      // An async node runs to completion here: its jobs run before the
      // task is put back, so interrupt() after an await is still its own.
      result = settle(entry.action(input, config), `node "${node}"`);
    } catch (err) {
      if (err instanceof GraphInterrupt) {
        return { tag: "interrupt", val: toJson(err.value ?? null, `node "${node}": the interrupt value`) };
      }
      throw err;
    } finally {
      currentTask = outer;
    }
    if (task.pending) {
      // The node caught the GraphInterrupt; the question still has no answer.
      return { tag: "interrupt", val: toJson(task.pending.value ?? null, `node "${node}": the interrupt value`) };
    }
    return nodeResult(node, result);
  }

  /** Runs router `router` on `state` (JSON text); returns WIT route targets. */
  route(router, state) {
    const edge = this.conditionalEdges.find((c) => c.router === router && router !== GOTO_ROUTER);
    if (!edge) throw new GraphError("unknown", `unknown router "${router}"`);
    const input = parseJson(state, "invalid-state", `router "${router}": state`);
    const answer = settle(edge.path(input), `router "${router}"`);
    const answers = answer === undefined || answer === null ? [] : Array.isArray(answer) ? answer : [answer];
    return answers.map((a, i) => {
      if (typeof a === "string") return { tag: "node", val: a };
      if (isSend(a)) return { tag: "send", val: sendOf(a, `router "${router}"`) };
      throw new GraphError("failed", `router "${router}" returned ${kindOf(a)}${answers.length > 1 ? ` at index ${i}` : ""}: return a node name, END, a Send, or an array of those`);
    });
  }

  /** Combines a custom channel's current value with one update (JSON texts). */
  reduce(channel, current, update) {
    const entry = this.channels.find((c) => c.name === channel);
    if (!entry || entry.custom === null) throw new GraphError("unknown", `no custom reducer for channel "${channel}"`);
    const now = parseJson(current, "invalid-state", "current value");
    const next = parseJson(update, "invalid-state", "update");
    let reduced;
    if (now === null && entry.default === null) {
      // As LangGraph: a channel without a value takes its first write as it is.
      reduced = next;
    } else {
      try {
        reduced = settle(entry.custom(now, next), `channel "${channel}": the reducer`);
      } catch (err) {
        throw new GraphError("failed", `channel "${channel}": ${messageOf(err)}`);
      }
    }
    if (reduced === undefined) throw new GraphError("failed", `channel "${channel}": the reducer returned undefined`);
    return toJson(reduced, `channel "${channel}": the reduced value`);
  }

  /**
   * Checks a tool call's input before the run: the `validate` option gets
   * the input and the config; returning a string, returning false or
   * throwing refuses the call with that reason.
   */
  validate(input, context) {
    if (this.validator === null) return;
    const value = parseJson(input, "invalid-state", "invalid input");
    const { config } = configOf(context);
    let verdict;
    try {
      verdict = settle(this.validator(value, config), "validate");
    } catch (err) {
      throw new GraphError("failed", messageOf(err));
    }
    if (typeof verdict === "string") throw new GraphError("failed", verdict);
    if (verdict === false) throw new GraphError("failed", "the input is not valid");
  }
}

function isSend(value) {
  return value instanceof Send || (value !== null && typeof value === "object" && value.lg_name === "Send");
}

function sendOf(send, what) {
  if (typeof send.node !== "string" || send.node === "") {
    throw new GraphError("failed", `${what}: a Send needs a node name`);
  }
  return { node: send.node, payload: toJson(send.args ?? null, `${what}: the payload of the Send to "${send.node}"`) };
}

/** The node config (LangGraph's RunnableConfig shape) and the resume values. */
function configOf(context) {
  const ctx = context ?? {};
  const configurable = ctx.configurable === undefined || ctx.configurable === null ? {} : parseJson(ctx.configurable, "invalid-state", "call context: configurable");
  if (!isPlainObject(configurable)) {
    throw new GraphError("invalid-state", `call context: configurable must be a JSON object, not ${kindOf(configurable)}`);
  }
  const resume = (ctx.resume ?? []).map((text, i) => parseJson(text, "invalid-state", `call context: resume value ${i}`));
  const threadId = ctx.threadId ?? null;
  const config = {
    configurable: threadId === null ? { ...configurable } : { ...configurable, thread_id: threadId },
    tool: ctx.tool ?? "",
    request: ctx.request ?? null,
    threadId,
    step: ctx.step ?? 0,
  };
  return { config, resume };
}

/** The WIT node-result of what a node returned. */
function nodeResult(node, result) {
  if (result === undefined || result === null) return { tag: "update", val: "{}" };
  if (result instanceof Command || (isPlainObject(result) && result.lg_name === "Command")) {
    const update = result.update ?? {};
    if (!isPlainObject(update)) throw new GraphError("failed", `node "${node}": a Command's update must be an object, not ${kindOf(update)}`);
    const targets = Array.isArray(result.goto) ? result.goto : [result.goto];
    const goto = [];
    const sends = [];
    for (const t of targets) {
      if (typeof t === "string") goto.push(t);
      else if (isSend(t)) sends.push(sendOf(t, `node "${node}"`));
      else throw new GraphError("failed", `node "${node}": a Command's goto takes node names, END and Sends, not ${kindOf(t)}`);
    }
    return { tag: "command", val: { update: toJson(update, `node "${node}": the update`), goto, sends } };
  }
  if (!isPlainObject(result)) {
    throw new GraphError("failed", `node "${node}" returned ${kindOf(result)}: return an object of state writes, a Command, or nothing`);
  }
  return { tag: "update", val: toJson(result, `node "${node}": the update`) };
}

/** True for an allocation failure of the JS engine: the host reports it (memory_limit). */
function isOutOfMemory(err) {
  return err instanceof Error && err.name === "InternalError" && /out of memory/i.test(err.message);
}

/** What QuickJS says when a graph calls a timer it does not have. */
const NO_TIMER = /^'?(setTimeout|setInterval|setImmediate|requestAnimationFrame)'? is not defined$/;

/** The WIT error case of anything an export threw. */
function errorCase(err) {
  if (err instanceof GraphError) return { tag: err.tag, val: err.message };
  const timer = err instanceof ReferenceError ? NO_TIMER.exec(err.message) : null;
  if (timer) {
    return {
      tag: "failed",
      val: `${timer[1]} is not available in a graph: a node runs to completion within its call, so nothing may run later (await the sdk's calls instead)`,
    };
  }
  return { tag: "failed", val: messageOf(err) };
}

/**
 * The component's `graph` export. Internal: the entry module `sandgraph
 * build` writes calls it with the graph's module and the host imports.
 * Every throw becomes the WIT error case; only an exhausted memory cap is
 * left to trap, so the host reports it as memory_limit.
 */
export function __bindComponent(graphModule, host, capabilities) {
  hostImports = host ?? null;
  bindCapabilities(capabilities);
  if (capabilities?.http) installFetch();
  const graph = pickGraph(graphModule);
  // What the graph module left queued while it was loaded runs now, in the
  // snapshot, not in the first node's call.
  settle(undefined, "the graph module");
  const guard = (fn, toError = errorCase) => (...args) => {
    try {
      return fn(...args);
    } catch (err) {
      if (isOutOfMemory(err)) throw err;
      throw toError(err);
    }
  };
  return {
    describe: () => graph.describe(),
    runNode: guard((node, state, context) => graph.runNode(node, state, context)),
    route: guard((router, state) => graph.route(router, state)),
    reduce: guard((channel, current, update) => graph.reduce(channel, current, update)),
    validate: guard(
      (input, context) => graph.validate(input, context),
      (err) => (err instanceof GraphError ? err.message : messageOf(err)),
    ),
  };
}

function pickGraph(graphModule) {
  const exported = [graphModule?.graph, graphModule?.default].find((g) => g instanceof CompiledStateGraph);
  if (exported) return exported;
  if (lastCompiled) return lastCompiled;
  throw new Error("the graph module compiled no graph: end it with `export const graph = builder.compile({ name: \"my_graph\" })`");
}
