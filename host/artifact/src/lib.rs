//! Pinning and signing graph components, with no wasm runtime involved.
//!
//! - digests: the sha256 of a component's bytes, written `sha256:<hex>`;
//! - signatures: an ed25519 signature over a component's digest, carried in
//!   a sidecar file next to the component (`echo.wasm` → `echo.wasm.sig`),
//!   so signing never changes the component or its digest.

use std::path::{Path, PathBuf};

/// The file name suffix of a signature sidecar: `echo.wasm` is signed by
/// `echo.wasm.sig`.
pub const SIGNATURE_SUFFIX: &str = ".sig";

/// The largest signature sidecar read. A sidecar is a small JSON document
/// (a few hundred bytes); it is read from untrusted places (a graphs folder,
/// an OCI registry), so anything larger is refused before parsing.
pub const MAX_SIGNATURE_FILE: usize = 64 * 1024;

/// The sidecar that carries `component`'s signature: the same path with
/// `.sig` appended (`graphs/echo.wasm` → `graphs/echo.wasm.sig`).
pub fn signature_path(component: &Path) -> PathBuf {
    let mut name = component.as_os_str().to_owned();
    name.push(SIGNATURE_SUFFIX);
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sidecar_sits_next_to_the_component() {
        assert_eq!(
            signature_path(Path::new("graphs/echo.wasm")),
            PathBuf::from("graphs/echo.wasm.sig")
        );
    }
}
