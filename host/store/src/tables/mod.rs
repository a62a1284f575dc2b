//! Tables that other crates declare and own, in the store's database (a
//! redb file, or PostgreSQL shared by several hosts), and the transactions
//! over them. The store knows keys and bytes, not what they mean: an owner
//! (the agent-graph controller, say) declares its tables as constants, and
//! its rules are written once over [`Tx`] and [`Table`], on either backend.
//!
//! The API:
//!
//! * an owner declares each table as a `const` [`TableDef`] (its name and
//!   its key and value types) and lists them in a [`TableSet`] (which also
//!   names what they hold, for messages);
//! * [`Store::tables`](crate::Store::tables) gives the [`Tables`] of a set:
//!   [`Tables::write`] runs a closure in one durable write transaction (on
//!   PostgreSQL `SERIALIZABLE`, run again when it lost a conflict),
//!   [`Tables::read`] on one consistent snapshot;
//! * the closure gets a [`Tx`], opens the tables it needs as [`Table`]s,
//!   and gets, inserts and scans rows by key ([`Table::get`],
//!   [`Table::insert`], [`Table::range`], [`Table::between`],
//!   [`Table::first`], [`Table::last`], [`Table::last_n`], [`Table::all`],
//!   and for a log keyed 1, 2, 3, ... [`Table::next_key`] to append and
//!   [`Table::pick_last`] to read its tail);
//! * keys and values are `&str`, `u64` and tuples of them ([`Field`]): on
//!   PostgreSQL they are stored in an order-preserving byte encoding, so a
//!   key range selects the same rows on both backends;
//! * failures are [`TableError`]s: the database's, or a stored row whose
//!   bytes are not in its table's encoding.
//!
//! Invariants: on redb a table is the typed redb table of its name; on
//! PostgreSQL its rows are those of `sg_agent_graph_rows (tbl, key, value)`
//! whose `tbl` is its name (the rows table is named for its first owner).
//! A table is made in a redb file by the first write transaction of its
//! set (every table of the set at once); until then a read sees it empty.
//! A table's name, key and value types are its format: changing any of
//! them is a migration of the owner's.
//!
//! See `DESIGN.md` (section "Declared tables") for the encoding.

mod handle;
mod kv;

pub use handle::{TableSet, Tables};
pub use kv::{Declared, Field, Range, Row, Table, TableDef, TableError, Tx};
