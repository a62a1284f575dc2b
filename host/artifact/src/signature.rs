//! Signatures of components: an ed25519 signature over the component's
//! sha256 and the graph name it vouches for, in a sidecar file next to it.
//!
//! `sandgraph sign echo.wasm --key KEY` writes `echo.wasm.sig`, a JSON
//! document:
//!
//! ```json
//! {
//!   "version": 2,
//!   "algorithm": "ed25519",
//!   "key_id": "<sha256 of the signer's 32 public key bytes, hex>",
//!   "sha256": "<sha256 of the component's bytes, hex>",
//!   "name": "<the graph name the signer vouches for>",
//!   "signature": "<the 64-byte ed25519 signature, hex>"
//! }
//! ```
//!
//! The signed message is [`SIGNED_PREFIX`], the 32 digest bytes, then the
//! graph name's bytes; the prefix keeps a sandgraph signature from being
//! valid for anything else signed with the same key, and the name keeps a
//! signature from vouching for bytes under a name the signer never saw (a
//! host mounting a signed graph checks that the graph is named as signed).
//! The component itself is never changed, so its digest (and a lock file
//! pinning it) stays the same.
//!
//! Version 1 sidecars (written before signatures covered the name) are
//! refused with [`Refusal::Outdated`], saying to sign again: a signature
//! that does not say which graph it vouches for cannot be checked against
//! the name the graph is mounted under.
//!
//! Verifying a component against [`TrustedKeys`] checks, in order: the
//! sidecar exists and parses; its `sha256` is the component's (else the
//! component was changed after signing); its key is trusted; the signature
//! verifies (strict ed25519 verification, which refuses malleable
//! signatures and weak keys).

use std::fmt;
use std::path::{Path, PathBuf};

use ed25519_dalek::{Signature, Signer};
use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::keys::{KeyId, SecretKey, TrustedKeys};
use crate::{ArtifactError, FormatError, MAX_SIGNATURE_FILE, read_bounded, signature_path};

/// The sidecar format written and read.
pub const SIGNATURE_VERSION: u32 = 2;

/// The only algorithm.
pub const ALGORITHM: &str = "ed25519";

/// Prepended to the digest bytes and the graph name to form the signed
/// message (domain separation; `v2` since the name is signed too).
pub const SIGNED_PREFIX: &[u8] = b"sandgraph-graph-signature-v2:";

/// A parsed signature sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// The signer's key id.
    pub key_id: KeyId,
    /// The digest signed.
    pub sha256: Digest,
    /// The graph name signed.
    pub name: String,
    /// The ed25519 signature.
    pub signature: [u8; 64],
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSidecar {
    version: u32,
    algorithm: String,
    key_id: String,
    sha256: String,
    name: String,
    signature: String,
}

/// Only the version of a sidecar, read first so an older one is refused
/// as outdated rather than as malformed.
#[derive(Deserialize)]
struct RawVersion {
    version: u32,
}

/// A component whose signature checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The signer's key id.
    pub key_id: KeyId,
    /// The trusted public key file it matched.
    pub key_file: PathBuf,
    /// The component's digest.
    pub sha256: Digest,
    /// The graph name the signer vouches for: the graph must be mounted
    /// under it.
    pub name: String,
}

/// Why a component's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No sidecar.
    Unsigned,
    /// The sidecar is unreadable, oversized or does not parse.
    Malformed,
    /// The sidecar is of an older version, which does not sign the graph
    /// name: the component must be signed again.
    Outdated,
    /// The sidecar signs another digest: the component changed.
    Tampered,
    /// The signer's key is not trusted.
    UnknownKey,
    /// The signature does not verify with the key it names.
    BadSignature,
}

/// A refused signature: why, and the sentence that says it (naming the
/// component or sidecar, and what to do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureError {
    /// Why.
    pub refusal: Refusal,
    /// The error, with the file it concerns.
    pub error: ArtifactError,
}

impl fmt::Display for SignatureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for SignatureError {}

/// The signed message: the prefix, the 32 digest bytes (fixed length, so
/// the name that follows cannot be shifted into them), the name.
fn message(digest: &Digest, name: &str) -> Vec<u8> {
    [SIGNED_PREFIX, &digest.0, name.as_bytes()].concat()
}

impl Sidecar {
    /// Signs `digest` as the component of the graph `name` with `key`.
    pub fn sign(key: &SecretKey, digest: Digest, name: &str) -> Sidecar {
        Sidecar {
            key_id: key.public().id(),
            sha256: digest,
            name: name.to_owned(),
            signature: key.0.sign(&message(&digest, name)).to_bytes(),
        }
    }

    /// The JSON text of the sidecar.
    pub fn to_json(&self) -> String {
        let raw = RawSidecar {
            version: SIGNATURE_VERSION,
            algorithm: ALGORITHM.into(),
            key_id: self.key_id.to_string(),
            sha256: self.sha256.to_hex(),
            name: self.name.clone(),
            signature: hex::encode(self.signature),
        };
        // Strings and integers always serialize.
        let mut text = serde_json::to_string_pretty(&raw).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Parses the bytes of a sidecar.
    ///
    /// # Errors
    ///
    /// Not JSON, an unknown field, another version or algorithm, malformed
    /// hex.
    pub fn parse(bytes: &[u8]) -> Result<Sidecar, FormatError> {
        let syntax = |e: serde_json::Error| FormatError::SidecarSyntax(e.to_string());
        let version = |found| FormatError::SidecarVersion {
            found,
            supported: SIGNATURE_VERSION,
        };
        let first: RawVersion = serde_json::from_slice(bytes).map_err(syntax)?;
        if first.version != SIGNATURE_VERSION {
            return Err(version(first.version));
        }
        let raw: RawSidecar = serde_json::from_slice(bytes).map_err(syntax)?;
        if raw.version != SIGNATURE_VERSION {
            return Err(version(raw.version));
        }
        if raw.algorithm != ALGORITHM {
            return Err(FormatError::Algorithm {
                found: raw.algorithm.escape_debug().take(80).collect(),
                supported: ALGORITHM,
            });
        }
        let field = |field| {
            move |m| FormatError::Field {
                field,
                source: Box::new(m),
            }
        };
        let key_id = raw.key_id.parse().map_err(field("key_id"))?;
        let sha256 = raw.sha256.parse().map_err(field("sha256"))?;
        let mut signature = [0u8; 64];
        if raw.signature.len() != 128
            || hex::decode_to_slice(&raw.signature, &mut signature).is_err()
        {
            return Err(FormatError::SignatureHex);
        }
        Ok(Sidecar {
            key_id: KeyId(key_id),
            sha256,
            name: raw.name,
            signature,
        })
    }

    /// Reads the sidecar file `path`.
    ///
    /// # Errors
    ///
    /// Unreadable, larger than [`MAX_SIGNATURE_FILE`], or malformed.
    pub fn read(path: &Path) -> Result<Sidecar, ArtifactError> {
        let bytes = read_bounded(path, MAX_SIGNATURE_FILE, "signature file")?;
        Self::parse(&bytes).map_err(|m| ArtifactError::new(path, format!("malformed: {m}")))
    }

    /// Writes the sidecar of `component` (replacing an older signature);
    /// returns its path.
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write_for(&self, component: &Path) -> Result<PathBuf, ArtifactError> {
        let path = signature_path(component);
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let fail = |e: std::io::Error| ArtifactError::new(&path, format!("cannot write: {e}"));
        std::fs::write(&tmp, self.to_json()).map_err(fail)?;
        std::fs::rename(&tmp, &path).map_err(fail)?;
        Ok(path)
    }
}

/// Checks the signature of the component at `component`, whose bytes have
/// the digest `digest`, against `trusted`.
///
/// # Errors
///
/// The [`Refusal`] and a sentence naming the file and what to do.
pub fn verify(
    component: &Path,
    digest: &Digest,
    trusted: &TrustedKeys,
) -> Result<Verified, SignatureError> {
    let sidecar_path = signature_path(component);
    let sidecar = read_sidecar(component, &sidecar_path)?;
    let refuse = |refusal, path: &Path, message: String| SignatureError {
        refusal,
        error: ArtifactError::new(path, message),
    };
    if sidecar.sha256 != *digest {
        return Err(refuse(
            Refusal::Tampered,
            component,
            format!(
                "changed after it was signed: its sha256 is {digest} but {} signs {}",
                sidecar_path.display(),
                sidecar.sha256
            ),
        ));
    }
    let Some((key, key_file)) = trusted.get(&sidecar.key_id) else {
        return Err(refuse(
            Refusal::UnknownKey,
            component,
            format!(
                "signed by key {}, which is not trusted (trusted keys: {}); add the signer's \
                 KEY.pub to the trusted keys if you trust it",
                sidecar.key_id,
                trusted.sources()
            ),
        ));
    };
    let signature = Signature::from_bytes(&sidecar.signature);
    if key
        .0
        .verify_strict(&message(digest, &sidecar.name), &signature)
        .is_err()
    {
        return Err(refuse(
            Refusal::BadSignature,
            component,
            format!(
                "the signature in {} does not verify with key {} ({}): the signature file was \
                 altered; sign the component again",
                sidecar_path.display(),
                sidecar.key_id,
                key_file.display()
            ),
        ));
    }
    Ok(Verified {
        key_id: sidecar.key_id,
        key_file: key_file.to_path_buf(),
        sha256: *digest,
        name: sidecar.name,
    })
}

/// The signature sidecar of `component` at `sidecar_path`, refused when
/// there is none, when it is of an older version, or when it is malformed.
fn read_sidecar(component: &Path, sidecar_path: &Path) -> Result<Sidecar, SignatureError> {
    let refuse = |refusal, message: String| SignatureError {
        refusal,
        error: ArtifactError::new(component, message),
    };
    if !sidecar_path.exists() {
        return Err(refuse(
            Refusal::Unsigned,
            format!(
                "not signed: there is no {} next to it; sign it with `sandgraph sign {} --key KEY`",
                sidecar_path.display(),
                component.display()
            ),
        ));
    }
    if let Some(version) = outdated(sidecar_path) {
        return Err(refuse(
            Refusal::Outdated,
            format!(
                "{} is a version {version} signature, which does not cover the graph name; sign \
                 it again with `sandgraph sign {} --key KEY`",
                sidecar_path.display(),
                component.display()
            ),
        ));
    }
    Sidecar::read(sidecar_path).map_err(|error| SignatureError {
        refusal: Refusal::Malformed,
        error,
    })
}

/// The version of the sidecar at `path` when it is an older one (1, which
/// signs the digest alone).
fn outdated(path: &Path) -> Option<u32> {
    let bytes = read_bounded(path, MAX_SIGNATURE_FILE, "signature file").ok()?;
    let raw: RawVersion = serde_json::from_slice(&bytes).ok()?;
    (raw.version < SIGNATURE_VERSION).then_some(raw.version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256;

    struct Fixture {
        _dir: tempfile::TempDir,
        component: PathBuf,
        digest: Digest,
        key: SecretKey,
        trusted: TrustedKeys,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let component = dir.path().join("echo.wasm");
        std::fs::write(&component, b"\0asm component").unwrap();
        let key = SecretKey::generate().unwrap();
        let keys = dir.path().join("keys");
        std::fs::create_dir(&keys).unwrap();
        key.write_pair(&keys.join("ci")).unwrap();
        let trusted = TrustedKeys::from_dir(&keys).unwrap();
        Fixture {
            digest: sha256(b"\0asm component"),
            _dir: dir,
            component,
            key,
            trusted,
        }
    }

    fn refusal(f: &Fixture, digest: &Digest) -> Refusal {
        verify(&f.component, digest, &f.trusted)
            .unwrap_err()
            .refusal
    }

    #[test]
    fn a_signed_component_verifies_with_its_key() {
        let f = fixture();
        let written = Sidecar::sign(&f.key, f.digest, "echo_graph")
            .write_for(&f.component)
            .unwrap();
        assert_eq!(written, signature_path(&f.component));
        let ok = verify(&f.component, &f.digest, &f.trusted).unwrap();
        assert_eq!(ok.key_id, f.key.public().id());
        assert!(ok.key_file.ends_with("keys/ci.pub"));
        let text = std::fs::read_to_string(&written).unwrap();
        assert!(text.contains("\"algorithm\": \"ed25519\""), "{text}");
        assert_eq!(Sidecar::parse(text.as_bytes()).unwrap().sha256, f.digest);
    }

    #[test]
    fn unsigned_tampered_unknown_and_forged_are_each_refused() {
        let f = fixture();
        assert_eq!(refusal(&f, &f.digest), Refusal::Unsigned);
        let err = verify(&f.component, &f.digest, &f.trusted).unwrap_err();
        assert!(err.to_string().contains("sandgraph sign"), "{err}");

        Sidecar::sign(&f.key, f.digest, "echo_graph")
            .write_for(&f.component)
            .unwrap();
        assert_eq!(refusal(&f, &sha256(b"other bytes")), Refusal::Tampered);

        let stranger = SecretKey::generate().unwrap();
        Sidecar::sign(&stranger, f.digest, "echo_graph")
            .write_for(&f.component)
            .unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::UnknownKey);

        // A signature by another key, relabelled with the trusted key's id.
        let mut forged = Sidecar::sign(&stranger, f.digest, "echo_graph");
        forged.key_id = f.key.public().id();
        forged.write_for(&f.component).unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::BadSignature);

        // A signature of another digest, relabelled with this digest.
        let mut moved = Sidecar::sign(&f.key, sha256(b"other bytes"), "echo_graph");
        moved.sha256 = f.digest;
        moved.write_for(&f.component).unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::BadSignature);
    }

    #[test]
    fn the_signature_covers_the_name_it_vouches_for() {
        let f = fixture();
        let signed = Sidecar::sign(&f.key, f.digest, "echo_graph");
        signed.write_for(&f.component).unwrap();
        let ok = verify(&f.component, &f.digest, &f.trusted).unwrap();
        assert_eq!(ok.name, "echo_graph");
        // The same signature relabelled with another name does not verify.
        let mut renamed = signed.clone();
        renamed.name = "research".into();
        renamed.write_for(&f.component).unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::BadSignature);
        // Name bytes cannot be shifted into the digest: a signature of
        // "echo_graph" is not one of "echo_grap" + "h".
        assert_ne!(
            message(&f.digest, "echo_graph"),
            message(&f.digest, "echo_grap")
        );
    }

    #[test]
    fn a_version_1_signature_is_refused_saying_to_sign_again() {
        let f = fixture();
        // What `sandgraph sign` wrote before signatures covered the name:
        // the digest alone, under the v1 prefix.
        let v1 = [b"sandgraph-graph-signature-v1:".as_slice(), &f.digest.0].concat();
        let text = serde_json::json!({
            "version": 1,
            "algorithm": "ed25519",
            "key_id": f.key.public().id().to_string(),
            "sha256": f.digest.to_hex(),
            "signature": hex::encode(f.key.0.sign(&v1).to_bytes()),
        });
        std::fs::write(signature_path(&f.component), text.to_string()).unwrap();
        let err = verify(&f.component, &f.digest, &f.trusted).unwrap_err();
        assert_eq!(err.refusal, Refusal::Outdated, "{err}");
        assert_eq!(err.error.path, f.component);
        let text = err.to_string();
        assert!(
            text.contains("is a version 1 signature, which does not cover the graph name")
                && text.contains("sign it again with `sandgraph sign"),
            "{text}"
        );
    }

    #[test]
    fn malformed_and_oversized_sidecars_are_refused() {
        let f = fixture();
        let sidecar = signature_path(&f.component);
        let good = Sidecar::sign(&f.key, f.digest, "echo_graph").to_json();
        let cases = [
            "not json".to_owned(),
            good.replace("\"ed25519\"", "\"rsa\""),
            good.replace("\"version\": 2", "\"version\": 9"),
            good.replace("\"signature\": \"", "\"signature\": \"zz"),
            " ".repeat(MAX_SIGNATURE_FILE + 1),
        ];
        for text in cases {
            std::fs::write(&sidecar, &text).unwrap();
            let err = verify(&f.component, &f.digest, &f.trusted).unwrap_err();
            assert_eq!(err.refusal, Refusal::Malformed, "{err}");
            assert_eq!(err.error.path, sidecar);
        }
    }
}
