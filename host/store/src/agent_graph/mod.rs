//! The storage of the agent-graph controller: its tables `agent_graph_*`
//! in the sandgraph database (a redb file, or PostgreSQL shared by several
//! hosts) and the transactions over them. The rules (schedule revisions,
//! claims and their leases, provisions, records, wakes) are the
//! controller's, in `sandgraph-controller`; this module knows keys and
//! bytes, not what they mean.
//!
//! The API, from a [`crate::Store`]:
//!
//! * [`Store::agent_graph_tables`](crate::Store::agent_graph_tables) gives
//!   the [`AgentGraphTables`] of the store: [`AgentGraphTables::write`] runs
//!   a closure in one durable write transaction (on PostgreSQL
//!   `SERIALIZABLE`, run again when it lost a conflict),
//!   [`AgentGraphTables::read`] on one consistent snapshot;
//! * the closure gets a [`Tx`], opens the tables it needs (the constants
//!   `AG_*`, each a [`TableDef`]) as [`Table`]s, and gets, inserts and
//!   scans rows by key ([`Table::get`], [`Table::insert`], [`Table::range`],
//!   [`Table::between`], [`Table::first`], [`Table::last`], [`Table::all`]);
//! * keys and values are `&str`, `u64` and tuples of them ([`Field`]): on
//!   PostgreSQL they are stored in an order-preserving byte encoding, so a
//!   key range selects the same rows on both backends;
//! * failures are [`KvError`]s: the database's, or a stored row whose bytes
//!   are not in its table's encoding.
//!
//! See `DESIGN.md` (sections "Agent-graph control" and "PostgreSQL") for
//! the tables' keys and values.

mod kv;
mod tables;

pub use crate::schema::{
    AG_CLAIM_RUNS, AG_CLAIM_TURNS, AG_CLAIMS, AG_PROVISION_OPERATORS, AG_PROVISION_WORK,
    AG_PROVISIONS, AG_RECORDS, AG_SCHEDULE, AG_UPDATE_IDS, AG_UPDATE_SOURCES, AG_WAKE_ATTEMPTS,
    AG_WAKES, AG_WORK_IDS,
};
pub use kv::{Field, KvError, Range, Row, Table, TableDef, Tx};
pub use tables::AgentGraphTables;
