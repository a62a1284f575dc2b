"""`loop_graph`: `count` adds one to `n` and loops back through the router
`should_continue` while `n < target` (the Rust `example-graphs/loop`).

`{"target": 3}` ends as `{"n": 3, "target": 3}`.
"""

from typing import TypedDict

from sandgraph import END, START, StateGraph


class State(TypedDict):
    n: int
    target: int


def count(state: State) -> dict:
    return {"n": state["n"] + 1}


def should_continue(state: State) -> str:
    return "continue" if state["n"] < state["target"] else "done"


builder = StateGraph(State, defaults={"n": 0})
builder.add_node("count", count)
builder.add_edge(START, "count")
builder.add_conditional_edges("count", should_continue, {"continue": "count", "done": END})
graph = builder.compile(
    name="loop_graph",
    description="Count up to a target, one superstep at a time.",
)
