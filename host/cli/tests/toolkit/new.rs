//! Tests of `sandgraph new`, the SDK's packaging and `sandgraph build`'s
//! small, reproducible output (see ../toolkit.rs).

use std::path::{Path, PathBuf};

/// The repository root (host/cli/../..).
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The SDK binds to its own copy of the WIT world (guest-sdk/wit), so the
/// published crate builds alone; the copy must be wit/'s files, byte for
/// byte, and nothing else.
#[test]
fn the_sdk_packages_the_same_wit_as_the_host() {
    let repo = repo();
    let wit_files = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "wit"))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let host = wit_files(&repo.join("wit"));
    let sdk = wit_files(&repo.join("guest-sdk/wit"));
    assert!(!host.is_empty());
    assert_eq!(
        host, sdk,
        "guest-sdk/wit must hold exactly the .wit files of wit/: copy them with \
         `cp wit/*.wit guest-sdk/wit/`"
    );
    for name in &host {
        let a = std::fs::read(repo.join("wit").join(name)).unwrap();
        let b = std::fs::read(repo.join("guest-sdk/wit").join(name)).unwrap();
        assert!(
            a == b,
            "guest-sdk/wit/{name} differs from wit/{name}: copy it with \
             `cp wit/{name} guest-sdk/wit/{name}`"
        );
    }
}
