// @sandgraph/sdk/capabilities: the host's capabilities in one import, for
// graphs and the prebuilt agent blocks — the chat model (`ChatModel`,
// `llm`), the graph tools (`tools`) and their typed errors. Each is defined
// in its own module (llm.js, tools.js, registry.js); node tests of the
// prebuilt blocks load a fake of this module instead (fakes/hooks.mjs).
export { CapabilityError, CapabilityNotImported, HttpError, LlmError, ToolError } from "./registry.js";
export { ChatModel, llm } from "./llm.js";
export { tools } from "./tools.js";
