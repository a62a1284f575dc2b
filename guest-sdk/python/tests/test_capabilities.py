"""`sandgraph.llm`, `sandgraph.tools`, `sandgraph.http` and async nodes
against stand-ins for the generated capability bindings: the WIT records
sent, the answers read back, typed errors, and a capability the build did
not import."""

import asyncio
import enum
import json
import types
import unittest
from typing import Annotated, TypedDict

from . import fake_bindings as fb

fb.install()

from sandgraph import StateGraph, _bindings, http, interrupt, llm, tools  # noqa: E402
from sandgraph import graph as sg  # noqa: E402
from sandgraph.errors import CapabilityError, HttpError, LlmError, ToolError  # noqa: E402


class Role(enum.Enum):
    SYSTEM = 0
    USER = 1
    ASSISTANT = 2
    TOOL = 3


def fake_llm(answer):
    """An `llm` binding whose `chat` records its request and returns
    `answer(request)` (or raises it when it is an exception)."""
    m = types.SimpleNamespace(Role=Role, requests=[])
    m.ToolCall = fb._record("ToolCall", "id", "name", "arguments")
    m.Message = fb._record("Message", "role", "content", "tool_calls", "tool_call_id")
    m.ToolDefinition = fb._record("ToolDefinition", "name", "description", "parameters")
    m.ChatRequest = fb._record("ChatRequest", "model", "messages", "tools", "temperature", "max_tokens")
    m.Usage = fb._record("Usage", "prompt_tokens", "completion_tokens")
    m.ChatResponse = fb._record("ChatResponse", "content", "tool_calls", "finish_reason", "usage")

    def chat(request):
        m.requests.append(request)
        out = answer(m, request)
        if isinstance(out, BaseException):
            raise out
        return out

    m.chat = chat
    return m


ToolInfo = fb._record("ToolInfo", "name", "description", "parameters")
ToolError_NotFound = fb._case("ToolError_NotFound")
LlmError_Denied = fb._case("LlmError_Denied")


def fake_tools():
    m = types.SimpleNamespace(calls=[])
    m.list = lambda: [ToolInfo("search", "Searches.", '{"type":"object","properties":{"q":{"type":"string"}}}')]

    def call(name, args):
        m.calls.append((name, args))
        if name != "search":
            raise fb.Err(ToolError_NotFound(f"no tool named {name}"))
        return json.dumps({"hits": [json.loads(args)["q"]]})

    m.call = call
    return m


def answer_with_tool_call(m, request):
    return m.ChatResponse(
        content="",
        tool_calls=[m.ToolCall("call-1", "search", '{"q":"wasm"}'), m.ToolCall("call-2", "raw", "not json")],
        finish_reason="tool_calls",
        usage=m.Usage(7, 3),
    )


class Capabilities(unittest.TestCase):
    def tearDown(self):
        _bindings.install("llm")
        _bindings.install("tools")

    def test_chat_model_maps_messages_tools_and_the_answer(self):
        m = fake_llm(answer_with_tool_call)
        _bindings.install("llm", m)
        _bindings.install("tools", fake_tools())

        class Local:
            name = "shout"
            description = "Shouts."
            args_schema = {"type": "object", "properties": {"text": {"type": "string"}}}

        model = llm.ChatModel("fast", temperature=0.5, max_tokens=10)
        bound = model.bind_tools(["search", Local(), {"name": "d", "parameters": {"type": "object"}}])
        self.assertEqual(model.tools, ())
        history = [
            ("system", "be brief"),
            "hi",
            {"type": "ai", "content": "", "tool_calls": [{"id": "c0", "name": "search", "args": {"q": "x"}}]},
            {"type": "tool", "content": "found", "tool_call_id": "c0", "name": "search"},
        ]
        message = bound.invoke(history)
        self.assertEqual(
            message,
            {
                "type": "ai",
                "content": "",
                "tool_calls": [
                    {"id": "call-1", "name": "search", "args": {"q": "wasm"}},
                    {"id": "call-2", "name": "raw", "args": "not json"},
                ],
                "usage_metadata": {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10},
                "response_metadata": {"finish_reason": "tool_calls"},
            },
        )
        request = m.requests[0]
        self.assertEqual((request.model, request.temperature, request.max_tokens), ("fast", 0.5, 10))
        self.assertEqual(
            [(w.role, w.content, w.tool_call_id) for w in request.messages],
            [
                (Role.SYSTEM, "be brief", None),
                (Role.USER, "hi", None),
                (Role.ASSISTANT, "", None),
                (Role.TOOL, "found", "c0"),
            ],
        )
        self.assertEqual(request.messages[2].tool_calls, [m.ToolCall("c0", "search", '{"q":"x"}')])
        self.assertEqual(
            [(t.name, t.description, json.loads(t.parameters)) for t in request.tools],
            [
                ("search", "Searches.", {"type": "object", "properties": {"q": {"type": "string"}}}),
                ("shout", "Shouts.", Local.args_schema),
                ("d", None, {"type": "object"}),
            ],
        )
        self.assertEqual(asyncio.run(bound.ainvoke("again"))["type"], "ai")

    def test_errors_are_typed_and_name_their_kind(self):
        _bindings.install("llm", fake_llm(lambda m, r: fb.Err(LlmError_Denied("no grant for fast"))))
        with self.assertRaises(LlmError) as caught:
            llm.chat("hi", model="fast")
        self.assertEqual((caught.exception.kind, str(caught.exception)), ("denied", "denied: no grant for fast"))
        self.assertIsInstance(caught.exception, CapabilityError)
        _bindings.install("tools", fake_tools())
        with self.assertRaises(ToolError) as caught:
            tools.call("nope", {})
        self.assertEqual(str(caught.exception), "not_found: no tool named nope")
        with self.assertRaisesRegex(ValueError, "no graph tool named 'other' is granted \\(granted: search\\)"):
            llm.chat("hi", tools=["other"])

    def test_tools_call_and_list(self):
        fake = fake_tools()
        _bindings.install("tools", fake)
        self.assertEqual(tools.call("search", {"q": "é"}), {"hits": ["é"]})
        self.assertEqual(fake.calls, [("search", '{"q":"é"}')])
        self.assertEqual(asyncio.run(tools.acall("search", {"q": "a"})), {"hits": ["a"]})
        [info] = tools.list()
        self.assertEqual((info.name, info.parameters["type"]), ("search", "object"))
        with self.assertRaisesRegex(TypeError, "args must be a dict"):
            tools.call("search", ["q"])

    def test_a_capability_the_build_did_not_import_says_how_to_ask_for_it(self):
        _bindings.install("llm", None)
        with self.assertRaisesRegex(
            RuntimeError, 'add "llm" to \\[tool.sandgraph\\] capabilities in pyproject.toml'
        ):
            llm.ChatModel().invoke("hi")
        with self.assertRaisesRegex(RuntimeError, 'add "http" to'):
            http.get("http://example.com/")

    def test_an_uncaught_capability_error_fails_the_node_with_its_kind(self):
        _bindings.install("tools", fake_tools())
        sg._compiled.clear()
        b = StateGraph(State)
        b.add_node("n", lambda s: {"log": [tools.call("nope", {})]})
        b.set_entry_point("n")
        g = b.compile(name="g")
        with self.assertRaises(sg.CallError) as caught:
            g.run_node("n", "{}", {})
        self.assertEqual(caught.exception.kind, "failed")
        self.assertEqual(caught.exception.message, "not_found: no tool named nope")


class Http(unittest.TestCase):
    def test_urls_headers_and_responses(self):
        self.assertEqual(
            http._split_url("https://bücher.example/a b?x=1", {"q": ["é", "2"]}),
            ("https", "xn--bcher-kva.example", "/a%20b?x=1&q=%C3%A9&q=2"),
        )
        self.assertEqual(http._split_url("http://127.0.0.1:8080", None), ("http", "127.0.0.1:8080", "/"))
        with self.assertRaisesRegex(HttpError, "is not an http or https url"):
            http._split_url("ftp://x/", None)
        headers = http.Headers([("Content-Type", "application/json; charset=latin-1"), ("set-cookie", "a"), ("Set-Cookie", "b")])
        self.assertEqual((headers["content-type"], headers["SET-COOKIE"]), ("application/json; charset=latin-1", "a, b"))
        self.assertIn("Content-TYPE", headers)
        response = http.Response("http://x/", 503, headers, '{"a": "é"}'.encode("latin-1"))
        self.assertEqual(response.json(), {"a": "é"})
        with self.assertRaisesRegex(HttpError, "status: 503 from http://x/"):
            response.raise_for_status()
        self.assertEqual(http._kind(fb._case("ErrorCode_HttpRequestDenied")(None)), "denied")
        self.assertEqual(http._kind(fb._case("ErrorCode_ConnectionRefused")(None)), "connection")
        self.assertEqual(http._kind(fb._case("ErrorCode_ConnectionReadTimeout")(None)), "timeout")

    def test_bodies(self):
        headers = {}
        self.assertEqual(http._body(headers, {"a": 1}, None), b'{"a":1}')
        self.assertEqual(headers, {"Content-Type": "application/json"})
        headers = {}
        self.assertEqual(http._body(headers, None, {"a": "b c"}), b"a=b+c")
        self.assertEqual(headers["Content-Type"], "application/x-www-form-urlencoded")
        with self.assertRaisesRegex(TypeError, "not both"):
            http._body({}, {}, b"")


class State(TypedDict):
    log: Annotated[list, lambda a, b: a + b]


class AsyncNodes(unittest.TestCase):
    def setUp(self):
        sg._compiled.clear()

    def graph(self, node, router=None):
        b = StateGraph(State)
        b.add_node("n", node)
        b.set_entry_point("n")
        if router is not None:
            b.add_conditional_edges("n", router, ["n", "__end__"])
        else:
            b.set_finish_point("n")
        return b.compile(name="g")

    def test_an_async_node_and_router_run_to_completion_with_gather(self):
        async def double(x):
            await asyncio.sleep(0)
            return x * 2

        async def node(state):
            return {"log": list(await asyncio.gather(double(1), double(2), double(3)))}

        async def router(state):
            await asyncio.sleep(0.001)
            return "__end__"

        g = self.graph(node, router)
        self.assertEqual(g.run_node("n", '{"log": []}', {}), ("update", '{"log":[2,4,6]}'))
        self.assertEqual(g.route("router", "{}"), [("node", "__end__")])

    def test_an_async_node_may_interrupt(self):
        async def node(state):
            return {"log": [interrupt("ok?")]}

        g = self.graph(node)
        self.assertEqual(g.run_node("n", "{}", {}), ("interrupt", '"ok?"'))
        self.assertEqual(g.run_node("n", "{}", {"resume": ['"yes"']}), ("update", '{"log":["yes"]}'))

    def test_what_outlives_the_call_is_refused(self):
        async def background(state):
            asyncio.get_running_loop().create_task(asyncio.sleep(60), name="poller")
            return {}

        async def timer(state):
            asyncio.get_running_loop().call_later(60, print)
            return {}

        async def forever(state):
            await asyncio.get_running_loop().create_future()

        for node, text in [
            (background, "1 background task(s) were still pending when the coroutine returned (poller)"),
            (timer, "1 timer(s) were still pending when the coroutine returned: a timer cannot outlive the call"),
            (forever, "the coroutine awaits something that never finishes inside the call"),
        ]:
            sg._compiled.clear()
            with self.assertRaises(sg.CallError) as caught:
                self.graph(node).run_node("n", "{}", {})
            self.assertIn(text, caught.exception.message)


if __name__ == "__main__":
    unittest.main()
