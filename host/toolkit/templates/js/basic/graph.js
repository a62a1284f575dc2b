// `{{graph}}`: a sandgraph graph. It counts the words of `text`, then
// appends a line about it to `log`.
//
// `{"text": "hello wasm world"}` ends as
// `{"text": "hello wasm world", "words": 3, "log": ["3 words"]}`.
//
// Build the component with `sandgraph build . --out {{name}}.wasm`, run the
// golden cases of `tests/` with `sandgraph test {{name}}.wasm`, and the
// native unit tests (graph.test.js) with `npm test`.
import { Annotation, END, START, StateGraph, reducers } from "@sandgraph/sdk";

const State = Annotation.Root({
  text: Annotation(),
  words: Annotation({ default: () => 0 }),
  log: Annotation({ reducer: reducers.append, default: () => [] }),
});

/** Counts the words of the text. */
export function count({ text }) {
  return { words: text.split(/\s+/).filter((w) => w !== "").length };
}

/** Appends one line about the count to the log. */
export function report({ words }) {
  return { log: [`${words} ${words === 1 ? "word" : "words"}`] };
}

// Strict: an input key or a node write that names no channel fails the run,
// naming the key.
export const graph = new StateGraph(State)
  .addNode("count", count, { description: "Count the words of the text." })
  .addNode("report", report, { description: "Log the count." })
  .addEdge(START, "count")
  .addEdge("count", "report")
  .addEdge("report", END)
  .compile({
    name: "{{graph}}",
    description: "Count the words of a text.",
    asTool: true,
    parameters: { text: { type: "string", required: true, description: "The text to count." } },
    strict: true,
  });
