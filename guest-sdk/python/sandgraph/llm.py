"""Chat with a model through the host (the `llm` capability:
`capabilities = ["llm"]` in `[tool.sandgraph]`, and an `llm` grant in the
operator's config). The graph names a model alias; the operator maps it to
a provider's model, and the graph never sees the provider's address or key.

`chat` is the raw call; `ChatModel` reads like LangChain's chat models:
`invoke(messages)` returns an ai message (a dict, as `MessagesState` keeps
it) and `bind_tools(tools)` offers tools to the model."""

import json
from typing import Any, List, NamedTuple, Optional, Sequence

from . import _bindings
from . import tools as _tools
from .errors import LlmError
from .messages import coerce_messages

__all__ = ["ChatModel", "ChatResponse", "chat"]


def _coerce(messages: Any) -> List[dict]:
    """Messages as dicts (contract section 1); messages that do not coerce
    are a `malformed` request, as the Rust SDK says."""
    try:
        return coerce_messages(messages)
    except ValueError as error:
        raise LlmError("malformed", str(error)) from None


def _arguments(args: Any) -> str:
    if isinstance(args, str):
        return args
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def _wire_message(wit: Any, message: dict) -> Any:
    kind = message["type"]
    role = {
        "human": wit.Role.USER,
        "ai": wit.Role.ASSISTANT,
        "system": wit.Role.SYSTEM,
        "tool": wit.Role.TOOL,
    }[kind]
    calls = [
        wit.ToolCall(id=str(c.get("id", "")), name=c["name"], arguments=_arguments(c.get("args", {})))
        for c in message.get("tool_calls") or []
    ]
    return wit.Message(
        role=role,
        content=message["content"],
        tool_calls=calls if kind == "ai" else [],
        tool_call_id=message.get("tool_call_id") if kind == "tool" else None,
    )


def _schema(tool: Any) -> dict:
    schema = getattr(tool, "args_schema", None)
    if schema is None:
        return {"type": "object", "properties": {}}
    if isinstance(schema, dict):
        return schema
    for method in ("model_json_schema", "schema"):
        if callable(getattr(schema, method, None)):
            return getattr(schema, method)()
    raise TypeError(f"tool {tool.name!r}: args_schema is not a JSON Schema dict")


def tool_definition(tool: Any, granted: Optional[dict] = None) -> dict:
    """`{name, description, parameters}` of a tool offered to the model: a
    graph tool's name (its schema from `granted`, `tools.list()` by name), an
    object with `name`, `description` and `args_schema` (a `@tool`), or a
    dict `{name, description, parameters}` (or OpenAI's `{"type":
    "function", "function": {...}}`)."""
    if isinstance(tool, str):
        if granted is None:
            granted = {t.name: t for t in _tools.list()}
        info = granted.get(tool)
        if info is None:
            names = ", ".join(granted) or "none"
            raise ValueError(f"no graph tool named {tool!r} is granted (granted: {names})")
        return {"name": info.name, "description": info.description, "parameters": info.parameters}
    if isinstance(tool, dict):
        spec = tool.get("function", tool) if tool.get("type") == "function" else tool
        if not isinstance(spec.get("name"), str):
            raise ValueError("a tool dict needs a string `name`")
        return {
            "name": spec["name"],
            "description": spec.get("description"),
            "parameters": spec.get("parameters") or {"type": "object", "properties": {}},
        }
    name = getattr(tool, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"cannot offer a {type(tool).__name__} as a tool: give a name, dict or @tool")
    return {"name": name, "description": getattr(tool, "description", None), "parameters": _schema(tool)}


class ChatResponse(NamedTuple):
    """A model's answer: its text, its tool calls (`[{id, name, args}]`,
    args parsed when they are a JSON object, else the raw text), the
    provider's finish reason and the token usage (`input_tokens`,
    `output_tokens`, `total_tokens`)."""

    content: str
    tool_calls: list
    finish_reason: str
    usage: dict

    def message(self) -> dict:
        """The answer as an ai message (contract section 1, without id)."""
        return {
            "type": "ai",
            "content": self.content,
            "tool_calls": [dict(c) for c in self.tool_calls],
            "usage_metadata": dict(self.usage),
            "response_metadata": {"finish_reason": self.finish_reason},
        }


def _parse_args(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, dict) else text


def chat(
    messages: Any,
    *,
    model: Optional[str] = None,
    tools: Optional[Sequence[Any]] = None,
    temperature: Optional[float] = None,
    max_tokens: Optional[int] = None,
) -> ChatResponse:
    """Sends `messages` (strings, `(role, content)` pairs or message dicts)
    to the model alias `model` (None: the operator's default) with `tools`
    offered, and waits for the answer. The wait holds no CPU and no fuel;
    it counts against the run's deadline. Raises `LlmError` (kinds
    `denied`, `quota`, `timeout`, `provider`, `malformed`)."""
    wit = _bindings.binding("llm")
    items = _coerce(messages)
    granted = None
    if any(isinstance(t, str) for t in tools or ()):
        granted = {t.name: t for t in _tools.list()}
    definitions = [tool_definition(t, granted) for t in tools or ()]
    request = wit.ChatRequest(
        model=model,
        messages=[_wire_message(wit, m) for m in items],
        tools=[
            wit.ToolDefinition(
                name=d["name"],
                description=d["description"],
                parameters=json.dumps(d["parameters"], ensure_ascii=False, separators=(",", ":")),
            )
            for d in definitions
        ],
        temperature=None if temperature is None else float(temperature),
        max_tokens=max_tokens,
    )
    try:
        response = wit.chat(request)
    except Exception as error:
        value = getattr(error, "value", None)
        if value is None or not type(value).__name__.startswith("LlmError_"):
            raise
        raise LlmError(_tools.kind_of(value), str(value.value)) from None
    usage = response.usage
    return ChatResponse(
        content=response.content,
        tool_calls=[
            {"id": c.id, "name": c.name, "args": _parse_args(c.arguments)} for c in response.tool_calls
        ],
        finish_reason=response.finish_reason,
        usage={
            "input_tokens": usage.prompt_tokens,
            "output_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        },
    )


class ChatModel:
    """A chat model behind a model alias (None: the operator's default),
    shaped like LangChain's: `invoke(messages)` returns an ai message dict,
    `bind_tools(tools)` a model offering those tools."""

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        temperature: Optional[float] = None,
        max_tokens: Optional[int] = None,
    ) -> None:
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tools: tuple = ()

    def bind_tools(self, tools: Sequence[Any]) -> "ChatModel":
        """A copy of this model that offers `tools`: graph tools by name
        (their schema read from `tools.list()` at call time), `@tool`
        objects (`name`, `description`, `args_schema`), or dicts `{name,
        description, parameters}`."""
        bound = ChatModel(self.model, temperature=self.temperature, max_tokens=self.max_tokens)
        bound.tools = tuple(tools)
        return bound

    def invoke(self, messages: Any) -> dict:
        """The model's answer to `messages` as an ai message: `type`,
        `content`, `tool_calls`, `usage_metadata`, `response_metadata`."""
        return chat(
            messages,
            model=self.model,
            tools=self.tools,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        ).message()

    async def ainvoke(self, messages: Any) -> dict:
        """`invoke`, awaitable (the host call is synchronous: several
        awaited with `asyncio.gather` run one after another)."""
        return self.invoke(messages)

    def __repr__(self) -> str:
        return f"ChatModel(model={self.model!r})"
