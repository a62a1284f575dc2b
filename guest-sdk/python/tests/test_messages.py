"""Every rule of `add_messages` and of message coercion, ported from the
Rust SDK's messages_tests.rs: the same inputs give the same JSON."""

import json
import unittest

from sandgraph import StateGraph
from sandgraph import graph as sg
from sandgraph.messages import (
    REMOVE_ALL_MESSAGES,
    AIMessage,
    HumanMessage,
    MessagesState,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
    add_messages,
)


def dumps(value):
    """Compact JSON text, key order kept: equal text means byte-for-byte
    the Rust SDK's output."""
    return json.dumps(value, separators=(",", ":"))


class AddMessages(unittest.TestCase):
    def same(self, got, expected):
        self.assertEqual(dumps(got), dumps(expected))

    def test_appends_with_deterministic_ids(self):
        self.same(add_messages(None, "hi"), [{"type": "human", "content": "hi", "id": "msg-0"}])
        left = [{"type": "human", "content": "a", "id": "x"}]
        self.same(
            add_messages(left, [["assistant", "b"], ["system", "c"]]),
            [
                {"type": "human", "content": "a", "id": "x"},
                {"type": "ai", "content": "b", "id": "msg-1", "tool_calls": []},
                {"type": "system", "content": "c", "id": "msg-2"},
            ],
        )

    def test_assigned_ids_skip_ids_in_use(self):
        left = [{"type": "human", "content": "a", "id": "msg-1"}]
        right = ["b", {"role": "user", "content": "c", "id": "msg-2"}, "d"]
        self.assertEqual([m["id"] for m in add_messages(left, right)], ["msg-1", "msg-3", "msg-2", "msg-4"])

    def test_a_known_id_replaces_in_place_and_the_last_duplicate_wins(self):
        left = [{"type": "human", "content": "a", "id": "1"}, {"type": "human", "content": "b", "id": "2"}]
        right = [
            {"type": "ai", "content": "first", "id": "1"},
            {"type": "human", "content": "new", "id": "3"},
            {"type": "ai", "content": "last", "id": "1"},
        ]
        self.same(
            add_messages(left, right),
            [
                {"type": "ai", "content": "last", "id": "1", "tool_calls": []},
                {"type": "human", "content": "b", "id": "2"},
                {"type": "human", "content": "new", "id": "3"},
            ],
        )

    def test_remove_markers_delete_and_a_later_message_restores(self):
        left = [{"type": "human", "content": "a", "id": "1"}, {"type": "human", "content": "b", "id": "2"}]
        self.same(add_messages(left, [RemoveMessage("1")]), [{"type": "human", "content": "b", "id": "2"}])
        right = [RemoveMessage("2"), {"type": "human", "content": "again", "id": "2"}]
        self.same(
            add_messages(left, right),
            [{"type": "human", "content": "a", "id": "1"}, {"type": "human", "content": "again", "id": "2"}],
        )
        with self.assertRaises(ValueError) as caught:
            add_messages(left, {"type": "remove", "id": "9"})
        self.assertEqual(str(caught.exception), "attempting to delete a message with an id that doesn't exist ('9')")

    def test_remove_all_keeps_what_follows_the_last_marker(self):
        left = [{"type": "human", "content": "a", "id": "1"}]
        right = [
            "dropped",
            RemoveMessage(REMOVE_ALL_MESSAGES),
            "also dropped",
            RemoveMessage(REMOVE_ALL_MESSAGES),
            {"type": "human", "content": "kept", "id": "k"},
            "kept too",
        ]
        # Ids were assigned over the whole right side: "kept too" is msg-3.
        self.same(
            add_messages(left, right),
            [{"type": "human", "content": "kept", "id": "k"}, {"type": "human", "content": "kept too", "id": "msg-3"}],
        )
        with self.assertRaises(ValueError) as caught:
            add_messages(left, [RemoveMessage(REMOVE_ALL_MESSAGES), RemoveMessage("1")])
        self.assertEqual(str(caught.exception), "attempting to delete a message with an id that doesn't exist ('1')")
        self.assertEqual(add_messages(left, [RemoveMessage(REMOVE_ALL_MESSAGES)]), [])

    def test_objects_coerce_with_their_optional_keys(self):
        right = [
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c1", "name": "search", "args": {"q": "x"}},
                {"id": "c2", "name": "raw", "args": "not json"},
            ]},
            {"type": "tool", "content": "42", "name": "search", "tool_call_id": "c1"},
            {"role": "developer", "content": "be brief", "name": "ops", "extra": 1},
        ]  # fmt: skip
        self.same(
            add_messages([], right),
            [
                {"type": "ai", "content": "", "id": "msg-0", "tool_calls": [
                    {"id": "c1", "name": "search", "args": {"q": "x"}},
                    {"id": "c2", "name": "raw", "args": "not json"},
                ]},
                {"type": "tool", "content": "42", "id": "msg-1", "name": "search",
                 "tool_call_id": "c1", "status": "success"},
                {"type": "system", "content": "be brief", "id": "msg-2", "name": "ops"},
            ],
        )  # fmt: skip

    def test_bad_items_name_their_index_and_why(self):
        cases = [
            (["ok", 7], "message 1: expected a message (a string, a [role, content] pair or an object with type and content), not a number"),
            ([["tool", "x"]], "message 0: a [role, content] pair cannot make a tool message (it needs a tool_call_id)"),
            ([["robot", "x"]], 'message 0: unknown role "robot"'),
            ([["human"]], "message 0: a [role, content] pair needs exactly two strings"),
            ([{"content": "x"}], "message 0: a message object needs a type or role"),
            ([{"type": "human"}], "message 0: a message object needs a string content"),
            ([{"type": "human", "content": 1}], "message 0: content must be a string, not a number"),
            ([{"type": "tool", "content": "x"}], "message 0: a tool message needs a tool_call_id"),
            ([{"type": "tool", "content": "x", "tool_call_id": "c", "status": "ok"}], 'message 0: status must be success or error, not "ok"'),
            ([{"type": "remove"}], "message 0: a remove marker needs an id"),
            ([{"type": "ai", "content": "", "tool_calls": [{"id": "c"}]}], "message 0: tool_calls: missing field `name`"),
        ]  # fmt: skip
        for right, expected in cases:
            with self.subTest(right=right), self.assertRaises(ValueError) as caught:
                add_messages([], right)
            self.assertEqual(str(caught.exception), expected)
            self.assertFalse(expected.endswith("."))
        with self.assertRaises(ValueError) as caught:
            add_messages([1], [])
        self.assertEqual(
            str(caught.exception),
            "message 0: expected a message (a string, a [role, content] pair or an object with type and content), not a number",
        )

    def test_the_constructors_make_the_plain_dicts(self):
        call = {"id": "c", "name": "t", "args": {}}
        self.same(
            AIMessage("x", tool_calls=[call], id="1"),
            {"type": "ai", "content": "x", "id": "1", "tool_calls": [{"id": "c", "name": "t", "args": {}}]},
        )
        self.same(
            ToolMessage("r", name="t", tool_call_id="c", status="error"),
            {"type": "tool", "content": "r", "name": "t", "tool_call_id": "c", "status": "error"},
        )
        self.same(RemoveMessage("z"), {"type": "remove", "id": "z"})
        self.same(HumanMessage(content="hi"), {"type": "human", "content": "hi"})
        self.same(SystemMessage("s", id="9"), {"type": "system", "content": "s", "id": "9"})
        with self.assertRaises(ValueError):
            ToolMessage("r", tool_call_id="c", status="ok")

    def test_the_messages_channel_reduces_with_add_messages(self):
        sg._compiled.clear()
        b = StateGraph(MessagesState)
        b.add_node("reply", lambda s: {"messages": [AIMessage("hello")]})
        b.add_edge("__start__", "reply")
        g = b.compile(name="chat")
        sg._compiled.clear()
        self.assertEqual(g.spec["channels"], [{"name": "messages", "reducer": "custom", "default": "[]"}])
        reduced = json.loads(g.reduce("messages", "[]", '["hi",{"type":"ai","content":"yo"}]'))
        self.assertEqual(reduced[1]["id"], "msg-1")
        with self.assertRaises(sg.CallError) as caught:
            g.reduce("messages", "[]", '[{"type":"remove","id":"q"}]')
        self.assertIn("id that doesn't exist ('q')", caught.exception.message)

    def test_langgraph_import_paths(self):
        from sandgraph.graph import MessagesState as state
        from sandgraph.graph import add_messages as add
        from sandgraph.graph.message import add_messages as add2

        self.assertIs(state, MessagesState)
        self.assertIs(add, add_messages)
        self.assertIs(add2, add_messages)


if __name__ == "__main__":
    unittest.main()
