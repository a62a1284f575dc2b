"""`approval_graph`: drafts a text about `topic`, then interrupts with the
draft and asks for approval. `"yes"` publishes it (`published: true`) and
ends; any other answer counts a revision, revises the draft and asks again.

Run it on a durable thread: `sandgraph run approval.wasm --thread t1
--input '{"topic":"wasm"}'`, then `--resume '"no"'` or `--resume '"yes"'`.
"""

from typing import Literal, TypedDict

from sandgraph import END, START, StateGraph, interrupt


class State(TypedDict):
    topic: str
    draft: str
    revisions: int
    published: bool


def draft(state: State) -> dict:
    revisions = state["revisions"]
    if revisions == 0:
        text = f"A short note about {state['topic']}."
    else:
        text = f"A short note about {state['topic']} (revision {revisions})."
    return {"draft": text}


def review(state: State) -> dict:
    answer = interrupt({"question": "publish this draft?", "draft": state.get("draft", "")})
    if answer == "yes":
        return {"published": True}
    return {"revisions": state["revisions"] + 1}


def after_review(state: State) -> Literal["publish", "revise"]:
    return "publish" if state["published"] is True else "revise"


# LangGraph has no defaults for plain keys; sandgraph's `defaults` gives
# these two a starting value, as the Rust example's channels have.
builder = StateGraph(State, defaults={"revisions": 0, "published": False})
builder.add_node("draft", draft)
builder.add_node("review", review)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_conditional_edges("review", after_review, {"publish": END, "revise": "draft"})
graph = builder.compile(
    name="approval_graph",
    description="Draft a text about a topic and publish it once a human approves.",
)
