"""`map_reduce_graph`: `plan` fans out one `square` task per item with
`Send`; each appends `x * x` to `results`; the tasks then trigger `sum`
once, which writes the total.

`{"items": [1, 2, 3]}` ends with `total: 14`.
"""

import operator
from typing import Annotated, TypedDict

from sandgraph import END, START, Send, StateGraph

# The Rust example's i64 arithmetic fails past this; so does this one.
I64_MAX = 2**63 - 1


class State(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]
    total: int


def plan(state: State) -> None:
    return None


def fan_out(state: State) -> list[Send]:
    return [Send("square", {"x": x}) for x in state["items"]]


def square(task: dict) -> dict:
    x = task["x"]
    if not isinstance(x, int) or isinstance(x, bool):
        raise TypeError(f"x must be an integer, not {type(x).__name__}")
    result = x * x
    if result > I64_MAX:
        raise ValueError("square overflows i64")
    return {"results": [result]}


def sum_results(state: State) -> dict:
    total = sum(state["results"])
    if abs(total) > I64_MAX:
        raise ValueError("total overflows i64")
    return {"total": total}


builder = StateGraph(State)
builder.add_node("plan", plan)
builder.add_node("square", square)
builder.add_node("sum", sum_results)
builder.add_edge(START, "plan")
builder.add_conditional_edges("plan", fan_out)
builder.add_edge("square", "sum")
builder.add_edge("sum", END)
graph = builder.compile(
    name="map_reduce_graph",
    description="Square every item in parallel, then sum the squares.",
)
