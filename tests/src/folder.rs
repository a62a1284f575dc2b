//! Folders of graph components, the setup most host tests start from: a
//! temporary folder holding copies of the built guests under the names a
//! test chooses (the registry mounts a folder, the CLI and the MCP server
//! serve one).

use std::path::Path;

use tempfile::TempDir;

/// A new temporary folder holding `graphs`, each a (file name, component
/// path) pair, e.g. `graph_folder(&[("echo_graph.wasm", ECHO)])`.
pub fn graph_folder(graphs: &[(&str, &str)]) -> TempDir {
    let dir = tempfile::tempdir().expect("a temporary folder");
    copy_graphs(dir.path(), graphs);
    dir
}

/// Copies `graphs`, each a (file name, component path) pair, into `dir`,
/// which is made when missing.
pub fn copy_graphs(dir: &Path, graphs: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    for (name, component) in graphs {
        std::fs::copy(component, dir.join(name))
            .unwrap_or_else(|e| panic!("copying {component} to {name}: {e}"));
    }
}
