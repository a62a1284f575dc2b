//! The MCP server's integration tests, one test binary (one link instead
//! of one per file, as wasmtime's `tests/all`): each former
//! `tests/<name>.rs` is a module here, so a test is named `<module>::<test>`.

mod common;

mod agent_graph;
mod http;
mod interrupts;
mod server;
