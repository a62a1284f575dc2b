//! The author and CI toolkit, end to end through the `sandgraph` binary:
//! `new`, `build`, `test`, `check`, `lock`, `sign`/`verify`, `push`/`pull`,
//! and the conformance of the Rust, Python and JavaScript examples.
//! One test binary; each command's tests are a module, and `acceptance`
//! walks the whole path from `sandgraph new` to a served graph.

#[path = "toolkit/acceptance.rs"]
mod acceptance;
#[path = "toolkit/check.rs"]
mod check;
#[path = "toolkit/conformance.rs"]
mod conformance;
#[path = "toolkit/golden.rs"]
mod golden;
#[path = "toolkit/js.rs"]
mod js;
#[path = "toolkit/new.rs"]
mod new;
#[path = "toolkit/oci.rs"]
mod oci;
#[path = "toolkit/python.rs"]
mod python;
#[path = "toolkit/sign.rs"]
mod sign;
