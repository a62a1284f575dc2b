"""`{{graph}}`: a sandgraph graph that asks a model. The `ask` node sends
the question to the model the operator maps to the alias `default`
(through the host, which holds the provider and its key), and writes the
`answer`; a failed call (no grant, quota used up, provider down) ends the
run with `error` saying why.

The host grants models per graph, in the operator's `sandgraph.toml`:

    [llm]
    model = "deepseek-chat"   # the alias "default"

    [graphs.{{graph}}.grants]
    llm = { models = ["default"], max_calls = 4, max_tokens = 2000 }

The golden case `tests/basic.json` replays a recorded exchange
(`tests/basic.cassette.jsonl`), so `sandgraph test` needs no model or key.
"""

from typing import TypedDict

from sandgraph import END, START, StateGraph
from sandgraph.errors import LlmError
from sandgraph.llm import ChatModel
from sandgraph.messages import HumanMessage, SystemMessage

# The model alias the graph asks; the operator maps it to a model.
MODEL = "default"

# Most tokens of an answer.
MAX_ANSWER_TOKENS = 200

SYSTEM = "Answer the question in one short sentence."


class State(TypedDict, total=False):
    question: str
    answer: str
    error: str


def model() -> ChatModel:
    """The model the graph asks."""
    return ChatModel(MODEL, max_tokens=MAX_ANSWER_TOKENS)


def messages(question: str) -> list:
    """Everything the model is asked."""
    return [SystemMessage(SYSTEM), HumanMessage(question)]


def ask(state: State) -> dict:
    """Asks the model; writes its answer, or why there is none."""
    try:
        reply = model().invoke(messages(state["question"]))
    except LlmError as error:
        return {"error": str(error)}
    return {"answer": reply["content"].strip()}


builder = StateGraph(State)
builder.add_node("ask", ask, description="Ask the model the question.")
builder.add_edge(START, "ask")
builder.add_edge("ask", END)
graph = builder.compile(
    name="{{graph}}",
    description="Answer a question in one sentence, asking a model.",
    as_tool=True,
    parameters={"question": {"type": "string", "required": True, "description": "What to answer."}},
    strict=True,
)
