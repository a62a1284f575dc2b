"""`langgraph.checkpoint.memory`: not offered. Making a `MemorySaver` or
`InMemorySaver` raises `NotOffered` saying what to do instead."""

from .._unoffered import CHECKPOINTS, unoffered

__all__ = ["InMemorySaver", "MemorySaver"]

MemorySaver = unoffered("MemorySaver", CHECKPOINTS)
InMemorySaver = unoffered("InMemorySaver", CHECKPOINTS)
