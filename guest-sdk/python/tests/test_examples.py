"""The Python examples (example-graphs/python), natively: each compiles to
the Rust example's spec (name, channels, parameters) and its nodes give the
same answers through the host's calls."""

import importlib.util
import json
import pathlib
import unittest

from sandgraph import graph as sg

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "example-graphs" / "python"


def load(example):
    """Imports example-graphs/python/EXAMPLE/graph.py; returns its graph."""
    sg._compiled.clear()
    spec = importlib.util.spec_from_file_location(f"example_{example.replace('-', '_')}", EXAMPLES / example / "graph.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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


if __name__ == "__main__":
    unittest.main()
