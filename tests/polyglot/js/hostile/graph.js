// The hostile twin: a graph that misbehaves on purpose, by `mode`, so the
// host's limits can be shown to hold for JavaScript guests too.
import { Annotation, END, START, StateGraph } from "@sandgraph/sdk";

const State = Annotation.Root({ mode: Annotation(), out: Annotation() });

const kept = [];

function act({ mode }) {
  switch (mode) {
    case "loop":
      // Spins without calling the host.
      for (;;) {}
    case "bomb":
      // Keeps 1 MiB buffers forever.
      for (;;) kept.push(new Uint8Array(1 << 20).fill(1));
    case "huge":
      return { out: "x".repeat(20_000_000) };
    case "raise":
      throw new Error("hostile raise");
    default:
      return { out: "ok" };
  }
}

export const graph = new StateGraph(State)
  .addNode("act", act)
  .addEdge(START, "act")
  .addEdge("act", END)
  .compile({
    name: "hostile_graph",
    description: "Misbehaves as `mode` says: loop, bomb, huge, raise.",
  });
