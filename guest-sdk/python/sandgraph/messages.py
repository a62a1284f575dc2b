"""Chat messages as a graph keeps them in state, `add_messages` (the
reducer of a `messages` channel) and `MessagesState`, mirroring
`langgraph.graph.message` and `langchain_core.messages`.

A message is a plain dict, the same JSON in the Rust, Python and
JavaScript SDKs (keys in this order, absent optional keys omitted)::

    {"type": "human" | "ai" | "system" | "tool", "content": "...", "id": "msg-0",
     "name": "...",                                  (optional; tool messages: the tool)
     "tool_calls": [{"id", "name", "args"}],         (ai messages, maybe [])
     "tool_call_id": "...", "status": "success" | "error"}   (tool messages)

`{"type": "remove", "id": X}` removes the message `X`; with the id
`REMOVE_ALL_MESSAGES` it clears the list. `HumanMessage("hi")` and the
other constructors return such dicts.
"""

from typing import Annotated, Any, List, Optional, TypedDict

__all__ = [
    "REMOVE_ALL_MESSAGES",
    "AIMessage",
    "AnyMessage",
    "HumanMessage",
    "MessagesState",
    "RemoveMessage",
    "SystemMessage",
    "ToolMessage",
    "add_messages",
    "coerce_messages",
]

#: The id of a remove marker that clears every message before it.
REMOVE_ALL_MESSAGES = "__remove_all__"

#: A message in state is a dict.
AnyMessage = dict

_TYPES = {
    "human": "human", "user": "human",
    "ai": "ai", "assistant": "ai",
    "system": "system", "developer": "system",
    "tool": "tool",
    "remove": "remove",
}  # fmt: skip


def _kind(value: Any) -> str:
    """A JSON value's kind as the Rust SDK words it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _message(
    kind: str,
    content: str,
    id: Optional[str] = None,
    name: Optional[str] = None,
    tool_calls: Optional[list] = None,
    tool_call_id: Optional[str] = None,
    status: Optional[str] = None,
) -> dict:
    """The message dict, keys in the contract's order."""
    if kind == "remove":
        return {"type": "remove", "id": id}
    out = {"type": kind, "content": content}
    if id is not None:
        out["id"] = id
    if name is not None:
        out["name"] = name
    if kind == "ai":
        out["tool_calls"] = [dict(c) for c in tool_calls or []]
    if tool_call_id is not None:
        out["tool_call_id"] = tool_call_id
    if status is not None:
        out["status"] = status
    return out


def HumanMessage(content: str, *, id: Optional[str] = None, name: Optional[str] = None) -> dict:  # noqa: N802
    """A user message (a dict, as state holds it)."""
    return coerce_message(_message("human", content, id, name))


def AIMessage(  # noqa: N802
    content: str = "",
    *,
    tool_calls: Optional[list] = None,
    id: Optional[str] = None,
    name: Optional[str] = None,
) -> dict:
    """A model message; `tool_calls` is `[{"id", "name", "args"}]`."""
    return coerce_message(_message("ai", content, id, name, tool_calls))


def SystemMessage(content: str, *, id: Optional[str] = None, name: Optional[str] = None) -> dict:  # noqa: N802
    """A system message."""
    return coerce_message(_message("system", content, id, name))


def ToolMessage(  # noqa: N802
    content: str,
    *,
    tool_call_id: str,
    name: Optional[str] = None,
    status: str = "success",
    id: Optional[str] = None,
) -> dict:
    """The result of the tool call `tool_call_id` (`status` "success" or
    "error")."""
    return coerce_message(_message("tool", content, id, name, None, tool_call_id, status))


def RemoveMessage(id: str) -> dict:  # noqa: N802, A002
    """A marker removing the message `id` (all, with `REMOVE_ALL_MESSAGES`)."""
    return coerce_message({"type": "remove", "id": id})


def _text_field(item: dict, key: str) -> Optional[str]:
    value = item.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{key} must be a string, not {_kind(value)}")


def _tool_calls(calls: Any) -> List[dict]:
    if not isinstance(calls, (list, tuple)):
        raise ValueError(f"tool_calls: invalid type: {_kind(calls)}, expected a sequence")
    out = []
    for call in calls:
        if not isinstance(call, dict):
            raise ValueError(f"tool_calls: invalid type: {_kind(call)}, expected struct ToolCall")
        for key in ("id", "name", "args"):
            if key not in call:
                raise ValueError(f"tool_calls: missing field `{key}`")
        for key in ("id", "name"):
            if not isinstance(call[key], str):
                raise ValueError(f"tool_calls: invalid type: {_kind(call[key])}, expected a string")
        out.append({"id": call["id"], "name": call["name"], "args": call["args"]})
    return out


def coerce_message(item: Any) -> dict:
    """One message as `add_messages` accepts it: a string (a user message),
    a `[role, content]` pair, or a dict with `type` or `role` and
    `content`. Raises ValueError saying why `item` is not a message."""
    if isinstance(item, str):
        return _message("human", item)
    if isinstance(item, (list, tuple)):
        if len(item) != 2 or not all(isinstance(v, str) for v in item):
            raise ValueError("a [role, content] pair needs exactly two strings")
        role, content = item
        kind = _TYPES.get(role)
        if kind == "tool":
            raise ValueError("a [role, content] pair cannot make a tool message (it needs a tool_call_id)")
        if kind in (None, "remove"):
            raise ValueError(f"unknown role {_quote(role)}")
        return _message(kind, content)
    if not isinstance(item, dict):
        raise ValueError(
            "expected a message (a string, a [role, content] pair or an object with type and "
            f"content), not {_kind(item)}"
        )
    type_, role = _text_field(item, "type"), _text_field(item, "role")
    role = type_ if type_ is not None else role
    if role is None:
        raise ValueError("a message object needs a type or role")
    kind = _TYPES.get(role)
    if kind is None:
        raise ValueError(f"unknown type {_quote(role)}")
    id = _text_field(item, "id")  # noqa: A001
    if kind == "remove":
        if id is None:
            raise ValueError("a remove marker needs an id")
        return _message("remove", "", id)
    content = _text_field(item, "content")
    if content is None:
        raise ValueError("a message object needs a string content")
    name = _text_field(item, "name")
    calls = item.get("tool_calls")
    tool_calls = _tool_calls(calls) if kind == "ai" and calls is not None else None
    tool_call_id = status = None
    if kind == "tool":
        tool_call_id = _text_field(item, "tool_call_id")
        if tool_call_id is None:
            raise ValueError("a tool message needs a tool_call_id")
        status = _text_field(item, "status") or "success"
        if status not in ("success", "error"):
            raise ValueError(f"status must be success or error, not {_quote(status)}")
    return _message(kind, content, id, name, tool_calls, tool_call_id, status)


def _quote(text: str) -> str:
    """`"text"`, quoted as Rust's `{:?}` quotes a plain string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def coerce_messages(value: Any) -> List[dict]:
    """One side of `add_messages` as message dicts: None is empty, a
    non-list one item (so put a lone `[role, content]` pair in a list).
    Raises ValueError naming the first bad item's index."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        try:
            out.append(coerce_message(item))
        except ValueError as error:
            raise ValueError(f"message {i}: {error}") from None
    return out


def add_messages(left: Any, right: Any) -> List[dict]:
    """Merges `right` into `left`, LangGraph's `add_messages` with
    deterministic ids: a message whose id is in `left` replaces it in
    place, a new one is appended, a remove marker deletes its id (an
    unknown id is an error), and one with `REMOVE_ALL_MESSAGES` keeps only
    what follows it. A message without an id gets `msg-<n>`, `n` counting
    from `left`'s length and skipping ids in use."""
    left = coerce_messages(left)
    right = coerce_messages(right)
    used = {m["id"] for m in left + right if m.get("id") is not None}
    n = len(left)
    for message in right:
        if message.get("id") is None:
            while f"msg-{n}" in used:
                n += 1
            message["id"] = f"msg-{n}"
            used.add(message["id"])
            n += 1
            _reorder(message)
    clears = [i for i, m in enumerate(right) if m["type"] == "remove" and m["id"] == REMOVE_ALL_MESSAGES]
    if clears:
        left, right = [], right[clears[-1] + 1 :]
    merged = list(left)
    at = {}
    for i, m in enumerate(merged):
        if m.get("id") is not None:
            at.setdefault(m["id"], i)
    removed = set()
    for message in right:
        id = message["id"]  # noqa: A001
        if message["type"] == "remove":
            if id not in at:
                raise ValueError(f"attempting to delete a message with an id that doesn't exist ('{id}')")
            removed.add(id)
        elif id in at:
            removed.discard(id)
            merged[at[id]] = message
        else:
            at[id] = len(merged)
            merged.append(message)
    return [m for m in merged if m.get("id") not in removed]


def _reorder(message: dict) -> None:
    """Puts a just-given `id` in its place, after `content`."""
    rest = {k: message.pop(k) for k in list(message) if k not in ("type", "content", "id")}
    message.update(rest)


class MessagesState(TypedDict):
    """A state with one channel, `messages`: a list of message dicts,
    starting empty, merged by `add_messages` (run in the graph). Subclass
    it to add keys."""

    messages: Annotated[list, add_messages]
