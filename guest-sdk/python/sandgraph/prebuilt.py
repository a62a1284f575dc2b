"""LangGraph's prebuilt agent blocks over the host's models and tools,
mirroring `langgraph.prebuilt` and `langchain_core.tools.tool`: `tool`,
`ToolNode`, `tools_condition` and `create_react_agent`. They keep the
conversation in the `messages` channel as message dicts
(`sandgraph.messages`), the same JSON as the Rust and JavaScript SDKs.

    from sandgraph.prebuilt import create_react_agent, tool

    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Adds two integers.\"\"\"
        return a + b

    # A local tool and the graph tool `search` (granted by the operator).
    graph = create_react_agent("default", [add, "search"], prompt="Be brief.", name="assistant")
"""

import inspect
import re
import typing
from typing import Annotated, Any, Callable, Dict, List, Literal, Optional, Sequence, TypedDict, Union

from . import _aio
from . import tools as _tools
from .constants import END, START
from .graph import CompiledStateGraph, StateGraph, _dumps
from .llm import ChatModel
from .messages import HumanMessage, SystemMessage, ToolMessage, add_messages, coerce_messages

__all__ = ["Tool", "ToolNode", "create_react_agent", "tool", "tools_condition"]

# JSON Schema types of annotations a tool's parameters may have.
_JSON_TYPES: Dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _schema_of(annotation: Any) -> dict:
    """The JSON Schema of a parameter annotation (`{}`: any value)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _schema_of(typing.get_args(annotation)[0])
    if origin is Literal:
        return {"enum": list(typing.get_args(annotation))}
    if origin is Union:
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _schema_of(options[0]) if len(options) == 1 else {}
    kind = _JSON_TYPES.get(origin or annotation)
    if kind is None:
        return {}
    schema = {"type": kind}
    args = typing.get_args(annotation)
    if kind == "array" and origin is list and args:
        schema["items"] = _schema_of(args[0])
    return schema


def _docstring(fn: Callable) -> tuple:
    """The description (the docstring before an `Args:` section) and each
    argument's description from that Google-style section."""
    doc = inspect.cleandoc(fn.__doc__ or "")
    parts = re.split(r"^(?:Args|Arguments|Parameters):[ \t]*$", doc, maxsplit=1, flags=re.M)
    head, args = parts[0], parts[1] if len(parts) > 1 else ""
    described: Dict[str, str] = {}
    for line in args.lstrip("\n").splitlines():
        match = re.match(r"\s+(\w+)(?:\s*\(.*?\))?:\s*(.+)", line)
        if match:
            described[match.group(1)] = match.group(2).strip()
        elif not line.strip() or not line.startswith((" ", "\t")):
            break
    return head.strip(), described


class Tool:
    """A tool defined in the graph: offered to a model (`name`,
    `description`, `args_schema`, a JSON Schema dict) and run by a
    `ToolNode` with the model's arguments as keywords. Calling it calls
    the function."""

    def __init__(self, fn: Callable, name: Optional[str] = None, description: Optional[str] = None) -> None:
        if not callable(fn):
            raise TypeError(f"tool: expected a function, not {type(fn).__name__}")
        self.func = fn
        self.name = name or fn.__name__
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise ValueError(f'tool {self.name!r}: a tool name has 1 to 64 ascii letters, digits, "_" or "-"')
        head, described = _docstring(fn)
        self.description = description if description is not None else head
        if not self.description:
            raise ValueError(f"tool {self.name!r}: give a docstring or description=... (the model reads it)")
        hints = typing.get_type_hints(fn, include_extras=True)
        properties, required = {}, []
        for param in inspect.signature(fn).parameters.values():
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            schema = _schema_of(hints.get(param.name, Any))
            if param.name in described:
                schema["description"] = described[param.name]
            properties[param.name] = schema
            if param.default is param.empty:
                required.append(param.name)
        self.args_schema: dict = {"type": "object", "properties": properties}
        if required:
            self.args_schema["required"] = required

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def invoke(self, args: dict) -> Any:
        """Runs the tool on the model's arguments (a dict)."""
        return _aio.resolve(self.func(**args))

    async def ainvoke(self, args: dict) -> Any:
        """`invoke`, awaitable (awaits an `async def` tool)."""
        result = self.func(**args)
        return await result if inspect.isawaitable(result) else result

    def definition(self) -> dict:
        """`{name, description, parameters}`, as a model is offered it."""
        return {"name": self.name, "description": self.description, "parameters": self.args_schema}

    def __repr__(self) -> str:
        return f"Tool(name={self.name!r})"


def tool(
    name_or_fn: Union[str, Callable, None] = None, *, description: Optional[str] = None
) -> Any:
    """LangChain's `@tool`: `@tool`, `@tool("name")` or
    `@tool(description=...)` makes a `Tool` of a function; its parameters
    (with type annotations) are the arguments' JSON Schema, its docstring
    the description (and an `Args:` section the arguments')."""
    if callable(name_or_fn):
        return Tool(name_or_fn, description=description)

    def decorate(fn: Callable) -> Tool:
        return Tool(fn, name=name_or_fn, description=description)

    return decorate


def _split(tools: Sequence[Any]) -> tuple:
    """Local `Tool`s (plain functions made tools) and graph tool names."""
    local: List[Tool] = []
    names: List[str] = []
    for item in tools:
        if isinstance(item, str):
            names.append(item)
        elif isinstance(item, Tool):
            local.append(item)
        elif callable(item):
            local.append(Tool(item))
        else:
            raise TypeError(f"a tool is a @tool function or a graph tool's name, not {type(item).__name__}")
    return local, names


class ToolNode:
    """Runs the tool calls of the latest ai message (LangGraph's
    `ToolNode`): local tools in the graph, any other name as a graph tool
    through the host (`sandgraph.tools`), in order, one after another.
    Returns `{"messages": [tool message, ...]}` in call order.

    A failing call becomes a tool message with status "error" and content
    `Error: <message>\\n Please fix your mistakes.` (a host tool error's
    message is `<kind>: <text>`), unless `handle_tool_errors=False`, when
    the node fails. An unknown tool or arguments that are not a JSON object
    are always error messages.
    """

    def __init__(self, tools: Sequence[Any], *, handle_tool_errors: bool = True, name: str = "tools") -> None:
        self.local, _ = _split(tools)
        self.handle_tool_errors = handle_tool_errors
        self.name = name
        self.__name__ = name

    def __call__(self, input: Any) -> dict:  # noqa: A002
        return self.invoke(input)

    def invoke(self, input: Any) -> dict:  # noqa: A002
        """Runs the calls for `input`: a state with `messages`, or a list."""
        return _aio.resolve(self.ainvoke(input))

    async def ainvoke(self, input: Any) -> dict:  # noqa: A002
        """`invoke`, awaitable: `async def` tools are awaited."""
        messages = _messages_of(input)
        ai = next((m for m in reversed(messages) if m["type"] == "ai"), None)
        if ai is None:
            raise ValueError("no ai message found in input")
        local = {t.name: t for t in self.local}
        listed: Optional[list] = None
        out = []
        for call in ai["tool_calls"]:
            name, args = call["name"], call["args"]
            if not isinstance(args, dict):
                out.append(self._message(call, error=f"Error: the arguments of {name} are not a JSON object"))
                continue
            if name not in local:
                if listed is None:
                    listed = [t.name for t in _tools.list()]
                if name not in listed:
                    names = ", ".join([*local, *listed])
                    out.append(self._message(call, error=f"Error: {name} is not a valid tool, try one of [{names}]."))
                    continue
            try:
                result = await local[name].ainvoke(args) if name in local else _tools.call(name, args)
            except Exception as error:
                if not self.handle_tool_errors:
                    raise
                out.append(self._message(call, error=f"Error: {_reason(error)}\n Please fix your mistakes."))
                continue
            out.append(self._message(call, result=result))
        return {"messages": out}

    @staticmethod
    def _message(call: dict, *, result: Any = None, error: Optional[str] = None) -> dict:
        if error is not None:
            return ToolMessage(error, name=call["name"], tool_call_id=call["id"], status="error")
        content = result if isinstance(result, str) else _dumps(result)
        return ToolMessage(content, name=call["name"], tool_call_id=call["id"])


def _reason(error: Exception) -> str:
    """A failed call's message: its text (a host tool error's is
    `<kind>: <text>`), or its type when it has none."""
    return str(error) or type(error).__name__


def _messages_of(value: Any) -> List[dict]:
    """The messages of a state's `messages` key, or of `value` itself (a
    list), as the Rust SDK reads them."""
    if isinstance(value, dict) and "messages" in value:
        value = value["messages"]
    return coerce_messages(value)


def tools_condition(state: Any) -> Literal["tools", "__end__"]:
    """Routes to "tools" when the last message (of `messages`, or of a
    list) is an ai message with tool calls, else to END."""
    messages = _messages_of(state)
    if not messages:
        raise ValueError("no messages found in input state")
    last = messages[-1]
    return "tools" if last["type"] == "ai" and last["tool_calls"] else END


class AgentState(TypedDict):
    """The state of `create_react_agent`'s graph."""

    messages: Annotated[list, add_messages]
    question: str


# The agent graph's parameters, in the Rust SDK's order.
_AGENT_PARAMETERS = {
    "question": {"type": "string", "description": "What to ask the agent."},
    "messages": {"type": "array", "description": "The conversation so far."},
}


def _definitions(local: List[Tool], names: List[str], tools: Sequence[Any]) -> List[dict]:
    """The tool definitions to bind, in the order given: local tools', and
    the listed schemas of the named graph tools (unlisted ones left out)."""
    listed = {t.name: t for t in _tools.list()} if names else {}
    by_name = {t.name: t for t in local}
    out = []
    for item in tools:
        if isinstance(item, str):
            info = listed.get(item)
            if info is not None:
                out.append({"name": info.name, "description": info.description, "parameters": info.parameters})
        else:
            out.append(by_name[item.name if isinstance(item, Tool) else item.__name__].definition())
    return out


def create_react_agent(
    model: Union[str, ChatModel, None],
    tools: Sequence[Any] = (),
    *,
    prompt: Optional[str] = None,
    name: Optional[str] = None,
    description: Optional[str] = None,
    as_tool: bool = False,
    **compile_options: Any,
) -> CompiledStateGraph:
    """LangGraph's prebuilt ReAct agent, compiled: the `messages` channel,
    a node "agent" calling `model` (a model alias or a `ChatModel`) with
    `tools` bound (and `prompt` as a leading system message on every call,
    not stored), and, with tools, a `ToolNode` "tools" with
    agent -tools_condition-> {tools, END} and tools -> agent.

    The graph is named `name` (default "agent"); its parameters accept
    `messages` or a `question`, which starts the conversation as a user
    message. Graph tools' schemas are read with `tools.list()` at run time.
    Other keywords go to `compile`."""
    if model is None or isinstance(model, str):
        model = ChatModel(model)
    if not isinstance(model, ChatModel):
        raise TypeError(f"create_react_agent: model is a model alias or a ChatModel, not {type(model).__name__}")
    if prompt is not None and not isinstance(prompt, str):
        raise TypeError("create_react_agent: prompt must be a string (the system message)")
    tools = list(tools)
    local, names = _split(tools)

    def agent(state: dict) -> dict:
        history = state.get("messages") or []
        new = []
        question = state.get("question")
        if not history and isinstance(question, str):
            new.append(HumanMessage(question))
        system = [SystemMessage(prompt)] if prompt is not None else []
        bound = model.bind_tools(_definitions(local, names, tools))
        reply = bound.invoke(system + list(history) + new)
        return {"messages": [*new, reply]}

    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    if tools:
        builder.add_node("tools", ToolNode(tools))
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
    else:
        builder.add_edge("agent", END)
    return builder.compile(
        name=name or "agent",
        description=description,
        as_tool=as_tool,
        parameters=_AGENT_PARAMETERS,
        **compile_options,
    )

