"""`langgraph.checkpoint`: not offered, the host owns checkpoints and
thread state (see `sandgraph.checkpoint.memory`)."""
