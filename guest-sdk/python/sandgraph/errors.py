"""Mirrors `langgraph.errors`, plus the typed errors of the host's
capabilities (`sandgraph.llm`, `sandgraph.tools`, `sandgraph.http`).

An uncaught capability error fails the node with `<kind>: <text>`."""

from ._unoffered import NotOffered
from .types import GraphInterrupt

__all__ = ["CapabilityError", "GraphInterrupt", "HttpError", "LlmError", "NotOffered", "ToolError"]


class CapabilityError(Exception):
    """A failed call to a host capability: `kind` names the case (the WIT
    error case with `-` as `_`, e.g. `denied`, `not_found`), `message` is
    the host's text. `str(error)` is `<kind>: <message>`."""

    #: The kinds this capability reports.
    KINDS: tuple = ()

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


class LlmError(CapabilityError):
    """A failed `sandgraph.llm` call."""

    KINDS = ("denied", "quota", "timeout", "provider", "malformed")


class ToolError(CapabilityError):
    """A failed `sandgraph.tools` call."""

    KINDS = ("denied", "not_found", "invalid_args", "recursion", "quota", "failed")


class HttpError(CapabilityError):
    """A failed `sandgraph.http` request: `denied` (the origin is not
    granted, or the host refused the request), `timeout`, `connection` (DNS,
    refused, reset, TLS), `protocol` (a malformed or too large request or
    response), `status` (`raise_for_status` on a 4xx/5xx answer)."""

    KINDS = ("denied", "timeout", "connection", "protocol", "status")


class CapabilityNotImported(RuntimeError):
    """A capability the build did not import was called."""

    def __init__(self, capability: str) -> None:
        super().__init__(
            f'this graph was built without the "{capability}" capability: add "{capability}" to '
            "[tool.sandgraph] capabilities in pyproject.toml"
        )
        self.capability = capability
