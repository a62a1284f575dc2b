//! The store's own redb tables (threads) and the file's schema version.
//! Bump [`SCHEMA_VERSION`] and add a step to [`migrate`] when a table's key
//! or value encoding changes.
//!
//! Tables of other crates (the agent graphs, the journals, supervised
//! runs) are declared by their owners on [`crate::tables`] and made by the
//! first write that needs them; the store does not name them.

use redb::{TableDefinition, WriteTransaction};

use crate::StoreError;

/// The schema this build writes.
pub const SCHEMA_VERSION: u64 = 1;

/// `META["schema_version"]` holds the schema version of the file.
pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Durable threads: key thread id, value JSON
/// `{"graph", "head", "created_at_ms", "updated_at_ms"}`; `head` names the
/// thread's newest checkpoint. Written with the thread's first checkpoint.
pub(crate) const THREADS: TableDefinition<&str, &str> = TableDefinition::new("threads");

/// Checkpoints: key `(thread id, checkpoint id)`, checkpoint ids being 16
/// lowercase hex digits that sort chronologically; value the checkpoint as
/// JSON without its id and without channel values: `values` is instead the
/// list `[[channel, blob], ...]`, in the checkpoint's channel order, naming
/// the [`BLOBS`] row of each channel that has a value.
pub(crate) const CHECKPOINTS: TableDefinition<(&str, &str), &str> =
    TableDefinition::new("checkpoints");

/// Channel values: key `(thread id, channel, blob)`, where `blob` is the id
/// (as a number) of the checkpoint that first held this value of the
/// channel; value the channel's value as JSON. A checkpoint whose channel
/// has the same version as in its parent refers to the parent's blob, so a
/// value is stored again only when its channel's version changes.
pub(crate) const BLOBS: TableDefinition<(&str, &str, u64), &str> = TableDefinition::new("blobs");

/// Pending writes: key `(thread id, checkpoint id, task path)`, value the
/// task's `TaskRecord` as JSON: what a task of the superstep after that
/// checkpoint produced (writes or an interrupt).
pub(crate) const WRITES: TableDefinition<(&str, &str, &str), &str> = TableDefinition::new("writes");

pub(crate) fn create_tables(tx: &WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(THREADS)?;
    tx.open_table(CHECKPOINTS)?;
    tx.open_table(BLOBS)?;
    tx.open_table(WRITES)?;
    Ok(())
}

/// Upgrades a file written by schema `from` (older than this build).
pub(crate) fn migrate(_tx: &WriteTransaction, from: u64) -> Result<(), StoreError> {
    // Schema 1 is the first; nothing older exists.
    Err(StoreError::Db(format!(
        "no migration from schema {from} to {SCHEMA_VERSION}"
    )))
}
