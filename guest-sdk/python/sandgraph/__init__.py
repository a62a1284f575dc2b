"""sandgraph: write LangGraph-style state graphs in Python and build them
into sandboxed WebAssembly components with `sandgraph build`.

The API mirrors `langgraph.graph` and `langgraph.types`: porting a graph is
mostly changing `langgraph` to `sandgraph` in its imports.
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
