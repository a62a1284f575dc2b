//! The data store (threads, journals, agent graphs) a command opens:
//! `--db`/`--store` over `$SANDGRAPH_STORE` over `$SANDGRAPH_DB` over the
//! user's data folder, a redb file or a PostgreSQL URL, and
//! `$SANDGRAPH_LEASE_MS`.

use std::path::{Path, PathBuf};

use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::{Store, StoreError, StoreLocation, ThreadStore};

use crate::exit::Failure;

fn invalid(m: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, m).into()
}

/// The database path: the flag, `$SANDGRAPH_DB`, or the user's data dir.
pub(crate) fn db_path(flag: Option<&Path>) -> Result<PathBuf, Failure> {
    if let Some(p) = flag {
        return Ok(p.to_path_buf());
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(p) = env("SANDGRAPH_STORE").or_else(|| env("SANDGRAPH_DB")) {
        return Ok(PathBuf::from(p));
    }
    let data = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .ok_or_else(|| {
            invalid("cannot find a data directory: pass --db PATH or set SANDGRAPH_DB")
        })?;
    Ok(data.join("sandgraph").join("threads.redb"))
}

/// `location` as messages name it: a PostgreSQL URL without its password
/// (see [`sandgraph_store::redact_url`]).
pub(crate) fn shown(location: &Path) -> String {
    sandgraph_store::redact_url(&location.to_string_lossy())
}

/// Opens the data store at `location`: a PostgreSQL URL shared by several
/// hosts, or a redb file (created when missing).
pub(crate) fn open_data(location: &Path) -> Result<Store, Failure> {
    let location = StoreLocation::new(location);
    let lease = match location.is_postgres() {
        true => lease_ttl()?,
        false => None,
    };
    location.open(lease).map_err(storage)
}

/// The thread store of the database `db` names (see [`db_path`]).
pub(crate) fn open_threads(db: Option<&Path>) -> Result<ThreadStore, Failure> {
    Ok(open_data(&db_path(db)?)?.threads())
}

/// `$SANDGRAPH_LEASE_MS`: how long a shared (PostgreSQL) thread, or a claim
/// of agent-graph work, held by a dead host stays busy before another host
/// may take it over.
fn lease_ttl() -> Result<Option<std::time::Duration>, Failure> {
    let Some(value) = std::env::var_os("SANDGRAPH_LEASE_MS").filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match value.to_str().and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(ms) if ms >= 100 => Ok(Some(std::time::Duration::from_millis(ms))),
        _ => Err(invalid(format!(
            "SANDGRAPH_LEASE_MS={}: expected a number of milliseconds, at least 100",
            value.to_string_lossy()
        ))),
    }
}

/// Whether the data store at `location` exists (a URL is assumed to).
pub(crate) fn data_exists(location: &Path) -> bool {
    StoreLocation::new(location).exists()
}

/// The failure of a store operation: `thread_busy` or `storage`.
/// A failure of a table another crate owns in the database (a journal,
/// supervised runs): code `storage`, its message.
pub(crate) fn table_storage(e: impl std::fmt::Display) -> Failure {
    RunError::new(ErrorCode::Storage, e.to_string()).into()
}

pub(crate) fn storage(e: StoreError) -> Failure {
    let code = match e {
        StoreError::ThreadBusy { .. } => ErrorCode::ThreadBusy,
        _ => ErrorCode::Storage,
    };
    RunError::new(code, e.to_string()).into()
}
