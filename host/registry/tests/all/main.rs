//! The registry's integration tests, one test binary (one link instead of
//! one per file, as wasmtime's `tests/all`): each former `tests/<name>.rs`
//! is a module here, so a test is named `<module>::<test>`.

mod common;

mod cache;
mod call;
mod identity;
mod mount;
mod watch;
