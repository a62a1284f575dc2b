// The approval graph: draft, ask a human (interrupt), publish or revise.
import { Annotation, END, START, StateGraph, interrupt } from "@sandgraph/sdk";

const State = Annotation.Root({
  topic: Annotation(),
  draft: Annotation(),
  revisions: Annotation({ default: () => 0 }),
  published: Annotation({ default: () => false }),
});

function draft({ topic, revisions }) {
  const text = revisions === 0 ? `A short note about ${topic}.` : `A short note about ${topic} (revision ${revisions}).`;
  return { draft: text };
}

function review({ draft = "", revisions }) {
  const answer = interrupt({ question: "publish this draft?", draft });
  return answer === "yes" ? { published: true } : { revisions: revisions + 1 };
}

function after_review(state) {
  return state.published === true ? "publish" : "revise";
}

export const graph = new StateGraph(State)
  .addNode("draft", draft)
  .addNode("review", review)
  .addEdge(START, "draft")
  .addEdge("draft", "review")
  .addConditionalEdges("review", after_review, { publish: END, revise: "draft" })
  .compile({
    name: "approval_graph",
    description: "Draft a text about a topic and publish it once a human approves.",
  });
