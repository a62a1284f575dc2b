//! The author and CI toolkit, end to end through the `sandgraph` binary:
//! `new`, `build`, `test`, `check`, `lock`, `sign`/`verify`, `push`/`pull`.
//! One test binary; each command's tests are a module.

#[path = "toolkit/check.rs"]
mod check;
#[path = "toolkit/golden.rs"]
mod golden;
#[path = "toolkit/new.rs"]
mod new;
#[path = "toolkit/oci.rs"]
mod oci;
#[path = "toolkit/sign.rs"]
mod sign;
