// A graph that calls the host's capabilities from an async node: a model
// (ChatModel.invoke), two graph tools at once (Promise.all over
// tools.call), a tool it is not granted (a typed ToolError).
import { Annotation, ChatModel, END, START, StateGraph, ToolError, tools } from "@sandgraph/sdk";

const State = Annotation.Root({
  answer: Annotation(),
  echoed: Annotation(),
  refused: Annotation(),
});

const model = new ChatModel({ model: "fast", maxTokens: 50 });

async function ask() {
  const answer = await model.invoke([["system", "be brief"], "hello?"]);
  const echoed = await Promise.all([tools.call("echo_graph", { text: "a" }), tools.call("echo_graph", { text: "b" })]);
  let refused = null;
  try {
    await tools.call("not_granted", {});
  } catch (err) {
    refused = err instanceof ToolError ? `${err.name} ${err.kind}` : `not a ToolError: ${err}`;
  }
  return { answer, echoed: echoed.map((e) => e.log), refused };
}

async function done(state) {
  return state.refused === null ? "ask" : END;
}

export const graph = new StateGraph(State)
  .addNode("ask", ask)
  .addEdge(START, "ask")
  .addConditionalEdges("ask", done, ["ask", END])
  .compile({ name: "js_caps" });
