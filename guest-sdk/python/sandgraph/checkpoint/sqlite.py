"""`langgraph.checkpoint.sqlite`: not offered. Making a `SqliteSaver`
raises `NotOffered` saying what to do instead."""

from .._unoffered import CHECKPOINTS, unoffered

__all__ = ["SqliteSaver"]

SqliteSaver = unoffered("SqliteSaver", CHECKPOINTS)
