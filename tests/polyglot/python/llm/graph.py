"""`graph_llm` in Python, the bench's twin of tests/guests/graph-llm: `ask`
makes `calls` chat calls (default 1) with the alias `fast`, the system
message "Answer briefly." and the user message `question`, and appends each
outcome to `answers`. With `mode: "async"` the calls are awaited one after
another from an `async def` node instead (the same work), so the polyglot
bench can measure what an async node costs."""

import operator
from typing import Annotated, Any, TypedDict

from sandgraph import END, START, StateGraph, llm
from sandgraph.errors import LlmError


class State(TypedDict, total=False):
    question: str
    calls: int
    mode: str
    answers: Annotated[list, operator.add]


model = llm.ChatModel("fast")


def _messages(state: State) -> list:
    return [("system", "Answer briefly."), ("user", state.get("question", "hello?"))]


def _outcome(call: Any) -> dict:
    try:
        answer = call()
    except LlmError as error:
        return {"error": {"kind": error.kind, "message": error.message}}
    return {"content": answer["content"]}


def ask(state: State) -> dict:
    messages = _messages(state)
    return {"answers": [_outcome(lambda: model.invoke(messages)) for _ in range(state.get("calls", 1))]}


async def ask_async(state: State) -> dict:
    messages = _messages(state)
    answers = []
    for _ in range(state.get("calls", 1)):
        try:
            answer = await model.ainvoke(messages)
        except LlmError as error:
            answers.append({"error": {"kind": error.kind, "message": error.message}})
        else:
            answers.append({"content": answer["content"]})
    return {"answers": answers}


def mode(state: State) -> str:
    return "async" if state.get("mode") == "async" else "sync"


builder = StateGraph(State)
builder.add_node("ask", ask)
builder.add_node("ask_async", ask_async)
builder.add_conditional_edges(START, mode, {"sync": "ask", "async": "ask_async"})
builder.add_edge("ask", END)
builder.add_edge("ask_async", END)
graph = builder.compile(name="graph_llm")
