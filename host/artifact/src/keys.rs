//! ed25519 key files and the set of keys a host trusts.
//!
//! Both key files are two lines of text, a header naming the kind of key and
//! 64 lowercase hex digits (lines starting with `#` are comments):
//!
//! ```text
//! sandgraph-ed25519-secret-key
//! <the 32-byte ed25519 seed, hex>
//! ```
//!
//! ```text
//! sandgraph-ed25519-public-key
//! <the 32-byte ed25519 public key, hex>
//! ```
//!
//! `sandgraph keygen --out KEY` writes `KEY` (mode 0600) and `KEY.pub`. A
//! key's id is the sha256 of its 32 public key bytes, in hex: what a
//! signature names and what `sandgraph verify` prints.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::{SigningKey, VerifyingKey};

use crate::digest::{Digest, sha256};
use crate::{ArtifactError, FormatError, open, read_open_bounded, read_text, text};

/// The first line of a secret key file.
pub const SECRET_KEY_HEADER: &str = "sandgraph-ed25519-secret-key";
/// The first line of a public key file.
pub const PUBLIC_KEY_HEADER: &str = "sandgraph-ed25519-public-key";
/// The extension of public key files (`KEY.pub`, and the files of a
/// trusted keys folder).
pub const PUBLIC_KEY_EXTENSION: &str = "pub";

/// The largest key file read: a key file is under 100 bytes, comments
/// included; anything much larger is not a key.
pub const MAX_KEY_FILE: usize = 4096;

/// The most `*.pub` files read from a trusted keys folder: the folder is
/// read at every start, so a folder of millions of files must not stall it.
pub const MAX_TRUSTED_KEYS: usize = 1024;

/// A key's id: the sha256 of its 32 public key bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub Digest);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An ed25519 public key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey(pub(crate) VerifyingKey);

/// An ed25519 secret key. Its `Debug` shows only the key id.
pub struct SecretKey(pub(crate) SigningKey);

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SecretKey({})", self.public().id())
    }
}

/// Parses a two-line key file: `header`, then 32 bytes in hex.
fn parse_key_text(
    text: &str,
    header: &'static str,
    what: &'static str,
) -> Result<[u8; 32], FormatError> {
    let mut lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'));
    let first = lines.next().unwrap_or("");
    if first != header {
        let other = if header == SECRET_KEY_HEADER {
            PUBLIC_KEY_HEADER
        } else {
            SECRET_KEY_HEADER
        };
        let hint = if first == other {
            format!(
                " (it is a {})",
                other
                    .trim_start_matches("sandgraph-ed25519-")
                    .replace('-', " ")
            )
        } else {
            String::new()
        };
        return Err(FormatError::KeyHeader { what, header, hint });
    }
    let mut bytes = [0u8; 32];
    let key = lines.next().unwrap_or("");
    if key.len() != 64 || hex::decode_to_slice(key, &mut bytes).is_err() {
        return Err(FormatError::KeyHex { what });
    }
    if lines.next().is_some() {
        return Err(FormatError::KeyTrailing { what });
    }
    Ok(bytes)
}

impl PublicKey {
    /// The key's id.
    pub fn id(&self) -> KeyId {
        KeyId(sha256(self.0.as_bytes()))
    }

    /// The text of a public key file.
    pub(crate) fn to_text(&self) -> String {
        format!("{PUBLIC_KEY_HEADER}\n{}\n", hex::encode(self.0.as_bytes()))
    }

    /// Parses the text of a public key file.
    ///
    /// # Errors
    ///
    /// Another header, malformed hex, or bytes that are not a point of the
    /// curve.
    pub fn parse(text: &str) -> Result<PublicKey, FormatError> {
        let bytes = parse_key_text(text, PUBLIC_KEY_HEADER, "public key file")?;
        VerifyingKey::from_bytes(&bytes)
            .map(PublicKey)
            .map_err(|_| FormatError::KeyNotOnCurve)
    }

    /// Reads a public key file.
    ///
    /// # Errors
    ///
    /// Unreadable, oversized or malformed.
    pub fn read(path: &Path) -> Result<PublicKey, ArtifactError> {
        let text = read_text(path, MAX_KEY_FILE, "public key file")?;
        Self::parse(&text).map_err(|m| ArtifactError::new(path, m))
    }
}

impl SecretKey {
    /// A new key from the operating system's random source.
    ///
    /// # Errors
    ///
    /// The random source failed.
    pub fn generate() -> Result<SecretKey, FormatError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| FormatError::Random(e.to_string()))?;
        Ok(SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// The public half.
    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// The text of a secret key file.
    pub(crate) fn to_text(&self) -> String {
        format!("{SECRET_KEY_HEADER}\n{}\n", hex::encode(self.0.to_bytes()))
    }

    /// Parses the text of a secret key file.
    ///
    /// # Errors
    ///
    /// Another header (a public key, say), or malformed hex.
    pub fn parse(text: &str) -> Result<SecretKey, FormatError> {
        parse_key_text(text, SECRET_KEY_HEADER, "secret key file")
            .map(|seed| SecretKey(SigningKey::from_bytes(&seed)))
    }

    /// Reads a secret key file. On Unix the file must be private, as
    /// `sandgraph keygen` writes it: a file that its group or others may
    /// read or write is refused, naming its mode and the `chmod` that fixes
    /// it. The mode checked is the one of the file opened (through a
    /// symlink, the file it points to), so it cannot change in between.
    ///
    /// # Errors
    ///
    /// Unreadable, open to others, oversized or malformed.
    pub fn read(path: &Path) -> Result<SecretKey, ArtifactError> {
        const WHAT: &str = "secret key file";
        let file = open(path, WHAT)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = file
                .metadata()
                .map_err(|e| ArtifactError::new(path, format!("cannot read the {WHAT}: {e}")))?;
            let mode = meta.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(ArtifactError::new(
                    path,
                    format!(
                        "the {WHAT} has mode {:04o}, so its group or others may read or write \
                         it; make it private with `chmod 600 {}`",
                        mode & 0o7777,
                        path.display()
                    ),
                ));
            }
        }
        let text = text(
            read_open_bounded(file, path, MAX_KEY_FILE, WHAT)?,
            path,
            WHAT,
        )?;
        Self::parse(&text).map_err(|m| ArtifactError::new(path, m))
    }

    /// Writes the key to `out` (mode 0600 on Unix) and its public half to
    /// `out.pub`; neither may exist. Returns the public key's path.
    ///
    /// # Errors
    ///
    /// Either file exists (nothing is written), or cannot be written.
    pub fn write_pair(&self, out: &Path) -> Result<PathBuf, ArtifactError> {
        let public = public_key_path(out);
        for path in [out, public.as_path()] {
            if path.exists() {
                return Err(ArtifactError::new(
                    path,
                    "already exists: a key is never overwritten; choose another --out or remove \
                     the old key first",
                ));
            }
        }
        write_new(out, self.to_text().as_bytes(), 0o600)?;
        write_new(&public, self.public().to_text().as_bytes(), 0o644)?;
        Ok(public)
    }
}

/// `KEY.pub` for the secret key file `KEY`.
pub(crate) fn public_key_path(secret: &Path) -> PathBuf {
    let mut name = secret.as_os_str().to_owned();
    name.push(".");
    name.push(PUBLIC_KEY_EXTENSION);
    PathBuf::from(name)
}

/// Creates `path` (which must not exist) with `bytes`, with `mode` on Unix.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), ArtifactError> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let fail = |e: std::io::Error| ArtifactError::new(path, format!("cannot write the key: {e}"));
    let mut file = options.open(path).map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)
}

/// The public keys a host or `sandgraph verify` trusts, by id, each with
/// the file it came from.
#[derive(Debug, Clone, Default)]
pub struct TrustedKeys {
    keys: BTreeMap<KeyId, (PublicKey, PathBuf)>,
    sources: Vec<PathBuf>,
}

impl TrustedKeys {
    /// No keys.
    pub fn new() -> TrustedKeys {
        TrustedKeys::default()
    }

    /// The `*.pub` files of `dir` (not recursive).
    ///
    /// # Errors
    ///
    /// The folder cannot be read, holds more than [`MAX_TRUSTED_KEYS`]
    /// key files, holds none, or one of them is not a public key file.
    pub fn from_dir(dir: &Path) -> Result<TrustedKeys, ArtifactError> {
        let mut keys = TrustedKeys::new();
        keys.add_dir(dir)?;
        Ok(keys)
    }

    /// Adds the `*.pub` files of `dir`; see [`TrustedKeys::from_dir`].
    ///
    /// # Errors
    ///
    /// As [`TrustedKeys::from_dir`].
    pub fn add_dir(&mut self, dir: &Path) -> Result<(), ArtifactError> {
        let entries = std::fs::read_dir(dir).map_err(|e| {
            ArtifactError::new(dir, format!("cannot read the trusted keys folder: {e}"))
        })?;
        let mut files = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == PUBLIC_KEY_EXTENSION) && path.is_file() {
                if files.len() == MAX_TRUSTED_KEYS {
                    return Err(ArtifactError::new(
                        dir,
                        format!(
                            "more than {MAX_TRUSTED_KEYS} *.pub files in the trusted keys folder"
                        ),
                    ));
                }
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(ArtifactError::new(
                dir,
                "no trusted keys: the folder holds no *.pub file; copy the signers' KEY.pub \
                 files (from `sandgraph keygen`) into it",
            ));
        }
        files.sort();
        for path in files {
            self.add_file(&path)?;
        }
        self.sources.push(dir.to_path_buf());
        Ok(())
    }

    /// Adds the public key file `path`.
    ///
    /// # Errors
    ///
    /// Unreadable, oversized or malformed.
    pub fn add_file(&mut self, path: &Path) -> Result<KeyId, ArtifactError> {
        let key = PublicKey::read(path)?;
        let id = key.id();
        self.keys.entry(id).or_insert((key, path.to_path_buf()));
        if !self.sources.iter().any(|s| path.starts_with(s)) {
            self.sources.push(path.to_path_buf());
        }
        Ok(id)
    }

    /// The key of id `id`, and the file it came from.
    pub fn get(&self, id: &KeyId) -> Option<(&PublicKey, &Path)> {
        self.keys.get(id).map(|(k, p)| (k, p.as_path()))
    }

    /// How many keys are trusted.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Where the keys came from, for messages: `keys/, ci.pub`.
    pub fn sources(&self) -> String {
        self.sources
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_writes_a_private_secret_and_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ci");
        let key = SecretKey::generate().unwrap();
        let public = key.write_pair(&out).unwrap();
        assert_eq!(public, dir.path().join("ci.pub"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&out).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert_eq!(SecretKey::read(&out).unwrap().public(), key.public());
        assert_eq!(PublicKey::read(&public).unwrap(), key.public());
        let before = std::fs::read(&out).unwrap();
        let err = SecretKey::generate().unwrap().write_pair(&out).unwrap_err();
        assert!(err.message.contains("never overwritten"), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), before);
    }

    #[cfg(unix)]
    #[test]
    fn a_secret_key_file_others_may_read_or_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("ci");
        let key = SecretKey::generate().unwrap();
        key.write_pair(&out).unwrap();
        for mode in [0o644, 0o640, 0o620, 0o602] {
            std::fs::set_permissions(&out, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = SecretKey::read(&out).unwrap_err();
            assert_eq!(err.path, out);
            assert!(
                err.message.contains(&format!("has mode {mode:04o}"))
                    && err
                        .message
                        .contains(&format!("`chmod 600 {}`", out.display())),
                "{err}"
            );
        }
        // Private to its owner (read-only too), through a symlink as well.
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o400)).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&out, &link).unwrap();
        for path in [&out, &link] {
            assert_eq!(SecretKey::read(path).unwrap().public(), key.public());
        }
    }

    #[test]
    fn two_keys_differ_and_ids_are_sha256_of_the_public_key() {
        let (a, b) = (
            SecretKey::generate().unwrap(),
            SecretKey::generate().unwrap(),
        );
        assert_ne!(a.public(), b.public());
        assert_eq!(a.public().id().0, sha256(a.public().0.as_bytes()));
        assert!(!format!("{a:?}").contains(&hex::encode(a.0.to_bytes())));
    }

    #[test]
    fn a_public_key_is_not_a_secret_key_and_garbage_is_refused() {
        let key = SecretKey::generate().unwrap();
        let err = SecretKey::parse(&key.public().to_text()).unwrap_err();
        assert!(matches!(err, FormatError::KeyHeader { .. }), "{err}");
        let err = err.to_string();
        assert!(err.contains("it is a public key"), "{err}");
        let err = PublicKey::parse(&key.to_text()).unwrap_err().to_string();
        assert!(err.contains("it is a secret key"), "{err}");
        let err = PublicKey::parse(&format!("{PUBLIC_KEY_HEADER}\nabcd\n")).unwrap_err();
        assert_eq!(
            err,
            FormatError::KeyHex {
                what: "public key file"
            }
        );
        let err = err.to_string();
        assert!(err.contains("64 hex digits"), "{err}");
        let err = PublicKey::parse("").unwrap_err().to_string();
        assert!(err.contains("sandgraph keygen"), "{err}");
        let text = format!("# ci key\n{}extra\n", key.public().to_text());
        assert!(
            PublicKey::parse(&text)
                .unwrap_err()
                .to_string()
                .contains("after the key")
        );
        let commented = format!("# ci key\n{}", key.public().to_text());
        assert_eq!(PublicKey::parse(&commented).unwrap(), key.public());
    }

    #[test]
    fn a_trusted_folder_needs_keys_and_reads_every_pub_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = TrustedKeys::from_dir(dir.path()).unwrap_err();
        assert!(err.message.contains("no trusted keys"), "{err}");
        let (a, b) = (
            SecretKey::generate().unwrap(),
            SecretKey::generate().unwrap(),
        );
        std::fs::write(dir.path().join("a.pub"), a.public().to_text()).unwrap();
        std::fs::write(dir.path().join("b.pub"), b.public().to_text()).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not a key").unwrap();
        let keys = TrustedKeys::from_dir(dir.path()).unwrap();
        assert_eq!(keys.len(), 2);
        let (_, from) = keys.get(&b.public().id()).unwrap();
        assert_eq!(from, dir.path().join("b.pub"));
        std::fs::write(dir.path().join("c.pub"), "junk").unwrap();
        let err = TrustedKeys::from_dir(dir.path()).unwrap_err();
        assert_eq!(err.path, dir.path().join("c.pub"));
    }
}
