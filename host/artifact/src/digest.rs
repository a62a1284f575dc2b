//! The sha256 of a component's bytes: what the lock pins and a signature
//! covers.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::FormatError;

use sha2::Digest as _;

/// A sha256 digest. Displayed and parsed as 64 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

/// The sha256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> Digest {
    Digest(sha2::Sha256::digest(bytes).into())
}

/// The sha256 of the file at `path`, read as a stream (any size: nothing
/// is held in memory).
///
/// # Errors
///
/// The file cannot be read.
pub fn sha256_file(path: &Path) -> Result<Digest, crate::ArtifactError> {
    let fail = |e: std::io::Error| crate::ArtifactError::new(path, format!("cannot read: {e}"));
    let mut file = std::fs::File::open(path).map_err(fail)?;
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(fail)?;
    Ok(Digest(hasher.finalize().into()))
}

impl Digest {
    /// The 64 lowercase hex digits.
    pub(crate) fn to_hex(self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl FromStr for Digest {
    type Err = FormatError;

    /// 64 hex digits (either case).
    fn from_str(s: &str) -> Result<Self, FormatError> {
        let mut out = [0u8; 32];
        if s.len() != 64 || hex::decode_to_slice(s, &mut out).is_err() {
            return Err(FormatError::NotADigest(s.escape_debug().take(80).collect()));
        }
        Ok(Digest(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_of_nothing_is_the_known_one() {
        assert_eq!(
            sha256(b"").to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn a_file_hashes_as_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.wasm");
        std::fs::write(&path, b"component bytes").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), sha256(b"component bytes"));
        let err = sha256_file(&dir.path().join("absent.wasm")).unwrap_err();
        assert!(err.message.starts_with("cannot read"), "{err}");
    }

    #[test]
    fn hex_round_trips_and_garbage_is_refused() {
        let d = sha256(b"graph");
        assert_eq!(d.to_hex().parse::<Digest>().unwrap(), d);
        assert_eq!(d.to_hex().to_uppercase().parse::<Digest>().unwrap(), d);
        assert!(
            "abc"
                .parse::<Digest>()
                .unwrap_err()
                .to_string()
                .contains("64 hex digits")
        );
        assert!("zz".repeat(32).parse::<Digest>().is_err());
    }
}
