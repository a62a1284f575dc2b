"""LangGraph-Python's SQLite checkpointer on the echo graph, for a same-run
comparison with sandgraph's durable echo
(`cargo bench -p sandgraph-tests --bench runtime -- durability`).

The graph is `example-graphs/echo`: channels `topic` (last value) and `log`
(append); one node appends `seen:<topic>`. Each run is `invoke` of
`{"topic": "hi"}` on a new thread with a `SqliteSaver` on a file (SQLite's
defaults: rollback journal, `synchronous=FULL`, so each commit is fsynced),
in each LangGraph durability mode. Prints the median per run.

Run it (not part of the build; the venv stays outside the repository):

    python3 -m venv /tmp/lgvenv
    /tmp/lgvenv/bin/pip install langgraph langgraph-checkpoint-sqlite
    /tmp/lgvenv/bin/python tests/benches/langgraph_echo.py
"""

import operator
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Annotated, TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

WARMUP = 200
RUNS = 2000


class State(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def echo(state: State) -> dict:
    return {"log": [f"seen:{state['topic']}"]}


def build(checkpointer=None):
    graph = StateGraph(State)
    graph.add_node("echo", echo)
    graph.add_edge(START, "echo")
    graph.add_edge("echo", END)
    return graph.compile(checkpointer=checkpointer)


def median_us(run) -> float:
    for i in range(WARMUP):
        run(f"warm-{i}")
    times = []
    for i in range(RUNS):
        started = time.perf_counter()
        run(f"run-{i}")
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    results = {}
    plain = build()
    results["no checkpointer"] = median_us(lambda _: plain.invoke({"topic": "hi"}))
    with tempfile.TemporaryDirectory() as dir:
        conn = sqlite3.connect(os.path.join(dir, "lg.sqlite"), check_same_thread=False)
        app = build(SqliteSaver(conn))
        for mode in ("exit", "async", "sync"):
            def run(thread, mode=mode):
                out = app.invoke(
                    {"topic": "hi"},
                    {"configurable": {"thread_id": f"{mode}-{thread}"}},
                    durability=mode,
                )
                assert out == {"topic": "hi", "log": ["seen:hi"]}, out

            results[f"sqlite, durability={mode}"] = median_us(run)
        conn.close()
    print(f"python {sys.version.split()[0]}")
    for name, us in results.items():
        print(f"{name}: {us:,.0f} µs per run")


if __name__ == "__main__":
    main()
