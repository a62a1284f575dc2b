//! Everything sandgraph keeps on disk, in one redb file: durable threads
//! (checkpoints, channel values, pending writes), and the tables other
//! crates declare on [`tables`] (the agent-graph controller's, the routing
//! and capability journals, supervised runs; each owner's rules are in its
//! crate). No wasm engine here: the store holds bytes and JSON; callers
//! own their meaning.
//!
//! Or in PostgreSQL, shared by several hosts ([`Store::connect`]): threads
//! and declared tables. A configured location (a
//! path or a `postgres://` URL) is told apart and opened in one place:
//! [`StoreLocation`].
//!
//! And the compile cache ([`CompileCache`]): not in the database but a
//! folder of content-addressed files that concurrent processes share.
//!
//! See `DESIGN.md` at the crate root for keys, encodings and invariants.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod bridge;
mod cache;
mod error;
mod location;
mod postgres;
mod schema;
pub mod tables;
mod threads;

pub use cache::{
    CachedArtifact, CompileCache, DEFAULT_MAX_CACHE_BYTES, LoadFailure, MAX_ARTIFACT_BYTES,
    MAX_LOAD_FAILURE_MESSAGE_BYTES, MAX_SPEC_BYTES,
};
pub use error::StoreError;
pub use location::StoreLocation;
pub use postgres::redact_url;
pub use postgres::schema::PG_SCHEMA_VERSION;
pub use schema::SCHEMA_VERSION;
pub use threads::{Durability, MAX_THREAD_ID_LEN, ThreadInfo, ThreadStore, ThreadWriter};

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redb::{Database, ReadableDatabase, ReadableTable};

/// An open sandgraph database. Cheap to clone; clones share the database
/// and the set of thread leases.
#[derive(Clone)]
pub struct Store {
    /// The redb file; for a PostgreSQL store, an empty database in memory
    /// that holds what is not kept in PostgreSQL (see [`Store::connect`]).
    db: Arc<Database>,
    leases: threads::Leases,
    /// The PostgreSQL database of a store made by [`Store::connect`].
    pg: Option<postgres::Pg>,
    /// How long a PostgreSQL thread lease lives without renewal.
    thread_lease: std::time::Duration,
    /// Who this store is in claim leases of its agent graphs.
    holder: Arc<str>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// Makes sure a complete database file is at `path`, creating it when
/// missing: its missing folders as 0700 and the file as 0600 (databases
/// hold graph state and journals with model requests, none of it for
/// other users).
///
/// A new file is created whole or not at all. redb initialises a new
/// database in place: it sizes the file, writes the header, and writes its
/// magic number last, so a process killed in between (a host stopped with
/// SIGKILL as it first starts) left a file that every later open refused
/// as "not a redb database" although it never held data. So the database
/// is initialised under a temporary name beside `path` and then linked to
/// `path` (a link, not a rename: a database another process created there
/// meanwhile is kept). A kill leaves at most the temporary file, and the
/// next open starts afresh.
fn create_whole(path: &Path) -> Result<(), StoreError> {
    #[cfg(unix)]
    use std::os::unix::fs::DirBuilderExt;
    let io = |e| StoreError::io(path, e);
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        let mut dirs = std::fs::DirBuilder::new();
        dirs.recursive(true);
        #[cfg(unix)]
        dirs.mode(0o700);
        dirs.create(parent).map_err(io)?;
    }
    if path.exists() {
        return Ok(());
    }
    let temp = creating_name(path);
    let made = private_new_file(&temp)
        .map_err(io)
        .and_then(|()| Database::create(&temp).map_err(|e| StoreError::open(path, e)))
        .and_then(|db| {
            drop(db);
            match std::fs::hard_link(&temp, path) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                // A file system without links: a rename, unless another
                // process created `path` first.
                Err(_) if !path.exists() => std::fs::rename(&temp, path).map_err(io),
                Err(_) => Ok(()),
            }
        });
    let _ = std::fs::remove_file(&temp);
    remove_stale_creations(path);
    made
}

/// How old a temporary file of [`create_whole`] must be to be another
/// process's leftover (a creation takes milliseconds).
const STALE_CREATION: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes the temporary files that processes killed while creating `path`
/// left beside it.
fn remove_stale_creations(path: &Path) {
    let prefix = creating_prefix(path);
    let dir = match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent,
        None => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let stale = entry.file_name().to_string_lossy().starts_with(&prefix)
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_CREATION);
        if stale {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The temporary name a new database at `path` is made under: hidden,
/// beside it, and unique to this process and call.
fn creating_name(path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix = creating_prefix(path);
    path.with_file_name(format!("{prefix}{}-{n}", std::process::id()))
}

/// How every [`creating_name`] of `path` begins (followed by the pid and a
/// counter), so leftovers are found by the name they were made under.
fn creating_prefix(path: &Path) -> String {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    format!(".{name}.creating-")
}

/// Creates the temporary file `path` ([`creating_name`]) as 0600. A file
/// already there is the leftover of a dead process that had this one's pid
/// (no live process shares it): it is replaced.
fn private_new_file(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new();
    file.write(true).create_new(true);
    #[cfg(unix)]
    file.mode(0o600);
    match file.open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(path)?;
            file.open(path).map(drop)
        }
        opened => opened.map(drop),
    }
}

impl Store {
    /// Opens the database at `path`, creating it (and its tables) when
    /// missing; a process killed while creating it leaves no file this
    /// refuses. Refuses a database written by a newer schema, and one that
    /// is already open (redb locks the file: one process, one handle).
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        create_whole(path)?;
        let db = Database::create(path).map_err(|e| match e {
            redb::DatabaseError::DatabaseAlreadyOpen => StoreError::AlreadyOpen {
                path: path.display().to_string(),
            },
            e => StoreError::open(path, e),
        })?;
        let store = Store {
            db: Arc::new(db),
            leases: threads::Leases::default(),
            pg: None,
            thread_lease: postgres::threads::DEFAULT_LEASE_TTL,
            holder: postgres::threads::new_holder(),
        };
        store.init(path)?;
        Ok(store)
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://` or
    /// `postgresql://`, no TLS: `sslmode=require` is refused), shared with
    /// the other hosts that connect to it, and creates or migrates its
    /// tables; refuses a database of a newer schema.
    ///
    /// On such a store threads and declared [`tables`](Store::tables) live
    /// in PostgreSQL.
    pub fn connect(url: &str) -> Result<Self, StoreError> {
        let pg = postgres::Pg::connect(url)?;
        let memory = Path::new("(memory)");
        let db = Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| StoreError::open(memory, e))?;
        let store = Store {
            db: Arc::new(db),
            leases: threads::Leases::default(),
            pg: Some(pg),
            thread_lease: postgres::threads::DEFAULT_LEASE_TTL,
            holder: postgres::threads::new_holder(),
        };
        store.init(memory)?;
        Ok(store)
    }

    /// Whether this store is a PostgreSQL database ([`Store::connect`]).
    pub fn is_postgres(&self) -> bool {
        self.pg.is_some()
    }

    fn init(&self, path: &Path) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut meta = tx.open_table(schema::META)?;
            let found = meta.get(schema::SCHEMA_VERSION_KEY)?.map(|v| v.value());
            match found {
                None => {
                    meta.insert(schema::SCHEMA_VERSION_KEY, SCHEMA_VERSION)?;
                }
                Some(v) if v == SCHEMA_VERSION => {}
                Some(v) if v > SCHEMA_VERSION => {
                    return Err(StoreError::NewerSchema {
                        path: path.display().to_string(),
                        found: v,
                    });
                }
                Some(v) => schema::migrate(&tx, v)?,
            }
            schema::create_tables(&tx)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The schema version recorded in the file (for PostgreSQL: in the
    /// database, [`PG_SCHEMA_VERSION`] for this build).
    pub fn schema_version(&self) -> Result<u64, StoreError> {
        if let Some(pg) = &self.pg {
            return Ok(u64::try_from(postgres::schema::version(pg)?).unwrap_or(0));
        }
        let tx = self.db.begin_read()?;
        let meta = tx.open_table(schema::META)?;
        Ok(meta
            .get(schema::SCHEMA_VERSION_KEY)?
            .map(|v| v.value())
            .unwrap_or(0))
    }

    /// Durable threads. Every `ThreadStore` made from this store or its
    /// clones shares one set of leases, so two runs of one thread exclude
    /// each other.
    pub fn threads(&self) -> ThreadStore {
        match &self.pg {
            Some(pg) => ThreadStore::postgres(postgres::threads::PgThreads::new(
                pg.clone(),
                self.thread_lease,
            )),
            None => ThreadStore::new(self.db.clone(), self.leases.clone()),
        }
    }

    /// This store with another lifetime for the leases of its PostgreSQL
    /// threads (default 30 s): how long a thread held by a dead or paused
    /// host stays busy before another host may take it over. A run renews
    /// its lease every third of it. No effect on redb.
    pub fn with_thread_lease(mut self, ttl: std::time::Duration) -> Self {
        self.thread_lease = ttl.max(std::time::Duration::from_millis(100));
        self
    }

    /// The tables of `set`, which their owner declares, in this store's
    /// database (a redb file, or PostgreSQL shared with the other hosts)
    /// and the transactions over them, with who this store is in leases
    /// and how long they last ([thread leases](Store::with_thread_lease)).
    pub fn tables(&self, set: &'static tables::TableSet) -> tables::Tables {
        match &self.pg {
            Some(pg) => {
                tables::Tables::on_postgres(pg.clone(), set, self.holder.clone(), self.thread_lease)
            }
            None => tables::Tables::on_redb(
                self.db.clone(),
                set,
                self.holder.clone(),
                self.thread_lease,
            ),
        }
    }
}

/// Hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_creates_and_reopens_with_the_schema_version() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nested/dir/sandgraph.redb");
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(store.schema_version().unwrap(), SCHEMA_VERSION);
    }

    #[cfg(unix)]
    #[test]
    fn new_databases_and_their_folders_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("made/here/sandgraph.redb");
        drop(Store::open(&path).unwrap());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("made/here")), 0o700);
        assert_eq!(mode(&dir.path().join("made")), 0o700);
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.redb");
        {
            let db = Database::create(&path).unwrap();
            let tx = db.begin_write().unwrap();
            tx.open_table(schema::META)
                .unwrap()
                .insert(schema::SCHEMA_VERSION_KEY, SCHEMA_VERSION + 1)
                .unwrap();
            tx.commit().unwrap();
        }
        let err = Store::open(&path).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn a_second_open_of_the_same_file_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db.redb");
        let first = Store::open(&path).unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(matches!(err, StoreError::AlreadyOpen { .. }), "{err:?}");
        let text = err.to_string();
        assert!(
            text.contains("already open in another sandgraph process"),
            "{text}"
        );
        assert!(text.contains(&path.display().to_string()), "{text}");
        drop(first);
        Store::open(&path).expect("the file opens again once closed");
    }

    #[test]
    fn not_a_database_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.redb");
        std::fs::write(
            &path,
            b"this is not a redb file at all, not even close............",
        )
        .unwrap();
        let err = Store::open(&path).unwrap_err();
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
}
