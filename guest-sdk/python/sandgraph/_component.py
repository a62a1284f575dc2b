"""The component's exports: the only module that sees the bindings
componentize-py generates (`wit_world`). `sandgraph build` writes an entry
module that imports the graph module, then calls `bind()`, which takes the
one compiled graph and returns the class componentize-py exports.

Every call is wrapped: an exception anywhere becomes the WIT error case
(`graph-error`, or validate's reason), never a trap; except `MemoryError`,
the instance's memory cap, an exhausted limit, which the WIT contract
reports by trapping (the host says `memory_limit`).
"""

from typing import Any, List

from componentize_py_types import Err
from wit_world import exports
try:
    from wit_world.imports import types as wit
except ImportError:  # renamed beside wasi:http's own `types` (an `http` build)
    from wit_world.imports import sandgraph_graph_types as wit

from .graph import CallError, CompiledStateGraph, describe_exception, exported

_REDUCERS = {
    "last-value": wit.Reducer.LAST_VALUE,
    "append": wit.Reducer.APPEND,
    "merge": wit.Reducer.MERGE,
    "add": wit.Reducer.ADD,
    "custom": wit.Reducer.CUSTOM,
}

_ERRORS = {
    "invalid-state": wit.GraphError_InvalidState,
    "unknown": wit.GraphError_Unknown,
    "failed": wit.GraphError_Failed,
}


def spec_record(graph: CompiledStateGraph) -> Any:
    """The WIT `graph-spec` record of `graph`."""
    s = graph.spec
    return wit.GraphSpec(
        name=s["name"],
        description=s["description"],
        registration=wit.Registration(as_tool=s["as_tool"], as_graph_tool=s["as_graph_tool"]),
        parameters=s["parameters"],
        timeout_ms=s["timeout_ms"],
        channels=[
            wit.ChannelSpec(name=c["name"], reducer=_REDUCERS[c["reducer"]], default=c["default"])
            for c in s["channels"]
        ],
        nodes=[wit.NodeSpec(name=n["name"], description=n["description"]) for n in s["nodes"]],
        edges=[wit.Edge(sources=sources, target=target) for sources, target in s["edges"]],
        conditional_edges=[
            wit.ConditionalEdge(
                source=source,
                router=router,
                path_map=[wit.PathEntry(key=k, target=t) for k, t in path_map],
            )
            for source, router, path_map in s["conditional_edges"]
        ],
        entry_points=s["entry_points"],
        finish_points=s["finish_points"],
    )


def _context(context: Any) -> dict:
    return {
        "tool": context.tool,
        "request": context.request,
        "thread_id": context.thread_id,
        "step": context.step,
        "resume": list(context.resume),
        "configurable": context.configurable,
    }


def _graph_error(error: BaseException) -> Err:
    if isinstance(error, CallError):
        return Err(_ERRORS[error.kind](error.message))
    return Err(wit.GraphError_Failed(f"sandgraph sdk: {describe_exception(error)}"))


def _node_result(kind: str, value: Any) -> Any:
    if kind == "update":
        return wit.NodeResult_Update(value)
    if kind == "interrupt":
        return wit.NodeResult_Interrupt(value)
    update, goto, sends = value
    return wit.NodeResult_Command(
        wit.Command(update=update, goto=goto, sends=[wit.Send(node=n, payload=p) for n, p in sends])
    )


def _route_target(kind: str, value: Any) -> Any:
    if kind == "node":
        return wit.RouteTarget_Node(value)
    node, payload = value
    return wit.RouteTarget_Send(wit.Send(node=node, payload=payload))


def bind() -> type:
    """The class componentize-py exports for the `graph` interface, bound to
    the one compiled graph. Runs at build time (componentize-py snapshots
    the initialised interpreter), so a module that compiled no graph, or
    several, fails the build."""
    graph = exported()
    spec = spec_record(graph)

    class Graph(exports.Graph):
        def describe(self) -> Any:
            return spec

        def run_node(self, node: str, state: str, context: Any) -> Any:
            try:
                return _node_result(*graph.run_node(node, state, _context(context)))
            except MemoryError:
                raise  # the memory cap: an exhausted limit traps
            except BaseException as error:
                raise _graph_error(error) from None

        def route(self, router: str, state: str) -> List[Any]:
            try:
                return [_route_target(*target) for target in graph.route(router, state)]
            except MemoryError:
                raise  # the memory cap: an exhausted limit traps
            except BaseException as error:
                raise _graph_error(error) from None

        def reduce(self, channel: str, current: str, update: str) -> str:
            try:
                return graph.reduce(channel, current, update)
            except MemoryError:
                raise  # the memory cap: an exhausted limit traps
            except BaseException as error:
                raise _graph_error(error) from None

        def validate(self, input: str, context: Any) -> None:
            try:
                reason = graph.validate(input, _context(context))
            except CallError as error:
                reason = error.message
            except MemoryError:
                raise  # the memory cap: an exhausted limit traps
            except BaseException as error:
                reason = f"sandgraph sdk: {describe_exception(error)}"
            if reason is not None:
                raise Err(reason)

    return Graph
