"""`sandgraph._component` against stand-ins for the generated bindings:
the WIT records it builds, and that every failure inside an export becomes
the WIT error case (`Err`), never an exception that would trap."""

import operator
import unittest
from typing import Annotated, TypedDict

from . import fake_bindings as fb

fb.install()

from sandgraph import END, START, Command, Send, StateGraph, interrupt  # noqa: E402
from sandgraph import _component  # noqa: E402
from sandgraph import graph as sg  # noqa: E402


class State(TypedDict):
    topic: str
    log: Annotated[list, operator.add]
    best: Annotated[int, max]


def _raise(error):
    raise error


class Component(unittest.TestCase):
    def setUp(self):
        sg._compiled.clear()
        b = StateGraph(State)
        b.add_node("echo", lambda s: {"log": [f"seen:{s['topic']}"]}, description="Echoes.")
        b.add_node("cmd", lambda s: Command(update={"best": 1}, goto=["echo", Send("echo", {"topic": "t"})]))
        b.add_node("ask", lambda s: {"answer": interrupt({"q": 1})})
        for name, error in [
            ("system_exit", SystemExit(3)),
            ("keyboard", KeyboardInterrupt()),
            ("memory", MemoryError()),
            ("recursion", RecursionError("deep")),
        ]:
            b.add_node(name, lambda s, e=error: _raise(e))
            b.add_edge(START, name)
        b.add_edge(START, "echo")
        b.add_edge(START, "cmd")
        b.add_edge(["echo", "cmd"], "ask")
        b.add_edge("ask", END)
        b.add_conditional_edges("echo", lambda s: [Send("echo", {"topic": "x"}), END], {"done": END})
        self.graph = b.compile(
            name="g", description="d", as_tool=True, parameters={"topic": {"type": "string"}},
            validate=lambda args: "no" if args.get("topic") == "no" else None, strict=True,
        )
        self.Graph = _component.bind()
        self.g = self.Graph()

    def err(self, fn, *args):
        with self.assertRaises(fb.Err) as caught:
            fn(*args)
        return caught.exception.value

    def test_describe_builds_the_wit_record(self):
        spec = self.g.describe()
        self.assertEqual((spec.name, spec.description, spec.parameters, spec.timeout_ms), ("g", "d", '{"topic":{"type":"string"}}', None))
        self.assertEqual((spec.registration.as_tool, spec.registration.as_graph_tool), (True, True))
        self.assertEqual(
            [(c.name, c.reducer, c.default) for c in spec.channels],
            [
                ("topic", fb.Reducer.LAST_VALUE, None),
                ("log", fb.Reducer.APPEND, "[]"),
                ("best", fb.Reducer.CUSTOM, "0"),
                ("__strict__", fb.Reducer.LAST_VALUE, None),
            ],
        )
        self.assertEqual(spec.nodes[0].name, "echo")
        self.assertEqual(spec.nodes[0].description, "Echoes.")
        self.assertEqual([(e.sources, e.target) for e in spec.edges], [(["echo", "cmd"], "ask")])
        [cond] = spec.conditional_edges
        self.assertEqual((cond.source, cond.router, [(p.key, p.target) for p in cond.path_map]), ("echo", "echo_router", [("done", END)]))
        self.assertEqual(spec.finish_points, ["ask"])

    def test_node_results_become_variants(self):
        result = self.g.run_node("echo", '{"topic":"wasm"}', fb.context())
        self.assertEqual(type(result).__name__, "NodeResult_Update")
        self.assertEqual(result.value, '{"log":["seen:wasm"]}')
        result = self.g.run_node("cmd", "{}", fb.context())
        self.assertEqual(type(result).__name__, "NodeResult_Command")
        self.assertEqual((result.value.update, result.value.goto), ('{"best":1}', ["echo"]))
        self.assertEqual([(s.node, s.payload) for s in result.value.sends], [("echo", '{"topic":"t"}')])
        result = self.g.run_node("ask", "{}", fb.context())
        self.assertEqual((type(result).__name__, result.value), ("NodeResult_Interrupt", '{"q":1}'))
        result = self.g.run_node("ask", "{}", fb.context(resume=['"yes"']))
        self.assertEqual(result.value, '{"answer":"yes"}')

    def test_routes_become_variants(self):
        targets = self.g.route("echo_router", "{}")
        self.assertEqual([type(t).__name__ for t in targets], ["RouteTarget_Send", "RouteTarget_Node"])
        self.assertEqual((targets[0].value.node, targets[0].value.payload, targets[1].value), ("echo", '{"topic":"x"}', END))

    def test_every_failure_is_a_graph_error(self):
        cases = [
            (self.g.run_node, ("nope", "{}", fb.context()), "GraphError_Unknown", 'unknown node "nope"'),
            (self.g.run_node, ("echo", "{", fb.context()), "GraphError_InvalidState", "state: "),
            (self.g.run_node, ("echo", "{}", fb.context()), "GraphError_Failed", "KeyError: 'topic'"),
            (self.g.run_node, ("system_exit", "{}", fb.context()), "GraphError_Failed", "SystemExit: 3"),
            (self.g.run_node, ("keyboard", "{}", fb.context()), "GraphError_Failed", "KeyboardInterrupt"),
            (self.g.run_node, ("recursion", "{}", fb.context()), "GraphError_Failed", "RecursionError: deep"),
            (self.g.run_node, ("echo", "{}", fb.context(configurable="[")), "GraphError_Failed", "KeyError"),
            (self.g.run_node, ("ask", "{}", fb.context(resume=["{"])), "GraphError_InvalidState", "call context: resume value 0: "),
            (self.g.route, ("ghost", "{}"), "GraphError_Unknown", 'unknown router "ghost"'),
            (self.g.reduce, ("best", "1", "[1]"), "GraphError_Failed", 'channel "best": TypeError'),
            (self.g.reduce, ("log", "[]", "1"), "GraphError_Unknown", "no custom reducer"),
        ]
        for fn, args, case, prefix in cases:
            error = self.err(fn, *args)
            self.assertEqual(type(error).__name__, case, args)
            self.assertTrue(error.value.startswith(prefix), (args, error.value))
        self.assertEqual(self.g.reduce("best", "1", "3"), "3")

    def test_memory_error_is_left_to_trap(self):
        # The memory cap is an exhausted limit: the export lets it escape,
        # so the instance traps and the host reports memory_limit.
        with self.assertRaises(MemoryError):
            self.g.run_node("memory", "{}", fb.context())

    def test_a_broken_context_or_sdk_bug_is_an_error_too(self):
        # A context record missing a field: the SDK's own failure, still Err.
        error = self.err(self.g.run_node, "echo", "{}", object())
        self.assertEqual(type(error).__name__, "GraphError_Failed")
        self.assertTrue(error.value.startswith("sandgraph sdk: AttributeError"), error.value)
        self.assertTrue(self.err(self.g.validate, "{}", object()).startswith("sandgraph sdk: AttributeError"))
        # A state too deep for the parser.
        error = self.err(self.g.run_node, "echo", "[" * 100_000 + "]" * 100_000, fb.context())
        self.assertEqual(type(error).__name__, "GraphError_InvalidState")

    def test_validate_raises_err_with_the_reason(self):
        self.assertIsNone(self.g.validate('{"topic":"ok"}', fb.context()))
        self.assertEqual(self.err(self.g.validate, '{"topic":"no"}', fb.context()), "no")
        self.assertTrue(self.err(self.g.validate, "{", fb.context()).startswith("invalid input: "))

    def test_bind_needs_exactly_one_graph(self):
        sg._compiled.clear()
        with self.assertRaisesRegex(RuntimeError, "compiled no graph"):
            _component.bind()

    def test_log_goes_to_the_host(self):
        from sandgraph import host

        saved = host._host
        host._host = fb.sys.modules["wit_world.imports.host"]
        host._wit = fb.sys.modules["wit_world.imports.types"]
        try:
            fb.LOG.clear()
            host.log("warn", "careful \udc80")
            self.assertEqual(fb.LOG, [(fb.LogLevel.WARN, "careful \ufffd\ufffd\ufffd")])
            with self.assertRaisesRegex(ValueError, "is not one of trace, debug, info, warn, error"):
                host.log("loud", "x")
            self.assertFalse(host.cancelled())
        finally:
            host._host = saved


if __name__ == "__main__":
    unittest.main()
