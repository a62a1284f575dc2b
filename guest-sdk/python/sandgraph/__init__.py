"""sandgraph: write LangGraph-style state graphs in Python and build them
into sandboxed WebAssembly components with `sandgraph build`.

The API mirrors `langgraph.graph`, `langgraph.types` and
`langgraph.prebuilt` (`sandgraph.prebuilt`), with the host's models, graph
tools and URLs as capabilities (`sandgraph.llm`, `sandgraph.tools`,
`sandgraph.http`); the SDK's README lists each LangGraph name as the same,
different or not offered.
"""

from .constants import END, START
from .graph import CompiledStateGraph, StateGraph
from .host import cancelled, log
from .types import Command, GraphInterrupt, Send, interrupt

__all__ = [
    "END",
    "START",
    "Command",
    "CompiledStateGraph",
    "GraphInterrupt",
    "Send",
    "StateGraph",
    "cancelled",
    "interrupt",
    "log",
]
