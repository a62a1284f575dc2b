//! The store's integration tests, one test binary (one link instead of
//! one per file, as wasmtime's `tests/all`): each former `tests/<name>.rs`
//! is a module here, so a test is named `<module>::<test>`. The modules
//! that run on PostgreSQL share `fixture` and so one throwaway cluster.

mod open;
mod postgres;
mod tables;
mod threads;

#[allow(dead_code)]
#[path = "../../../../tests/src/postgres.rs"]
mod fixture;
