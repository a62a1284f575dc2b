// Types of @sandgraph/sdk/prebuilt: LangGraph's prebuilt agent blocks.

import type { CompileOptions, CompiledStateGraph, NodeConfig } from "./index.js";
import type { Message, MessageLike, SystemMessage } from "./messages.js";

/** How a tool is offered to a model. */
export interface ToolDefinition {
  name: string;
  description: string | null;
  /** A JSON Schema object for the arguments. */
  parameters: Record<string, unknown>;
}

/** What `tool()` takes besides the function. */
export interface ToolFields {
  name: string;
  description?: string;
  /** A JSON Schema object for the arguments (zod is not available). Default: any object. */
  schema?: Record<string, unknown>;
}

/** A tool function defined in the graph (made by `tool()`). */
export declare class StructuredTool<A = any, R = unknown> {
  constructor(fn: (args: A, config?: NodeConfig) => R | Promise<R>, fields: ToolFields);
  readonly name: string;
  readonly description: string;
  readonly schema: Record<string, unknown>;
  invoke(args: A, config?: NodeConfig): Promise<R>;
  definition(): ToolDefinition;
}

/**
 * LangChain's `tool(fn, { name, description, schema })`. A string result is
 * the tool message's content as it is, other JSON its compact text; throwing
 * makes an error tool message.
 */
export declare function tool<A = any, R = unknown>(fn: (args: A, config?: NodeConfig) => R | Promise<R>, fields: ToolFields): StructuredTool<A, R>;

/** A local tool, or the name of a granted graph tool. */
export type AgentTool = StructuredTool | string;

export interface ToolNodeOptions {
  /** A failing call becomes an error tool message (default), or fails the node. */
  handleToolErrors?: boolean;
  name?: string;
}

/** Runs the tool calls of the latest ai message: local tools in the graph, others as graph tools through the host. */
export declare class ToolNode {
  constructor(tools?: AgentTool[], options?: ToolNodeOptions);
  invoke(input: { messages: MessageLike[] } | MessageLike[], config?: NodeConfig): Promise<{ messages: Message[] }>;
}

/** "tools" when the last message is an ai message with tool calls, else END; brings its path map. */
export declare function toolsCondition(state: { messages: MessageLike[] } | MessageLike[]): "tools" | "__end__";

/** A chat model as the capability module offers it. */
export interface ChatModelLike {
  bindTools(tools: ToolDefinition[]): ChatModelLike;
  invoke(messages: MessageLike[]): Promise<Message & Record<string, unknown>>;
}

export interface CreateReactAgentParams extends Omit<CompileOptions, "name" | "parameters"> {
  /** The model: a ChatModel. */
  llm?: ChatModelLike | string;
  /** Or the alias of a granted model, e.g. "default". */
  model?: ChatModelLike | string;
  /** Local tools (made by tool()) and names of granted graph tools. */
  tools?: AgentTool[];
  /** A leading system message on every model call (not stored). */
  prompt?: string | SystemMessage;
  /** The graph (tool) name. Default: "agent". */
  name?: string;
}

/**
 * LangGraph's prebuilt ReAct agent, compiled: channels `messages` and
 * `question`, a node `agent` calling the model and, with tools, a ToolNode
 * `tools` looping back to it.
 */
export declare function createReactAgent(params: CreateReactAgentParams): CompiledStateGraph;
