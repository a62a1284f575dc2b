//! The LLM client's integration tests, one test binary (one link instead
//! of one per file, as wasmtime's `tests/all`): each former
//! `tests/<name>.rs` is a module here, so a test is named `<module>::<test>`.
//! `tests/logging.rs` stays a binary of its own (see its header): tracing
//! caches per-callsite interest process-wide.

mod common;

mod config;
mod errors;
mod fixtures;
mod retries;
mod wire;
