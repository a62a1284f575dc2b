"""ToolNode, tools_condition, the chat model's wire mapping and the agent
graph against stand-ins for the host's tools and model, ported from the
Rust SDK's prebuilt_tests.rs: the same inputs give the same JSON."""

import asyncio
import json
import unittest

from . import fake_bindings as fb
from .test_capabilities import Role, fake_llm

fb.install()

from sandgraph import END, _bindings  # noqa: E402
from sandgraph import graph as sg  # noqa: E402
from sandgraph.errors import LlmError, ToolError  # noqa: E402
from sandgraph.llm import ChatModel  # noqa: E402
from sandgraph.prebuilt import ToolNode, create_react_agent, tool, tools_condition  # noqa: E402

ToolInfo = fb._record("ToolInfo", "name", "description", "parameters")
ToolError_Denied = fb._case("ToolError_Denied")


def fake_tools():
    """Graph tools `search` and `broken` (which fails with a host error)."""
    import types

    m = types.SimpleNamespace(calls=[])
    m.list = lambda: [ToolInfo(n, f"{n} things", '{"type":"object"}') for n in ("search", "broken")]

    def call(name, args):
        m.calls.append((name, json.loads(args)))
        if name == "search":
            return json.dumps({"hits": [json.loads(args).get("q")]}, separators=(",", ":"))
        raise fb.Err(ToolError_Denied("not granted"))

    m.call = call
    return m


@tool
def add(a: int, b: int) -> int:
    """Adds."""
    if not isinstance(a, int) or not isinstance(b, int):
        raise ValueError("a and b must be integers")
    return a + b


@tool
def echo(text: str) -> str:
    """Echoes."""
    return text


def state_calling(calls):
    return {"messages": [
        {"type": "ai", "content": "old", "id": "0", "tool_calls": [{"id": "z", "name": "add", "args": {}}]},
        {"type": "human", "content": "go", "id": "1"},
        {"type": "ai", "content": "", "id": "2", "tool_calls": calls},
    ]}  # fmt: skip


def dumps(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class Prebuilt(unittest.TestCase):
    def setUp(self):
        self.host = fake_tools()
        _bindings.install("tools", self.host)

    def tearDown(self):
        _bindings.install("tools")
        _bindings.install("llm")
        sg._compiled.clear()

    def test_tool_node_runs_every_call_of_the_latest_ai_message_in_order(self):
        node = ToolNode([add, echo, "search"])
        out = node(state_calling([
            {"id": "c1", "name": "add", "args": {"a": 2, "b": 3}},
            {"id": "c2", "name": "echo", "args": {"text": "hi"}},
            {"id": "c3", "name": "search", "args": {"q": "rust"}},
        ]))  # fmt: skip
        self.assertEqual(dumps(out), dumps({"messages": [
            {"type": "tool", "content": "5", "name": "add", "tool_call_id": "c1", "status": "success"},
            {"type": "tool", "content": "hi", "name": "echo", "tool_call_id": "c2", "status": "success"},
            {"type": "tool", "content": '{"hits":["rust"]}', "name": "search", "tool_call_id": "c3", "status": "success"},
        ]}))  # fmt: skip
        self.assertEqual(self.host.calls, [("search", {"q": "rust"})])

    def test_tool_node_turns_mistakes_into_error_messages(self):
        node = ToolNode([add, echo])
        out = node(state_calling([
            {"id": "c1", "name": "nope", "args": {}},
            {"id": "c2", "name": "add", "args": "{bad"},
            {"id": "c3", "name": "add", "args": {"a": "x", "b": 1}},
            {"id": "c4", "name": "broken", "args": {}},
        ]))  # fmt: skip
        self.assertEqual({m["status"] for m in out["messages"]}, {"error"})
        self.assertEqual(
            [m["content"] for m in out["messages"]],
            [
                "Error: nope is not a valid tool, try one of [add, echo, search, broken].",
                "Error: the arguments of add are not a JSON object",
                "Error: a and b must be integers\n Please fix your mistakes.",
                "Error: denied: not granted\n Please fix your mistakes.",
            ],
        )
        # Without handling, a failing call fails the node.
        strict = ToolNode([add], handle_tool_errors=False)
        with self.assertRaises(ToolError) as caught:
            strict(state_calling([{"id": "c", "name": "broken", "args": {}}]))
        self.assertEqual(str(caught.exception), "denied: not granted")

    def test_tool_node_needs_an_ai_message_and_takes_a_list_too(self):
        node = ToolNode([add])
        with self.assertRaisesRegex(ValueError, "^no ai message found in input$"):
            node({"messages": ["hi"]})
        calls = [{"id": "c", "name": "add", "args": {"a": 1, "b": 1}}]
        self.assertEqual(node([{"type": "ai", "content": "", "tool_calls": calls}])["messages"][0]["content"], "2")

    def test_tool_node_awaits_async_tools(self):
        @tool
        async def later(x: int) -> dict:
            """Later."""
            await asyncio.sleep(0)
            return {"x": x}

        node = ToolNode([later])
        state = state_calling([{"id": "c", "name": "later", "args": {"x": 1}}])
        self.assertEqual(node(state)["messages"][0]["content"], '{"x":1}')
        self.assertEqual(asyncio.run(node.ainvoke(state))["messages"][0]["content"], '{"x":1}')

    def test_tools_condition_routes_on_the_last_message(self):
        self.assertEqual(tools_condition(state_calling([{"id": "c", "name": "add", "args": {}}])), "tools")
        self.assertEqual(tools_condition(state_calling([])), END)
        self.assertEqual(tools_condition([["ai", "done"]]), END)
        with self.assertRaisesRegex(ValueError, "^no messages found in input state$"):
            tools_condition({"messages": []})

    def test_the_tool_decorator_reads_the_signature_and_docstring(self):
        @tool("lookup")
        def find(query: str, limit: int = 3, exact: bool = False) -> list:
            """Finds things.

            Args:
                query: what to look for
                limit: how many at most
            """
            return []

        self.assertEqual(
            find.definition(),
            {"name": "lookup", "description": "Finds things.", "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "what to look for"},
                    "limit": {"type": "integer", "description": "how many at most"},
                    "exact": {"type": "boolean"},
                },
                "required": ["query"],
            }},
        )  # fmt: skip
        self.assertEqual(find("x"), [])
        def undocumented():
            return 1

        with self.assertRaisesRegex(ValueError, "give a docstring or description"):
            tool(undocumented)

    def test_the_chat_model_maps_messages_to_the_wire_and_back(self):
        llm = fake_llm(lambda m, r: m.ChatResponse(
            content="",
            tool_calls=[m.ToolCall("a", "add", '{"a":1}'), m.ToolCall("b", "add", "[1]")],
            finish_reason="tool_calls",
            usage=m.Usage(10, 5),
        ))  # fmt: skip
        _bindings.install("llm", llm)
        model = ChatModel("fast", max_tokens=50).bind_tools([add])
        reply = model.invoke([
            ["system", "be brief"],
            "hi",
            {"type": "ai", "content": "", "tool_calls": [
                {"id": "c1", "name": "add", "args": {"a": 1}},
                {"id": "c2", "name": "add", "args": "raw"},
            ]},
            {"type": "tool", "content": "1", "name": "add", "tool_call_id": "c1"},
        ])  # fmt: skip
        [request] = llm.requests
        self.assertEqual((request.model, request.max_tokens, request.tools[0].name), ("fast", 50, "add"))
        self.assertEqual([m.role for m in request.messages], [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.TOOL])
        self.assertEqual([c.arguments for c in request.messages[2].tool_calls], ['{"a":1}', "raw"])
        self.assertEqual(request.messages[3].tool_call_id, "c1")
        self.assertEqual(dumps(reply), dumps({
            "type": "ai", "content": "",
            "tool_calls": [{"id": "a", "name": "add", "args": {"a": 1}}, {"id": "b", "name": "add", "args": "[1]"}],
            "usage_metadata": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            "response_metadata": {"finish_reason": "tool_calls"},
        }))  # fmt: skip
        with self.assertRaises(LlmError) as caught:
            model.invoke([7])
        self.assertEqual(caught.exception.kind, "malformed")

    def test_the_agent_graph_has_the_react_shape(self):
        graph = create_react_agent("fast", [add, "search"], prompt="hi")
        spec = graph.spec
        self.assertEqual((graph.name, spec["as_tool"]), ("agent", False))
        self.assertEqual([n["name"] for n in spec["nodes"]], ["agent", "tools"])
        self.assertEqual(spec["entry_points"], ["agent"])
        self.assertEqual(spec["conditional_edges"], [("agent", "tools_condition", [("tools", "tools"), (END, END)])])
        self.assertEqual(spec["edges"], [(["tools"], "agent")])
        self.assertEqual(
            spec["channels"],
            [{"name": "messages", "reducer": "custom", "default": "[]"},
             {"name": "question", "reducer": "last-value", "default": None}],
        )  # fmt: skip
        self.assertEqual(
            spec["parameters"],
            '{"question":{"type":"string","description":"What to ask the agent."},'
            '"messages":{"type":"array","description":"The conversation so far."}}',
        )
        sg._compiled.clear()
        bare = create_react_agent("fast", [], name="bare", description="d", as_tool=True)
        self.assertEqual((bare.name, bare.spec["description"], bare.spec["as_tool"]), ("bare", "d", True))
        self.assertEqual((len(bare.spec["nodes"]), bare.spec["finish_points"]), (1, ["agent"]))

    def test_the_agent_asks_the_model_then_runs_the_tools(self):
        llm = fake_llm(lambda m, r: m.ChatResponse(
            content="" if len(m.requests) == 1 else "5 results",
            tool_calls=[m.ToolCall("c1", "add", '{"a":2,"b":3}')] if len(m.requests) == 1 else [],
            finish_reason="stop",
            usage=m.Usage(1, 1),
        ))  # fmt: skip
        _bindings.install("llm", llm)
        graph = create_react_agent("fast", [add, "search", "unlisted"], prompt="be brief")
        kind, update = graph.run_node("agent", '{"messages":[],"question":"2+3?"}', {})
        self.assertEqual(kind, "update")
        written = json.loads(update)["messages"]
        self.assertEqual([m["type"] for m in written], ["human", "ai"])
        [request] = llm.requests
        self.assertEqual([(m.role, m.content) for m in request.messages], [(Role.SYSTEM, "be brief"), (Role.USER, "2+3?")])
        # Bound: the local tool, then the listed graph tool; "unlisted" is left out.
        self.assertEqual([t.name for t in request.tools], ["add", "search"])
        state = json.loads(graph.reduce("messages", "[]", json.dumps(written)))
        self.assertEqual(graph.route("tools_condition", json.dumps({"messages": state})), [("node", "tools")])
        _, tool_update = graph.run_node("tools", json.dumps({"messages": state}), {})
        self.assertEqual(json.loads(tool_update)["messages"][0]["content"], "5")


if __name__ == "__main__":
    unittest.main()
