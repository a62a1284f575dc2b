"""The reserved node names, as `langgraph.constants` spells them (and the
host too)."""

# The virtual node a run starts from: `add_edge(START, node)` adds an entry
# point.
START = "__start__"
# The virtual node a run ends at: `add_edge(node, END)` adds a finish point;
# routers and `Command(goto=...)` may name it.
END = "__end__"
