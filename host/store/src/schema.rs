//! Every table of the database, in one place. Bump [`SCHEMA_VERSION`] and add
//! a step to [`migrate`] when a table's key or value encoding changes.

use redb::{TableDefinition, WriteTransaction};

use crate::StoreError;

/// The schema this build writes.
pub const SCHEMA_VERSION: u64 = 1;

/// `META["schema_version"]` holds the schema version of the file.
pub(crate) const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Compiled artifacts: key `(wasm sha256 hex, engine fingerprint hex)`,
/// value = 32-byte sha256 of the artifact followed by the artifact bytes.
pub(crate) const ARTIFACTS: TableDefinition<(&str, &str), &[u8]> =
    TableDefinition::new("artifacts");

/// Graph specs as described by the component: key wasm sha256 hex, value the
/// spec as JSON text. A spec does not depend on the engine.
pub(crate) const SPECS: TableDefinition<&str, &str> = TableDefinition::new("specs");

pub(crate) fn create_tables(tx: &WriteTransaction) -> Result<(), StoreError> {
    tx.open_table(ARTIFACTS)?;
    tx.open_table(SPECS)?;
    Ok(())
}

/// Upgrades a file written by schema `from` (older than this build).
pub(crate) fn migrate(_tx: &WriteTransaction, from: u64) -> Result<(), StoreError> {
    // Schema 1 is the first; nothing older exists.
    Err(StoreError::Db(format!(
        "no migration from schema {from} to {SCHEMA_VERSION}"
    )))
}
