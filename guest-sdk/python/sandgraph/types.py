"""Control-flow values a node or router returns, and `interrupt`.

Mirrors `langgraph.types`: `Send`, `Command`, `interrupt`; and
`langgraph.errors.GraphInterrupt`.
"""

from typing import Any, Generic, Optional, Sequence, TypeVar, Union

from .constants import END, START

from ._unoffered import unoffered

__all__ = [
    "END",
    "START",
    "CachePolicy",
    "Command",
    "GraphInterrupt",
    "RetryPolicy",
    "Send",
    "interrupt",
]

#: Why there are no retry policies.
NO_RETRIES = "the host does not retry nodes: catch the error in the node and try again there"

#: Why there are no cache policies.
NO_CACHE = "the host does not cache nodes: keep a result in the state and skip the work when it is there"

RetryPolicy = unoffered("RetryPolicy", NO_RETRIES)
CachePolicy = unoffered("CachePolicy", NO_CACHE)


class Send:
    """A dynamic task: run `node` in the next superstep with `arg` as its
    private input instead of the graph state (a router or a `Command`'s
    `goto` returns it)."""

    __slots__ = ("node", "arg")

    def __init__(self, node: str, arg: Any) -> None:
        self.node = node
        self.arg = arg

    def __repr__(self) -> str:
        return f"Send(node={self.node!r}, arg={self.arg!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Send) and (self.node, self.arg) == (other.node, other.arg)

    def __hash__(self) -> int:
        return hash(self.node)


N = TypeVar("N")


class Command(Generic[N]):
    """A node's state update plus where to go next.

    `-> Command[Literal["a", "b"]]` on a node function declares where it
    may go (as `add_node(..., destinations=("a", "b"))` does).

    `update` is a dict of state writes (as a node would return); `goto` is a
    node name, `END`, a `Send`, or a sequence of them, and adds to the
    node's static edges (it does not replace them).
    """

    PARENT = "__parent__"

    __slots__ = ("update", "goto")

    def __init__(
        self,
        *,
        graph: Optional[str] = None,
        update: Any = None,
        resume: Any = None,
        goto: Union[str, Send, Sequence[Union[str, Send]]] = (),
    ) -> None:
        if graph is not None:
            raise ValueError(
                "Command(graph=...) is not supported: a sandgraph component is one graph "
                "(no subgraphs or parent graph)"
            )
        if resume is not None:
            raise ValueError(
                "Command(resume=...) is not supported in a graph: the caller resumes a run "
                "(`sandgraph run --thread T --resume VALUE`)"
            )
        self.update = update
        self.goto = goto

    def __repr__(self) -> str:
        return f"Command(update={self.update!r}, goto={self.goto!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Command) and (self.update, self.goto) == (other.update, other.goto)


class GraphInterrupt(BaseException):
    """Raised by `interrupt` to pause the run. A `BaseException`, so an
    `except Exception` in a node does not swallow it by accident."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


class _Task:
    """The resume values of the running task and how many interrupts it has
    passed."""

    __slots__ = ("resume", "index")

    def __init__(self, resume: list) -> None:
        self.resume = resume
        self.index = 0


# The task running now; a component instance is single-threaded.
_task: Optional[_Task] = None


def _enter(resume: list) -> None:
    global _task
    _task = _Task(resume)


def _leave() -> None:
    global _task
    _task = None


def interrupt(value: Any) -> Any:
    """Pauses the run for a human, showing `value` (any JSON value) to the
    caller, as `langgraph.types.interrupt` does.

    The first call raises `GraphInterrupt`; do not catch it. When the caller
    resumes the run, the node runs again from the start and this time the
    k-th call of `interrupt` in the node returns the k-th resume value.
    """
    task = _task
    if task is None:
        raise RuntimeError("interrupt() may only be called while a node runs")
    index = task.index
    task.index += 1
    if index < len(task.resume):
        return task.resume[index]
    raise GraphInterrupt(value)
