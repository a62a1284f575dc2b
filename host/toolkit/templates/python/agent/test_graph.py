"""Native unit tests of graph.py: `PYTHONPATH=sdk/python python3 -m unittest`.

Off wasm there is no host to ask: the tests stand a fake model in for it.
"""

import unittest
from unittest import mock

import graph
from sandgraph.errors import LlmError


class FakeModel:
    def __init__(self, reply=None, error=None):
        self.reply, self.error, self.asked = reply, error, None

    def invoke(self, messages):
        self.asked = messages
        if self.error is not None:
            raise self.error
        return {"type": "ai", "content": self.reply, "tool_calls": []}


class GraphTest(unittest.TestCase):
    def test_the_graph_compiles_under_its_name(self):
        self.assertEqual(graph.graph.name, "{{graph}}")

    def test_the_model_is_the_alias_with_a_token_cap(self):
        m = graph.model()
        self.assertEqual((m.model, m.max_tokens), (graph.MODEL, graph.MAX_ANSWER_TOKENS))

    def test_the_answer_is_written_trimmed(self):
        fake = FakeModel(reply=" Because. ")
        with mock.patch.object(graph, "model", return_value=fake):
            self.assertEqual(graph.ask({"question": "Why wasm?"}), {"answer": "Because."})
        self.assertEqual(fake.asked, graph.messages("Why wasm?"))

    def test_a_failed_call_is_written_as_the_error(self):
        fake = FakeModel(error=LlmError("denied", "no grant"))
        with mock.patch.object(graph, "model", return_value=fake):
            update = graph.ask({"question": "Why wasm?"})
        self.assertNotIn("answer", update)
        self.assertIn("no grant", update["error"])


if __name__ == "__main__":
    unittest.main()
