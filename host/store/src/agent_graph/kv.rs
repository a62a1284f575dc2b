//! The tables of the agent-graph store, on either backend.
//!
//! The store's rules are written once, against [`Tx`] and [`Table`]: on
//! redb a table is the typed redb table of `src/schema.rs`; on PostgreSQL
//! the same rows live in `sg_agent_graph_rows (tbl, key, value)`, with key
//! and value in the order-preserving byte encoding of [`Field`]. Bytewise
//! order of encoded keys is the order of the redb keys, so a key range means
//! the same rows on both backends.

use std::ops::Bound;

use redb::{ReadableTable, TableDefinition, TableHandle};

use super::ControlError;
use crate::postgres::agent_graph::{PgRows, Scan};

/// A key or value type of an agent-graph table, with its owned form and an
/// encoding whose bytewise order is the type's order: a string is its
/// bytes with `00` written `00 ff`, ended by `00 01`; a `u64` is 8 bytes
/// big-endian; a tuple is its fields one after another.
pub(super) trait Field: redb::Value + 'static {
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

fn decode<F: Field>(table: &str, bytes: &[u8]) -> Result<F::Owned, ControlError> {
    let mut input = bytes;
    match F::take(&mut input) {
        Some(v) if input.is_empty() => Ok(v),
        _ => Err(ControlError::new(
            super::ControlErrorCode::MalformedState,
            format!("a row of table {table} has a malformed key or value"),
        )),
    }
}

/// A transaction of the agent-graph store.
pub(super) enum Tx<'a> {
    RedbWrite(&'a redb::WriteTransaction),
    RedbRead(&'a redb::ReadTransaction),
    Pg(&'a PgRows),
}

/// One table in a [`Tx`].
pub(super) enum Table<'a, K: Field + redb::Key, V: Field> {
    Write(redb::Table<'a, K, V>),
    Read(redb::ReadOnlyTable<K, V>),
    Pg { rows: &'a PgRows, name: String },
}

impl<'a> Tx<'a> {
    pub(super) fn open_table<K: Field + redb::Key, V: Field>(
        &self,
        def: TableDefinition<'static, K, V>,
    ) -> Result<Table<'a, K, V>, ControlError> {
        Ok(match *self {
            Tx::RedbWrite(tx) => Table::Write(tx.open_table(def)?),
            Tx::RedbRead(tx) => Table::Read(tx.open_table(def)?),
            Tx::Pg(rows) => Table::Pg {
                rows,
                name: def.name().to_owned(),
            },
        })
    }
}

/// A range of keys.
pub(super) type Range<'k, K> = (
    Bound<<K as redb::Value>::SelfType<'k>>,
    Bound<<K as redb::Value>::SelfType<'k>>,
);

/// A row, owned.
type Row<K, V> = (<K as Field>::Owned, <V as Field>::Owned);
type Rows<K, V> = Vec<Row<K, V>>;

impl<K: Field + redb::Key, V: Field> Table<'_, K, V> {
    /// The value at `key`.
    pub(super) fn get<'k>(&self, key: K::SelfType<'k>) -> Result<Option<V::Owned>, ControlError> {
        match self {
            Table::Write(t) => Ok(t.get(key)?.map(|g| V::own(g.value()))),
            Table::Read(t) => Ok(t.get(key)?.map(|g| V::own(g.value()))),
            Table::Pg { rows, name } => match rows.get(name, &encode::<K>(&key))? {
                Some(bytes) => decode::<V>(name, &bytes).map(Some),
                None => Ok(None),
            },
        }
    }

    /// Sets the value at `key`.
    pub(super) fn insert<'k, 'v>(
        &mut self,
        key: K::SelfType<'k>,
        value: V::SelfType<'v>,
    ) -> Result<(), ControlError> {
        match self {
            Table::Write(t) => {
                t.insert(key, value)?;
                Ok(())
            }
            Table::Read(t) => Err(ControlError::storage(format!(
                "table {} was opened read-only",
                t.name()
            ))),
            Table::Pg { rows, name } => {
                Ok(rows.put(name, &encode::<K>(&key), &encode::<V>(&value))?)
            }
        }
    }

    /// The rows of `range`, by key.
    pub(super) fn range<'k>(&self, range: Range<'k, K>) -> Result<Rows<K, V>, ControlError> {
        self.scan(range, Scan::All)
    }

    /// The rows whose key starts with the fields of `lo`.. `hi`: sugar for
    /// a range from `lo` included to `hi` excluded.
    pub(super) fn between<'k>(
        &self,
        lo: K::SelfType<'k>,
        hi: K::SelfType<'k>,
    ) -> Result<Rows<K, V>, ControlError> {
        self.range((Bound::Included(lo), Bound::Excluded(hi)))
    }

    /// The last row of `range`.
    pub(super) fn last<'k>(&self, range: Range<'k, K>) -> Result<Option<Row<K, V>>, ControlError> {
        Ok(self.scan(range, Scan::Last)?.pop())
    }

    /// The first row of `range`.
    pub(super) fn first<'k>(&self, range: Range<'k, K>) -> Result<Option<Row<K, V>>, ControlError> {
        Ok(self.scan(range, Scan::First)?.pop())
    }

    /// Every row, by key.
    pub(super) fn all(&self) -> Result<Rows<K, V>, ControlError> {
        self.range((Bound::Unbounded, Bound::Unbounded))
    }

    fn scan<'k>(&self, range: Range<'k, K>, scan: Scan) -> Result<Rows<K, V>, ControlError> {
        fn collect<'g, K: Field + redb::Key, V: Field>(
            mut it: redb::Range<'g, K, V>,
            scan: Scan,
        ) -> Result<Rows<K, V>, ControlError> {
            let own = |e: Result<(redb::AccessGuard<'g, K>, redb::AccessGuard<'g, V>), _>| {
                e.map(|(k, v)| (K::own(k.value()), V::own(v.value())))
                    .map_err(ControlError::from)
            };
            Ok(match scan {
                Scan::All => it.map(own).collect::<Result<_, _>>()?,
                Scan::First => it.next().map(own).transpose()?.into_iter().collect(),
                Scan::Last => it.next_back().map(own).transpose()?.into_iter().collect(),
            })
        }
        match self {
            Table::Write(t) => collect(t.range::<K::SelfType<'k>>(range)?, scan),
            Table::Read(t) => collect(t.range::<K::SelfType<'k>>(range)?, scan),
            Table::Pg { rows, name } => {
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
