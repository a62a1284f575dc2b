//! Graph records: the outcomes of work, written once.

use sandgraph_store::tables::{Table, Tx};

use super::tables;
use super::{
    AgentGraphStore, ControlError, ControlErrorCode, GraphRecord, decode, encode, malformed,
};

type RecordKey = (&'static str, &'static str);

pub(super) fn read_record(
    records: &Table<'_, RecordKey, &'static str>,
    graph: &str,
    record_id: &str,
) -> Result<Option<GraphRecord>, ControlError> {
    let Some(value) = records.get((graph, record_id))? else {
        return Ok(None);
    };
    let key = (graph, record_id);
    let record: GraphRecord = decode(tables::AG_RECORDS.name(), &key, &value)?;
    check_record_key(&key, &record)?;
    Ok(Some(record))
}

fn check_record_key(key: &(&str, &str), record: &GraphRecord) -> Result<(), ControlError> {
    if record.graph_id != key.0 || record.record_id != key.1 {
        return Err(malformed(
            tables::AG_RECORDS.name(),
            key,
            format!(
                "it holds record {} of agent graph {}",
                record.record_id, record.graph_id
            ),
        ));
    }
    Ok(())
}

/// The order of [`AgentGraphStore::list_records`].
fn record_order(r: &GraphRecord) -> (u64, &str, &str, u64, &str) {
    (
        r.emitted_at,
        &r.operator_id,
        &r.source.run_id,
        r.source.seq,
        &r.record_id,
    )
}

/// [`AgentGraphStore::append_record`] inside `tx`.
pub(super) fn append_in(tx: &Tx<'_>, record: &GraphRecord) -> Result<bool, ControlError> {
    let graph = record.graph_id.as_str();
    let id = record.record_id.as_str();
    let mut records = tx.open_table(tables::AG_RECORDS)?;
    if let Some(existing) = read_record(&records, graph, id)? {
        if existing != *record {
            return Err(ControlError::new(
                ControlErrorCode::RecordConflict,
                format!(
                    "agent graph {graph}: record {id} was already appended with different content"
                ),
            ));
        }
        return Ok(false);
    }
    let text = encode(tables::AG_RECORDS.name(), record)?;
    records.insert((graph, id), text.as_str())?;
    Ok(true)
}

impl AgentGraphStore {
    /// Appends a record: `true` when it was written, `false` when the very
    /// same record (every field equal) was already there; the same record id
    /// with other content → `record-conflict`. Records of a finished graph
    /// are accepted: work that was executing when the graph finished still
    /// settles, and its outcome is kept.
    pub fn append_record(&self, record: GraphRecord) -> Result<bool, ControlError> {
        self.write(|tx| append_in(tx, &record).map(|created| (created, created)))
    }

    /// The graph's records, ordered by `emittedAt`, operator id, source run
    /// id, source seq, then record id.
    pub fn list_records(&self, graph_id: &str) -> Result<Vec<GraphRecord>, ControlError> {
        let mut out: Vec<GraphRecord> =
            self.graph_rows(tables::AG_RECORDS, graph_id, check_record_key)?;
        out.sort_by(|a, b| record_order(a).cmp(&record_order(b)));
        Ok(out)
    }

    /// One record of the graph; `None` when there is none of that id.
    pub fn read_record(
        &self,
        graph_id: &str,
        record_id: &str,
    ) -> Result<Option<GraphRecord>, ControlError> {
        self.read(|tx| read_record(&tx.open_table(tables::AG_RECORDS)?, graph_id, record_id))
    }
}
