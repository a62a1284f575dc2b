//! The controller's integration tests, one test binary (one link instead
//! of one per file, as wasmtime's `tests/all`): each former
//! `tests/<name>.rs` is a module here, so a test is named `<module>::<test>`.
//! `agent_graph` runs on PostgreSQL too, on `fixture`'s throwaway cluster.

mod common;

mod agent_graph;
mod format;
mod surface;
mod update;
mod view;
mod yield_;

#[allow(dead_code)]
#[path = "../../../../tests/src/postgres.rs"]
mod fixture;
