"""`research` in Python, the twin of example-graphs/research: a ReAct
agent on the SDK's agent blocks. The `agent` node asks the model (alias
`fast`) through a `ChatModel`, offering the graph tools this graph is
granted (`tools.list()`, with their JSON Schemas); `tools_condition` sends
a turn with tool calls to the `tools` node, a `ToolNode` running each call
as a sub-run, which loops back to `agent`, until the model answers without
tool calls (`answer`) or `max_steps` model turns are used (`error`). The
conversation is the `messages` channel (`add_messages`).

`{"question": "Greet Ada formally."}` with `greet_graph` granted ends with
the model's `answer`, `steps: 2` and the whole conversation in `messages`.
A failed tool call goes back to the model as an error tool message; a
failed model call (no grant, quota used up, provider down) ends the run
with `error` saying why.

The graph is named after `[project].name` in pyproject.toml.
"""

from typing import Annotated, Literal, TypedDict

from sandgraph import END, START, StateGraph, tools
from sandgraph.errors import LlmError
from sandgraph.graph import add_messages
from sandgraph.llm import ChatModel
from sandgraph.messages import HumanMessage, SystemMessage
from sandgraph.prebuilt import ToolNode, tools_condition

# The most model turns whatever `max_steps` says: a turn with tool calls
# takes two supersteps (`agent`, `tools`), so the loop always ends here,
# before the host's step budget (25 supersteps) stops the run.
STEP_CAP = 12

SYSTEM = (
    "You are a research assistant. Call the tools when they help, "
    "then answer the question in a few sentences."
)


class State(TypedDict):
    question: str
    max_steps: int
    messages: Annotated[list, add_messages]
    steps: int
    answer: str
    error: str


def agent(state: State) -> dict:
    """One model turn. On the first, the instructions and the question
    start the conversation."""
    steps = state.get("steps", 0) + 1
    history = state.get("messages") or []
    new = [] if history else [SystemMessage(SYSTEM), HumanMessage(state["question"])]
    offered = [{"name": t.name, "description": t.description, "parameters": t.parameters} for t in tools.list()]
    model = ChatModel("fast").bind_tools(offered)
    try:
        reply = model.invoke(history + new)
    except LlmError as error:
        # No grant, the quota used up, the provider down: the run ends here.
        return {"steps": steps, "messages": new, "error": str(error)}
    update = {"steps": steps, "messages": [*new, reply]}
    if not reply["tool_calls"]:
        update["answer"] = reply["content"]
        return update
    max_steps = min(max(state.get("max_steps", 6), 1), STEP_CAP)
    if steps >= max_steps:
        # The tools node still runs this turn's calls, then the run ends.
        update["error"] = f"no answer after {steps} model turns (max_steps is {max_steps})"
    return update


def after_tools(state: State) -> Literal["agent", "__end__"]:
    """Back to the model, unless the step cap ended the run."""
    return END if state.get("error") else "agent"


builder = StateGraph(State, defaults={"max_steps": 6, "steps": 0})
builder.add_node("agent", agent, description="One model turn.")
builder.add_node("tools", ToolNode([]), description="Runs the turn's tool calls as sub-runs.")
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", tools_condition)
builder.add_conditional_edges("tools", after_tools)

graph = builder.compile(
    description="Answer a question, calling the granted graph tools as needed.",
    as_tool=True,
    parameters={
        "question": {"type": "string", "required": True, "description": "What to find out."},
        "max_steps": {"type": "integer", "default": 6, "description": "Most model turns (1 to 12)."},
    },
)
