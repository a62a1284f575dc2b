//! The `sandgraph` command line's integration tests, one test binary (one
//! link of wasmtime instead of one per file, as wasmtime's `tests/all`):
//! each former `tests/<name>.rs` is a module here, so a test is named
//! `<module>::<test>`, e.g. `cargo test -p sandgraph-cli --test all threads::`.
//! Their shared setup is `common`: the working folder most tests run
//! `sandgraph` in (with a compile cache that starts warm), and the folders
//! of the tests that build graph crates.

mod cli;
mod common;
mod crash;
mod discovered_config;
mod docs;
mod mcp_controller;
mod mcp_http;
mod mcp_stdio;
mod mcp_ts_e2e;
mod route;
mod studio;
mod studio_api;
mod supervise;
mod threads;
mod toolkit;
mod tools;
