"""`echo_graph`: appends `seen:<topic>` to the `log` list.

`{"topic": "hi"}` ends as `{"topic": "hi", "log": ["seen:hi"]}`.
"""

import operator
from typing import Annotated, TypedDict

from sandgraph import END, START, StateGraph


class State(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def echo(state: State) -> dict:
    return {"log": [f"seen:{state['topic']}"]}


builder = StateGraph(State)
builder.add_node("echo", echo)
builder.add_edge(START, "echo")
builder.add_edge("echo", END)
graph = builder.compile(name="echo_graph", description="Echo the given topic.", as_tool=True)
