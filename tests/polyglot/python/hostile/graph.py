"""`hostile_graph`: the host's hostile-guest cases, in Python (the twin of
the Rust one). By `mode`: `loop` spins for ever without host calls, `bomb`
allocates without bound, `huge` writes a 20,000,000-character string, `raise`
raises; anything else writes `out: "ok"`."""

from typing import TypedDict

from sandgraph import END, START, StateGraph

# Kept for ever, so nothing the bomb allocates is freed.
_hoard = []


class State(TypedDict):
    mode: str
    out: str


def act(state: State) -> dict:
    mode = state.get("mode")
    if mode == "loop":
        while True:
            pass
    if mode == "bomb":
        while True:
            _hoard.append(bytearray(1 << 20))
    if mode == "huge":
        return {"out": "x" * 20_000_000}
    if mode == "raise":
        raise RuntimeError("hostile raise")
    return {"out": "ok"}


builder = StateGraph(State)
builder.add_node("act", act)
builder.add_edge(START, "act")
builder.add_edge("act", END)
graph = builder.compile(
    name="hostile_graph",
    description="Misbehaves as `mode` says: loop, bomb, huge, raise.",
)
