use std::path::Path;

use sandgraph_core::{ErrorCode, RunError};

/// A failure of the store, saying which file and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {path}: {message}")]
    Open { path: String, message: String },
    #[error("database {path} was written by a newer sandgraph (schema {found}); upgrade sandgraph")]
    NewerSchema { path: String, found: u64 },
    #[error(
        "database {path} is already open in another sandgraph process (or elsewhere in this one); wait for it to finish"
    )]
    AlreadyOpen { path: String },
    #[error("database error: {0}")]
    Db(String),
    /// A PostgreSQL store failed: `server` is `host:port/database`, never
    /// the password.
    #[error("postgres {server}: {message}")]
    Postgres { server: String, message: String },
    #[error("thread {thread:?} is busy: another run is writing it")]
    ThreadBusy { thread: String },
    /// A run's lease on a shared (PostgreSQL) thread expired and another
    /// host took the thread over: this run's write was refused, nothing
    /// of it was written.
    #[error(
        "thread {thread:?} was taken over by another host after this run's lease expired; nothing was written"
    )]
    LeaseLost { thread: String },
    #[error("no thread {thread:?}")]
    UnknownThread { thread: String },
    #[error("thread {thread:?} has no checkpoint {id:?}")]
    UnknownCheckpoint { thread: String, id: String },
    #[error("thread {thread:?} belongs to graph {stored:?}, not {requested:?}")]
    GraphMismatch {
        thread: String,
        stored: String,
        requested: String,
    },
    #[error("invalid thread id {thread:?}: {reason}")]
    InvalidThreadId {
        thread: String,
        reason: &'static str,
    },
    #[error("invalid checkpoint id {id:?} for thread {thread:?}: expected 16 lowercase hex digits")]
    InvalidCheckpointId { thread: String, id: String },
    #[error(
        "checkpoint {id:?} of thread {thread:?} does not sort after the thread's head {head:?}"
    )]
    StaleCheckpoint {
        thread: String,
        id: String,
        head: String,
    },
    #[error("{0}")]
    InvalidArgument(String),
    #[error("corrupt record in {table}: {message}")]
    Corrupt {
        table: &'static str,
        message: String,
    },
}

impl StoreError {
    pub(crate) fn open(path: &Path, e: impl std::fmt::Display) -> Self {
        StoreError::Open {
            path: path.display().to_string(),
            message: e.to_string(),
        }
    }

    pub(crate) fn io(path: &Path, e: std::io::Error) -> Self {
        StoreError::open(path, e)
    }

    pub(crate) fn corrupt(table: &'static str, e: impl std::fmt::Display) -> Self {
        StoreError::Corrupt {
            table,
            message: e.to_string(),
        }
    }

    /// The run error code this failure maps to: `thread_busy` for a lease
    /// conflict, `invalid_input` for a bad request (unknown thread or
    /// checkpoint, wrong graph, bad id or argument), `storage` for anything
    /// the database itself failed at.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::ThreadBusy { .. } | StoreError::LeaseLost { .. } => ErrorCode::ThreadBusy,
            StoreError::UnknownThread { .. }
            | StoreError::UnknownCheckpoint { .. }
            | StoreError::GraphMismatch { .. }
            | StoreError::InvalidThreadId { .. }
            | StoreError::InvalidArgument(_) => ErrorCode::InvalidInput,
            _ => ErrorCode::Storage,
        }
    }
}

impl From<StoreError> for RunError {
    fn from(e: StoreError) -> Self {
        RunError::new(e.code(), e.to_string())
    }
}

macro_rules! from_redb {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self {
                StoreError::Db(e.to_string())
            }
        }
    )*};
}

from_redb!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError,
    redb::DatabaseError,
    redb::SetDurabilityError
);
