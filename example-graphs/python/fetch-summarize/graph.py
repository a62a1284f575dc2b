"""`fetch_summarize` in Python, the twin of example-graphs/fetch-summarize:
`fetch` GETs `url` through the `http` capability and keeps the start of the
body (`excerpt`, at most 4 KiB); `summarize` asks the model (alias `fast`)
to summarize it. Both nodes are `async def`.

`{"url": "https://example.com/"}`, with that origin and the model granted,
ends with `source` (the URL), `status: 200` and `summary`. Any failure (an
origin not granted, an address the graph may not reach, a body over the
host's cap, a timeout, a status other than 2xx, the model's error) ends the
run with `error` saying why."""

from typing import TypedDict

from sandgraph import END, START, StateGraph, http, llm
from sandgraph.errors import CapabilityError

#: The most bytes of the body the model is sent.
EXCERPT_BYTES = 4 * 1024

SYSTEM = "Summarize the document in two or three sentences. It may be cut short."


class State(TypedDict, total=False):
    url: str
    source: str
    status: int
    excerpt: str
    summary: str
    error: str


async def fetch(state: State) -> dict:
    url = state.get("url", "")
    update: dict = {"source": url}
    try:
        response = await http.aget(url)
    except CapabilityError as error:
        return {**update, "error": str(error)}
    update["status"] = response.status
    if not response.ok:
        return {**update, "error": f"the server answered {response.status}"}
    head = response.content[:EXCERPT_BYTES]
    return {**update, "excerpt": head.decode("utf-8", errors="replace")}


model = llm.ChatModel("fast", max_tokens=300)


async def summarize(state: State) -> dict:
    document = f"Document fetched from {state.get('url', '')}:\n\n{state.get('excerpt', '')}"
    try:
        answer = await model.ainvoke([("system", SYSTEM), ("user", document)])
    except CapabilityError as error:
        return {"error": str(error)}
    return {"summary": answer["content"]}


def fetched(state: State) -> str:
    return "failed" if state.get("error") is not None else "ok"


builder = StateGraph(State)
builder.add_node("fetch", fetch)
builder.add_node("summarize", summarize)
builder.add_edge(START, "fetch")
builder.add_conditional_edges("fetch", fetched, {"ok": "summarize", "failed": END})
builder.add_edge("summarize", END)
graph = builder.compile(
    name="fetch_summarize",
    description="Fetch a web page from a granted origin and summarize it.",
    as_tool=True,
    parameters={
        "url": {"type": "string", "required": True, "description": "The page to summarize."}
    },
)
