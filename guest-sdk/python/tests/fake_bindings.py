"""Stand-ins for the modules componentize-py generates (`wit_world`,
`componentize_py_types`), shaped like the real ones (records are
dataclasses, variants one class per case with `.value`, `result` errors
raise `Err`), so `sandgraph._component` runs natively."""

import enum
import sys
import types
from dataclasses import dataclass
from typing import Any, List, Optional


@dataclass(frozen=True)
class Err(Exception):
    value: Any


class Reducer(enum.Enum):
    LAST_VALUE = 0
    APPEND = 1
    MERGE = 2
    ADD = 3
    CUSTOM = 4


class LogLevel(enum.Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


def _record(name, *fields):
    return dataclass(type(name, (), {"__annotations__": {f: Any for f in fields}}))


def _case(name):
    return dataclass(type(name, (), {"__annotations__": {"value": Any}}))


ChannelSpec = _record("ChannelSpec", "name", "reducer", "default")
NodeSpec = _record("NodeSpec", "name", "description")
Edge = _record("Edge", "sources", "target")
PathEntry = _record("PathEntry", "key", "target")
ConditionalEdge = _record("ConditionalEdge", "source", "router", "path_map")
Registration = _record("Registration", "as_tool", "as_graph_tool")
GraphSpec = _record(
    "GraphSpec", "name", "description", "registration", "parameters", "timeout_ms", "channels",
    "nodes", "edges", "conditional_edges", "entry_points", "finish_points",
)
Send = _record("Send", "node", "payload")
Command = _record("Command", "update", "goto", "sends")
CallContext = _record("CallContext", "tool", "request", "thread_id", "step", "resume", "configurable")
NAMES = [
    "RouteTarget_Node", "RouteTarget_Send", "GraphError_InvalidState", "GraphError_Unknown",
    "GraphError_Failed", "NodeResult_Update", "NodeResult_Command", "NodeResult_Interrupt",
]


def context(resume: Optional[List[str]] = None, configurable: str = "{}", thread_id=None):
    return CallContext("tool", None, thread_id, 0, resume or [], configurable)


LOG: List[tuple] = []


def install() -> None:
    """Puts the stand-ins into `sys.modules` (once)."""
    if "wit_world" in sys.modules:
        return
    cpt = types.ModuleType("componentize_py_types")
    cpt.Err = Err
    wit_types = types.ModuleType("wit_world.imports.types")
    for name, value in list(globals().items()):
        if isinstance(value, type) and name[0].isupper() and name not in ("Any", "List", "Optional"):
            setattr(wit_types, name, value)
    for name in NAMES:
        setattr(wit_types, name, _case(name))
    host = types.ModuleType("wit_world.imports.host")
    host.log = lambda level, message: LOG.append((level, message))
    host.cancelled = lambda: False
    exports = types.ModuleType("wit_world.exports")
    exports.Graph = type("Graph", (), {})
    imports = types.ModuleType("wit_world.imports")
    imports.types = wit_types
    imports.host = host
    world = types.ModuleType("wit_world")
    world.exports = exports
    world.imports = imports
    sys.modules.update({
        "componentize_py_types": cpt,
        "wit_world": world,
        "wit_world.exports": exports,
        "wit_world.imports": imports,
        "wit_world.imports.types": wit_types,
        "wit_world.imports.host": host,
    })
