//! Pinning and signing graph components, with no wasm runtime involved.
//!
//! - [`digest`]: the sha256 of a component's bytes, as lowercase hex.
//! - [`lock`]: `sandgraph.lock`, the graphs of one folder pinned by file
//!   name, graph name and sha256, and the check of a folder against it.
//! - [`keys`]: ed25519 key files (`sandgraph keygen`) and a set of trusted
//!   public keys (a folder of `*.pub` files).
//! - [`signature`]: an ed25519 signature over a component's digest, carried
//!   in a sidecar file next to the component (`echo.wasm` →
//!   `echo.wasm.sig`), so signing never changes the component or its
//!   digest, and a lock file written before signing stays valid.
//!
//! Every file read here may come from an untrusted place (a graphs folder,
//! an OCI registry): each is read with a named size bound and parsed
//! without panicking; errors are lowercase sentences that name the file.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

use std::io::Read;
use std::path::{Path, PathBuf};

pub mod digest;
mod error;
pub mod keys;
pub mod lock;
pub mod signature;

pub use digest::{Digest, sha256, sha256_file};
pub use error::FormatError;
pub use keys::{KeyId, PublicKey, SecretKey, TrustedKeys};
pub use lock::{LOCK_FILE, LockEntry, LockFile, LockMismatch, MismatchKind};
pub use signature::{Refusal, Sidecar, SignatureError, Verified, verify};

/// The file name suffix of a signature sidecar: `echo.wasm` is signed by
/// `echo.wasm.sig`.
pub const SIGNATURE_SUFFIX: &str = ".sig";

/// The largest signature sidecar read. A sidecar is a small JSON document
/// (about 300 bytes); it is read from untrusted places (a graphs folder,
/// an OCI registry), so anything larger is refused before parsing.
pub const MAX_SIGNATURE_FILE: usize = 64 * 1024;

/// The sidecar that carries `component`'s signature: the same path with
/// `.sig` appended (`graphs/echo.wasm` → `graphs/echo.wasm.sig`).
pub fn signature_path(component: &Path) -> PathBuf {
    let mut name = component.as_os_str().to_owned();
    name.push(SIGNATURE_SUFFIX);
    PathBuf::from(name)
}

/// A failure to read, parse, check or write an artifact file. The message
/// is lowercase, names the file and says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ArtifactError {
    /// The file concerned.
    pub path: PathBuf,
    /// What is wrong with it.
    pub message: String,
}

impl ArtifactError {
    pub(crate) fn new(path: &Path, message: impl std::fmt::Display) -> Self {
        ArtifactError {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}

/// Reads at most `max` bytes of `path`; a larger file is an error naming
/// `what` and the bound.
pub(crate) fn read_bounded(path: &Path, max: usize, what: &str) -> Result<Vec<u8>, ArtifactError> {
    read_open_bounded(open(path, what)?, path, max, what)
}

/// Opens `path` for reading; an error names `what`.
pub(crate) fn open(path: &Path, what: &str) -> Result<std::fs::File, ArtifactError> {
    std::fs::File::open(path)
        .map_err(|e| ArtifactError::new(path, format!("cannot read the {what}: {e}")))
}

/// [`read_bounded`] of a file already opened from `path`.
pub(crate) fn read_open_bounded(
    file: std::fs::File,
    path: &Path,
    max: usize,
    what: &str,
) -> Result<Vec<u8>, ArtifactError> {
    let mut bytes = Vec::new();
    file.take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| ArtifactError::new(path, format!("cannot read the {what}: {e}")))?;
    if bytes.len() > max {
        return Err(ArtifactError::new(
            path,
            format!("the {what} is larger than the {max}-byte limit"),
        ));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub(crate) fn read_text(path: &Path, max: usize, what: &str) -> Result<String, ArtifactError> {
    text(read_bounded(path, max, what)?, path, what)
}

/// The bytes read from `path` as UTF-8 text.
pub(crate) fn text(bytes: Vec<u8>, path: &Path, what: &str) -> Result<String, ArtifactError> {
    String::from_utf8(bytes)
        .map_err(|_| ArtifactError::new(path, format!("the {what} is not UTF-8 text")))
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

    #[test]
    fn a_file_over_the_bound_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'x'; 11]).unwrap();
        let err = read_bounded(&path, 10, "key file").unwrap_err();
        assert_eq!(err.path, path);
        assert!(err.message.contains("10-byte limit"), "{err}");
        assert_eq!(read_bounded(&path, 11, "key file").unwrap().len(), 11);
    }
}
