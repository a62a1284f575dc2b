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
  /** Combines writes; without one, the channel keeps the last value written. */
  reducer?: Reducer<V, U>;
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

export type NodeAction<S, U> = (state: S, config: NodeConfig) => NodeResult<U>;

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
  validate?: (input: I, config: NodeConfig) => string | boolean | void;
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
    path: (state: StateType<SD>) => RouteAnswer,
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
