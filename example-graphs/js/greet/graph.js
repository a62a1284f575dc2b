// The greet graph: parameters, validate, and a node that can fail.
import { Annotation, END, START, StateGraph } from "@sandgraph/sdk";

const State = Annotation.Root({
  name: Annotation(),
  style: Annotation(),
  times: Annotation(),
  tags: Annotation(),
  greeting: Annotation(),
});

function greet({ name, style, times = 1, tags = [] }) {
  if (typeof name !== "string") throw new Error("name must be a string");
  let once;
  if (style === "formal") once = `Good day, ${name}.`;
  else if (style === "casual") once = `Hey ${name}!`;
  else throw new Error('style must be "formal" or "casual"');
  if (!Number.isInteger(times)) throw new Error("times must be an integer");
  if (times < 0) throw new Error("times must not be negative");
  return { greeting: Array(times).fill(once).join(" "), tags };
}

export const graph = new StateGraph(State)
  .addNode("greet", greet, { description: "Builds the greeting." })
  .addEdge(START, "greet")
  .addEdge("greet", END)
  .compile({
    name: "greet_graph",
    description: "Greet someone, formally or casually.",
    asTool: true,
    parameters: {
      name: { type: "string", required: true, description: "The name to greet." },
      style: { type: "string", required: true, enum: ["formal", "casual"], description: "Greeting style." },
      times: { type: "integer", description: "Repeat count.", default: 1 },
      tags: { type: "array", items: { type: "string" }, description: "Extra tags." },
    },
    validate: ({ times }) => {
      if (typeof times === "number" && times > 10) return "times must be at most 10";
    },
  });
