use std::path::Path;

use sandgraph_core::{ErrorCode, RunError};

/// A failure of the store, saying which file and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database file could not be opened or created.
    #[error("cannot open database {path}: {message}")]
    Open {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// The database was written by a newer schema than this build's.
    #[error("database {path} was written by a newer sandgraph (schema {found}); upgrade sandgraph")]
    NewerSchema {
        /// The file, or the PostgreSQL server.
        path: String,
        /// The schema version found there.
        found: u64,
    },
    /// redb allows one handle per file: another process (or another
    /// handle in this one) has it open.
    #[error(
        "database {path} is already open in another sandgraph process (or elsewhere in this one); wait for it to finish"
    )]
    AlreadyOpen {
        /// The file.
        path: String,
    },
    /// redb failed (I/O, a corrupt file, a failed commit).
    #[error("database error: {0}")]
    Db(String),
    /// A PostgreSQL store failed: `server` is `host:port/database`, never
    /// the password.
    #[error("postgres {server}: {message}")]
    Postgres {
        /// `host:port/database`.
        server: String,
        /// What failed, in words.
        message: String,
    },
    /// Another run (on any host) holds the thread's writer lease.
    #[error("thread {thread:?} is busy: another run is writing it")]
    ThreadBusy {
        /// The thread.
        thread: String,
    },
    /// A run's lease on a shared (PostgreSQL) thread expired and another
    /// host took the thread over: this run's write was refused, nothing
    /// of it was written.
    #[error(
        "thread {thread:?} was taken over by another host after this run's lease expired; nothing was written"
    )]
    LeaseLost {
        /// The thread.
        thread: String,
    },
    /// The thread does not exist.
    #[error("no thread {thread:?}")]
    UnknownThread {
        /// The thread.
        thread: String,
    },
    /// The thread has no checkpoint of that id.
    #[error("thread {thread:?} has no checkpoint {id:?}")]
    UnknownCheckpoint {
        /// The thread.
        thread: String,
        /// The checkpoint id asked for.
        id: String,
    },
    /// The thread was started by another graph.
    #[error("thread {thread:?} belongs to graph {stored:?}, not {requested:?}")]
    GraphMismatch {
        /// The thread.
        thread: String,
        /// The graph that owns it.
        stored: String,
        /// The graph that asked.
        requested: String,
    },
    /// A thread id that is empty, too long or has control characters.
    #[error("invalid thread id {thread:?}: {reason}")]
    InvalidThreadId {
        /// The id given.
        thread: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A checkpoint id that is not 16 lowercase hex digits.
    #[error("invalid checkpoint id {id:?} for thread {thread:?}: expected 16 lowercase hex digits")]
    InvalidCheckpointId {
        /// The thread.
        thread: String,
        /// The id given.
        id: String,
    },
    /// A checkpoint that would not be the thread's newest.
    #[error(
        "checkpoint {id:?} of thread {thread:?} does not sort after the thread's head {head:?}"
    )]
    StaleCheckpoint {
        /// The thread.
        thread: String,
        /// The checkpoint written.
        id: String,
        /// The thread's head.
        head: String,
    },
    /// An argument out of range, in words.
    #[error("{0}")]
    InvalidArgument(String),
    /// The compile cache's folder or one of its entries could not be made,
    /// written or removed.
    #[error("compile cache {path}: {message}")]
    Cache {
        /// The folder or file.
        path: String,
        /// What failed, in words.
        message: String,
    },
    /// The compile cache's key file is refused (a symbolic link, another
    /// owner, a mode others may read or write, ...): the message names it.
    #[error("{0}")]
    CacheKey(String),
    /// A stored row that does not decode or breaks the store's rules.
    #[error("corrupt record in {table}: {message}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// What is wrong.
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
