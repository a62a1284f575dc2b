//! Row encodings of durable threads and the redb reads and writes over
//! them (see `DESIGN.md` for the tables).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{Database, ReadableTable, WriteTransaction};
use sandgraph_core::{Checkpoint, CheckpointSource, SendPacket, TaskRecord};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::MAX_THREAD_ID_LEN;
use crate::{StoreError, schema};

/// `THREADS` value.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ThreadRow {
    pub(super) graph: String,
    pub(super) head: String,
    pub(super) created_at_ms: u64,
    pub(super) updated_at_ms: u64,
}

/// `CHECKPOINTS` value: a [`Checkpoint`] without its id (the key has it) and
/// with `values` as `[[channel, blob], ...]` references into `BLOBS`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CheckpointRow {
    pub(crate) parent: Option<String>,
    pub(crate) source: CheckpointSource,
    pub(crate) step: u32,
    pub(crate) created_at_ms: u64,
    pub(crate) channel_versions: BTreeMap<String, u64>,
    pub(crate) versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) values: Vec<(String, u64)>,
    pub(crate) pull: BTreeSet<String>,
    pub(crate) joins_seen: BTreeMap<String, BTreeSet<String>>,
    pub(crate) sends: Vec<SendPacket>,
}

/// The same encoding as [`CheckpointRow`], borrowed from a [`Checkpoint`].
#[derive(Serialize)]
struct CheckpointRowRef<'a> {
    parent: &'a Option<String>,
    source: CheckpointSource,
    step: u32,
    created_at_ms: u64,
    channel_versions: &'a BTreeMap<String, u64>,
    versions_seen: &'a BTreeMap<String, BTreeMap<String, u64>>,
    values: &'a [(String, u64)],
    pull: &'a BTreeSet<String>,
    joins_seen: &'a BTreeMap<String, BTreeSet<String>>,
    sends: &'a [SendPacket],
}

impl CheckpointRow {
    /// The checkpoint `id` this row describes, with its `values` read back.
    pub(crate) fn into_checkpoint(self, id: String, values: Map<String, Value>) -> Checkpoint {
        Checkpoint {
            id,
            parent: self.parent,
            source: self.source,
            step: self.step,
            created_at_ms: self.created_at_ms,
            channel_versions: self.channel_versions,
            versions_seen: self.versions_seen,
            values,
            pull: self.pull,
            joins_seen: self.joins_seen,
            sends: self.sends,
        }
    }

    /// The blob of each channel that has a value, with its version.
    pub(crate) fn refs(&self) -> BTreeMap<String, BlobRef> {
        self.values
            .iter()
            .map(|(channel, blob)| {
                let version = self.channel_versions.get(channel).copied();
                (
                    channel.clone(),
                    BlobRef {
                        version,
                        blob: *blob,
                    },
                )
            })
            .collect()
    }
}

/// Where a channel's value is stored, and the version it had there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlobRef {
    version: Option<u64>,
    blob: u64,
}

/// A stored checkpoint's id and blob references: what a following
/// checkpoint deduplicates against.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) id: String,
    pub(crate) refs: BTreeMap<String, BlobRef>,
}

pub(crate) fn encode<T: Serialize + ?Sized>(
    table: &'static str,
    value: &T,
) -> Result<String, StoreError> {
    serde_json::to_string(value)
        .map_err(|e| StoreError::Db(format!("cannot encode a {table} record: {e}")))
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(
    table: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::corrupt(table, e))
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The string right after `s` in byte order: `s + "\0"`. So the tuple range
/// `(s, "")..(successor(s), "")` holds exactly the keys whose first element
/// is `s`, whatever the later elements are.
pub(super) fn successor(s: &str) -> String {
    format!("{s}\0")
}

pub(crate) fn check_thread_id(thread: &str) -> Result<(), StoreError> {
    let reason = if thread.is_empty() {
        "it is empty"
    } else if thread.len() > MAX_THREAD_ID_LEN {
        "it is longer than 256 bytes"
    } else if thread.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(StoreError::InvalidThreadId {
        thread: thread.to_owned(),
        reason,
    })
}

/// A checkpoint id's number: ids are 16 lowercase hex digits.
fn id_number(thread: &str, id: &str) -> Result<u64, StoreError> {
    let valid = id.len() == 16 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    valid
        .then(|| u64::from_str_radix(id, 16).ok())
        .flatten()
        .ok_or_else(|| StoreError::InvalidCheckpointId {
            thread: thread.to_owned(),
            id: id.to_owned(),
        })
}

/// Task order within a step: PULL tasks by node, then PUSH tasks by index.
pub(crate) fn task_order(path: &str) -> (u8, u64, &str) {
    if let Some(node) = path.strip_prefix("pull:") {
        (0, 0, node)
    } else if let Some(i) = path.strip_prefix("push:").and_then(|i| i.parse().ok()) {
        (1, i, "")
    } else {
        (2, 0, path)
    }
}

// ---------------------------------------------------------------------------
// Reading (generic over read and write transactions' tables)

type CheckpointKey = (&'static str, &'static str);

pub(super) fn read_thread(
    t: &impl ReadableTable<&'static str, &'static str>,
    thread: &str,
) -> Result<Option<ThreadRow>, StoreError> {
    t.get(thread)?
        .map(|v| decode("threads", v.value()))
        .transpose()
}

pub(super) fn read_row(
    t: &impl ReadableTable<CheckpointKey, &'static str>,
    thread: &str,
    id: &str,
) -> Result<Option<CheckpointRow>, StoreError> {
    t.get((thread, id))?
        .map(|v| decode("checkpoints", v.value()))
        .transpose()
}

/// Rebuilds a checkpoint from its row and blobs.
pub(super) fn rebuild(
    blobs: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    thread: &str,
    id: &str,
    row: CheckpointRow,
) -> Result<Checkpoint, StoreError> {
    let mut values = Map::with_capacity(row.values.len());
    for (channel, blob) in &row.values {
        let Some(text) = blobs.get((thread, channel.as_str(), *blob))? else {
            return Err(StoreError::corrupt(
                "blobs",
                format!(
                    "checkpoint {id:?} of thread {thread:?} refers to missing value {blob:016x} of channel {channel:?}"
                ),
            ));
        };
        values.insert(channel.clone(), decode("blobs", text.value())?);
    }
    Ok(row.into_checkpoint(id.to_owned(), values))
}

/// The task records saved against checkpoint `id`, in task order.
pub(super) fn read_writes(
    t: &impl ReadableTable<(&'static str, &'static str, &'static str), &'static str>,
    thread: &str,
    id: &str,
) -> Result<Vec<TaskRecord>, StoreError> {
    let end = successor(id);
    let mut records = Vec::new();
    for entry in t.range((thread, id, "")..(thread, end.as_str(), ""))? {
        let (_, v) = entry?;
        records.push(decode::<TaskRecord>("writes", v.value())?);
    }
    records.sort_by(|a, b| task_order(&a.path).cmp(&task_order(&b.path)));
    Ok(records)
}

/// Ids of a thread's checkpoints, oldest first.
pub(super) fn checkpoint_ids(
    t: &impl ReadableTable<CheckpointKey, &'static str>,
    thread: &str,
) -> Result<Vec<String>, StoreError> {
    let end = successor(thread);
    let mut ids = Vec::new();
    for entry in t.range((thread, "")..(end.as_str(), ""))? {
        ids.push(entry?.0.value().1.to_owned());
    }
    Ok(ids)
}

pub(super) fn count_blobs(
    t: &impl ReadableTable<(&'static str, &'static str, u64), &'static str>,
    thread: &str,
) -> Result<usize, StoreError> {
    let end = successor(thread);
    let mut n = 0;
    for entry in t.range((thread, "", 0)..(end.as_str(), "", 0))? {
        entry?;
        n += 1;
    }
    Ok(n)
}

// ---------------------------------------------------------------------------
// Writing

/// A checkpoint encoded for storage.
#[derive(Debug)]
pub(crate) struct PreparedCheckpoint {
    pub(crate) id: String,
    /// The checkpoint id's number: the blob key of values stored with it.
    pub(crate) blob: u64,
    pub(crate) row: String,
    /// Values stored with this checkpoint: (channel, JSON).
    pub(crate) new_blobs: Vec<(String, String)>,
    /// Values taken over from the parent: (channel, blob).
    pub(crate) reused: Vec<(String, u64)>,
}

/// Encodes `c`, storing a channel's value only when the channel's version
/// differs from its version in `parent` (when `parent` is `c`'s parent).
pub(crate) fn prepare_checkpoint(
    thread: &str,
    c: &Checkpoint,
    parent: Option<&Head>,
) -> Result<(PreparedCheckpoint, Head), StoreError> {
    let blob = id_number(thread, &c.id)?;
    let parent = parent.filter(|p| c.parent.as_deref() == Some(p.id.as_str()));
    let mut values = Vec::with_capacity(c.values.len());
    let mut refs = BTreeMap::new();
    let mut new_blobs = Vec::new();
    let mut reused = Vec::new();
    for (channel, value) in &c.values {
        let version = c.channel_versions.get(channel).copied();
        let same = parent
            .and_then(|p| p.refs.get(channel))
            .filter(|r| r.version.is_some() && r.version == version);
        let at = match same {
            Some(r) => {
                reused.push((channel.clone(), r.blob));
                r.blob
            }
            None => {
                new_blobs.push((channel.clone(), encode("blobs", value)?));
                blob
            }
        };
        values.push((channel.clone(), at));
        refs.insert(channel.clone(), BlobRef { version, blob: at });
    }
    let row = encode(
        "checkpoints",
        &CheckpointRowRef {
            parent: &c.parent,
            source: c.source,
            step: c.step,
            created_at_ms: c.created_at_ms,
            channel_versions: &c.channel_versions,
            versions_seen: &c.versions_seen,
            values: &values,
            pull: &c.pull,
            joins_seen: &c.joins_seen,
            sends: &c.sends,
        },
    )?;
    let head = Head {
        id: c.id.clone(),
        refs,
    };
    let prepared = PreparedCheckpoint {
        id: c.id.clone(),
        blob,
        row,
        new_blobs,
        reused,
    };
    Ok((prepared, head))
}

/// One thing a writer saves.
#[derive(Debug)]
pub(crate) enum Op {
    Task {
        checkpoint_id: String,
        path: String,
        record: String,
    },
    Checkpoint(PreparedCheckpoint),
}

pub(super) fn prepare_task(checkpoint_id: &str, record: &TaskRecord) -> Result<Op, StoreError> {
    Ok(Op::Task {
        checkpoint_id: checkpoint_id.to_owned(),
        path: record.path.clone(),
        record: encode("writes", record)?,
    })
}

/// Writes a prepared checkpoint as the thread's head. `graph` creates the
/// thread if missing and must match an existing thread's graph; `None`
/// requires the thread to exist.
pub(super) fn write_checkpoint(
    tx: &WriteTransaction,
    thread: &str,
    graph: Option<&str>,
    p: &PreparedCheckpoint,
) -> Result<(), StoreError> {
    let now = now_ms();
    let mut threads = tx.open_table(schema::THREADS)?;
    let row = match read_thread(&threads, thread)? {
        Some(mut row) => {
            if let Some(graph) = graph.filter(|g| *g != row.graph) {
                return Err(StoreError::GraphMismatch {
                    thread: thread.to_owned(),
                    stored: row.graph,
                    requested: graph.to_owned(),
                });
            }
            if p.id <= row.head {
                return Err(StoreError::StaleCheckpoint {
                    thread: thread.to_owned(),
                    id: p.id.clone(),
                    head: row.head,
                });
            }
            row.head = p.id.clone();
            row.updated_at_ms = now;
            row
        }
        None => {
            let Some(graph) = graph else {
                return Err(StoreError::UnknownThread {
                    thread: thread.to_owned(),
                });
            };
            ThreadRow {
                graph: graph.to_owned(),
                head: p.id.clone(),
                created_at_ms: now,
                updated_at_ms: now,
            }
        }
    };
    threads.insert(thread, encode("threads", &row)?.as_str())?;
    tx.open_table(schema::CHECKPOINTS)?
        .insert((thread, p.id.as_str()), p.row.as_str())?;
    let mut blobs = tx.open_table(schema::BLOBS)?;
    for (channel, blob) in &p.reused {
        if blobs.get((thread, channel.as_str(), *blob))?.is_none() {
            return Err(StoreError::corrupt(
                "blobs",
                format!(
                    "checkpoint {:?} of thread {thread:?} would refer to missing value {blob:016x} of channel {channel:?}",
                    p.id
                ),
            ));
        }
    }
    for (channel, value) in &p.new_blobs {
        blobs.insert((thread, channel.as_str(), p.blob), value.as_str())?;
    }
    Ok(())
}

fn write_task(
    tx: &WriteTransaction,
    thread: &str,
    checkpoint_id: &str,
    path: &str,
    record: &str,
) -> Result<(), StoreError> {
    if tx
        .open_table(schema::CHECKPOINTS)?
        .get((thread, checkpoint_id))?
        .is_none()
    {
        return Err(StoreError::UnknownCheckpoint {
            thread: thread.to_owned(),
            id: checkpoint_id.to_owned(),
        });
    }
    tx.open_table(schema::WRITES)?
        .insert((thread, checkpoint_id, path), record)?;
    Ok(())
}

pub(super) fn begin_write(db: &Database) -> Result<WriteTransaction, StoreError> {
    let mut tx = db.begin_write()?;
    tx.set_durability(redb::Durability::Immediate)?;
    Ok(tx)
}

/// Applies `ops`, in order, in `tx`.
pub(super) fn apply_ops(
    tx: &WriteTransaction,
    thread: &str,
    graph: &str,
    ops: &[Op],
) -> Result<(), StoreError> {
    for op in ops {
        match op {
            Op::Task {
                checkpoint_id,
                path,
                record,
            } => write_task(tx, thread, checkpoint_id, path, record)?,
            Op::Checkpoint(p) => write_checkpoint(tx, thread, Some(graph), p)?,
        }
    }
    Ok(())
}

/// Commits `ops`, in order, in one durable transaction: all or nothing.
pub(super) fn commit_ops(
    db: &Database,
    thread: &str,
    graph: &str,
    ops: &[Op],
) -> Result<(), StoreError> {
    let tx = begin_write(db)?;
    apply_ops(&tx, thread, graph, ops)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn checkpoint(id: &str, parent: Option<&str>) -> Checkpoint {
        Checkpoint {
            id: id.into(),
            parent: parent.map(Into::into),
            source: CheckpointSource::Loop,
            step: 3,
            created_at_ms: 17,
            channel_versions: [("a".to_string(), 2), ("b".to_string(), 1)].into(),
            versions_seen: [("n".to_string(), [("a".to_string(), 1)].into())].into(),
            values: serde_json::from_str(r#"{"b": [1, 2], "a": {"z": 1, "y": 2}}"#).unwrap(),
            pull: ["n".to_string()].into(),
            joins_seen: [("j".to_string(), ["x".to_string()].into())].into(),
            sends: vec![SendPacket {
                node: "n".into(),
                payload: Value::from(5),
            }],
        }
    }

    #[test]
    fn a_row_encodes_everything_but_values_and_decodes_back() {
        let c = checkpoint("0000000000000010", Some("000000000000000f"));
        let (p, head) = prepare_checkpoint("t", &c, None).unwrap();
        assert_eq!(p.blob, 16);
        assert_eq!(p.new_blobs.len(), 2, "no parent: every value is new");
        assert!(
            !p.row.contains(r#""z""#),
            "values stay out of the row: {}",
            p.row
        );
        let row: CheckpointRow = serde_json::from_str(&p.row).unwrap();
        assert_eq!(
            row.values,
            vec![("b".to_string(), 16), ("a".to_string(), 16)]
        );
        assert_eq!(row.refs(), head.refs);
        let again = encode("checkpoints", &row).unwrap();
        assert_eq!(again, p.row, "owned and borrowed encodings agree");
    }

    #[test]
    fn only_channels_whose_version_changed_get_a_new_blob() {
        let first = checkpoint("0000000000000010", None);
        let (_, head) = prepare_checkpoint("t", &first, None).unwrap();
        let mut second = checkpoint("0000000000000020", Some("0000000000000010"));
        second.channel_versions.insert("a".into(), 3);
        let (p, _) = prepare_checkpoint("t", &second, Some(&head)).unwrap();
        let new: Vec<&str> = p.new_blobs.iter().map(|(c, _)| c.as_str()).collect();
        assert_eq!(new, ["a"]);
        assert_eq!(p.reused, vec![("b".to_string(), 16)]);
        // A checkpoint whose parent is not the known head stores everything.
        let mut other = checkpoint("0000000000000030", Some("0000000000000001"));
        other.channel_versions.insert("a".into(), 3);
        let (p, _) = prepare_checkpoint("t", &other, Some(&head)).unwrap();
        assert_eq!(p.new_blobs.len(), 2);
    }

    #[test]
    fn ids_and_thread_ids_are_checked() {
        for bad in [
            "",
            "00000000000000",
            "000000000000000G",
            "000000000000000A",
            "0000000000000000x",
        ] {
            assert!(id_number("t", bad).is_err(), "{bad:?}");
        }
        assert_eq!(id_number("t", "00000000000000ff").unwrap(), 255);
        for bad in ["", "a\nb", &"x".repeat(MAX_THREAD_ID_LEN + 1)] {
            let err = check_thread_id(bad).unwrap_err();
            assert!(err.to_string().contains("invalid thread id"), "{err}");
        }
        check_thread_id("user-42/session 7").unwrap();
    }

    #[test]
    fn pending_writes_come_back_in_task_order() {
        let mut paths = vec!["push:10", "pull:b", "push:2", "other", "pull:a"];
        paths.sort_by_key(|p| task_order(p));
        assert_eq!(paths, ["pull:a", "pull:b", "push:2", "push:10", "other"]);
    }
}
