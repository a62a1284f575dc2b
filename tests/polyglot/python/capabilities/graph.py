"""Calls every capability the Python SDK offers: a model (`ask`), a graph
tool (`use_tool`), a loopback URL (`fetch`), and all three at once from an
async node (`gather`). Refusals are caught and kept as their kinds."""

import asyncio
from typing import Any, TypedDict

from sandgraph import START, END, StateGraph, http, llm, tools
from sandgraph.errors import HttpError, ToolError


class State(TypedDict, total=False):
    url: str
    answer: Any
    tool: Any
    fetched: Any
    gathered: Any


model = llm.ChatModel("fast", max_tokens=50)


def ask(state: State) -> dict:
    reply = model.invoke([("system", "be brief"), "hi?"])
    return {"answer": {"content": reply["content"], "usage": reply["usage_metadata"]}}


def use_tool(state: State) -> dict:
    result = tools.call("echo_graph", {"input": {"topic": "py"}})
    try:
        tools.call("not_granted", {})
        refused = None
    except ToolError as error:
        refused = error.kind
    return {"tool": {"log": result["log"], "refused": refused}}


def fetch(state: State) -> dict:
    got = http.get(state["url"] + "/hello", params={"q": "é"}, headers={"X-Test": "yes"})
    got.raise_for_status()
    posted = http.post(state["url"] + "/echo", json={"n": 1}, timeout=5)
    try:
        http.get("http://example.com/")
        denied = None
    except HttpError as error:
        denied = error.kind
    return {
        "fetched": {
            "status": got.status,
            "type": got.headers["CONTENT-TYPE"],
            "get": got.json(),
            "post": posted.json(),
            "denied": denied,
            "idna": "bücher.example".encode("idna").decode("ascii"),
        }
    }


async def gather(state: State) -> dict:
    await asyncio.sleep(0)
    reply, echoed, got = await asyncio.gather(
        model.ainvoke("again"),
        tools.acall("echo_graph", {"input": {"topic": "async"}}),
        http.aget(state["url"] + "/async"),
    )
    return {"gathered": [reply["content"], echoed["log"], got.json()["path"]]}


builder = StateGraph(State)
builder.add_sequence([ask, use_tool, fetch, gather])
builder.add_edge(START, "ask")
builder.add_edge("gather", END)
graph = builder.compile(name="py_caps")
