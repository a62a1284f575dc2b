//! Declared tables on either backend: [`TableDef`], [`Field`], [`Tx`] and
//! [`Table`].
//!
//! An owner's rules are written once, against [`Tx`] and [`Table`]: on
//! redb a table is the typed redb table of its name; on PostgreSQL the same
//! rows live in `sg_agent_graph_rows (tbl, key, value)`, with key and value
//! in the order-preserving byte encoding of [`Field`]. Bytewise order of
//! encoded keys is the order of the redb keys, so a key range means the
//! same rows on both backends.

use std::marker::PhantomData;
use std::ops::Bound;

use redb::{ReadableTable, TableDefinition, TableHandle};

use crate::StoreError;
use crate::postgres::rows::{PgRows, Scan};

/// A failure of a declared table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The database failed (redb, or PostgreSQL), in words.
    #[error("database error: {0}")]
    Db(String),
    /// A stored key or value that is not in its table's encoding.
    #[error("a row of table {table} has a malformed key or value")]
    Malformed {
        /// The table.
        table: String,
    },
}

impl TableError {
    /// A database failure described by `e`.
    pub fn db(e: impl std::fmt::Display) -> Self {
        TableError::Db(e.to_string())
    }
}

/// Every error the store's own code gets from redb, and [`StoreError`]
/// itself: a redb failure keeps its message (`database error: ...`), any
/// other store error is its text.
impl<E: Into<StoreError>> From<E> for TableError {
    fn from(e: E) -> Self {
        match e.into() {
            StoreError::Db(message) => TableError::Db(message),
            e => TableError::db(e),
        }
    }
}

/// A table an owner declares: its name and its key and value types, which
/// are its format on disk (on redb, the typed table of that name; on
/// PostgreSQL, the rows of that name). Owners declare tables as constants,
/// list them in a [`TableSet`](super::TableSet), and open them in a [`Tx`].
pub struct TableDef<K, V> {
    name: &'static str,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for TableDef<K, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, V> Copy for TableDef<K, V> {}

impl<K: Field + redb::Key, V: Field> TableDef<K, V> {
    /// The table named `name` (unique in the database: prefix it with its
    /// owner, e.g. `agent_graph_`).
    pub const fn new(name: &'static str) -> Self {
        TableDef {
            name,
            types: PhantomData,
        }
    }

    /// The table's name, on both backends.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The redb table.
    pub(crate) fn redb(&self) -> TableDefinition<'static, K, V> {
        TableDefinition::new(self.name)
    }
}

/// A [`TableDef`] of any key and value types, as a
/// [`TableSet`](super::TableSet) lists it: the store makes the tables of a
/// set it does not otherwise know. Implemented by [`TableDef`] only.
pub trait Declared: sealed::Create + Sync {
    /// The table's name.
    fn table_name(&self) -> &'static str;
}

impl<K: Field + redb::Key, V: Field> Declared for TableDef<K, V> {
    fn table_name(&self) -> &'static str {
        self.name
    }
}

pub(super) mod sealed {
    /// How the store makes a declared table in a redb write transaction;
    /// out of reach of other crates.
    pub trait Create {
        /// Makes the table in `tx` unless it exists.
        fn create(&self, tx: &redb::WriteTransaction) -> Result<(), redb::TableError>;
    }

    impl<K: super::Field + redb::Key, V: super::Field> Create for super::TableDef<K, V> {
        fn create(&self, tx: &redb::WriteTransaction) -> Result<(), redb::TableError> {
            tx.open_table(self.redb()).map(drop)
        }
    }
}

/// A key or value type of a declared table, with its owned form and an
/// encoding whose bytewise order is the type's order: a string is its
/// bytes with `00` written `00 ff`, ended by `00 01`; a `u64` is 8 bytes
/// big-endian; a tuple is its fields one after another.
///
/// Implemented for `&'static str`, `u64` and tuples of 2 to 4 of them.
pub trait Field: redb::Value + 'static {
    /// The value, owning its strings.
    type Owned: std::fmt::Debug;
    /// `v` owned.
    fn own(v: Self::SelfType<'_>) -> Self::Owned;
    /// Appends the encoding of `v`.
    fn put(v: &Self::SelfType<'_>, out: &mut Vec<u8>);
    /// Reads one encoded value off the front of `input`.
    fn take(input: &mut &[u8]) -> Option<Self::Owned>;
}

impl Field for &'static str {
    type Owned = String;
    fn own(v: &str) -> String {
        v.to_owned()
    }
    fn put(v: &&str, out: &mut Vec<u8>) {
        for &b in v.as_bytes() {
            out.push(b);
            if b == 0 {
                out.push(0xff);
            }
        }
        out.extend_from_slice(&[0, 1]);
    }
    fn take(input: &mut &[u8]) -> Option<String> {
        let mut bytes = Vec::new();
        let mut i = 0;
        loop {
            match (*input.get(i)?, input.get(i + 1).copied()) {
                (0, Some(0xff)) => bytes.push(0),
                (0, Some(1)) => break,
                (0, _) => return None,
                (b, _) => {
                    bytes.push(b);
                    i += 1;
                    continue;
                }
            }
            i += 2;
        }
        *input = &input[i + 2..];
        String::from_utf8(bytes).ok()
    }
}

impl Field for u64 {
    type Owned = u64;
    fn own(v: u64) -> u64 {
        v
    }
    fn put(v: &u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&v.to_be_bytes());
    }
    fn take(input: &mut &[u8]) -> Option<u64> {
        let (head, rest) = input.split_first_chunk::<8>()?;
        *input = rest;
        Some(u64::from_be_bytes(*head))
    }
}

macro_rules! tuple_field {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Field),+> Field for ($($t,)+) {
            type Owned = ($($t::Owned,)+);
            fn own(v: Self::SelfType<'_>) -> Self::Owned {
                ($($t::own(v.$i),)+)
            }
            fn put(v: &Self::SelfType<'_>, out: &mut Vec<u8>) {
                $($t::put(&v.$i, out);)+
            }
            fn take(input: &mut &[u8]) -> Option<Self::Owned> {
                Some(($($t::take(input)?,)+))
            }
        }
    };
}
tuple_field!(A 0, B 1);
tuple_field!(A 0, B 1, C 2);
tuple_field!(A 0, B 1, C 2, D 3);

fn encode<F: Field>(v: &F::SelfType<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    F::put(v, &mut out);
    out
}

fn decode<F: Field>(table: &str, bytes: &[u8]) -> Result<F::Owned, TableError> {
    let mut input = bytes;
    match F::take(&mut input) {
        Some(v) if input.is_empty() => Ok(v),
        _ => Err(TableError::Malformed {
            table: table.to_owned(),
        }),
    }
}

/// A transaction over declared tables (see [`Tables`](super::Tables)): a
/// write or a read-only one, on redb or PostgreSQL.
pub struct Tx<'a>(TxOn<'a>);

/// Where a [`Tx`] runs.
pub(crate) enum TxOn<'a> {
    RedbWrite(&'a redb::WriteTransaction),
    RedbRead(&'a redb::ReadTransaction),
    Pg(&'a PgRows),
}

/// One table in a [`Tx`].
pub struct Table<'a, K: Field + redb::Key, V: Field>(TableOn<'a, K, V>);

enum TableOn<'a, K: Field + redb::Key, V: Field> {
    Write(redb::Table<'a, K, V>),
    Read(redb::ReadOnlyTable<K, V>),
    /// A table a read-only transaction found missing: no write of its set
    /// has made it in this file yet, so it has no rows.
    Missing(&'static str),
    Pg {
        rows: &'a PgRows,
        name: String,
    },
}

impl<'a> Tx<'a> {
    pub(crate) fn new(on: TxOn<'a>) -> Self {
        Tx(on)
    }

    /// Opens `def` in this transaction.
    pub fn open_table<K: Field + redb::Key, V: Field>(
        &self,
        def: TableDef<K, V>,
    ) -> Result<Table<'a, K, V>, TableError> {
        Ok(Table(match self.0 {
            TxOn::RedbWrite(tx) => TableOn::Write(tx.open_table(def.redb())?),
            TxOn::RedbRead(tx) => match tx.open_table(def.redb()) {
                Ok(table) => TableOn::Read(table),
                Err(redb::TableError::TableDoesNotExist(_)) => TableOn::Missing(def.name()),
                Err(e) => return Err(e.into()),
            },
            TxOn::Pg(rows) => TableOn::Pg {
                rows,
                name: def.name().to_owned(),
            },
        }))
    }
}

/// The failure of an insert into `table` in a read-only transaction.
fn read_only(table: &str) -> TableError {
    TableError::db(format!("table {table} was opened read-only"))
}

/// A range of keys: its lower and upper bound.
pub type Range<'k, K> = (
    Bound<<K as redb::Value>::SelfType<'k>>,
    Bound<<K as redb::Value>::SelfType<'k>>,
);

/// A row, owned: key and value.
pub type Row<K, V> = (<K as Field>::Owned, <V as Field>::Owned);
type Rows<K, V> = Vec<Row<K, V>>;

impl<K: Field + redb::Key, V: Field> Table<'_, K, V> {
    /// The value at `key`.
    pub fn get<'k>(&self, key: K::SelfType<'k>) -> Result<Option<V::Owned>, TableError> {
        match &self.0 {
            TableOn::Write(t) => Ok(t.get(key)?.map(|g| V::own(g.value()))),
            TableOn::Read(t) => Ok(t.get(key)?.map(|g| V::own(g.value()))),
            TableOn::Missing(_) => Ok(None),
            TableOn::Pg { rows, name } => match rows.get(name, &encode::<K>(&key))? {
                Some(bytes) => decode::<V>(name, &bytes).map(Some),
                None => Ok(None),
            },
        }
    }

    /// Sets the value at `key`.
    pub fn insert<'k, 'v>(
        &mut self,
        key: K::SelfType<'k>,
        value: V::SelfType<'v>,
    ) -> Result<(), TableError> {
        match &mut self.0 {
            TableOn::Write(t) => {
                t.insert(key, value)?;
                Ok(())
            }
            TableOn::Read(t) => Err(read_only(t.name())),
            TableOn::Missing(name) => Err(read_only(name)),
            TableOn::Pg { rows, name } => {
                Ok(rows.put(name, &encode::<K>(&key), &encode::<V>(&value))?)
            }
        }
    }

    /// The rows of `range`, by key.
    pub fn range<'k>(&self, range: Range<'k, K>) -> Result<Rows<K, V>, TableError> {
        self.scan(range, Scan::All)
    }

    /// The rows whose key starts with the fields of `lo`.. `hi`: sugar for
    /// a range from `lo` included to `hi` excluded.
    pub fn between<'k>(
        &self,
        lo: K::SelfType<'k>,
        hi: K::SelfType<'k>,
    ) -> Result<Rows<K, V>, TableError> {
        self.range((Bound::Included(lo), Bound::Excluded(hi)))
    }

    /// The last row of `range`.
    pub fn last<'k>(&self, range: Range<'k, K>) -> Result<Option<Row<K, V>>, TableError> {
        Ok(self.scan(range, Scan::Last(1))?.pop())
    }

    /// The last `n` rows of `range`, last first: a bounded scan from the
    /// end (a reader pages back through a log with it, each page's
    /// smallest key the excluded upper bound of the next).
    pub fn last_n<'k>(&self, range: Range<'k, K>, n: usize) -> Result<Rows<K, V>, TableError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        self.scan(range, Scan::Last(n))
    }

    /// The first row of `range`.
    pub fn first<'k>(&self, range: Range<'k, K>) -> Result<Option<Row<K, V>>, TableError> {
        Ok(self.scan(range, Scan::First)?.pop())
    }

    /// Every row, by key.
    pub fn all(&self) -> Result<Rows<K, V>, TableError> {
        self.range((Bound::Unbounded, Bound::Unbounded))
    }

    fn scan<'k>(&self, range: Range<'k, K>, scan: Scan) -> Result<Rows<K, V>, TableError> {
        fn collect<'g, K: Field + redb::Key, V: Field>(
            mut it: redb::Range<'g, K, V>,
            scan: Scan,
        ) -> Result<Rows<K, V>, TableError> {
            let own = |e: Result<(redb::AccessGuard<'g, K>, redb::AccessGuard<'g, V>), _>| {
                e.map(|(k, v)| (K::own(k.value()), V::own(v.value())))
                    .map_err(TableError::from)
            };
            Ok(match scan {
                Scan::All => it.map(own).collect::<Result<_, _>>()?,
                Scan::First => it.next().map(own).transpose()?.into_iter().collect(),
                Scan::Last(n) => it.rev().take(n).map(own).collect::<Result<_, _>>()?,
            })
        }
        match &self.0 {
            TableOn::Write(t) => collect(t.range::<K::SelfType<'k>>(range)?, scan),
            TableOn::Read(t) => collect(t.range::<K::SelfType<'k>>(range)?, scan),
            TableOn::Missing(_) => Ok(Vec::new()),
            TableOn::Pg { rows, name } => {
                let bound = |b: &Bound<K::SelfType<'k>>| match b {
                    Bound::Included(k) => Bound::Included(encode::<K>(k)),
                    Bound::Excluded(k) => Bound::Excluded(encode::<K>(k)),
                    Bound::Unbounded => Bound::Unbounded,
                };
                let found = rows.scan(name, (bound(&range.0), bound(&range.1)), scan)?;
                found
                    .iter()
                    .map(|(k, v)| Ok((decode::<K>(name, k)?, decode::<V>(name, v)?)))
                    .collect()
            }
        }
    }
}

/// Rows a [`Table::pick_last`] reads at a time.
const LOG_PAGE: usize = 256;

/// A log: a table keyed by numbers 1, 2, 3, ... that an owner appends to.
impl<V: Field> Table<'_, u64, V> {
    /// The key after the table's last one: 1 for an empty table. An owner
    /// appends under it to keep a log numbered 1, 2, 3, ... without gaps;
    /// the write transaction makes the number its own (on PostgreSQL,
    /// appenders that read the same last key conflict, and all but one run
    /// again).
    pub fn next_key(&self) -> Result<u64, TableError> {
        let last = self.last((Bound::Unbounded, Bound::Unbounded))?;
        last.map_or(Some(1), |(k, _)| k.checked_add(1))
            .ok_or_else(|| TableError::db("the table has no key left after u64::MAX"))
    }

    /// What `pick` makes of the rows it keeps (`Some`), in key order: all
    /// of them, or only the last `n`. With `n` the rows are read from the
    /// end, a page at a time, and the scan stops once `n` are kept, so a
    /// reader of a log's tail does not read the whole log.
    pub fn pick_last<T, E: From<TableError>>(
        &self,
        n: Option<usize>,
        mut pick: impl FnMut(u64, V::Owned) -> Result<Option<T>, E>,
    ) -> Result<Vec<T>, E> {
        let mut out = Vec::new();
        let Some(n) = n else {
            for (k, v) in self.all()? {
                out.extend(pick(k, v)?);
            }
            return Ok(out);
        };
        let mut below = Bound::Unbounded;
        while out.len() < n {
            let page = self.last_n((Bound::Unbounded, below), LOG_PAGE)?;
            let (full, smallest) = (page.len() == LOG_PAGE, page.last().map(|(k, _)| *k));
            for (k, v) in page {
                if out.len() == n {
                    break;
                }
                out.extend(pick(k, v)?);
            }
            match smallest {
                Some(k) if full => below = Bound::Excluded(k),
                _ => break,
            }
        }
        out.reverse();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc2(a: &str, b: &str) -> Vec<u8> {
        encode::<(&'static str, &'static str)>(&(a, b))
    }

    #[test]
    fn encoded_tuples_sort_as_the_tuples_do() {
        let mut keys = vec![
            ("a", "b"),
            ("a\0", ""),
            ("a", ""),
            ("", "z"),
            ("ab", ""),
            ("a", "\0"),
            ("a\u{ff}", ""),
        ];
        let mut by_bytes = keys.clone();
        keys.sort();
        by_bytes.sort_by_key(|(a, b)| enc2(a, b));
        assert_eq!(keys, by_bytes);
        let mut nums = [
            (String::from("g"), 300u64),
            ("g".into(), 2),
            ("f".into(), u64::MAX),
        ];
        let mut sorted = nums.clone();
        sorted.sort();
        nums.sort_by_key(|(g, n)| encode::<(&'static str, u64)>(&(g.as_str(), *n)));
        assert_eq!(nums, sorted);
    }

    #[test]
    fn encoded_fields_decode_back_and_bad_bytes_are_refused() {
        let bytes = encode::<(&'static str, &'static str, &'static str, &'static str)>(&(
            "g\0x", "", "é", "d",
        ));
        let back = decode::<(&'static str, &'static str, &'static str, &'static str)>("t", &bytes);
        assert_eq!(
            back.unwrap(),
            ("g\0x".into(), String::new(), "é".into(), "d".into())
        );
        assert!(decode::<&'static str>("t", b"abc").is_err(), "unterminated");
        assert!(
            decode::<&'static str>("t", b"a\0\x01x").is_err(),
            "trailing bytes"
        );
        assert!(
            decode::<&'static str>("t", b"a\0\x07\0\x01").is_err(),
            "bad escape"
        );
        assert!(decode::<u64>("t", b"1234").is_err(), "short number");
    }
}
