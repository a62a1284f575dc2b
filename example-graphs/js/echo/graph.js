// The echo graph: appends "seen:<topic>" to the log.
import { Annotation, END, START, StateGraph, reducers } from "@sandgraph/sdk";

const State = Annotation.Root({
  topic: Annotation(),
  log: Annotation({ reducer: reducers.append, default: () => [] }),
});

export const graph = new StateGraph(State)
  .addNode("echo", (state) => ({ log: [`seen:${state.topic}`] }))
  .addEdge(START, "echo")
  .addEdge("echo", END)
  .compile({ name: "echo_graph", description: "Echo the given topic.", asTool: true });
