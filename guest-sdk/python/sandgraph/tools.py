"""Other mounted graph tools, called through the host as sub-runs of the
current run (the `tools` capability: `capabilities = ["tools"]` in
`[tool.sandgraph]`, and a `tools` grant in the operator's config)."""

import builtins
import json
import re
from typing import Any, NamedTuple, Optional

from . import _bindings
from .errors import ToolError

__all__ = ["ToolInfo", "acall", "call", "list"]


class ToolInfo(NamedTuple):
    """A tool the graph is granted: its name, description and the JSON
    Schema of its arguments (a dict)."""

    name: str
    description: Optional[str]
    parameters: dict


def kind_of(error_case: Any) -> str:
    """The kind of a WIT error case (`ToolError_NotFound` → `not_found`)."""
    case = type(error_case).__name__.split("_", 1)[-1]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", case).lower()


def list() -> builtins.list:  # noqa: A001 (the WIT function's name)
    """The tools this graph is granted, with their schemas, in the host's
    order."""
    infos = []
    for info in _bindings.binding("tools").list():
        try:
            parameters = json.loads(info.parameters)
        except ValueError:
            parameters = {"type": "object"}
        infos.append(ToolInfo(info.name, info.description, parameters))
    return infos


def call(name: str, args: Optional[dict] = None) -> Any:
    """Runs tool `name` with `args` (a dict) as a sub-run sharing this run's
    deadline, fuel and memory budget; returns its final state (parsed JSON).
    Raises `ToolError` (kinds `denied`, `not_found`, `invalid_args`,
    `recursion`, `quota`, `failed`)."""
    if not isinstance(name, str):
        raise TypeError(f"tools.call: the tool name must be a string, not {type(name).__name__}")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise TypeError(f"tools.call({name!r}): args must be a dict, not {type(args).__name__}")
    text = json.dumps(args, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return json.loads(call_text(name, text))


def call_text(name: str, args: str) -> str:
    """`call` with the arguments and the result as JSON text."""
    module = _bindings.binding("tools")
    try:
        return module.call(name, args)
    except Exception as error:
        value = getattr(error, "value", None)
        if value is None or not type(value).__name__.startswith("ToolError_"):
            raise
        raise ToolError(kind_of(value), str(value.value)) from None


async def acall(name: str, args: Optional[dict] = None) -> Any:
    """`call`, awaitable (the host call itself is synchronous: awaiting
    several with `asyncio.gather` runs them one after another)."""
    return call(name, args)
