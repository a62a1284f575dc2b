"""`StateGraph`, mirroring `langgraph.graph.StateGraph`, and
`CompiledStateGraph`, which answers the host's calls.

Pure Python: nothing here imports the component bindings, so graphs and
this module are unit-testable with a native `python3` (3.11 or later).
"""

import collections.abc
import inspect
import json
import operator
import re
import sys
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _aio
from . import types as _types
from .constants import END, START
from . import messages as _messages
from ._unoffered import CHECKPOINTS, STORES, NotOffered
from .errors import CapabilityError
from .messages import MessagesState, add_messages
from .types import Command, GraphInterrupt, Send

__all__ = ["END", "START", "CompiledStateGraph", "MessagesState", "StateGraph", "add_messages"]

# LangGraph's `langgraph.graph.message` (sandgraph.graph is a module).
sys.modules.setdefault(f"{__name__}.message", _messages)

# The reducers the host runs itself, and `custom` (the WIT `reducer` enum).
LAST_VALUE = "last-value"
APPEND = "append"
MERGE = "merge"
ADD = "add"
CUSTOM = "custom"

# The channel that marks a strict graph in the spec (the WIT record has no
# field for it); the Rust SDK sends the same.
STRICT_MARKER_CHANNEL = "__strict__"

# The router name of a node's goto declaration (`destinations=`, or a
# `-> Command[Literal[...]]` annotation): never a router, never called.
GOTO_ROUTER = "__goto__"

# Longest failure message sent to the host, in characters.
MAX_MESSAGE_LEN = 4000

# The host's rules for a graph name (the tool name).
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_NAME_LEN = 64


# A `MemoryError` is not turned into a graph error: it means the instance
# reached its memory cap, an exhausted limit, which the WIT contract reports
# by trapping (the host then says `memory_limit`). Every other exception
# becomes a graph error.


class CallError(Exception):
    """A failed host call, one-to-one with the WIT `graph-error` cases:
    `invalid-state`, `unknown`, `failed`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = _text(message)


def _text(message: str) -> str:
    """A message the host can take: bounded, valid UTF-8 (a lone surrogate
    becomes U+FFFD)."""
    if len(message) > MAX_MESSAGE_LEN:
        message = message[: MAX_MESSAGE_LEN - 3] + "..."
    return message.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _dumps(value: Any) -> str:
    """Compact JSON text; raises TypeError or ValueError for what is not
    JSON (NaN, a set, a string with a lone surrogate, ...)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a string holds a lone surrogate, which is not UTF-8") from None
    return text


def _json(value: Any, what: str) -> str:
    try:
        return _dumps(value)
    except (TypeError, ValueError, RecursionError) as error:
        raise CallError("failed", f"{what} is not JSON: {error}") from None


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise CallError("invalid-state", f"{what}: {error}") from None


def describe_exception(error: BaseException) -> str:
    """`ValueError: boom (graph.py:12 in shout)`: the type, the message and
    the innermost frame, so a failure says where."""
    try:
        message = str(error)
    except Exception:
        message = ""
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    tb = error.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    if last is not None:
        code = last.tb_frame.f_code
        name = code.co_filename.replace("\\", "/").rsplit("/", 1)[-1]
        text += f" ({name}:{last.tb_lineno} in {code.co_name})"
    return _text(text)


# --- the state schema ------------------------------------------------------

_LISTS = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)
_DICTS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_NUMBERS = (int, float)

# LangGraph starts a reducer channel at its type's empty value (`list()`,
# `int()`, ...); these are the ones JSON can hold.
_EMPTY: Dict[Any, Any] = {
    list: [],
    tuple: [],
    collections.abc.Sequence: [],
    collections.abc.MutableSequence: [],
    dict: {},
    collections.abc.Mapping: {},
    collections.abc.MutableMapping: {},
    int: 0,
    float: 0.0,
    str: "",
    bool: False,
}


def _origin(base: Any) -> Any:
    return typing.get_origin(base) or base


def _reducer_of(base: Any, fn: Callable) -> Tuple[str, Optional[Callable]]:
    """The host reducer for `Annotated[base, fn]`, or `custom` with `fn`."""
    origin = _origin(base)
    if fn is operator.add and origin in _LISTS:
        return APPEND, None
    if fn is operator.add and origin in _NUMBERS:
        return ADD, None
    if fn is operator.or_ and origin in _DICTS:
        return MERGE, None
    return CUSTOM, fn


def _default_of(base: Any) -> Optional[str]:
    """The starting value of a reducer channel, as JSON text, or None."""
    try:
        empty = _EMPTY.get(_origin(base))
    except TypeError:  # an unhashable annotation
        return None
    return None if empty is None else _dumps(empty)


def _channels(schema: Any) -> List[dict]:
    """One channel per annotated key of `schema` (a `TypedDict`)."""
    try:
        hints = typing.get_type_hints(schema, include_extras=True)
    except Exception as error:  # a forward reference that does not resolve
        raise TypeError(f"StateGraph: cannot read the state schema {schema!r}: {error}") from None
    if not hints:
        raise TypeError(f"StateGraph: the state schema {schema!r} declares no keys; use a TypedDict")
    channels = []
    for name, hint in hints.items():
        reducer, fn, default = LAST_VALUE, None, None
        if typing.get_origin(hint) is typing.Annotated:
            base, *metadata = typing.get_args(hint)
            if metadata and callable(metadata[-1]):
                reducer, fn = _reducer_of(base, metadata[-1])
                default = _default_of(base)
        channels.append({"name": name, "reducer": reducer, "default": default, "fn": fn})
    return channels


# --- helpers ---------------------------------------------------------------


def _key(value: Any) -> str:
    """A path-map key or a router's answer as the host sees it: strings as
    they are, anything else (`True`, `1`, `None`) as its JSON text."""
    return value if isinstance(value, str) else _dumps(value)


def _wants_config(fn: Callable) -> Optional[str]:
    """How `fn` takes the config after the state, if it does: `"keyword"`
    for a keyword-only parameter named `config`, `"positional"` for a
    positional one named `config` (as LangGraph reads it) or a second
    positional parameter without a default; else None."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for p in params[1:]:
        if p.name == "config":
            return "keyword" if p.kind == p.KEYWORD_ONLY else "positional"
    if len([p for p in positional if p.default is p.empty]) >= 2:
        return "positional"
    return None


def _call(fn: Callable, how: Optional[str], value: Any, config: Any) -> Any:
    if how == "keyword":
        return fn(value, config=config)
    if how == "positional":
        return fn(value, config)
    return fn(value)


def _check_sync(what: str, fn: Any) -> None:
    """A plain or `async def` function (run to completion inside the call);
    not an async generator, whose later items would outlive it."""
    if not callable(fn):
        raise TypeError(f"{what} must be callable, not {type(fn).__name__}")
    if inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"{what} is an async generator; sandgraph runs a function to completion inside the "
            "call (return the update instead of yielding)"
        )


def _literal_targets(path: Callable) -> List[str]:
    """The destinations a router declares with a `Literal[...]` return
    annotation (as LangGraph reads them), or []."""
    try:
        hint = typing.get_type_hints(path).get("return")
    except Exception:
        return []
    if typing.get_origin(hint) is typing.Literal:
        return [v for v in typing.get_args(hint) if isinstance(v, str)]
    return []


def _goto_targets(action: Callable) -> List[str]:
    """The targets of a `-> Command[Literal["a", "b"]]` return annotation
    (as LangGraph reads them), or []."""
    try:
        hint = typing.get_type_hints(action).get("return")
    except Exception:
        return []
    if typing.get_origin(hint) is not Command:
        return []
    args = typing.get_args(hint)
    if len(args) != 1 or typing.get_origin(args[0]) is not typing.Literal:
        return []
    return [v for v in typing.get_args(args[0]) if isinstance(v, str)]


def _push(items: list, item: Any) -> None:
    if item not in items:
        items.append(item)


def _unsupported(what: str, value: Any, why: str) -> None:
    if value:
        raise ValueError(f"{what} is not supported: {why}")


def _unoffered(what: str, value: Any, instead: str) -> None:
    if value is not None:
        raise NotOffered(what, instead)


class StateGraph:
    """A graph whose nodes read and write a shared state.

    `state_schema` is a `TypedDict`; each key is a channel. A key annotated
    `Annotated[list, operator.add]` appends, `Annotated[int, operator.add]`
    (or `float`) adds, `Annotated[dict, operator.or_]` merges: those three
    run in the host. Any other `Annotated[T, f]` is a custom reducer
    `f(current, update)`, run in the graph. Reducer channels start at
    their type's empty value (`[]`, `0`, `{}`, `""`), as in LangGraph. Other
    keys keep the last value written and are absent until written.

    `defaults` (a sandgraph extension) gives keys a starting value:
    `StateGraph(State, defaults={"revisions": 0})`.
    """

    def __init__(
        self,
        state_schema: Any,
        context_schema: Any = None,
        *,
        input_schema: Any = None,
        output_schema: Any = None,
        defaults: Optional[Dict[str, Any]] = None,
    ) -> None:
        _unsupported("StateGraph(context_schema=...)", context_schema, "a node's second argument is its config")
        _unsupported("StateGraph(input_schema=...)", input_schema, "the graph's parameters say what it takes")
        _unsupported("StateGraph(output_schema=...)", output_schema, "a run returns the whole state")
        self.schema = state_schema
        self.channels = _channels(state_schema)
        for key, value in (defaults or {}).items():
            channel = next((c for c in self.channels if c["name"] == key), None)
            if channel is None:
                raise ValueError(f"StateGraph(defaults=...): {key!r} is not a key of the state schema")
            try:
                channel["default"] = _dumps(value)
            except (TypeError, ValueError) as error:
                raise ValueError(f"StateGraph(defaults=...): the default of {key!r} is not JSON: {error}") from None
        self.nodes: Dict[str, dict] = {}
        self.edges: List[Tuple[List[str], str]] = []
        self.branches: List[dict] = []
        self.entry_points: List[str] = []
        self.finish_points: List[str] = []
        self.compiled = False

    def add_node(
        self,
        node: Any,
        action: Optional[Callable] = None,
        *,
        description: Optional[str] = None,
        defer: bool = False,
        metadata: Optional[dict] = None,
        input_schema: Any = None,
        retry_policy: Any = None,
        cache_policy: Any = None,
        destinations: Any = None,
        retry: Any = None,
    ) -> "StateGraph":
        """`add_node("name", fn)`, or `add_node(fn)` named after `fn`.

        `fn(state)` (or `fn(state, config)`) returns a dict of state
        updates, a `Command`, or None. `description` is shown in tool
        descriptions and diagrams. `metadata` is accepted and ignored;
        `defer`, `input_schema`, `retry_policy` and
        `cache_policy` are not supported.

        `destinations` (node names, or a dict whose keys are node names)
        declares where the node's `Command(goto=...)` may go, as a
        `-> Command[Literal["a", "b"]]` return annotation does: those nodes
        count as reached from it and diagrams draw the edges. Nothing is
        routed; the command's goto picks.
        """
        _unsupported("add_node(defer=True)", defer, "a join edge (add_edge([a, b], node)) waits for several nodes")
        _unsupported("add_node(input_schema=...)", input_schema, "a node gets the whole state")
        _unoffered("add_node(retry=...)", retry, _types.NO_RETRIES)
        _unoffered("add_node(retry_policy=...)", retry_policy, _types.NO_RETRIES)
        _unoffered("add_node(cache_policy=...)", cache_policy, _types.NO_CACHE)
        if isinstance(action if action is not None else node, CompiledStateGraph):
            raise NotOffered(
                "a compiled graph as a node (a subgraph)",
                "mount it as its own graph tool and call it from a node with "
                "sandgraph.tools.call(name, args), or add its nodes to this graph",
            )
        if action is None:
            action = node
            node = getattr(action, "__name__", None)
            if not isinstance(node, str) or node == "<lambda>":
                raise ValueError("add_node(fn): fn has no name; call add_node(name, fn)")
        if not isinstance(node, str):
            raise TypeError(f"add_node: the node name must be a string, not {type(node).__name__}")
        if node in (START, END):
            raise ValueError(f"add_node: node name {node!r} is reserved")
        if node in self.nodes:
            raise ValueError(f"add_node: node {node!r} is already present")
        _check_sync(f"add_node({node!r}): the action", action)
        if description is not None and not isinstance(description, str):
            raise TypeError(f"add_node({node!r}): description must be a string")
        if isinstance(destinations, str):
            raise TypeError(f"add_node({node!r}): destinations is a tuple of node names, not a string")
        targets = list(destinations or ()) + _goto_targets(action)
        for target in targets:
            if not isinstance(target, str):
                raise TypeError(f"add_node({node!r}): destinations are node names, not {type(target).__name__}")
        self.nodes[node] = {
            "fn": action,
            "wants_config": _wants_config(action),
            "description": description,
        }
        if targets:
            path_map: List[Tuple[str, str]] = []
            for target in targets:
                _push(path_map, (target, target))
            self.branches.append({"source": node, "router": GOTO_ROUTER, "fn": None, "path_map": path_map})
        return self

    def add_edge(self, start_key: Union[str, Sequence[str]], end_key: str) -> "StateGraph":
        """`end_key` runs in the superstep after `start_key` ran. A list of
        sources is a join: `end_key` waits until every source has run."""
        sources = [start_key] if isinstance(start_key, str) else list(start_key)
        for name in [*sources, end_key]:
            if not isinstance(name, str):
                raise TypeError(f"add_edge: node names are strings, not {type(name).__name__}")
        if not sources:
            raise ValueError(f"add_edge([], {end_key!r}): give at least one source")
        if end_key == START:
            raise ValueError("add_edge: START cannot be an edge's end")
        if len(sources) > 1 and START in sources:
            raise ValueError("add_edge: START cannot be part of a join")
        if END in sources:
            raise ValueError("add_edge: END cannot be an edge's start")
        if sources == [START]:
            _push(self.entry_points, end_key)
        elif end_key == END:
            # The run ends when nothing is left to run, so a join before END
            # is the same as each source being a finish point.
            for source in sources:
                _push(self.finish_points, source)
        else:
            _push(self.edges, (sources, end_key))
        return self

    def set_entry_point(self, key: str) -> "StateGraph":
        return self.add_edge(START, key)

    def set_finish_point(self, key: str) -> "StateGraph":
        return self.add_edge(key, END)

    def add_sequence(self, nodes: Sequence[Any]) -> "StateGraph":
        """Adds `nodes` (functions, or `(name, fn)` pairs) chained by edges."""
        if not nodes:
            raise ValueError("add_sequence: the sequence is empty")
        previous = None
        for item in nodes:
            if isinstance(item, tuple):
                self.add_node(*item)
                name = item[0]
            else:
                self.add_node(item)
                name = item.__name__
            if previous is not None:
                self.add_edge(previous, name)
            previous = name
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable,
        path_map: Union[Dict[Any, str], Sequence[str], None] = None,
    ) -> "StateGraph":
        """After `source` runs (or first, from `START`), `path(state)` picks
        where to go: a node name or a key of `path_map`, `END`, a `Send`, a
        list of those, or None (nowhere).

        `path_map` maps the router's answers to nodes (a dict), or lists the
        nodes it may name; without one, a `Literal[...]` return annotation
        of `path` lists them, else the router may name any node. The router
        is registered under `path`'s function name (`fan_out`), made unique.
        """
        if not isinstance(source, str):
            raise TypeError(f"add_conditional_edges: the source must be a node name, not {type(source).__name__}")
        _check_sync(f"add_conditional_edges({source!r}): the path", path)
        if path_map is None:
            entries = [(t, t) for t in _literal_targets(path)]
        elif isinstance(path_map, dict):
            entries = [(_key(k), v) for k, v in path_map.items()]
        else:
            entries = [(v, v) for v in path_map]
        for _, target in entries:
            if not isinstance(target, str):
                raise TypeError(f"add_conditional_edges({source!r}): path-map targets are node names, not {type(target).__name__}")
        base = getattr(path, "__name__", None)
        if not isinstance(base, str) or not base.isidentifier() or base == GOTO_ROUTER:
            base = f"{'start' if source == START else source}_router"
        taken = {b["router"] for b in self.branches} | {GOTO_ROUTER}
        router, n = base, 2
        while router in taken:
            router, n = f"{base}_{n}", n + 1
        self.branches.append({"source": source, "router": router, "fn": path, "path_map": entries})
        return self

    def set_conditional_entry_point(self, path: Callable, path_map: Any = None) -> "StateGraph":
        return self.add_conditional_edges(START, path, path_map)

    def compile(
        self,
        checkpointer: Any = None,
        *,
        name: Optional[str] = None,
        description: Optional[str] = None,
        as_tool: bool = False,
        as_graph_tool: bool = True,
        parameters: Union[dict, str, None] = None,
        validate: Optional[Callable] = None,
        timeout_ms: Optional[int] = None,
        strict: bool = False,
        interrupt_before: Any = None,
        interrupt_after: Any = None,
        debug: bool = False,
        store: Any = None,
        cache: Any = None,
    ) -> "CompiledStateGraph":
        """Checks the graph and makes it the one the component exports
        (`sandgraph build` binds the component's exports to it).

        `name` is the tool name and registry key (ASCII letters, digits,
        `_`, `-`); without it, the name is `[project].name` of the graph's
        pyproject.toml (`.` as `-`), which `sandgraph build` passes in. `description` is shown to models; `as_tool`
        exposes the graph as a model-visible tool; `parameters` are the
        tool's arguments in the value-schema DSL (a dict, or its JSON text
        to keep an exact order); `validate(input)` or `validate(input,
        config)` checks a call's input before the run and refuses it by
        returning a reason (a string) or raising; `strict=True` makes the
        host refuse input keys and node writes that are not channels.
        `checkpointer=`, `store=` and `cache=` are not offered (the host
        owns checkpoints and thread state).

        Raises ValueError listing every problem of the graph.
        """
        _unsupported("compile(interrupt_before=...)", interrupt_before, "call interrupt() in the node")
        _unsupported("compile(interrupt_after=...)", interrupt_after, "call interrupt() in the node")
        _unoffered("compile(checkpointer=...)", checkpointer, CHECKPOINTS)
        _unoffered("compile(store=...)", store, STORES)
        _unoffered("compile(cache=...)", cache, _types.NO_CACHE)
        del debug
        compiled = CompiledStateGraph(
            self,
            name=_build_project if name is None else name,
            description=description,
            as_tool=as_tool,
            as_graph_tool=as_graph_tool,
            parameters=parameters,
            validate=validate,
            timeout_ms=timeout_ms,
            strict=strict,
        )
        _compiled.append(compiled)
        return compiled


# The name of a graph compiled without `name=`: `[project].name` of the
# graph's pyproject.toml, which `sandgraph build` passes in (normalised to a
# graph name) before it imports the graph module.
_build_project: Optional[str] = None


def set_build_project(name: Optional[str]) -> None:
    """Sets the name `compile()` uses when it is given none (the build calls
    it with the project's name; tests of a graph may too)."""
    global _build_project
    if name is not None and not isinstance(name, str):
        raise TypeError(f"set_build_project: the name must be a string, not {type(name).__name__}")
    _build_project = name


# Every graph compiled in this interpreter, in order; the component exports
# the one (see `exported`).
_compiled: List["CompiledStateGraph"] = []


def exported() -> "CompiledStateGraph":
    """The graph the component exports: the one `compile()` call."""
    if len(_compiled) == 1:
        return _compiled[0]
    if not _compiled:
        raise RuntimeError("the graph module compiled no graph: call StateGraph(...).compile(name=...) at module level")
    names = ", ".join(repr(g.name) for g in _compiled)
    raise RuntimeError(f"the graph module compiled {len(_compiled)} graphs ({names}); a component exports one: compile only one")


def _problems(builder: StateGraph, spec: dict, validate: Any) -> List[str]:
    """Every problem of the graph, worded as the host words them."""
    problems: List[str] = []
    name = spec["name"]
    if name is None:
        problems.append(
            "the graph has no name: give compile(name=...) or set [project].name in its pyproject.toml "
            "(`sandgraph build` passes it in)"
        )
    elif not isinstance(name, str):
        problems.append(f"the graph name must be a string, not {type(name).__name__}")
    elif not name:
        problems.append("graph name is empty")
    elif len(name) > _MAX_NAME_LEN:
        problems.append(f"graph name {name!r} is longer than {_MAX_NAME_LEN} characters")
    elif not _NAME.fullmatch(name):
        problems.append(f'graph name {name!r} may only contain ascii letters, digits, "_" and "-"')
    elif name == "run_code":
        problems.append('graph name "run_code" is reserved')
    if spec["description"] is not None and not isinstance(spec["description"], str):
        problems.append("the description must be a string")
    timeout = spec["timeout_ms"]
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 < timeout < 2**64):
        problems.append("timeout_ms must be a positive integer")
    parameters = spec["parameters"]
    if parameters is not None:
        try:
            if not isinstance(json.loads(parameters), dict):
                problems.append("parameters must be a dict (the value-schema DSL)")
        except ValueError as error:
            problems.append(f"parameters are not JSON: {error}")
    if validate is not None and not callable(validate):
        problems.append("validate must be callable")

    for channel in builder.channels:
        if channel["name"] == STRICT_MARKER_CHANNEL:
            problems.append(f'channel name "{STRICT_MARKER_CHANNEL}" is reserved (it marks a strict graph)')

    nodes = set(builder.nodes)
    if not nodes:
        problems.append("the graph has no nodes")
    if not builder.entry_points and not any(b["source"] == START for b in builder.branches):
        problems.append("the graph has no entry point: add add_edge(START, node)")
    for entry in builder.entry_points:
        if entry not in nodes:
            problems.append(f"edge START -> {entry!r}: unknown node {entry!r}")
    for finish in builder.finish_points:
        if finish not in nodes:
            problems.append(f"edge {finish!r} -> END: unknown node {finish!r}")
    for sources, target in builder.edges:
        label = f"edge {sources[0]!r} -> {target!r}" if len(sources) == 1 else f"edge {sources!r} -> {target!r}"
        for source in sources:
            if source not in nodes:
                problems.append(f"{label}: unknown source node {source!r}")
        if len(set(sources)) != len(sources):
            problems.append(f"{label}: a source is listed twice")
        if target not in nodes:
            problems.append(f"{label}: unknown target node {target!r}")
    for branch in builder.branches:
        source = branch["source"]
        label = f"conditional edge from {source!r} (router {branch['router']!r})"
        if source != START and source not in nodes:
            problems.append(f"{label}: unknown source node {source!r}")
        keys = [k for k, _ in branch["path_map"]]
        for key, target in branch["path_map"]:
            if target != END and target not in nodes:
                problems.append(f"{label}: path-map key {key!r} leads to unknown node {target!r}")
        if len(set(keys)) != len(keys):
            problems.append(f"{label}: a path-map key is listed twice")

    # Every node must be reachable from START (the host's rule): a join
    # reaches its target once all its sources are reached; a router without
    # a path map may reach any node.
    reached = {START}
    while True:
        before = len(reached)
        reached.update(builder.entry_points)
        for sources, target in builder.edges:
            if all(s in reached for s in sources):
                reached.add(target)
        for branch in builder.branches:
            if branch["source"] in reached:
                if branch["path_map"]:
                    reached.update(t for _, t in branch["path_map"])
                else:
                    reached.update(nodes)
        if len(reached) == before:
            break
    for node in builder.nodes:
        if node not in reached:
            problems.append(f"node {node!r} is unreachable from START")
    return problems


class CompiledStateGraph:
    """A compiled graph: its spec, and the host's calls (`run_node`,
    `route`, `reduce`, `validate`, all JSON text in and out) dispatched to
    the author's functions."""

    def __init__(
        self,
        builder: StateGraph,
        *,
        name: Any,
        description: Any,
        as_tool: bool,
        as_graph_tool: bool,
        parameters: Any,
        validate: Optional[Callable],
        timeout_ms: Any,
        strict: bool,
    ) -> None:
        if parameters is not None and not isinstance(parameters, str):
            try:
                parameters = _dumps(parameters)
            except (TypeError, ValueError) as error:
                raise ValueError(f"compile(parameters=...) is not JSON: {error}") from None
        channels = [{"name": c["name"], "reducer": c["reducer"], "default": c["default"]} for c in builder.channels]
        if strict:
            channels.append({"name": STRICT_MARKER_CHANNEL, "reducer": LAST_VALUE, "default": None})
        self.spec = {
            "name": name,
            "description": description,
            "as_tool": bool(as_tool),
            "as_graph_tool": bool(as_graph_tool),
            "parameters": parameters,
            "timeout_ms": timeout_ms,
            "channels": channels,
            "nodes": [{"name": n, "description": v["description"]} for n, v in builder.nodes.items()],
            "edges": [(list(s), t) for s, t in builder.edges],
            "conditional_edges": [(b["source"], b["router"], list(b["path_map"])) for b in builder.branches],
            "entry_points": list(builder.entry_points),
            "finish_points": list(builder.finish_points),
        }
        problems = _problems(builder, self.spec, validate)
        if problems:
            raise ValueError(f"invalid graph {name!r}:\n  " + "\n  ".join(problems))
        self.name: str = name
        self.strict = bool(strict)
        self.builder = builder
        self.nodes = {n: v["fn"] for n, v in builder.nodes.items()}
        self._nodes = dict(builder.nodes)
        self._routers = {b["router"]: b for b in builder.branches if b["fn"] is not None}
        self._reducers = {c["name"]: c["fn"] for c in builder.channels if c["fn"] is not None}
        self._validate = validate
        self._validate_wants_config = validate is not None and _wants_config(validate)
        builder.compiled = True

    # --- the host's calls (JSON text in and out) ---------------------------

    def run_node(self, node: str, state: str, context: dict) -> Tuple[str, Any]:
        """Runs `node` on `state` (JSON text). Returns `("update", json)`,
        `("command", (update_json, goto, [(node, payload_json)]))` or
        `("interrupt", json)`; raises `CallError`."""
        entry = self._nodes.get(node)
        if entry is None:
            raise CallError("unknown", f'unknown node "{node}"')
        value = _loads(state, "state")
        resume = []
        for i, text in enumerate(context.get("resume", [])):
            resume.append(_loads(text, f"call context: resume value {i}"))
        config = _config(node, context) if entry["wants_config"] else None
        _types._enter(resume)
        try:
            result = _aio.resolve(_call(entry["fn"], entry["wants_config"], value, config))
        except GraphInterrupt as pause:
            return "interrupt", _json(pause.value, "the interrupt value")
        except CallError:
            raise
        except CapabilityError as error:  # `<kind>: <text>`, as the other SDKs say
            raise CallError("failed", str(error)) from None
        except MemoryError:
            raise
        except BaseException as error:
            raise CallError("failed", describe_exception(error)) from None
        finally:
            _types._leave()
        return _encode_result(node, result)

    def route(self, router: str, state: str) -> List[Tuple[str, Any]]:
        """Runs the router on `state` (JSON text); returns
        `[("node", name) | ("send", (node, payload_json))]`."""
        branch = self._routers.get(router)
        if branch is None:
            raise CallError("unknown", f'unknown router "{router}"')
        value = _loads(state, "state")
        try:
            answer = _aio.resolve(branch["fn"](value))
        except MemoryError:
            raise
        except CapabilityError as error:
            raise CallError("failed", str(error)) from None
        except BaseException as error:
            raise CallError("failed", describe_exception(error)) from None
        if answer is None:
            answers: list = []
        elif isinstance(answer, (list, tuple)):
            answers = list(answer)
        else:
            answers = [answer]
        targets = []
        for item in answers:
            if isinstance(item, Send):
                targets.append(("send", _send(item)))
            elif isinstance(item, (str, bool, int, float)) or item is None:
                targets.append(("node", _key(item)))
            else:
                raise CallError(
                    "failed",
                    f"the router returned {type(item).__name__}; return a node name, "
                    "a path-map key, END, a Send, or a list of them",
                )
        return targets

    def reduce(self, channel: str, current: str, update: str) -> str:
        """Runs the custom reducer of `channel`; JSON text in and out."""
        fn = self._reducers.get(channel)
        if fn is None:
            raise CallError("unknown", f'no custom reducer for channel "{channel}"')
        current_value = _loads(current, "current value")
        update_value = _loads(update, "update")
        try:
            reduced = _aio.resolve(fn(current_value, update_value))
        except MemoryError:
            raise
        except BaseException as error:
            raise CallError("failed", f'channel "{channel}": {describe_exception(error)}') from None
        return _json(reduced, f'channel "{channel}": the reduced value')

    def validate(self, input: str, context: dict) -> Optional[str]:
        """Runs the validate hook: None accepts the input, a string is the
        reason to refuse it."""
        if self._validate is None:
            return None
        try:
            value = json.loads(input)
        except (ValueError, RecursionError) as error:
            return _text(f"invalid input: {error}")
        try:
            how = self._validate_wants_config
            config = _config(None, context) if how else None
            verdict = _aio.resolve(_call(self._validate, how, value, config))
        except MemoryError:
            raise
        except BaseException as error:
            try:
                reason = str(error)
            except Exception:
                reason = ""
            return _text(reason or describe_exception(error))
        if isinstance(verdict, str):
            return _text(verdict)
        if verdict is False:
            return "the graph's validate refused the input"
        return None

    # --- LangGraph's runner methods -----------------------------------------

    def invoke(self, *_args: Any, **kwargs: Any) -> Any:
        if "stream_mode" in kwargs:
            raise NotOffered(
                "stream_mode=...",
                "the host runs the graph and reports each step: `sandgraph run --stream`",
            )
        raise RuntimeError(
            "a sandgraph graph runs in the host: `sandgraph build` it, then `sandgraph run` it "
            "(test node functions directly)"
        )

    stream = invoke
    ainvoke = invoke


def _config(node: Optional[str], context: dict) -> dict:
    """A LangGraph-style `RunnableConfig` for a node (or validate) that
    takes a second argument."""
    configurable = _loads(context.get("configurable") or "{}", "call context: configurable")
    if not isinstance(configurable, dict):
        raise CallError(
            "invalid-state",
            f"call context: configurable must be a JSON object, not {type(configurable).__name__}",
        )
    if context.get("thread_id") is not None:
        configurable.setdefault("thread_id", context["thread_id"])
    metadata = {
        "langgraph_step": context.get("step", 0),
        "sandgraph_tool": context.get("tool", ""),
        "sandgraph_request": context.get("request"),
    }
    if node is not None:
        metadata["langgraph_node"] = node
    return {"configurable": configurable, "metadata": metadata}


def _send(send: Send) -> Tuple[str, str]:
    if not isinstance(send.node, str):
        raise CallError("failed", f"Send's node must be a string, not {type(send.node).__name__}")
    return send.node, _json(send.arg, f"the payload of Send({send.node!r}, ...)")


def _encode_result(node: str, result: Any) -> Tuple[str, Any]:
    if isinstance(result, Command):
        update = _encode_update(node, result.update)
        goto, sends = [], []
        targets = result.goto
        if isinstance(targets, (str, Send)):
            targets = [targets]
        elif not isinstance(targets, (list, tuple)):
            raise CallError("failed", "Command(goto=...) takes a node name, a Send, or a list of them")
        for target in targets:
            if isinstance(target, Send):
                sends.append(_send(target))
            elif isinstance(target, str):
                goto.append(target)
            else:
                raise CallError("failed", f"Command(goto=...) takes node names and Sends, not {type(target).__name__}")
        return "command", (update, goto, sends)
    return "update", _encode_update(node, result)


def _encode_update(node: str, update: Any) -> str:
    if update is None:
        return "{}"
    if not isinstance(update, dict):
        raise CallError(
            "failed",
            f"the node returned {type(update).__name__}; return a dict of state updates, a Command, or None",
        )
    for key in update:
        if not isinstance(key, str):
            raise CallError("failed", f"update keys must be strings, not {type(key).__name__}")
    return _json(update, "the update")
