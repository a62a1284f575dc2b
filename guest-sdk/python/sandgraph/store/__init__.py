"""`langgraph.store`: not offered (see `sandgraph.store.memory`)."""
