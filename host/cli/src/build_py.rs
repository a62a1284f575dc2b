//! `sandgraph build` for a Python graph (componentize-py); being built (issue 15).

use std::path::Path;

use crate::exit::Failure;

/// Builds the Python graph in `dir` into component bytes.
pub fn build(dir: &Path, _debug: bool) -> Result<Vec<u8>, Failure> {
    Err(Failure::build(format!(
        "{} is a Python graph, and building Python graphs is not supported yet",
        dir.display()
    )))
}
