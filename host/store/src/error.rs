use std::path::Path;

/// A failure of the store, saying which file and what went wrong.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open database {path}: {message}")]
    Open { path: String, message: String },
    #[error("database {path} was written by a newer sandgraph (schema {found}); upgrade sandgraph")]
    NewerSchema { path: String, found: u64 },
    #[error("database error: {0}")]
    Db(String),
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
    redb::DatabaseError
);
