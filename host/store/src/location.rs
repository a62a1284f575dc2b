//! [`StoreLocation`]: where a store is, as configured, and the one place
//! that tells a PostgreSQL database from a redb file and opens it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::{Store, StoreError, postgres};

/// Where a store is, as configured (a `--db` flag, `$SANDGRAPH_STORE`, a
/// path in a request): a PostgreSQL database shared by several hosts, or a
/// redb file. Every caller that opens a configured store goes through
/// [`StoreLocation::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// A `postgres://` or `postgresql://` URL ([`Store::connect`]).
    Postgres(String),
    /// The path of a redb file ([`Store::open`]; created when missing).
    File(PathBuf),
}

impl StoreLocation {
    /// `location` as configured: a PostgreSQL URL when it is one
    /// (`postgres://` or `postgresql://`), else the path of a redb file.
    pub fn new(location: impl AsRef<Path>) -> Self {
        let location = location.as_ref();
        match location.to_str() {
            Some(url) if postgres::is_url(url) => StoreLocation::Postgres(url.to_owned()),
            _ => StoreLocation::File(location.to_path_buf()),
        }
    }

    /// Whether this is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        matches!(self, StoreLocation::Postgres(_))
    }

    /// Whether the store exists: a file that is there; a database is
    /// assumed to.
    pub fn exists(&self) -> bool {
        match self {
            StoreLocation::Postgres(_) => true,
            StoreLocation::File(path) => path.exists(),
        }
    }

    /// Opens the store: connects to the database, or opens (creating it
    /// when missing) the file. `shared_lease` is the lease of a shared
    /// store's threads and claims ([`Store::with_thread_lease`]); a file,
    /// which one process opens, keeps the default.
    ///
    /// # Errors
    ///
    /// Those of [`Store::connect`] and [`Store::open`].
    pub fn open(&self, shared_lease: Option<Duration>) -> Result<Store, StoreError> {
        match self {
            StoreLocation::Postgres(url) => {
                let store = Store::connect(url)?;
                Ok(match shared_lease {
                    Some(ttl) => store.with_thread_lease(ttl),
                    None => store,
                })
            }
            StoreLocation::File(path) => Store::open(path),
        }
    }
}

/// As messages name it: a URL without its password
/// ([`redact_url`](crate::redact_url)), or the path.
impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Postgres(url) => f.write_str(&postgres::redact_url(url)),
            StoreLocation::File(path) => write!(f, "{}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_databases_and_anything_else_a_file() {
        for url in ["postgres://u@h/db", "postgresql://h/db"] {
            assert_eq!(StoreLocation::new(url), StoreLocation::Postgres(url.into()));
            assert!(StoreLocation::new(url).exists());
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("postgres:").join("data.redb");
        let file = StoreLocation::new(&path);
        assert_eq!(file, StoreLocation::File(path.clone()));
        assert!(!file.is_postgres() && !file.exists());
        static NO_TABLES: crate::tables::TableSet = crate::tables::TableSet {
            what: "nothing",
            tables: &[],
        };
        let store = file.open(Some(Duration::from_secs(1))).unwrap();
        let default = postgres::threads::DEFAULT_LEASE_TTL;
        assert_eq!(
            store.tables(&NO_TABLES).lease_ttl(),
            default,
            "a file keeps it"
        );
        assert!(file.exists());
        let shown = StoreLocation::new("postgres://u:pw@h/db").to_string();
        assert_eq!(shown, "postgres://u:***@h/db");
    }
}
