//! Every PostgreSQL table, in one place, and the migrations that make them.
//!
//! `sandgraph_meta` holds the schema version of the database
//! (`schema_version`). [`migrate`] runs at every connect, in one
//! transaction under a transaction-scoped advisory lock, so hosts starting
//! at once migrate one after the other (the later ones find the work done).
//! To change a table: append a migration to [`MIGRATIONS`] (never edit a
//! released one) and bump [`PG_SCHEMA_VERSION`]. A binary refuses a
//! database whose version is newer than its own.
//!
//! Rows keep the JSON encodings of the redb tables (`src/schema.rs`, and
//! the declared tables of other crates), so `DESIGN.md` describes one
//! encoding. Text keys are `COLLATE "C"`: they
//! compare bytewise, as redb's `&str` keys do, whatever the database's
//! default collation.

use tokio_postgres::IsolationLevel;

use super::{Pg, PgTxError};
use crate::StoreError;

/// The PostgreSQL schema this build writes.
pub const PG_SCHEMA_VERSION: i64 = 3;

/// The advisory lock key migrations hold ("sandgrap" in ASCII).
const MIGRATION_LOCK: i64 = 0x7361_6e64_6772_6170;

const META: &str = "CREATE TABLE IF NOT EXISTS sandgraph_meta (
    key text COLLATE \"C\" PRIMARY KEY,
    value bigint NOT NULL
)";

/// Migration `n` (1-based) brings a database from schema `n - 1` to `n`.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: every durable role but the agent-graph control tables and the
    // compile cache (local to each host).
    r#"
    -- Durable threads. `sg_threads` is the redb `threads` row as columns.
    CREATE TABLE sg_threads (
        thread text COLLATE "C" PRIMARY KEY,
        graph text NOT NULL,
        head text COLLATE "C" NOT NULL,
        created_at_ms bigint NOT NULL,
        updated_at_ms bigint NOT NULL
    );
    -- Checkpoint JSON without id and values, as in redb `checkpoints`.
    CREATE TABLE sg_checkpoints (
        thread text COLLATE "C" NOT NULL,
        id text COLLATE "C" NOT NULL,
        row text NOT NULL,
        PRIMARY KEY (thread, id)
    );
    -- Channel values, as in redb `blobs`.
    CREATE TABLE sg_blobs (
        thread text COLLATE "C" NOT NULL,
        channel text COLLATE "C" NOT NULL,
        blob bigint NOT NULL,
        value text NOT NULL,
        PRIMARY KEY (thread, channel, blob)
    );
    -- Pending writes (`TaskRecord` JSON), as in redb `writes`.
    CREATE TABLE sg_writes (
        thread text COLLATE "C" NOT NULL,
        checkpoint text COLLATE "C" NOT NULL,
        path text COLLATE "C" NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (thread, checkpoint, path)
    );
    -- One writer per thread across hosts: the holder's lease and its
    -- fencing token.
    CREATE TABLE sg_thread_leases (
        thread text COLLATE "C" PRIMARY KEY,
        holder text NOT NULL,
        token bigint NOT NULL,
        expires_at timestamptz NOT NULL
    );
    -- The routing journal and the capability journal: seq 1, 2, 3, ...
    -- without gaps (allocated as max + 1 under a table lock).
    CREATE TABLE sg_journal (
        seq bigint PRIMARY KEY,
        entry text NOT NULL
    );
    CREATE TABLE sg_capability_calls (
        seq bigint PRIMARY KEY,
        entry text NOT NULL
    );
    -- Supervised agent graphs: `SupervisorRun` JSON.
    CREATE TABLE sg_supervisor_runs (
        graph_id text COLLATE "C" PRIMARY KEY,
        run text NOT NULL
    );
    "#,
    // 2: the agent-graph control tables, and since then every declared
    // table (`crate::tables`). Each (`agent_graph_*`, named in `tbl`) is a
    // set of rows whose key and value are in the order-preserving byte
    // encoding of `tables::Field`: bytewise order of `key` is the redb key
    // order.
    r#"
    CREATE TABLE sg_agent_graph_rows (
        tbl text COLLATE "C" NOT NULL,
        key bytea NOT NULL,
        value bytea NOT NULL,
        PRIMARY KEY (tbl, key)
    );
    "#,
    // 3: the routing journal, the capability journal and the supervised
    // runs become tables their owners declare (`journal`,
    // `capability_calls`, `supervisor_runs`, the names of their redb
    // tables): their rows move into `sg_agent_graph_rows`, in the encoding
    // of `tables::Field`. A `u64` key is 8 bytes big-endian (`int8send`:
    // sequence numbers are positive); a `&str` is its UTF-8 bytes ended by
    // `00 01` (PostgreSQL text holds no `00`, so nothing is escaped). The
    // old tables go.
    r#"
    INSERT INTO sg_agent_graph_rows (tbl, key, value)
        SELECT 'journal', int8send(seq), convert_to(entry, 'UTF8') || '\x0001'::bytea
        FROM sg_journal;
    INSERT INTO sg_agent_graph_rows (tbl, key, value)
        SELECT 'capability_calls', int8send(seq), convert_to(entry, 'UTF8') || '\x0001'::bytea
        FROM sg_capability_calls;
    INSERT INTO sg_agent_graph_rows (tbl, key, value)
        SELECT 'supervisor_runs',
               convert_to(graph_id, 'UTF8') || '\x0001'::bytea,
               convert_to(run, 'UTF8') || '\x0001'::bytea
        FROM sg_supervisor_runs;
    DROP TABLE sg_journal, sg_capability_calls, sg_supervisor_runs;
    "#,
];

/// Creates or upgrades the schema; refuses a newer one.
pub(crate) async fn migrate(pg: &Pg) -> Result<(), StoreError> {
    const WHAT: &str = "cannot migrate the schema";
    let mut conn = pg.connection(WHAT).await?;
    let client: &mut tokio_postgres::Client = &mut conn;
    let run = async {
        // READ COMMITTED: after waiting for the lock, each statement sees
        // what the previous holder committed.
        let tx = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
            .await?;
        tx.batch_execute(META).await?;
        let found: i64 = tx
            .query_opt(
                "SELECT value FROM sandgraph_meta WHERE key = 'schema_version'",
                &[],
            )
            .await?
            .map_or(0, |row| row.get(0));
        if found > PG_SCHEMA_VERSION {
            return Err(PgTxError::Store(StoreError::NewerSchema {
                path: pg.server().to_owned(),
                found: u64::try_from(found).unwrap_or(0),
            }));
        }
        for (n, sql) in MIGRATIONS.iter().enumerate() {
            let version = n as i64 + 1;
            if version > found {
                tx.batch_execute(sql).await?;
            }
        }
        if found < PG_SCHEMA_VERSION {
            tx.execute(
                "INSERT INTO sandgraph_meta (key, value) VALUES ('schema_version', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                &[&PG_SCHEMA_VERSION],
            )
            .await?;
        }
        tx.commit().await?;
        Ok(())
    };
    match run.await {
        Ok(()) => Ok(()),
        Err(PgTxError::Store(e)) => Err(e),
        Err(PgTxError::Db(e)) => Err(pg.db_error(WHAT, &e)),
    }
}

/// The schema version recorded in the database.
pub(crate) fn version(pg: &Pg) -> Result<i64, StoreError> {
    pg.transaction_blocking("cannot read the schema version", true, |tx| {
        Box::pin(async move {
            let row = tx
                .query_opt(
                    "SELECT value FROM sandgraph_meta WHERE key = 'schema_version'",
                    &[],
                )
                .await?;
            Ok(row.map_or(0, |r| r.get::<_, i64>(0)))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_one_migration_per_version() {
        assert_eq!(MIGRATIONS.len() as i64, PG_SCHEMA_VERSION);
    }
}
