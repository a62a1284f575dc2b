// Calls every capability the JavaScript SDK offers from async nodes: a
// model (`ask`, ChatModel.invoke), two graph tools at once (`useTools`,
// Promise.all over tools.call), a loopback URL (`get`, fetch), and all
// three at once (`gather`). Refusals are caught and kept as their kinds.
import { Annotation, ChatModel, END, HttpError, START, StateGraph, ToolError, tools } from "@sandgraph/sdk";

const State = Annotation.Root({
  url: Annotation(),
  answer: Annotation(),
  tool: Annotation(),
  fetched: Annotation(),
  gathered: Annotation(),
});

const model = new ChatModel({ model: "fast", maxTokens: 50 });

async function ask() {
  const reply = await model.invoke([["system", "be brief"], "hi?"]);
  return { answer: { content: reply.content, usage: reply.usage_metadata } };
}

async function useTools() {
  const [a, b] = await Promise.all([
    tools.call("echo_graph", { input: { topic: "a" } }),
    tools.call("echo_graph", { input: { topic: "b" } }),
  ]);
  let refused = null;
  try {
    await tools.call("not_granted", {});
  } catch (err) {
    refused = err instanceof ToolError ? err.kind : `not a ToolError: ${err}`;
  }
  return { tool: { log: [...a.log, ...b.log], refused } };
}

async function get(state) {
  const got = await fetch(`${state.url}/hello?q=é`, { headers: { "X-Test": "yes" } });
  const posted = await fetch(`${state.url}/echo`, { method: "POST", body: JSON.stringify({ n: 1 }) });
  let denied = null;
  try {
    await fetch("http://example.com/");
  } catch (err) {
    denied = err instanceof HttpError ? err.kind : `not an HttpError: ${err}`;
  }
  return {
    fetched: {
      status: got.status,
      type: got.headers.get("CONTENT-TYPE"),
      get: await got.json(),
      post: await posted.json(),
      denied,
    },
  };
}

async function gather(state) {
  const [reply, echoed, path] = await Promise.all([
    model.invoke("again"),
    tools.call("echo_graph", { input: { topic: "async" } }),
    fetch(`${state.url}/async`)
      .then((r) => r.json())
      .then((body) => body.path),
  ]);
  return { gathered: [reply.content, echoed.log, path] };
}

async function next(state) {
  return state.gathered === null || state.gathered === undefined ? "gather" : END;
}

export const graph = new StateGraph(State)
  .addNode("ask", ask)
  .addNode("use_tools", useTools)
  .addNode("get", get)
  .addNode("gather", gather)
  .addEdge(START, "ask")
  .addEdge("ask", "use_tools")
  .addEdge("use_tools", "get")
  .addConditionalEdges("get", next, ["gather", END])
  .addEdge("gather", END)
  .compile({ name: "js_caps" });
