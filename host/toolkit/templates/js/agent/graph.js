// `{{graph}}`: a sandgraph graph that asks a model. The `ask` node sends the
// question to the model the operator maps to the alias `default` (through
// the host, which holds the provider and its key), and writes the `answer`;
// a failed call (no grant, quota used up, provider down) ends the run with
// `error` saying why.
//
// The host grants models per graph, in the operator's `sandgraph.toml`:
//
//     [llm]
//     model = "deepseek-chat"   # the alias "default"
//
//     [graphs.{{graph}}.grants]
//     llm = { models = ["default"], max_calls = 4, max_tokens = 2000 }
//
// The golden case `tests/basic.json` replays a recorded exchange
// (`tests/basic.cassette.jsonl`), so `sandgraph test` needs no model or key.
import { Annotation, ChatModel, END, LlmError, START, StateGraph } from "@sandgraph/sdk";

/** The model alias the graph asks; the operator maps it to a model. */
export const MODEL = "default";

/** Most tokens of an answer. */
export const MAX_ANSWER_TOKENS = 200;

const SYSTEM = "Answer the question in one short sentence.";

const State = Annotation.Root({
  question: Annotation(),
  answer: Annotation(),
  error: Annotation(),
});

/** Everything the model is asked. */
export function messages(question) {
  return [
    { role: "system", content: SYSTEM },
    { role: "user", content: question },
  ];
}

/** The node, asking `model`: its answer, or why there is none. */
export async function ask({ question }, model = new ChatModel({ model: MODEL, maxTokens: MAX_ANSWER_TOKENS })) {
  try {
    const reply = await model.invoke(messages(question));
    return { answer: reply.content.trim() };
  } catch (error) {
    if (error instanceof LlmError) return { error: error.message };
    throw error;
  }
}

export const graph = new StateGraph(State)
  .addNode("ask", (state) => ask(state), { description: "Ask the model the question." })
  .addEdge(START, "ask")
  .addEdge("ask", END)
  .compile({
    name: "{{graph}}",
    description: "Answer a question in one sentence, asking a model.",
    asTool: true,
    parameters: { question: { type: "string", required: true, description: "What to answer." } },
    strict: true,
  });
