"""The Python examples (example-graphs/python), natively: each compiles to
the Rust example's spec (name, channels, parameters) and its nodes give the
same answers through the host's calls."""

import importlib.util
import json
import pathlib
import tomllib
import unittest

from sandgraph import _bindings
from sandgraph import graph as sg

from . import fake_bindings as fb
from .test_capabilities import Role, fake_llm

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "example-graphs" / "python"


def load(example):
    """Imports example-graphs/python/EXAMPLE/graph.py, its [project].name
    passed in as `sandgraph build` does; returns its graph."""
    sg._compiled.clear()
    project = tomllib.loads((EXAMPLES / example / "pyproject.toml").read_text())["project"]["name"]
    sg.set_build_project(project.replace(".", "-"))
    spec = importlib.util.spec_from_file_location(f"example_{example.replace('-', '_')}", EXAMPLES / example / "graph.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:
        sg.set_build_project(None)
    return sg.exported()


def ctx(resume=()):
    return {"tool": "t", "request": None, "thread_id": None, "step": 0,
            "resume": [json.dumps(r) for r in resume], "configurable": "{}"}


def channels(g):
    return [(c["name"], c["reducer"], c["default"]) for c in g.spec["channels"]]


class Examples(unittest.TestCase):
    def test_echo(self):
        g = load("echo")
        self.assertEqual((g.name, g.spec["description"], g.spec["as_tool"]), ("echo_graph", "Echo the given topic.", True))
        self.assertEqual(channels(g), [("topic", "last-value", None), ("log", "append", "[]")])
        self.assertEqual(g.run_node("echo", '{"topic":"wasm","log":[]}', ctx()), ("update", '{"log":["seen:wasm"]}'))

    def test_greet(self):
        g = load("greet")
        self.assertEqual(g.name, "greet_graph")
        # The Rust example's parameter text, key for key in the same order.
        self.assertEqual(
            g.spec["parameters"],
            '{"name":{"type":"string","required":true,"description":"The name to greet."},'
            '"style":{"type":"string","required":true,"enum":["formal","casual"],"description":"Greeting style."},'
            '"times":{"type":"integer","description":"Repeat count.","default":1},'
            '"tags":{"type":"array","items":{"type":"string"},"description":"Extra tags."}}',
        )
        self.assertEqual([c[1] for c in channels(g)], ["last-value"] * 5)
        self.assertEqual(g.spec["nodes"], [{"name": "greet", "description": "Builds the greeting."}])
        run = lambda state: json.loads(g.run_node("greet", json.dumps(state), ctx())[1])  # noqa: E731
        self.assertEqual(run({"name": "Ada", "style": "formal", "times": 2, "tags": ["x"]}),
                         {"greeting": "Good day, Ada. Good day, Ada.", "tags": ["x"]})
        self.assertEqual(run({"name": "Ada", "style": "casual"}), {"greeting": "Hey Ada!", "tags": []})
        self.assertIsNone(g.validate('{"times":10}', ctx()))
        self.assertEqual(g.validate('{"times":11}', ctx()), "times must be at most 10")
        for bad in ({"name": "Ada", "style": "loud"}, {"style": "formal"}, {"name": "Ada", "style": "formal", "times": -1}):
            with self.assertRaises(sg.CallError):
                g.run_node("greet", json.dumps(bad), ctx())

    def test_map_reduce(self):
        g = load("map-reduce")
        self.assertEqual(g.name, "map_reduce_graph")
        self.assertEqual(channels(g), [("items", "last-value", None), ("results", "append", "[]"), ("total", "last-value", None)])
        self.assertEqual(g.spec["conditional_edges"], [("plan", "fan_out", [])])
        self.assertEqual(g.route("fan_out", '{"items":[1,2,3]}'), [("send", ("square", '{"x":%d}' % x)) for x in (1, 2, 3)])
        self.assertEqual(g.run_node("plan", "{}", ctx()), ("update", "{}"))
        self.assertEqual(g.run_node("square", '{"x":3}', ctx()), ("update", '{"results":[9]}'))
        self.assertEqual(g.run_node("sum", '{"results":[1,4,9]}', ctx()), ("update", '{"total":14}'))
        with self.assertRaises(sg.CallError):
            g.run_node("square", '{"x":4294967296}', ctx())

    def test_approval(self):
        g = load("approval")
        self.assertEqual(g.name, "approval_graph")
        self.assertEqual(channels(g), [("topic", "last-value", None), ("draft", "last-value", None),
                                       ("revisions", "last-value", "0"), ("published", "last-value", "false")])
        self.assertEqual(g.spec["conditional_edges"], [("review", "after_review", [("publish", "__end__"), ("revise", "draft")])])
        state = {"topic": "wasm", "revisions": 0, "published": False}
        self.assertEqual(g.run_node("draft", json.dumps(state), ctx()), ("update", '{"draft":"A short note about wasm."}'))
        state["draft"] = "A short note about wasm."
        self.assertEqual(g.run_node("review", json.dumps(state), ctx()),
                         ("interrupt", '{"question":"publish this draft?","draft":"A short note about wasm."}'))
        self.assertEqual(g.run_node("review", json.dumps(state), ctx(["no"])), ("update", '{"revisions":1}'))
        self.assertEqual(g.run_node("review", json.dumps(state), ctx(["yes"])), ("update", '{"published":true}'))
        self.assertEqual(g.route("after_review", json.dumps(state)), [("node", "revise")])
        self.assertEqual(g.run_node("draft", json.dumps({**state, "revisions": 1}), ctx()),
                         ("update", '{"draft":"A short note about wasm (revision 1)."}'))

    def test_research(self):
        g = load("research")
        self.assertEqual((g.name, g.spec["as_tool"]), ("research", True))
        self.assertEqual(channels(g), [("question", "last-value", None), ("max_steps", "last-value", "6"),
                                       ("messages", "custom", "[]"), ("steps", "last-value", "0"),
                                       ("answer", "last-value", None), ("error", "last-value", None)])
        # The Rust example's parameter text.
        self.assertEqual(
            g.spec["parameters"],
            '{"question":{"type":"string","required":true,"description":"What to find out."},'
            '"max_steps":{"type":"integer","default":6,"description":"Most model turns (1 to 12)."}}',
        )
        self.assertEqual(g.spec["conditional_edges"], [
            ("agent", "tools_condition", [("tools", "tools"), ("__end__", "__end__")]),
            ("tools", "after_tools", [("agent", "agent"), ("__end__", "__end__")]),
        ])  # fmt: skip

        # A turn with a tool call, the tool's answer, then the model's answer.
        tool_info = fb._record("ToolInfo", "name", "description", "parameters")
        fake_tools = type("Tools", (), {
            "list": staticmethod(lambda: [tool_info("greet_graph", "Greets.", '{"type":"object"}')]),
            "call": staticmethod(lambda name, args: '{"greeting":"Good day, Ada."}'),
        })  # fmt: skip
        llm = fake_llm(lambda m, r: m.ChatResponse(
            content="" if len(m.requests) == 1 else "Good day, Ada.",
            tool_calls=[m.ToolCall("c1", "greet_graph", '{"name":"Ada"}')] if len(m.requests) == 1 else [],
            finish_reason="stop",
            usage=m.Usage(3, 2),
        ))  # fmt: skip
        _bindings.install("tools", fake_tools)
        _bindings.install("llm", llm)
        try:
            state = {"question": "Greet Ada.", "max_steps": 6, "messages": [], "steps": 0}
            kind, update = g.run_node("agent", json.dumps(state), ctx())
            update = json.loads(update)
            self.assertEqual([m["type"] for m in update["messages"]], ["system", "human", "ai"])
            self.assertEqual((update["steps"], "answer" in update), (1, False))
            self.assertEqual([t.name for t in llm.requests[0].tools], ["greet_graph"])
            state["messages"] = json.loads(g.reduce("messages", "[]", json.dumps(update["messages"])))
            self.assertEqual(g.route("tools_condition", json.dumps(state)), [("node", "tools")])
            _, tools_update = g.run_node("tools", json.dumps(state), ctx())
            self.assertEqual(json.loads(tools_update)["messages"][0]["content"], '{"greeting":"Good day, Ada."}')
            self.assertEqual(g.route("after_tools", json.dumps(state)), [("node", "agent")])
            state["messages"] = json.loads(g.reduce("messages", json.dumps(state["messages"]), json.dumps(json.loads(tools_update)["messages"])))
            _, update = g.run_node("agent", json.dumps({**state, "steps": 1}), ctx())
            self.assertEqual(json.loads(update)["answer"], "Good day, Ada.")
            self.assertEqual([m.role for m in llm.requests[1].messages], [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL])
            # The step cap ends the run after the tools node.
            llm.requests.clear()
            _, update = g.run_node("agent", json.dumps({**state, "steps": 0, "max_steps": 1}), ctx())
            self.assertEqual(json.loads(update)["error"], "no answer after 1 model turns (max_steps is 1)")
            self.assertEqual(g.route("after_tools", update), [("node", "__end__")])
        finally:
            _bindings.install("tools")
            _bindings.install("llm")


if __name__ == "__main__":
    unittest.main()
