"""`greet_graph`: a tool with typed parameters, a default, an enum and an
input check.

`{"name": "Ada", "style": "formal", "times": 2, "tags": ["x"]}` ends with
`greeting: "Good day, Ada. Good day, Ada."` and `tags: ["x"]`.
"""

from typing import TypedDict

from sandgraph import END, START, StateGraph


class State(TypedDict, total=False):
    name: str
    style: str
    times: int
    tags: list[str]
    greeting: str


def greet(state: State) -> dict:
    if state["style"] == "formal":
        once = f"Good day, {state['name']}."
    elif state["style"] == "casual":
        once = f"Hey {state['name']}!"
    else:
        raise ValueError(f"style must be formal or casual, not {state['style']!r}")
    times = state.get("times", 1)
    if times < 0:
        raise ValueError("times must not be negative")
    return {"greeting": " ".join([once] * times), "tags": state.get("tags", [])}


def validate(args: dict) -> str | None:
    """Only what the parameter spec cannot say; the host has already checked
    the types."""
    times = args.get("times")
    if times is not None and times > 10:
        return "times must be at most 10"
    return None


builder = StateGraph(State)
builder.add_node("greet", greet, description="Builds the greeting.")
builder.add_edge(START, "greet")
builder.add_edge("greet", END)
graph = builder.compile(
    name="greet_graph",
    description="Greet someone, formally or casually.",
    as_tool=True,
    parameters={
        "name": {"type": "string", "required": True, "description": "The name to greet."},
        "style": {
            "type": "string",
            "required": True,
            "enum": ["formal", "casual"],
            "description": "Greeting style.",
        },
        "times": {"type": "integer", "description": "Repeat count.", "default": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Extra tags."},
    },
    validate=validate,
)
