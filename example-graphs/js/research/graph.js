// `research`: a ReAct agent on the SDK's agent blocks, the twin of the Rust
// example-graphs/research. The `agent` node asks the model (alias `fast`),
// offering the graph tools this graph is granted (`tools.list()`, with their
// JSON Schemas); `toolsCondition` sends a turn with tool calls to the `tools`
// node, a ToolNode running each call as a sub-run, which loops back to
// `agent`, until the model answers without tool calls (`answer`) or
// `max_steps` model turns are used (`error`). The conversation is the
// `messages` channel (MessagesAnnotation).
//
// `{"question": "Greet Ada formally."}` with `greet_graph` granted ends with
// the model's `answer`, `steps: 2` and the whole conversation in `messages`.
// A failed tool call goes back to the model as an error tool message; a
// failed model call (no grant, quota used up, provider down) ends the run
// with `error` saying why.
import { Annotation, END, MessagesAnnotation, START, StateGraph } from "@sandgraph/sdk";
import { ChatModel, tools } from "@sandgraph/sdk/capabilities";
import { ToolNode, toolsCondition } from "@sandgraph/sdk/prebuilt";

/**
 * The most model turns whatever `max_steps` says: a turn with tool calls
 * takes two supersteps (`agent`, `tools`), so the loop always ends here,
 * before the host's step budget (25 supersteps) stops the run.
 */
const STEP_CAP = 12;

const SYSTEM = "You are a research assistant. Call the tools when they help, then answer the question in a few sentences.";

const State = Annotation.Root({
  question: Annotation(),
  max_steps: Annotation({ default: () => 6 }),
  ...MessagesAnnotation.spec,
  steps: Annotation({ default: () => 0 }),
  answer: Annotation(),
  error: Annotation(),
});

/** One model turn. On the first, the instructions and the question start the conversation. */
export async function agent(state) {
  const steps = state.steps + 1;
  const history = state.messages ?? [];
  const fresh = history.length === 0 ? [{ type: "system", content: SYSTEM }, { type: "human", content: state.question }] : [];
  const granted = (await tools.list()).map(({ name, description, parameters }) => ({ name, description, parameters }));
  const model = new ChatModel("fast").bindTools(granted);
  let reply;
  try {
    reply = await model.invoke([...history, ...fresh]);
  } catch (err) {
    // No grant, the quota used up, the provider down: the run ends here.
    return { steps, messages: fresh, error: err instanceof Error ? err.message : String(err) };
  }
  const update = { steps, messages: [...fresh, reply] };
  if ((reply.tool_calls ?? []).length === 0) return { ...update, answer: reply.content };
  const maxSteps = Math.min(Math.max(Math.trunc(state.max_steps), 1), STEP_CAP);
  if (steps >= maxSteps) {
    // The tools node still runs this turn's calls, then the run ends.
    update.error = `no answer after ${steps} model turns (max_steps is ${maxSteps})`;
  }
  return update;
}

/** After the tools ran: back to the model, unless the turns are used up. */
export function next(state) {
  return state.error === null || state.error === undefined ? "agent" : END;
}

export const graph = new StateGraph(State)
  .addNode("agent", agent, { description: "One model turn." })
  .addNode("tools", new ToolNode([]), { description: "Runs the turn's tool calls as sub-runs." })
  .addEdge(START, "agent")
  .addConditionalEdges("agent", toolsCondition)
  .addConditionalEdges("tools", next, { agent: "agent", [END]: END })
  .compile({
    description: "Answer a question, calling the granted graph tools as needed.",
    asTool: true,
    parameters: {
      question: { type: "string", required: true, description: "What to find out." },
      max_steps: { type: "integer", default: 6, description: "Most model turns (1 to 12)." },
    },
  });
