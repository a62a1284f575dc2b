// graph_llm in JavaScript, the polyglot bench's twin of tests/guests/graph-llm:
// `ask` makes `calls` chat calls (default 1) with the alias `fast`, the system
// message "Answer briefly." and the user message `question`, and appends each
// outcome to `answers`. With `mode: "async"` the same calls are awaited from
// an async node (which the build lowers to a generator) instead of chained
// with `then`, so the bench can measure what an async node costs.
import { Annotation, ChatModel, END, LlmError, START, StateGraph, reducers } from "@sandgraph/sdk";

const State = Annotation.Root({
  question: Annotation(),
  calls: Annotation(),
  mode: Annotation(),
  answers: Annotation({ reducer: reducers.append }),
});

const model = new ChatModel("fast");

const messages = ({ question = "hello?" }) => [["system", "Answer briefly."], ["user", question]];

function outcome(error) {
  if (error instanceof LlmError) return { error: { kind: error.kind, message: error.detail } };
  throw error;
}

function ask(state) {
  let chain = Promise.resolve([]);
  for (let i = 0; i < (state.calls ?? 1); i++) {
    chain = chain.then((answers) =>
      model.invoke(messages(state)).then(
        (answer) => [...answers, { content: answer.content }],
        (error) => [...answers, outcome(error)],
      ),
    );
  }
  return chain.then((answers) => ({ answers }));
}

async function askAsync(state) {
  const answers = [];
  for (let i = 0; i < (state.calls ?? 1); i++) {
    try {
      const answer = await model.invoke(messages(state));
      answers.push({ content: answer.content });
    } catch (error) {
      answers.push(outcome(error));
    }
  }
  return { answers };
}

export const graph = new StateGraph(State)
  .addNode("ask", ask)
  .addNode("ask_async", askAsync)
  .addConditionalEdges(START, function mode({ mode }) {
    return mode === "async" ? "async" : "sync";
  }, { sync: "ask", async: "ask_async" })
  .addEdge("ask", END)
  .addEdge("ask_async", END)
  .compile({ name: "graph_llm" });
