"""The SDK, natively: the spec a StateGraph compiles to and the host's
calls, JSON text in and out, as the Rust SDK answers them.

Run from guest-sdk/python: `python3 -m unittest`.
"""

import json
import operator
import re
import unittest
from typing import Annotated, Literal, TypedDict

from sandgraph import END, START, Command, GraphInterrupt, Send, StateGraph, interrupt
from sandgraph import graph as sg
from sandgraph.graph import CallError


def ctx(resume=None, configurable="{}", thread_id=None, step=0):
    return {
        "tool": "t",
        "request": None,
        "thread_id": thread_id,
        "step": step,
        "resume": [json.dumps(r) for r in (resume or [])],
        "configurable": configurable,
    }


class EchoState(TypedDict):
    topic: str
    log: Annotated[list[str], operator.add]


def echo_builder():
    b = StateGraph(EchoState)
    b.add_node("echo", lambda s: {"log": [f"seen:{s['topic']}"]})
    b.add_edge(START, "echo")
    b.add_edge("echo", END)
    return b


class Base(unittest.TestCase):
    def setUp(self):
        sg._compiled.clear()

    def assertCallError(self, kind, message, fn, *args):
        with self.assertRaises(CallError) as caught:
            fn(*args)
        self.assertEqual((caught.exception.kind, caught.exception.message), (kind, message))


class Spec(Base):
    def test_echo_spec_is_what_the_rust_sdk_sends(self):
        g = echo_builder().compile(name="echo_graph", description="Echo the given topic.", as_tool=True)
        self.assertEqual(
            g.spec,
            {
                "name": "echo_graph",
                "description": "Echo the given topic.",
                "as_tool": True,
                "as_graph_tool": True,
                "parameters": None,
                "timeout_ms": None,
                "channels": [
                    {"name": "topic", "reducer": "last-value", "default": None},
                    {"name": "log", "reducer": "append", "default": "[]"},
                ],
                "nodes": [{"name": "echo", "description": None}],
                "edges": [],
                "conditional_edges": [],
                "entry_points": ["echo"],
                "finish_points": ["echo"],
            },
        )
        self.assertIs(sg.exported(), g)

    def test_reducers_and_defaults(self):
        def keep_max(current, update):
            return max(current, update)

        class State(TypedDict):
            plain: int
            notes: Annotated[str, "just a note"]
            items: Annotated[list, operator.add]
            seq: Annotated[tuple[int, ...], operator.add]
            count: Annotated[int, operator.add]
            score: Annotated[float, operator.add]
            meta: Annotated[dict[str, int], operator.or_]
            best: Annotated[int, keep_max]
            text: Annotated[str, operator.add]
            anything: Annotated[object, keep_max]

        b = StateGraph(State, defaults={"plain": 7, "items": ["x"]})
        b.add_node("a", lambda s: None)
        b.add_edge(START, "a")
        g = b.compile(name="g")
        got = [(c["name"], c["reducer"], c["default"]) for c in g.spec["channels"]]
        self.assertEqual(
            got,
            [
                ("plain", "last-value", "7"),
                ("notes", "last-value", None),
                ("items", "append", '["x"]'),
                ("seq", "append", "[]"),
                ("count", "add", "0"),
                ("score", "add", "0.0"),
                ("meta", "merge", "{}"),
                ("best", "custom", "0"),
                ("text", "custom", '""'),
                ("anything", "custom", None),
            ],
        )
        # Custom reducers run in the guest; host reducers have none.
        self.assertEqual(g.reduce("best", "3", "5"), "5")
        self.assertEqual(g.reduce("text", '"ab"', '"c"'), '"abc"')
        self.assertCallError("unknown", 'no custom reducer for channel "items"', g.reduce, "items", "[]", "1")

    def test_defaults_must_name_keys_and_be_json(self):
        with self.assertRaisesRegex(ValueError, "'nope' is not a key of the state schema"):
            StateGraph(EchoState, defaults={"nope": 1})
        with self.assertRaisesRegex(ValueError, "the default of 'topic' is not JSON"):
            StateGraph(EchoState, defaults={"topic": {1, 2}})

    def test_edges_joins_and_conditional_edges(self):
        class S(TypedDict):
            x: int

        def pick(s) -> Literal["b", "c"]:
            return "b"

        b = StateGraph(S)
        for n in "abc":
            b.add_node(n, lambda s: None)
        b.add_edge(START, "a")
        b.add_edge(START, "a")
        b.add_edge("a", "b")
        b.add_edge("a", "b")
        b.add_edge(["a", "b"], "c")
        b.add_edge(["b", "c"], END)
        b.add_conditional_edges("a", pick)
        b.add_conditional_edges("b", pick, {True: "c", "stop": END})
        b.add_conditional_edges("c", lambda s: END, ["a", END])
        b.add_conditional_edges(START, lambda s: "a")
        s = b.compile(name="g").spec
        self.assertEqual(s["entry_points"], ["a"])
        self.assertEqual(s["finish_points"], ["b", "c"])
        self.assertEqual(s["edges"], [(["a"], "b"), (["a", "b"], "c")])
        self.assertEqual(
            s["conditional_edges"],
            [
                ("a", "pick", [("b", "b"), ("c", "c")]),
                ("b", "pick_2", [("true", "c"), ("stop", END)]),
                ("c", "c_router", [("a", "a"), (END, END)]),
                (START, "start_router", []),
            ],
        )

    def test_node_names_descriptions_and_sequences(self):
        def first(s):
            """Not used as the description."""

        def second(s):
            return None

        b = StateGraph(EchoState)
        b.add_sequence([first, ("two", second)])
        b.add_node(second, description="Runs last.")
        b.add_edge(START, "first")
        b.add_edge("two", "second")
        s = b.compile(name="g").spec
        self.assertEqual(
            s["nodes"],
            [
                {"name": "first", "description": None},
                {"name": "two", "description": None},
                {"name": "second", "description": "Runs last."},
            ],
        )
        self.assertEqual(s["edges"], [(["first"], "two"), (["two"], "second")])

    def test_strict_graphs_carry_the_marker_channel_last(self):
        g = echo_builder().compile(name="g", strict=True)
        self.assertEqual(g.spec["channels"][-1], {"name": "__strict__", "reducer": "last-value", "default": None})
        self.assertEqual(len(g.spec["channels"]), 3)

    def test_parameters_keep_their_order_and_text_passes_through(self):
        params = {"name": {"type": "string", "required": True}, "a": {"type": "integer"}}
        g = echo_builder().compile(name="g", parameters=params, as_tool=True, timeout_ms=500)
        self.assertEqual(g.spec["parameters"], '{"name":{"type":"string","required":true},"a":{"type":"integer"}}')
        self.assertEqual(g.spec["timeout_ms"], 500)
        sg._compiled.clear()
        g = echo_builder().compile(name="g", parameters='{"z": {"type": "json"}}')
        self.assertEqual(g.spec["parameters"], '{"z": {"type": "json"}}')

    def test_compile_lists_every_problem(self):
        class S(TypedDict):
            __strict__: int

        b = StateGraph(S)
        b.add_node("a", lambda s: None)
        b.add_node("lonely", lambda s: None)
        b.add_edge("a", "ghost")
        b.add_edge(["a", "a"], "a")
        b.add_edge("zz", END)
        b.add_conditional_edges("q", lambda s: "k", {"k": "nowhere"})
        with self.assertRaises(ValueError) as caught:
            b.compile(name="bad name!", timeout_ms=0, parameters=[1])
        self.assertEqual(
            str(caught.exception).splitlines(),
            [
                "invalid graph 'bad name!':",
                "  graph name 'bad name!' may only contain ascii letters, digits, \"_\" and \"-\"",
                "  timeout_ms must be a positive integer",
                "  parameters must be a dict (the value-schema DSL)",
                '  channel name "__strict__" is reserved (it marks a strict graph)',
                "  the graph has no entry point: add add_edge(START, node)",
                "  edge 'zz' -> END: unknown node 'zz'",
                "  edge 'a' -> 'ghost': unknown target node 'ghost'",
                "  edge ['a', 'a'] -> 'a': a source is listed twice",
                "  conditional edge from 'q' (router 'q_router'): unknown source node 'q'",
                "  conditional edge from 'q' (router 'q_router'): path-map key 'k' leads to unknown node 'nowhere'",
                "  node 'a' is unreachable from START",
                "  node 'lonely' is unreachable from START",
            ],
        )
        self.assertEqual(sg._compiled, [], "a graph that does not compile is not exported")
        for name, problem in [
            (None, "the graph has no name: give compile(name=...) or set [project].name in its pyproject.toml"),
            ("", "graph name is empty"),
            ("run_code", 'graph name "run_code" is reserved'),
            ("x" * 65, "is longer than 64 characters"),
        ]:
            with self.assertRaisesRegex(ValueError, re.escape(problem)):
                echo_builder().compile(name=name)

    def test_the_build_passes_the_project_name_in(self):
        sg.set_build_project("research-agent")
        try:
            self.assertEqual(echo_builder().compile().name, "research-agent")
            sg._compiled.clear()
            self.assertEqual(echo_builder().compile(name="mine").name, "mine")
        finally:
            sg.set_build_project(None)
        with self.assertRaisesRegex(TypeError, "the name must be a string"):
            sg.set_build_project(1)

    def test_names_not_offered_say_what_to_do_instead(self):
        from sandgraph.errors import NotOffered
        from sandgraph.checkpoint.memory import InMemorySaver, MemorySaver
        from sandgraph.checkpoint.sqlite import SqliteSaver
        from sandgraph.store.memory import InMemoryStore
        from sandgraph.types import CachePolicy, RetryPolicy

        host_owns = "the host owns checkpoints and thread state: run with `sandgraph run --thread ID`"
        cases = [
            (MemorySaver, "MemorySaver is not offered by sandgraph: " + host_owns),
            (InMemorySaver, "InMemorySaver is not offered by sandgraph: " + host_owns),
            (lambda: SqliteSaver.from_conn_string(":memory:"), "SqliteSaver.from_conn_string is not offered by sandgraph: " + host_owns),
            (lambda: SqliteSaver(None), "SqliteSaver is not offered by sandgraph: " + host_owns),
            (InMemoryStore, "InMemoryStore is not offered by sandgraph: sandgraph has no long-term store"),
            (lambda: RetryPolicy(max_attempts=3), "RetryPolicy is not offered by sandgraph: the host does not retry nodes"),
            (CachePolicy, "CachePolicy is not offered by sandgraph: the host does not cache nodes"),
            (lambda: echo_builder().add_node("r", lambda s: None, retry_policy=object()), "add_node(retry_policy=...) is not offered"),
            (lambda: echo_builder().add_node("r", lambda s: None, retry=object()), "add_node(retry=...) is not offered"),
            (lambda: echo_builder().add_node("r", lambda s: None, cache_policy=object()), "add_node(cache_policy=...) is not offered"),
            (lambda: echo_builder().compile(checkpointer=object(), name="g"), "compile(checkpointer=...) is not offered by sandgraph: " + host_owns),
            (lambda: echo_builder().compile(store=object(), name="g"), "compile(store=...) is not offered by sandgraph: sandgraph has no long-term store"),
            (lambda: echo_builder().compile(cache=object(), name="g"), "compile(cache=...) is not offered"),
            (lambda: echo_builder().compile(name="g").stream({}, stream_mode="updates"), "stream_mode=... is not offered by sandgraph: the host runs the graph and reports each step"),
            (lambda: echo_builder().add_node("sub", echo_builder().compile(name="sub")), "a compiled graph as a node (a subgraph) is not offered by sandgraph: mount it as its own graph tool"),
        ]  # fmt: skip
        for make, message in cases:
            sg._compiled.clear()
            with self.subTest(message), self.assertRaises(NotOffered) as caught:
                make()
            self.assertIn(message, str(caught.exception))
        self.assertTrue(issubclass(NotOffered, NotImplementedError))

    def test_misuse_is_refused_where_it_happens(self):
        b = echo_builder()
        with self.assertRaisesRegex(ValueError, "node 'echo' is already present"):
            b.add_node("echo", lambda s: None)
        with self.assertRaisesRegex(ValueError, "reserved"):
            b.add_node(END, lambda s: None)
        with self.assertRaisesRegex(ValueError, "has no name"):
            b.add_node(lambda s: None)

        async def later(s):
            yield None

        with self.assertRaisesRegex(TypeError, "is an async generator"):
            b.add_node("later", later)
        with self.assertRaisesRegex(ValueError, "END cannot be an edge's start"):
            b.add_edge(END, "echo")
        with self.assertRaisesRegex(ValueError, "interrupt_before"):
            b.compile(name="g", interrupt_before=["echo"])
        with self.assertRaisesRegex(TypeError, "unexpected keyword"):
            b.compile(name="g", as_tools=True)
        with self.assertRaisesRegex(ValueError, "Command\\(graph=...\\) is not supported"):
            Command(graph=Command.PARENT)
        with self.assertRaisesRegex(TypeError, "declares no keys"):
            StateGraph(dict)

    def test_one_graph_is_exported(self):
        with self.assertRaisesRegex(RuntimeError, "compiled no graph"):
            sg.exported()
        echo_builder().compile(name="a")
        echo_builder().compile(name="b")
        with self.assertRaisesRegex(RuntimeError, "compiled 2 graphs \\('a', 'b'\\)"):
            sg.exported()


    def test_goto_targets_are_declared_and_never_routed(self):
        def triage(state) -> Command[Literal["escalate", "__end__"]]:
            return Command(goto="escalate")

        b = StateGraph(EchoState)
        b.add_node("triage", triage)
        b.add_node("pick", lambda s: Command(goto="escalate"), destinations=("escalate", "triage"))
        b.add_node("escalate", lambda s: None)
        b.add_edge(START, "triage")
        b.add_edge(START, "pick")

        def __goto__(state):  # an author's router may not take the reserved name
            return END

        b.add_conditional_edges("escalate", __goto__, [END])
        g = b.compile(name="g")
        self.assertEqual(
            g.spec["conditional_edges"],
            [
                ("triage", "__goto__", [("escalate", "escalate"), ("__end__", "__end__")]),
                ("pick", "__goto__", [("escalate", "escalate"), ("triage", "triage")]),
                ("escalate", "escalate_router", [("__end__", "__end__")]),
            ],
        )
        with self.assertRaises(CallError) as caught:
            g.route("__goto__", "{}")
        self.assertEqual((caught.exception.kind, caught.exception.message), ("unknown", 'unknown router "__goto__"'))
        self.assertEqual(g.route("escalate_router", "{}"), [("node", END)])

        sg._compiled.clear()
        b = StateGraph(EchoState)
        b.add_node("a", lambda s: None, destinations={"ghost": "a label"})
        b.add_edge(START, "a")
        with self.assertRaisesRegex(ValueError, "router '__goto__'\\): path-map key 'ghost' leads to unknown node 'ghost'"):
            b.compile(name="g")
        with self.assertRaisesRegex(TypeError, "destinations is a tuple of node names"):
            StateGraph(EchoState).add_node("a", lambda s: None, destinations="b")


class Calls(Base):
    def test_run_node_updates_and_errors(self):
        g = echo_builder().compile(name="echo_graph")
        self.assertEqual(g.run_node("echo", '{"topic":"hi","log":[]}', ctx()), ("update", '{"log":["seen:hi"]}'))
        self.assertCallError("unknown", 'unknown node "nope"', g.run_node, "nope", "{}", ctx())
        with self.assertRaises(CallError) as caught:
            g.run_node("echo", "not json", ctx())
        self.assertEqual(caught.exception.kind, "invalid-state")
        self.assertTrue(caught.exception.message.startswith("state: Expecting value"), caught.exception.message)
        with self.assertRaises(CallError) as caught:
            g.run_node("echo", "{}", ctx())
        self.assertEqual(caught.exception.kind, "failed")
        self.assertRegex(caught.exception.message, r"^KeyError: 'topic' \(test_graph.py:\d+ in <lambda>\)$")

    def test_node_results(self):
        class S(TypedDict):
            x: int

        results = {
            "none": None,
            "empty": {},
            "unicode": {"x": "é€😀"},
            "command": Command(update={"x": 1}, goto=["b", Send("b", {"k": 2}), END]),
            "goto_one": Command(goto="b"),
            "send_one": Command(goto=Send("b", 3)),
            "bad_type": 42,
            "bad_key": {1: 2},
            "not_json": {"x": {1, 2}},
            "nan": {"x": float("nan")},
            "surrogate": {"x": "\ud800"},
            "bad_goto": Command(goto=[1]),
            "bad_send": Command(goto=Send(1, 2)),
            "bad_payload": Command(goto=Send("b", object())),
        }
        b = StateGraph(S)
        for name, result in results.items():
            b.add_node(name, lambda s, r=result: r)
            b.add_edge(START, name)
        b.add_node("b", lambda s: None)
        b.add_edge("none", "b")
        g = b.compile(name="g")
        run = lambda n: g.run_node(n, "{}", ctx())  # noqa: E731
        self.assertEqual(run("none"), ("update", "{}"))
        self.assertEqual(run("empty"), ("update", "{}"))
        self.assertEqual(run("unicode"), ("update", '{"x":"é€😀"}'))
        self.assertEqual(run("command"), ("command", ('{"x":1}', ["b", END], [("b", '{"k":2}')])))
        self.assertEqual(run("goto_one"), ("command", ("{}", ["b"], [])))
        self.assertEqual(run("send_one"), ("command", ("{}", [], [("b", "3")])))
        failures = {
            "bad_type": "the node returned int; return a dict of state updates, a Command, or None",
            "bad_key": "update keys must be strings, not int",
            "not_json": "the update is not JSON: Object of type set is not JSON serializable",
            "nan": "the update is not JSON: Out of range float values are not JSON compliant",
            "surrogate": "the update is not JSON: a string holds a lone surrogate, which is not UTF-8",
            "bad_goto": "Command(goto=...) takes node names and Sends, not int",
            "bad_send": "Send's node must be a string, not int",
            "bad_payload": "the payload of Send('b', ...) is not JSON: Object of type object is not JSON serializable",
        }
        for node, message in failures.items():
            self.assertCallError("failed", message, run, node)

    def test_interrupts_take_resume_values_in_order(self):
        seen = []

        def ask(state):
            a = interrupt("a?")
            seen.append(a)
            b = interrupt({"q": "b?", "after": a})
            return {"ab": [a, b]}

        b = StateGraph(EchoState)
        b.add_node("ask", ask)
        b.add_edge(START, "ask")
        g = b.compile(name="g")
        self.assertEqual(g.run_node("ask", "{}", ctx()), ("interrupt", '"a?"'))
        self.assertEqual(g.run_node("ask", "{}", ctx([1])), ("interrupt", '{"q":"b?","after":1}'))
        self.assertEqual(g.run_node("ask", "{}", ctx([1, "two"])), ("update", '{"ab":[1,"two"]}'))
        self.assertEqual(seen, [1, 1])
        with self.assertRaisesRegex(RuntimeError, "only be called while a node runs"):
            interrupt("outside")
        with self.assertRaises(CallError) as caught:
            g.run_node("ask", "{}", {**ctx(), "resume": ["{"]})
        self.assertEqual(caught.exception.kind, "invalid-state")
        self.assertTrue(caught.exception.message.startswith("call context: resume value 0: "))

    def test_an_interrupt_is_not_swallowed_by_except_exception(self):
        def careful(state):
            try:
                interrupt("q")
            except Exception:
                return {"x": "swallowed"}
            return {"x": "answered"}

        def bad_payload(state):
            interrupt({1, 2})

        b = StateGraph(EchoState)
        b.add_node("careful", careful)
        b.add_node("bad_payload", bad_payload)
        b.add_edge(START, "careful")
        b.add_edge(START, "bad_payload")
        g = b.compile(name="g")
        self.assertEqual(g.run_node("careful", "{}", ctx()), ("interrupt", '"q"'))
        self.assertTrue(issubclass(GraphInterrupt, BaseException) and not issubclass(GraphInterrupt, Exception))
        self.assertCallError(
            "failed",
            "the interrupt value is not JSON: Object of type set is not JSON serializable",
            g.run_node, "bad_payload", "{}", ctx(),
        )

    def test_a_node_with_two_parameters_gets_the_config(self):
        got = []
        b = StateGraph(EchoState)
        b.add_node("n", lambda state, config: got.append(config))
        b.add_edge(START, "n")
        g = b.compile(name="g")
        g.run_node("n", "{}", ctx(configurable='{"user":"ada"}', thread_id="t1", step=3))
        self.assertEqual(
            got,
            [
                {
                    "configurable": {"user": "ada", "thread_id": "t1"},
                    "metadata": {
                        "langgraph_step": 3,
                        "sandgraph_tool": "t",
                        "sandgraph_request": None,
                        "langgraph_node": "n",
                    },
                }
            ],
        )
        # By name, as LangGraph reads it; a defaulted second parameter is not it.
        b = StateGraph(EchoState)
        b.add_node("kw", lambda state, *, config: got.append(("kw", config["metadata"]["langgraph_node"])))
        b.add_node("named", lambda state, config=None: got.append(("named", config is not None)))
        b.add_node("plain", lambda state, extra=1: got.append(("plain", extra)))
        for n in ("kw", "named", "plain"):
            b.add_edge(START, n)
        sg._compiled.clear()
        g2 = b.compile(name="g")
        for n in ("kw", "named", "plain"):
            g2.run_node(n, "{}", ctx())
        self.assertEqual(got[1:], [("kw", "kw"), ("named", True), ("plain", 1)])
        self.assertCallError(
            "invalid-state",
            "call context: configurable must be a JSON object, not list",
            g.run_node, "n", "{}", ctx(configurable="[]"),
        )

    def test_routes(self):
        class S(TypedDict):
            items: list

        b = StateGraph(S)
        b.add_node("plan", lambda s: None)
        b.add_node("square", lambda s: None)
        b.add_edge(START, "plan")
        b.add_conditional_edges("plan", lambda s: [Send("square", {"x": x}) for x in s["items"]])
        b.add_conditional_edges("square", lambda s: None)
        b.add_conditional_edges(START, lambda s: ["plan", END, True, 1])
        b.add_conditional_edges("plan", lambda s: object())
        b.add_conditional_edges("square", lambda s: s["nope"])
        g = b.compile(name="g")
        self.assertEqual(
            g.route("plan_router", '{"items":[1,2]}'),
            [("send", ("square", '{"x":1}')), ("send", ("square", '{"x":2}'))],
        )
        self.assertEqual(g.route("square_router", "{}"), [])
        self.assertEqual(
            g.route("start_router", "{}"), [("node", "plan"), ("node", END), ("node", "true"), ("node", "1")]
        )
        self.assertCallError(
            "failed",
            "the router returned object; return a node name, a path-map key, END, a Send, or a list of them",
            g.route, "plan_router_2", "{}",
        )
        with self.assertRaises(CallError) as caught:
            g.route("square_router_2", "{}")
        self.assertEqual(caught.exception.kind, "failed")
        self.assertTrue(caught.exception.message.startswith("KeyError: 'nope'"))
        self.assertCallError("unknown", 'unknown router "ghost"', g.route, "ghost", "{}")
        self.assertCallError("invalid-state", "state: Expecting value: line 1 column 1 (char 0)", g.route, "plan_router", "")

    def test_custom_reducers(self):
        def keep_max(current, update):
            if not isinstance(update, int):
                raise ValueError("not an integer")
            return update if current is None else max(current, update)

        class S(TypedDict):
            best: Annotated[object, keep_max]

        b = StateGraph(S)
        b.add_node("a", lambda s: None)
        b.add_edge(START, "a")
        g = b.compile(name="g")
        self.assertEqual(g.reduce("best", "null", "3"), "3")
        self.assertEqual(g.reduce("best", "5", "3"), "5")
        with self.assertRaises(CallError) as caught:
            g.reduce("best", "5", '"x"')
        self.assertEqual(caught.exception.kind, "failed")
        self.assertTrue(caught.exception.message.startswith('channel "best": ValueError: not an integer ('))
        with self.assertRaises(CallError) as caught:
            g.reduce("best", "{", "1")
        self.assertEqual(caught.exception.kind, "invalid-state")
        self.assertTrue(caught.exception.message.startswith("current value: "))
        with self.assertRaises(CallError) as caught:
            g.reduce("best", "1", "")
        self.assertTrue(caught.exception.message.startswith("update: "))

    def test_validate(self):
        g = echo_builder().compile(name="g")
        self.assertIsNone(g.validate("anything", ctx()))
        sg._compiled.clear()

        def check(args):
            if args.get("times", 0) > 10:
                return "times must be at most 10"
            if args.get("times") == 7:
                raise ValueError("seven is unlucky")
            if args.get("times") == 8:
                return False
            return None

        g = echo_builder().compile(name="g", validate=check)
        self.assertIsNone(g.validate('{"times":3}', ctx()))
        self.assertEqual(g.validate('{"times":11}', ctx()), "times must be at most 10")
        self.assertEqual(g.validate('{"times":7}', ctx()), "seven is unlucky")
        self.assertEqual(g.validate('{"times":8}', ctx()), "the graph's validate refused the input")
        self.assertEqual(g.validate("[]", ctx()), "'list' object has no attribute 'get'")
        self.assertTrue(g.validate("{", ctx()).startswith("invalid input: "))
        sg._compiled.clear()
        seen = []
        g = echo_builder().compile(name="g", validate=lambda args, config: seen.append(config["metadata"]["sandgraph_tool"]))
        self.assertIsNone(g.validate("{}", ctx()))
        self.assertEqual(seen, ["t"])

    def test_failure_messages_are_bounded_and_utf8(self):
        b = StateGraph(EchoState)
        b.add_node("long", lambda s: (_ for _ in ()).throw(ValueError("x" * 10_000)))
        b.add_node("bad", lambda s: (_ for _ in ()).throw(ValueError("\udc80 lone")))
        b.add_edge(START, "long")
        b.add_edge(START, "bad")
        g = b.compile(name="g")
        with self.assertRaises(CallError) as caught:
            g.run_node("long", "{}", ctx())
        self.assertEqual(len(caught.exception.message), sg.MAX_MESSAGE_LEN)
        with self.assertRaises(CallError) as caught:
            g.run_node("bad", "{}", ctx())
        caught.exception.message.encode("utf-8")
        self.assertTrue(caught.exception.message.startswith("ValueError: \ufffd"), caught.exception.message)

    def test_invoke_points_at_the_host(self):
        g = echo_builder().compile(name="g")
        with self.assertRaisesRegex(RuntimeError, "sandgraph run"):
            g.invoke({"topic": "x"})


if __name__ == "__main__":
    unittest.main()
