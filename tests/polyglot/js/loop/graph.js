// The loop graph (the Rust example-graphs/loop): `count` adds one to `n` and
// loops back through the router `should_continue` while `n < target`.
// {"target": 3} ends as {"n": 3, "target": 3}.
import { Annotation, END, START, StateGraph } from "@sandgraph/sdk";

const State = Annotation.Root({
  n: Annotation({ default: () => 0 }),
  target: Annotation(),
});

function should_continue({ n, target }) {
  return n < target ? "continue" : "done";
}

export const graph = new StateGraph(State)
  .addNode("count", ({ n }) => ({ n: n + 1 }))
  .addEdge(START, "count")
  .addConditionalEdges("count", should_continue, { continue: "count", done: END })
  .compile({
    name: "loop_graph",
    description: "Count up to a target, one superstep at a time.",
  });
