"""`{{graph}}`: a sandgraph graph. It counts the words of `text`, then
appends a line about it to `log`.

`{"text": "hello wasm world"}` ends as
`{"text": "hello wasm world", "words": 3, "log": ["3 words"]}`.

Build the component with `sandgraph build . --out {{name}}.wasm`, run the
golden cases of `tests/` with `sandgraph test {{name}}.wasm`, and the
native unit tests (test_graph.py) with `PYTHONPATH=sdk/python python3 -m unittest`.
"""

import operator
from typing import Annotated, TypedDict

from sandgraph import END, START, StateGraph


class State(TypedDict, total=False):
    text: str
    words: int
    log: Annotated[list[str], operator.add]


def count(state: State) -> dict:
    """Counts the words of the text."""
    return {"words": len(state["text"].split())}


def report(state: State) -> dict:
    """Appends one line about the count to the log."""
    words = state["words"]
    unit = "word" if words == 1 else "words"
    return {"log": [f"{words} {unit}"]}


# Strict: an input key or a node write that names no channel fails the run,
# naming the key.
builder = StateGraph(State, defaults={"words": 0})
builder.add_node("count", count, description="Count the words of the text.")
builder.add_node("report", report, description="Log the count.")
builder.add_edge(START, "count")
builder.add_edge("count", "report")
builder.add_edge("report", END)
graph = builder.compile(
    name="{{graph}}",
    description="Count the words of a text.",
    as_tool=True,
    parameters={"text": {"type": "string", "required": True, "description": "The text to count."}},
    strict=True,
)
