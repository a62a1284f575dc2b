"""Native unit tests of graph.py: `PYTHONPATH=sdk/python python3 -m unittest`."""

import unittest

import graph


class GraphTest(unittest.TestCase):
    def test_the_graph_compiles_under_its_name(self):
        # compile() raises listing every problem of the graph.
        self.assertEqual(graph.graph.name, "{{graph}}")

    def test_count_counts_words(self):
        self.assertEqual(graph.count({"text": "hello  wasm\nworld"}), {"words": 3})

    def test_report_says_word_or_words(self):
        self.assertEqual(graph.report({"words": 1}), {"log": ["1 word"]})
        self.assertEqual(graph.report({"words": 0}), {"log": ["0 words"]})


if __name__ == "__main__":
    unittest.main()
