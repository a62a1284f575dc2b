// Types of @sandgraph/sdk: sandgraph state graphs with @langchain/langgraph's API.

/** The virtual node a run starts from. */
export declare const START: "__start__";
/** The virtual node a run ends at. */
export declare const END: "__end__";

/** `(current, update) => next`: how writes to a channel combine. */
export type Reducer<V, U = V> = (current: V, update: U) => V;

/** Reducers the host runs itself; each is also a plain function. */
export declare const reducers: {
  /** An array update is concatenated, any other value is pushed. Starts at []. */
  readonly append: <T>(current: T[], update: T | T[]) => T[];
  /** Shallow-merges an object update into the current object. Starts at {}. */
  readonly merge: <T extends object>(current: T, update: Partial<T>) => T;
  /** Adds a number update to the current number. Starts at 0. */
  readonly add: (current: number, update: number) => number;
};

/** One channel (state key): its value type, update type, reducer and default. */
export interface ChannelAnnotation<V, U = V> {
  readonly reducer: Reducer<V, U> | null;
  readonly default: (() => V) | V | undefined;
  /** Type-level only. */
  readonly ValueType?: V;
  /** Type-level only. */
  readonly UpdateType?: U;
}

/** What `Annotation<T>({ ... })` takes. */
export interface ChannelOptions<V, U = V> {
  /** Combines writes (may be async); without one, the channel keeps the last value written. */
  reducer?: Reducer<V, U> | ((current: V, update: U) => Promise<V>);
  /** LangGraph's older name for `reducer`. */
  value?: Reducer<V, U>;
  /** The initial value (a function returning it, or the value). */
  default?: (() => V) | V;
}

export type StateDefinition = Record<string, ChannelAnnotation<any, any> | typeof Annotation>;

type ValueOf<C> = C extends ChannelAnnotation<infer V, any> ? V : any;
type UpdateOf<C> = C extends ChannelAnnotation<any, infer U> ? U : any;

/** The state a node receives. */
export type StateType<SD extends StateDefinition> = { [K in keyof SD]: ValueOf<SD[K]> };
/** The writes a node may return. */
export type UpdateType<SD extends StateDefinition> = { [K in keyof SD]?: UpdateOf<SD[K]> };

/** The channels of a state, from `Annotation.Root`. */
export interface AnnotationRoot<SD extends StateDefinition> {
  readonly spec: SD;
  /** Type-level only: `typeof Root.State`. */
  readonly State: StateType<SD>;
  /** Type-level only: `typeof Root.Update`. */
  readonly Update: UpdateType<SD>;
}

/**
 * A channel. `Annotation<T>()` (or `Annotation<T>` uncalled) keeps the last
 * value written; `Annotation<T>({ reducer, default })` combines writes.
 */
export declare function Annotation<V>(): ChannelAnnotation<V>;
export declare function Annotation<V, U = V>(options: ChannelOptions<V, U>): ChannelAnnotation<V, U>;
export declare namespace Annotation {
  function Root<SD extends StateDefinition>(spec: SD): AnnotationRoot<SD>;
}

/** A dynamic task: run `node` in the next superstep with `args` as its input. */
export declare class Send<A = unknown> {
  constructor(node: string, args: A);
  readonly lg_name: "Send";
  readonly node: string;
  readonly args: A;
}

export interface CommandParams<U> {
  /** State writes. */
  update?: U;
  /** Node names, END or Sends to run next (in addition to the static edges). */
  goto?: string | Send | Array<string | Send>;
  /** Not used: the host passes resume values. */
  resume?: unknown;
  /** Not offered: setting it throws (there are no parent graphs). */
  graph?: never;
}

/** An update plus dynamic control flow, returned by a node. */
export declare class Command<U = Record<string, unknown>> {
  constructor(params?: CommandParams<U>);
  readonly lg_name: "Command";
  readonly update: U | undefined;
  readonly goto: string | Send | Array<string | Send>;
  /** LangGraph's parent-graph marker; a Command with `graph` set throws (not offered). */
  static readonly PARENT: "__parent__";
}

/** Thrown by `interrupt` to pause the run; do not catch it. */
export declare class GraphInterrupt extends Error {
  readonly value: unknown;
}

/**
 * Pauses the run for a human: the k-th call in a task returns the k-th resume
 * value once the caller gave one, and until then throws a GraphInterrupt.
 */
export declare function interrupt<I = unknown, R = any>(value: I): R;

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** Writes to the host log (stderr off wasm). */
export declare function log(level: LogLevel, message: string): void;

/** True once the run's deadline passed or it was cancelled; false off wasm. */
export declare function cancelled(): boolean;

/** What a node (and `validate`) gets as its second argument. */
export interface NodeConfig {
  /** The caller's configurable keys, plus `thread_id` when the run has a thread. */
  configurable: Record<string, unknown>;
  /** The tool name the graph is mounted under. */
  tool: string;
  /** The original request text, when a model routed the call. */
  request: string | null;
  /** The durable thread, when the run has one. */
  threadId: string | null;
  /** The superstep number, from 0. */
  step: number;
}

export type NodeResult<U> = U | Command<U> | void | null | undefined;

/** A node: sync, or async (it runs to completion within the node's call). */
export type NodeAction<S, U> = (state: S, config: NodeConfig) => NodeResult<U> | Promise<NodeResult<U>>;

export interface NodeOptions {
  /** Shown in tool descriptions and diagrams. */
  description?: string;
  /**
   * Where the node's Commands may go (goto targets and Send nodes): the host
   * needs every node declared reachable. Sent as a conditional edge whose
   * router is the reserved "__goto__" (never routed).
   */
  ends?: string[];
  /** Not offered: throws (a failing node fails the run). */
  retryPolicy?: never;
  /** Not offered: throws (node results are not cached). */
  cachePolicy?: never;
}

export type RouteAnswer = string | Send | Array<string | Send> | null | undefined;

export interface CompileOptions<I = Record<string, unknown>> {
  /**
   * The tool name and registry key: ascii letters, digits, "_" and "-".
   * Default: package.json "name", its scope dropped and other characters
   * made "_" ("@acme/triage.v2" is "triage_v2").
   */
  name?: string;
  /** The tool description shown to models. */
  description?: string;
  /** The tool's parameters in the value-schema DSL (an object, or JSON text to keep its order). */
  parameters?: Record<string, unknown> | string;
  /** Also expose the graph as a model-visible tool (default false). */
  asTool?: boolean;
  /** List the graph for discovery and routing (default true). */
  asGraphTool?: boolean;
  /** Refuse input keys and node writes that are not channels. */
  strict?: boolean;
  /** The graph's own time budget, capped by the operator. */
  timeoutMs?: number;
  /**
   * Checks a tool call's input before the run: return a string (or false, or
   * throw) to refuse it with that reason.
   */
  validate?: (input: I, config: NodeConfig) => string | boolean | void | Promise<string | boolean | void>;
  /** Not offered: throws (the host owns checkpoints and thread state). */
  checkpointer?: never;
  /** Not offered: throws (there is no long-term store). */
  store?: never;
  /** Not offered: throws (node results are not cached). */
  cache?: never;
  /** Not offered: throws (call interrupt(value) in the node). */
  interruptBefore?: never;
  /** Not offered: throws (call interrupt(value) in the node). */
  interruptAfter?: never;
}

/** The WIT `graph-spec` record, as `describe` returns it. */
export interface GraphSpec {
  name: string;
  description: string | null;
  registration: { asTool: boolean; asGraphTool: boolean };
  parameters: string | null;
  timeoutMs: number | null;
  channels: Array<{ name: string; reducer: "last-value" | "append" | "merge" | "add" | "custom"; default: string | null }>;
  nodes: Array<{ name: string; description: string | null }>;
  edges: Array<{ sources: string[]; target: string }>;
  conditionalEdges: Array<{ source: string; router: string; pathMap: Array<{ key: string; target: string }> }>;
  entryPoints: string[];
  finishPoints: string[];
}

/** The WIT `call-context` record. */
export interface CallContext {
  tool: string;
  request?: string | null;
  threadId?: string | null;
  step: number;
  resume: string[];
  configurable: string;
}

export type WitNodeResult =
  | { tag: "update"; val: string }
  | { tag: "command"; val: { update: string; goto: string[]; sends: Array<{ node: string; payload: string }> } }
  | { tag: "interrupt"; val: string };

export type WitRouteTarget = { tag: "node"; val: string } | { tag: "send"; val: { node: string; payload: string } };

/** A compiled graph: the component's export, also callable in tests. */
export declare class CompiledStateGraph {
  readonly name: string;
  /** Every problem the host would refuse the graph for. */
  check(): string[];
  describe(): GraphSpec;
  /** Runs one node on a JSON state, as the host does; throws a GraphError (`tag`: failed, unknown, invalid-state). */
  runNode(node: string, state: string, context?: Partial<CallContext>): WitNodeResult;
  route(router: string, state: string): WitRouteTarget[];
  reduce(channel: string, current: string, update: string): string;
  validate(input: string, context?: Partial<CallContext>): void;
  /** Not offered: throws (the host runs the graph: sandgraph run, sandgraph call). */
  invoke(...args: unknown[]): never;
  /** Not offered: throws (sandgraph run --stream streams the supersteps). */
  stream(...args: unknown[]): never;
}

/** A state graph; build it, then `compile()` it. */
export declare class StateGraph<SD extends StateDefinition, N extends string = never> {
  constructor(state: AnnotationRoot<SD> | SD);
  addNode<K extends string>(name: K, action: NodeAction<StateType<SD>, UpdateType<SD>>, options?: NodeOptions): StateGraph<SD, N | K>;
  addNode<K extends string>(nodes: Record<K, NodeAction<StateType<SD>, UpdateType<SD>>>): StateGraph<SD, N | K>;
  /** Nodes fed by a Send take its payload instead of the state. */
  addNode<K extends string, P>(name: K, action: NodeAction<P, UpdateType<SD>>, options?: NodeOptions): StateGraph<SD, N | K>;
  /** A Runnable (an object with `invoke`), e.g. a ToolNode. */
  addNode<K extends string>(name: K, action: { invoke(state: any, config?: NodeConfig): unknown }, options?: NodeOptions): StateGraph<SD, N | K>;
  addEdge(start: typeof START | N | N[], end: N | typeof END): this;
  addConditionalEdges(
    source: typeof START | N,
    path: (state: StateType<SD>) => RouteAnswer | Promise<RouteAnswer>,
    pathMap?: Record<string, N | typeof END> | Array<N | typeof END>,
  ): this;
  setEntryPoint(node: N): this;
  setFinishPoint(node: N): this;
  compile(options?: CompileOptions): CompiledStateGraph;
}

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
import type { Message, MessageLike, RemoveMarker, ToolCall } from "./messages.js";
export type { BaseMessage, Message, MessageLike, RemoveMarker, ToolCall } from "./messages.js";

/** LangGraph's `MessagesAnnotation`: the channel `messages` (starts at [], merged by `messagesStateReducer`). */
export declare const MessagesAnnotation: AnnotationRoot<{
  messages: ChannelAnnotation<import("./messages.js").Message[], import("./messages.js").MessageLike | import("./messages.js").MessageLike[]>;
}>;

/** Not offered: constructing it throws (the host owns checkpoints and thread state). */
export declare class MemorySaver {
  constructor();
}
/** Not offered: constructing it throws (the host owns checkpoints and thread state). */
export declare class InMemorySaver {
  constructor();
}
/** Not offered: constructing it throws (there is no long-term store). */
export declare class InMemoryStore {
  constructor();
}
/** Not offered: constructing it throws (a failing node fails the run). */
export declare class RetryPolicy {
  constructor();
}
/** Not offered: constructing it throws (node results are not cached). */
export declare class CachePolicy {
  constructor();
}

// ---- Capabilities: package.json's "sandgraph": { "capabilities": [...] } ----

/**
 * A failed call to a host capability: `kind` names the WIT error case (with
 * `-` as `_`), `detail` is the host's text; `message` is `kind: detail`.
 */
export declare class CapabilityError extends Error {
  constructor(kind: string, detail: string);
  readonly kind: string;
  readonly detail: string;
}

export type LlmErrorKind = "denied" | "quota" | "timeout" | "provider" | "malformed";
/** A failed `llm` call. */
export declare class LlmError extends CapabilityError {
  readonly kind: LlmErrorKind;
  static readonly KINDS: readonly LlmErrorKind[];
}

export type ToolErrorKind = "denied" | "not_found" | "invalid_args" | "recursion" | "quota" | "failed";
/** A failed `tools` call. */
export declare class ToolError extends CapabilityError {
  readonly kind: ToolErrorKind;
  static readonly KINDS: readonly ToolErrorKind[];
}

export type HttpErrorKind = "denied" | "timeout" | "connection" | "protocol";
/** A failed `fetch`: the origin is not granted (`denied`), or the request did not get a whole answer. */
export declare class HttpError extends CapabilityError {
  readonly kind: HttpErrorKind;
  static readonly KINDS: readonly HttpErrorKind[];
}

/** A capability the build did not import (not in package.json's `sandgraph.capabilities`) was called. */
export declare class CapabilityNotImported extends Error {
  readonly capability: "llm" | "tools" | "http";
}

/** A message as state keeps it, or a remove marker (contract section 1). */
export type MessageJson = Message | RemoveMarker;

/** A tool offered to a model: a granted graph tool's name, or its definition. */
export type ToolLike =
  | string
  | { name: string; description?: string | null; parameters?: Record<string, unknown>; schema?: Record<string, unknown> }
  | { type: "function"; function: { name: string; description?: string | null; parameters?: Record<string, unknown> } };

/** Token counts, as LangChain names them. */
export interface UsageMetadata {
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
}

/** `ChatModel.invoke`'s answer: an ai message without id, with its usage and finish reason. */
export interface AIMessageJson {
  type: "ai";
  content: string;
  tool_calls: ToolCall[];
  usage_metadata: UsageMetadata;
  response_metadata: { finish_reason: string };
}

export interface ChatRequest {
  messages: MessageLike | MessageLike[] | null;
  /** A model alias of the operator's `[llm.models]`; none: the operator's default. */
  model?: string | null;
  tools?: ToolLike[];
  temperature?: number | null;
  maxTokens?: number | null;
}

export interface ChatResponse {
  content: string;
  toolCalls: ToolCall[];
  finishReason: string;
  usage: UsageMetadata;
}

/** The `llm` capability. */
export declare const llm: {
  /** Sends one chat request; rejects with `LlmError`. The wait holds no CPU or fuel. */
  chat(request: ChatRequest): Promise<ChatResponse>;
};

export interface ChatModelOptions {
  model?: string | null;
  temperature?: number | null;
  maxTokens?: number | null;
  tools?: ToolLike[];
}

/** A chat model behind a model alias, shaped like LangChain's. */
export declare class ChatModel {
  /** `new ChatModel("fast")` or `new ChatModel({ model, temperature, maxTokens })`; none: the operator's default model. */
  constructor(options?: string | ChatModelOptions | null);
  readonly model: string | null;
  readonly temperature: number | null;
  readonly maxTokens: number | null;
  readonly tools: readonly ToolLike[];
  /** A copy offering `tools`. */
  bindTools(tools: ToolLike[]): ChatModel;
  /** The model's answer; rejects with `LlmError` (bad messages: kind `malformed`). */
  invoke(messages: MessageLike | MessageLike[] | null): Promise<AIMessageJson>;
}

/** A graph tool this graph is granted. */
export interface ToolInfo {
  name: string;
  description: string | null;
  /** JSON Schema of the arguments. */
  parameters: Record<string, unknown>;
}

/** The `tools` capability: other mounted graphs, run as sub-runs of this run. */
export declare const tools: {
  list(): Promise<ToolInfo[]>;
  /** Runs tool `name` with `args`; resolves to its final state, rejects with `ToolError`. */
  call<R = any>(name: string, args?: Record<string, unknown>): Promise<R>;
};

// ---- fetch (the `http` capability), also installed as globals ----

export type HeadersInit = Headers | Array<[string, string]> | Record<string, string>;
export type BodyInit = string | ArrayBuffer | ArrayBufferView;

export declare class Headers implements Iterable<[string, string]> {
  constructor(init?: HeadersInit | null);
  append(name: string, value: string): void;
  set(name: string, value: string): void;
  get(name: string): string | null;
  has(name: string): boolean;
  delete(name: string): void;
  entries(): IterableIterator<[string, string]>;
  keys(): IterableIterator<string>;
  values(): IterableIterator<string>;
  forEach(fn: (value: string, name: string, headers: Headers) => void, thisArg?: unknown): void;
  [Symbol.iterator](): IterableIterator<[string, string]>;
}

export interface RequestInit {
  method?: string;
  headers?: HeadersInit;
  body?: BodyInit | null;
}

export declare class Request {
  constructor(input: string | Request, init?: RequestInit);
  readonly url: string;
  readonly method: string;
  readonly headers: Headers;
}

export interface ResponseInit {
  status?: number;
  statusText?: string;
  headers?: HeadersInit;
}

/** An answer whose whole body is read (at most MAX_RESPONSE_BYTES, 16 MiB). */
export declare class Response {
  constructor(body?: BodyInit | null, init?: ResponseInit);
  readonly status: number;
  readonly statusText: string;
  readonly ok: boolean;
  readonly headers: Headers;
  readonly url: string;
  readonly redirected: false;
  readonly bodyUsed: boolean;
  text(): Promise<string>;
  json<T = any>(): Promise<T>;
  bytes(): Promise<Uint8Array>;
  arrayBuffer(): Promise<ArrayBuffer>;
  clone(): Response;
}

/** The standard fetch over wasi:http; rejects with `HttpError`. Redirects are not followed. */
export declare function fetch(input: string | Request, init?: RequestInit): Promise<Response>;
