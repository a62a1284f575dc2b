"""Mirrors `langgraph.errors`: the exception `interrupt` raises."""

from .types import GraphInterrupt

__all__ = ["GraphInterrupt"]
