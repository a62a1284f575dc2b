//! Shipping graph components through OCI registries.
//!
//! A graph component is pushed as a CNCF WebAssembly OCI artifact (the
//! layout `wkg` and Wassette use; see [`layout`]): an OCI image manifest,
//! a `application/vnd.wasm.config.v0+json` config and one
//! `application/wasm` layer holding the component's bytes. A signature
//! sidecar rides along as the manifest annotation
//! [`layout::SIGNATURE_ANNOTATION`].
//!
//! [`Remote::pull`] trusts nothing the registry says: the manifest is read
//! under [`MAX_MANIFEST_BYTES`] and hashed (and must hash to the
//! reference's digest when the reference is pinned, `@sha256:...`), must be
//! this layout, and names sizes that are checked against
//! [`MAX_COMPONENT_BYTES`] and [`MAX_CONFIG_BYTES`] before a byte of a blob
//! is fetched; each blob is read up to its declared size and must hash to
//! its declared digest.
//!
//! Credentials come from the docker config file ([`auth`]); plain HTTP is
//! used only for a loopback registry or when the caller asks for it
//! ([`ConnectOptions::insecure`]), HTTPS otherwise.
//!
//! The transport is [`oci_client`] (the ORAS project's client): its auth
//! handshake (basic, bearer token service), chunked uploads and blob
//! downloads. Only the manifest is fetched by this crate's own bounded
//! request, because `oci_client` reads a manifest whole, however large.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

pub mod auth;
pub mod layout;
mod remote;

pub use auth::Credentials;
pub use layout::{
    Artifact, ComponentInfo, MAX_COMPONENT_BYTES, MAX_CONFIG_BYTES, MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES, WasmConfig,
};
pub use remote::{ConnectOptions, Pulled, Pushed, Remote, is_loopback};

/// What went wrong, by kind; the message says what, where and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The reference is malformed or cannot be used for this operation.
    #[error("{0}")]
    Reference(String),
    /// The docker config could not be read or has a broken entry.
    #[error("{0}")]
    Credentials(String),
    /// The registry refused the credentials (or asked for some).
    #[error("{0}")]
    Auth(String),
    /// The registry has no such repository, tag or digest.
    #[error("{0}")]
    NotFound(String),
    /// The registry could not be reached or failed.
    #[error("{0}")]
    Transport(String),
    /// The artifact is not a wasm component artifact of this layout.
    #[error("{0}")]
    Layout(String),
    /// Content does not match its digest or declared size.
    #[error("{0}")]
    Digest(String),
    /// Something is larger than its `MAX_*` bound.
    #[error("{0}")]
    TooLarge(String),
}

impl Error {
    /// A stable snake_case name of the kind, for `error[<code>]`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Reference(_) => "invalid_reference",
            Error::Credentials(_) => "docker_config",
            Error::Auth(_) => "registry_auth",
            Error::NotFound(_) => "not_found",
            Error::Transport(_) => "registry",
            Error::Layout(_) => "not_a_wasm_artifact",
            Error::Digest(_) => "digest_mismatch",
            Error::TooLarge(_) => "too_large",
        }
    }
}

/// Longest quote of registry-supplied text kept in a message.
const MAX_QUOTE_CHARS: usize = 200;

/// `text` cut to [`MAX_QUOTE_CHARS`] characters: registry-supplied text is
/// quoted in messages, never whole.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_QUOTE_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}
