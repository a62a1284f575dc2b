//! The author and CI toolkit, end to end through the `sandgraph` binary:
//! `new`, `build`, `test`, `check`, `lock`, `sign`/`verify`, `push`/`pull`,
//! and the conformance of the Rust, Python and JavaScript examples.
//! Each command's tests are a module, and `acceptance`
//! walks the whole path from `sandgraph new` to a served graph.

mod acceptance;
mod check;
mod conformance;
mod conformance_caps;
mod golden;
mod js;
mod new;
mod oci;
mod python;
mod sign;
mod workflow;

use crate::common::Env;

/// The working folder of a toolkit test: `graphs` ((file name, component
/// path) pairs) at its top, threads in `threads.redb`.
fn folder(graphs: &[(&str, &str)]) -> Env {
    Env::flat(graphs).with_db("threads.redb")
}
