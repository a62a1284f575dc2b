"""`langgraph.store.memory`: not offered. Making an `InMemoryStore` raises
`NotOffered` saying what to do instead."""

from .._unoffered import STORES, unoffered

__all__ = ["InMemoryStore"]

InMemoryStore = unoffered("InMemoryStore", STORES)
