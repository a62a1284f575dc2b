//! Signatures of components: an ed25519 signature over the component's
//! sha256, in a sidecar file next to it.
//!
//! `sandgraph sign echo.wasm --key KEY` writes `echo.wasm.sig`, a JSON
//! document:
//!
//! ```json
//! {
//!   "version": 1,
//!   "algorithm": "ed25519",
//!   "key_id": "<sha256 of the signer's 32 public key bytes, hex>",
//!   "sha256": "<sha256 of the component's bytes, hex>",
//!   "signature": "<the 64-byte ed25519 signature, hex>"
//! }
//! ```
//!
//! The signed message is [`SIGNED_PREFIX`] followed by the 32 digest
//! bytes; the prefix keeps a sandgraph signature from being valid for
//! anything else signed with the same key. The component itself is never
//! changed, so its digest (and a lock file pinning it) stays the same.
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
use crate::{ArtifactError, MAX_SIGNATURE_FILE, read_bounded, signature_path};

/// The sidecar format written and read.
pub const SIGNATURE_VERSION: u32 = 1;

/// The only algorithm.
pub const ALGORITHM: &str = "ed25519";

/// Prepended to the digest bytes to form the signed message (domain
/// separation).
pub const SIGNED_PREFIX: &[u8] = b"sandgraph-graph-signature-v1:";

/// A parsed signature sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sidecar {
    /// The signer's key id.
    pub key_id: KeyId,
    /// The digest signed.
    pub sha256: Digest,
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
    signature: String,
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
}

/// Why a component's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No sidecar.
    Unsigned,
    /// The sidecar is unreadable, oversized or does not parse.
    Malformed,
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

fn message(digest: &Digest) -> Vec<u8> {
    [SIGNED_PREFIX, &digest.0].concat()
}

impl Sidecar {
    /// Signs `digest` with `key`.
    pub fn sign(key: &SecretKey, digest: Digest) -> Sidecar {
        Sidecar {
            key_id: key.public().id(),
            sha256: digest,
            signature: key.0.sign(&message(&digest)).to_bytes(),
        }
    }

    /// The JSON text of the sidecar.
    pub fn to_json(&self) -> String {
        let raw = RawSidecar {
            version: SIGNATURE_VERSION,
            algorithm: ALGORITHM.into(),
            key_id: self.key_id.to_string(),
            sha256: self.sha256.to_hex(),
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
    pub fn parse(bytes: &[u8]) -> Result<Sidecar, String> {
        let raw: RawSidecar = serde_json::from_slice(bytes)
            .map_err(|e| format!("not a sandgraph signature file: {e}"))?;
        if raw.version != SIGNATURE_VERSION {
            return Err(format!(
                "signature file version {} is not supported (this sandgraph reads version \
                 {SIGNATURE_VERSION})",
                raw.version
            ));
        }
        if raw.algorithm != ALGORITHM {
            return Err(format!(
                "algorithm \"{}\" is not supported (only \"{ALGORITHM}\")",
                raw.algorithm.escape_debug().take(80).collect::<String>()
            ));
        }
        let key_id = raw.key_id.parse().map_err(|m| format!("key_id: {m}"))?;
        let sha256 = raw.sha256.parse().map_err(|m| format!("sha256: {m}"))?;
        let mut signature = [0u8; 64];
        if raw.signature.len() != 128
            || hex::decode_to_slice(&raw.signature, &mut signature).is_err()
        {
            return Err("signature: not an ed25519 signature (128 hex digits)".into());
        }
        Ok(Sidecar {
            key_id: KeyId(key_id),
            sha256,
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
    let refuse = |refusal, path: &Path, message: String| SignatureError {
        refusal,
        error: ArtifactError::new(path, message),
    };
    if !sidecar_path.exists() {
        return Err(refuse(
            Refusal::Unsigned,
            component,
            format!(
                "not signed: there is no {} next to it; sign it with `sandgraph sign {} --key KEY`",
                sidecar_path.display(),
                component.display()
            ),
        ));
    }
    let sidecar = Sidecar::read(&sidecar_path).map_err(|error| SignatureError {
        refusal: Refusal::Malformed,
        error,
    })?;
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
    if key.0.verify_strict(&message(digest), &signature).is_err() {
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
    })
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
        let written = Sidecar::sign(&f.key, f.digest)
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

        Sidecar::sign(&f.key, f.digest)
            .write_for(&f.component)
            .unwrap();
        assert_eq!(refusal(&f, &sha256(b"other bytes")), Refusal::Tampered);

        let stranger = SecretKey::generate().unwrap();
        Sidecar::sign(&stranger, f.digest)
            .write_for(&f.component)
            .unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::UnknownKey);

        // A signature by another key, relabelled with the trusted key's id.
        let mut forged = Sidecar::sign(&stranger, f.digest);
        forged.key_id = f.key.public().id();
        forged.write_for(&f.component).unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::BadSignature);

        // A signature of another digest, relabelled with this digest.
        let mut moved = Sidecar::sign(&f.key, sha256(b"other bytes"));
        moved.sha256 = f.digest;
        moved.write_for(&f.component).unwrap();
        assert_eq!(refusal(&f, &f.digest), Refusal::BadSignature);
    }

    #[test]
    fn malformed_and_oversized_sidecars_are_refused() {
        let f = fixture();
        let sidecar = signature_path(&f.component);
        let good = Sidecar::sign(&f.key, f.digest).to_json();
        let cases = [
            "not json".to_owned(),
            good.replace("\"ed25519\"", "\"rsa\""),
            good.replace("\"version\": 1", "\"version\": 9"),
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
