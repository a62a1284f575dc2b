// Types of @sandgraph/sdk/messages: chat messages as state holds them, and
// the reducer of a `messages` channel (LangGraph's `addMessages`).

/** A model's request to call a tool. */
export interface ToolCall {
  id: string;
  name: string;
  /** A JSON object, or the raw text when the model's arguments were not one. */
  args: Record<string, unknown> | string;
}

/** A message as state holds it (absent optional keys are omitted). */
export interface Message {
  type: "human" | "ai" | "system" | "tool";
  content: string;
  id?: string;
  name?: string;
  /** On ai messages, always (maybe []). */
  tool_calls?: ToolCall[];
  /** On tool messages: the call answered. */
  tool_call_id?: string;
  /** On tool messages. */
  status?: "success" | "error";
}

/** A marker removing the message `id` (or all, with REMOVE_ALL_MESSAGES). */
export interface RemoveMarker {
  type: "remove";
  id: string;
}

/** What a message may be given as: a string (a user message), a `[role, content]` pair, or an object. */
export type MessageLike =
  | string
  | [role: "human" | "user" | "ai" | "assistant" | "system" | "developer", content: string]
  | Message
  | RemoveMarker
  | { role: string; content: string; [key: string]: unknown }
  | BaseMessage;

/** The id of a remove marker that clears every message before it. */
export declare const REMOVE_ALL_MESSAGES: "__remove_all__";

/** One side of the reducer as plain messages; throws `message <i>: <why>`. */
export declare function coerceMessages(value: MessageLike | MessageLike[] | null | undefined): Array<Message | RemoveMarker>;

/**
 * LangGraph's `addMessages`: replace by id in place, append new ones (a
 * missing id becomes the next free `msg-<n>`), delete on a remove marker.
 */
export declare function messagesStateReducer(left: MessageLike | MessageLike[] | null | undefined, right: MessageLike | MessageLike[] | null | undefined): Message[];
/** LangGraph's other name for `messagesStateReducer`. */
export declare const addMessages: typeof messagesStateReducer;

/** The fields a message class takes. */
export interface MessageFields {
  content?: string;
  id?: string;
  name?: string;
}

/** A message shaped like @langchain/core's; `JSON.stringify` gives its plain JSON. */
declare abstract class BaseMessage {
  readonly type: Message["type"] | "remove";
  readonly content: string;
  readonly id?: string;
  readonly name?: string;
  getType(): Message["type"] | "remove";
  _getType(): Message["type"] | "remove";
  toJSON(): Message | RemoveMarker;
}
export type { BaseMessage };

export declare class HumanMessage extends BaseMessage {
  constructor(fields: string | MessageFields);
  readonly type: "human";
}
export declare class AIMessage extends BaseMessage {
  constructor(fields: string | (MessageFields & { tool_calls?: ToolCall[] }));
  readonly type: "ai";
  readonly tool_calls: ToolCall[];
}
export declare class SystemMessage extends BaseMessage {
  constructor(fields: string | MessageFields);
  readonly type: "system";
}
export declare class ToolMessage extends BaseMessage {
  constructor(fields: MessageFields & { tool_call_id: string; status?: "success" | "error" });
  constructor(content: string, toolCallId: string, name?: string);
  readonly type: "tool";
  readonly tool_call_id: string;
  readonly status: "success" | "error";
}
export declare class RemoveMessage extends BaseMessage {
  constructor(fields: string | { id: string });
  readonly type: "remove";
}

export declare function isHumanMessage(message: unknown): message is Message & { type: "human" };
export declare function isAIMessage(message: unknown): message is Message & { type: "ai"; tool_calls: ToolCall[] };
export declare function isSystemMessage(message: unknown): message is Message & { type: "system" };
export declare function isToolMessage(message: unknown): message is Message & { type: "tool"; tool_call_id: string };
