//! The core's integration tests, one test binary (one link instead of one
//! per file, as wasmtime's `tests/all`): each former `tests/<name>.rs` is a
//! module here, so a test is named `<module>::<test>`.

mod support;

mod executor;
mod threads;
