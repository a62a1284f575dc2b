"""LangGraph names sandgraph does not offer: each raises, on use, an error
that names it and says what sandgraph does instead (a port fails where the
name is used, not later in the host)."""

from typing import Any, NoReturn

__all__ = ["CHECKPOINTS", "NotOffered", "STORES", "unoffered"]

#: Why there are no checkpointers.
CHECKPOINTS = (
    "the host owns checkpoints and thread state: run with `sandgraph run --thread ID` and resume "
    "with `--resume VALUE`; compile() needs no checkpointer"
)

#: Why there are no stores.
STORES = (
    "sandgraph has no long-term store: keep what a run needs in the graph's state, or call a "
    "granted graph tool (sandgraph.tools) that keeps it"
)


class NotOffered(NotImplementedError):
    """A LangGraph name or argument sandgraph does not offer."""

    def __init__(self, name: str, instead: str) -> None:
        super().__init__(f"{name} is not offered by sandgraph: {instead}")
        self.name = name


class _Refusing(type):
    """Refuses a stand-in's class attributes too (`SqliteSaver.from_conn_string`)."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotOffered(f"{cls.__name__}.{attr}", cls._instead)


def unoffered(name: str, instead: str) -> type:
    """A stand-in class `name` that raises `NotOffered` when it is made or
    its attributes are used."""

    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise NotOffered(name, instead)

    return _Refusing(name, (), {"__new__": refuse, "_instead": instead, "__doc__": f"Not offered: {instead}."})
