// fetch_summarize in JavaScript, the twin of example-graphs/fetch-summarize:
// `fetch` GETs `url` with the global fetch (the `http` capability) and keeps
// the start of the body (`excerpt`, at most 4 KiB); `summarize` asks the
// model (alias `fast`) to summarize it. Both nodes are async.
//
// {"url": "https://example.com/"}, with that origin and the model granted,
// ends with `source` (the URL), `status: 200` and `summary`. Any failure (an
// origin not granted, an address the graph may not reach, a body over the
// host's cap, a timeout, a status other than 2xx, the model's error) ends
// the run with `error` saying why.
import { Annotation, ChatModel, END, START, StateGraph } from "@sandgraph/sdk";

/** The most bytes of the body the model is sent. */
const EXCERPT_BYTES = 4 * 1024;

const SYSTEM = "Summarize the document in two or three sentences. It may be cut short.";

const State = Annotation.Root({
  url: Annotation(),
  source: Annotation(),
  status: Annotation(),
  excerpt: Annotation(),
  summary: Annotation(),
  error: Annotation(),
});

async function fetchPage({ url = "" }) {
  const update = { source: url };
  let response;
  try {
    response = await fetch(url);
  } catch (error) {
    return { ...update, error: String(error.message ?? error) };
  }
  update.status = response.status;
  if (!response.ok) return { ...update, error: `the server answered ${response.status}` };
  const body = await response.bytes();
  // Decoded as Rust's from_utf8_lossy does: invalid bytes become U+FFFD.
  const excerpt = await new Response(body.subarray(0, EXCERPT_BYTES)).text();
  return { ...update, excerpt };
}

const model = new ChatModel({ model: "fast", maxTokens: 300 });

async function summarize({ url = "", excerpt = "" }) {
  try {
    const answer = await model.invoke([
      ["system", SYSTEM],
      ["user", `Document fetched from ${url}:\n\n${excerpt}`],
    ]);
    return { summary: answer.content };
  } catch (error) {
    return { error: String(error.message ?? error) };
  }
}

export const graph = new StateGraph(State)
  .addNode("fetch", fetchPage)
  .addNode("summarize", summarize)
  .addEdge(START, "fetch")
  .addConditionalEdges("fetch", function fetched({ error }) {
    return error === undefined || error === null ? "ok" : "failed";
  }, { ok: "summarize", failed: END })
  .addEdge("summarize", END)
  .compile({
    name: "fetch_summarize",
    description: "Fetch a web page from a granted origin and summarize it.",
    asTool: true,
    parameters: {
      url: { type: "string", required: true, description: "The page to summarize." },
    },
  });
