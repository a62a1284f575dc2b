//! Why an artifact's text is not well formed: a digest, a key file, a lock
//! file or a signature sidecar. Each case's text is the lowercase sentence
//! a person reads; [`crate::ArtifactError`] adds the file it came from.

/// A malformed digest, key, lock or signature text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// A digest that is not 64 hex digits (the text, escaped and cut).
    #[error("\"{0}\" is not a sha256 digest (64 hex digits)")]
    NotADigest(String),
    /// A key file whose first line is not the expected header; `hint`
    /// says when it is the other kind of key.
    #[error(
        "not a sandgraph {what}: the first line should be \"{header}\"{hint}; make one with \
         `sandgraph keygen`"
    )]
    KeyHeader {
        /// "public key file" or "secret key file".
        what: &'static str,
        /// The header expected.
        header: &'static str,
        /// ` (it is a secret key)` and the like, or empty.
        hint: String,
    },
    /// A key file whose key line is not 64 hex digits.
    #[error("malformed {what}: the second line should be 64 hex digits")]
    KeyHex {
        /// "public key file" or "secret key file".
        what: &'static str,
    },
    /// A key file with more text after its key.
    #[error("malformed {what}: unexpected text after the key")]
    KeyTrailing {
        /// "public key file" or "secret key file".
        what: &'static str,
    },
    /// Public key bytes that are not a point of the curve.
    #[error("malformed public key file: the key is not a valid ed25519 key")]
    KeyNotOnCurve,
    /// The operating system's random source failed.
    #[error("cannot get random bytes: {0}")]
    Random(String),
    /// A lock that pins one file twice.
    #[error("\"{0}\" is pinned twice")]
    PinnedTwice(String),
    /// A lock entry whose file is not a plain `*.wasm` name (escaped, cut).
    #[error("\"{0}\" is not a component file name (a plain *.wasm name in the folder)")]
    FileName(String),
    /// A lock file that is not TOML of the lock's shape.
    #[error("not a valid lock file: {0}")]
    LockSyntax(String),
    /// A lock file of another version.
    #[error(
        "lock file version {found} is not supported (this sandgraph reads version \
         {supported}); write it again with `sandgraph lock`"
    )]
    LockVersion {
        /// The version the file has.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A lock entry whose digest is malformed.
    #[error("graph \"{file}\": sha256: {source}")]
    EntryDigest {
        /// The entry's file, escaped.
        file: String,
        /// What is wrong with its digest.
        source: Box<FormatError>,
    },
    /// A sidecar that is not JSON of the sidecar's shape.
    #[error("not a sandgraph signature file: {0}")]
    SidecarSyntax(String),
    /// A sidecar of another version.
    #[error(
        "signature file version {found} is not supported (this sandgraph reads version \
         {supported})"
    )]
    SidecarVersion {
        /// The version the file has.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// A sidecar's algorithm other than ed25519 (escaped, cut).
    #[error("algorithm \"{found}\" is not supported (only \"{supported}\")")]
    Algorithm {
        /// The algorithm the file names.
        found: String,
        /// The one this build verifies.
        supported: &'static str,
    },
    /// A sidecar field holding a malformed digest.
    #[error("{field}: {source}")]
    Field {
        /// `key_id` or `sha256`.
        field: &'static str,
        /// What is wrong with it.
        source: Box<FormatError>,
    },
    /// A sidecar whose signature is not 128 hex digits.
    #[error("signature: not an ed25519 signature (128 hex digits)")]
    SignatureHex,
}
