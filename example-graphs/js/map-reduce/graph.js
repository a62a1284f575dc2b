// The map-reduce graph: a router fans out one Send per item, the squares
// are appended in parallel, and sum adds them up.
import { Annotation, END, START, Send, StateGraph, reducers } from "@sandgraph/sdk";

const State = Annotation.Root({
  items: Annotation(),
  results: Annotation({ reducer: reducers.append }),
  total: Annotation(),
});

function fan_out(state) {
  return state.items.map((x) => new Send("square", { x }));
}

function square({ x }) {
  const sq = x * x;
  if (!Number.isSafeInteger(sq)) throw new Error("square overflows i64");
  return { results: [sq] };
}

function sum({ results }) {
  const total = results.reduce((a, b) => a + b, 0);
  if (!Number.isSafeInteger(total)) throw new Error("total overflows i64");
  return { total };
}

export const graph = new StateGraph(State)
  .addNode("plan", () => ({}))
  .addNode("square", square)
  .addNode("sum", sum)
  .addEdge(START, "plan")
  .addConditionalEdges("plan", fan_out)
  .addEdge("square", "sum")
  .addEdge("sum", END)
  .compile({
    name: "map_reduce_graph",
    description: "Square every item in parallel, then sum the squares.",
  });
