// A fake of the SDK's capability module (`ChatModel`, `tools`) for node
// tests, loaded in its place by ./hooks.mjs. The model answers with the
// replies a test queued and logs every call; the graph tools are whatever a
// test puts in `fake.graphTools`.

export const fake = {
  /** Replies the model gives, in order: an ai message, or an Error to throw. */
  replies: [],
  /** Every model call: `{ alias, tools, messages }`. */
  modelCalls: [],
  /** The host's graph tools: name -> `{ description, parameters, run(args) }`. */
  graphTools: {},
  /** Every graph tool call: `[name, args]`. */
  toolCalls: [],
  reset() {
    this.replies = [];
    this.modelCalls = [];
    this.graphTools = {};
    this.toolCalls = [];
  },
};

/** A failure of a capability call: its WIT error case is `kind`. */
export class CapabilityError extends Error {
  constructor(kind, message) {
    super(message);
    this.kind = kind;
  }
}

export class ChatModel {
  constructor(alias) {
    this.alias = alias ?? null;
    this.tools = [];
  }

  bindTools(tools) {
    const bound = new ChatModel(this.alias);
    bound.tools = tools;
    return bound;
  }

  async invoke(messages) {
    fake.modelCalls.push({ alias: this.alias, tools: this.tools, messages: JSON.parse(JSON.stringify(messages)) });
    const reply = fake.replies.shift();
    if (reply === undefined) throw new Error("the fake model has no reply queued");
    if (reply instanceof Error) throw reply;
    return reply;
  }
}

export const tools = {
  list() {
    return Object.entries(fake.graphTools).map(([name, t]) => ({ name, description: t.description ?? null, parameters: t.parameters ?? {} }));
  },
  async call(name, args) {
    fake.toolCalls.push([name, args]);
    const t = fake.graphTools[name];
    if (t === undefined) throw new CapabilityError("not-found", `no graph tool "${name}"`);
    return t.run(args);
  },
};
