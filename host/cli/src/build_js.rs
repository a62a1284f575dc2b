//! `sandgraph build` for a JavaScript graph (componentize-js); being built (issue 15).

use std::path::Path;

use crate::exit::Failure;

/// Builds the JavaScript graph in `dir` into component bytes.
pub fn build(dir: &Path, _debug: bool) -> Result<Vec<u8>, Failure> {
    Err(Failure::build(format!(
        "{} is a JavaScript graph, and building JavaScript graphs is not supported yet",
        dir.display()
    )))
}
