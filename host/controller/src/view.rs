//! `view_agent_graph`: the bounded snapshot of a projection, its cursor
//! paging and its text rendering (seed-contracts §2.6).

use std::collections::HashSet;

use serde::Serialize;
use serde_json::Value;

use crate::state::{RecordFacet, RecordOutcome, SelectedResultInput, WorkTarget};

use crate::error::ToolFailure;
use crate::projection::{Projection, WorkEntry, WorkStatus};
use crate::rules::{
    VIEW_MAX_INSTRUCTION_CHARS, VIEW_MAX_LIVE_STATE, VIEW_MAX_READINESS, VIEW_MAX_RECORDS,
    VIEW_MAX_STOPPED_TARGETS, VIEW_MAX_SUMMARY_CHARS, VIEW_MAX_TERMINAL_WORK, one_line,
    truncate_utf16,
};

/// The model-visible snapshot (`AgentGraphToolSnapshot`), in the seed's key
/// order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ToolSnapshot {
    pub graph_id: String,
    pub closed: bool,
    pub revision: u64,
    pub update_count: usize,
    pub work: Vec<WorkView>,
    pub stopped_targets: Vec<StopView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish: Option<FinishView>,
    pub records: Vec<RecordView>,
    pub readiness: ReadinessView,
    pub omitted: Omitted,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WorkView {
    pub work_id: String,
    pub target: WorkTarget,
    pub instruction: String,
    pub instruction_truncated: bool,
    pub input_ids: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub selected_result_inputs: Vec<SelectedResultInput>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    pub status: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StopView {
    pub target_id: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FinishView {
    pub result_ids: Vec<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordView {
    pub record_id: String,
    pub operator_id: String,
    pub summary: String,
    pub summary_truncated: bool,
    pub facets: Vec<RecordFacet>,
    pub emitted_at: u64,
}

/// Readiness intents are always empty: the controller passes no readiness
/// policies (seed §3 item 7). `routesCount` counts, as the seed's does,
/// every record once per edge leaving its operator
/// ([`Projection::routes_count`]): the edges are the ones the operators
/// were provisioned with.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ReadinessView {
    pub intents: Vec<Value>,
    pub routes_count: u64,
}

/// What the view leaves out, by kind.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Omitted {
    pub work: usize,
    pub stopped_targets: usize,
    pub records: usize,
    /// Always 0 here. The seed counts the partial events of operator
    /// sessions (streaming chunks) it skipped when it folded records from
    /// their event stream; this host writes a record only when an outcome
    /// has settled, whole and in one transaction, so there is never a
    /// partial one to skip (`host/controller/DESIGN.md`, "Tables and rules").
    pub partial_records: usize,
    pub readiness: usize,
}

const CURSOR_PREFIXES: [&str; 3] = ["work:", "record:", "intent:"];

fn stale_cursor() -> ToolFailure {
    ToolFailure::invalid("agent graph view cursor is stale or invalid")
}

/// One page of the live entries: requested work (commit order), then every
/// record, then readiness intents (none). The page is the 64 entries after
/// the cursor's entry; `nextCursor` names the last visible entry and is set
/// only when more follow.
struct Page {
    work: HashSet<String>,
    records: HashSet<String>,
    next_cursor: Option<String>,
}

fn paginate(entries: &[(&'static str, &str)], cursor: Option<&str>) -> Result<Page, ToolFailure> {
    let start = match cursor {
        None => 0,
        Some(c) => {
            if !CURSOR_PREFIXES.iter().any(|p| c.starts_with(p)) {
                return Err(stale_cursor());
            }
            let at = entries
                .iter()
                .position(|(kind, id)| {
                    c.strip_prefix(kind).and_then(|rest| rest.strip_prefix(':')) == Some(*id)
                })
                .ok_or_else(stale_cursor)?;
            at + 1
        }
    };
    let end = (start + VIEW_MAX_LIVE_STATE).min(entries.len());
    let visible = &entries[start..end];
    let mut page = Page {
        work: HashSet::new(),
        records: HashSet::new(),
        next_cursor: None,
    };
    for (kind, id) in visible {
        match *kind {
            "work" => page.work.insert((*id).to_owned()),
            _ => page.records.insert((*id).to_owned()),
        };
    }
    if let Some((kind, id)) = visible.last()
        && end < entries.len()
    {
        page.next_cursor = Some(format!("{kind}:{id}"));
    }
    Ok(page)
}

/// `buildAgentGraphToolSnapshot`.
pub(crate) fn build_snapshot(
    projection: &Projection,
    cursor: Option<&str>,
) -> Result<ToolSnapshot, ToolFailure> {
    let mut entries: Vec<(&'static str, &str)> = projection
        .requested()
        .map(|w| ("work", w.work_id()))
        .collect();
    entries.extend(
        projection
            .records()
            .iter()
            .map(|r| ("record", r.record_id.as_str())),
    );
    let page = paginate(&entries, cursor)?;
    let (work, work_omitted) = work_views(projection, &page);
    let (records, records_omitted) = record_views(projection, &page);
    let stopped = projection.stopped_targets();
    let stopped_tail = &stopped[stopped.len().saturating_sub(VIEW_MAX_STOPPED_TARGETS)..];
    let intents: Vec<Value> = Vec::new();
    debug_assert!(intents.len() <= VIEW_MAX_READINESS);

    Ok(ToolSnapshot {
        graph_id: projection.graph_id().to_owned(),
        closed: projection.closed(),
        revision: projection.revision(),
        update_count: projection.update_count(),
        work,
        stopped_targets: stopped_tail
            .iter()
            .map(|s| StopView {
                target_id: s.target_id.clone(),
                reason: s.reason.clone(),
            })
            .collect(),
        finish: projection.finish().map(|f| FinishView {
            result_ids: f.result_ids.clone(),
            reason: f.reason.clone(),
        }),
        records,
        readiness: ReadinessView {
            intents,
            routes_count: projection.routes_count(),
        },
        omitted: Omitted {
            work: work_omitted,
            stopped_targets: stopped.len() - stopped_tail.len(),
            records: records_omitted,
            partial_records: 0,
            readiness: 0,
        },
        next_cursor: page.next_cursor,
    })
}

/// The requested work on the page, then the last
/// [`VIEW_MAX_TERMINAL_WORK`] ended items; and how many items are left out.
fn work_views(projection: &Projection, page: &Page) -> (Vec<WorkView>, usize) {
    let live = projection
        .requested()
        .filter(|w| page.work.contains(w.work_id()));
    let terminal: Vec<&WorkEntry> = projection
        .work()
        .iter()
        .filter(|w| w.status() != WorkStatus::Requested)
        .collect();
    let tail = &terminal[terminal.len().saturating_sub(VIEW_MAX_TERMINAL_WORK)..];
    let work = live.chain(tail.iter().copied()).map(work_view).collect();
    let requested_off_page = projection
        .requested()
        .filter(|w| !page.work.contains(w.work_id()))
        .count();
    (work, (terminal.len() - tail.len()) + requested_off_page)
}

fn work_view(entry: &WorkEntry) -> WorkView {
    let w = entry.work();
    let (instruction, instruction_truncated) =
        truncate_utf16(&w.instruction, VIEW_MAX_INSTRUCTION_CHARS);
    WorkView {
        work_id: w.work_id.clone(),
        target: w.target.clone(),
        instruction,
        instruction_truncated,
        input_ids: w.input_ids.clone(),
        selected_result_inputs: w.selected_result_inputs.clone(),
        replaces: w.replaces.clone(),
        status: entry.status().as_str(),
    }
}

/// The last [`VIEW_MAX_RECORDS`] records on the page; and how many records
/// are off the page.
fn record_views(projection: &Projection, page: &Page) -> (Vec<RecordView>, usize) {
    let on_page: Vec<_> = projection
        .records()
        .iter()
        .filter(|r| page.records.contains(&r.record_id))
        .collect();
    let records_tail = &on_page[on_page.len().saturating_sub(VIEW_MAX_RECORDS)..];
    let records = records_tail
        .iter()
        .map(|r| {
            let (summary, summary_truncated) = truncate_utf16(&r.summary, VIEW_MAX_SUMMARY_CHARS);
            RecordView {
                record_id: r.record_id.clone(),
                operator_id: r.operator_id.clone(),
                summary,
                summary_truncated,
                facets: r.facets.clone(),
                emitted_at: r.emitted_at,
            }
        })
        .collect();
    let records_off_page = projection
        .records()
        .iter()
        .filter(|r| !page.records.contains(&r.record_id))
        .count();
    (records, records_off_page)
}

/// The text block the model sees.
pub(crate) fn render_snapshot(s: &ToolSnapshot) -> String {
    let mut lines = vec![
        format!(
            "Agent graph {} \u{2014} {}, revision {}, {} update(s).",
            s.graph_id,
            if s.closed { "closed" } else { "open" },
            s.revision,
            s.update_count
        ),
        format!("Work ({} visible):", s.work.len()),
    ];
    for w in &s.work {
        let replaces = w
            .replaces
            .as_ref()
            .map(|r| format!(" (replaces {r})"))
            .unwrap_or_default();
        lines.push(format!(
            "  [{}] {} \u{2192} {}:{}{}: {}",
            w.status,
            w.work_id,
            w.target.kind.as_str(),
            w.target.id,
            replaces,
            one_line(&w.instruction)
        ));
    }
    if s.work.is_empty() {
        lines.push("  none".to_owned());
    }
    lines.push(format!("Records ({} visible):", s.records.len()));
    for r in &s.records {
        lines.push(format!(
            "  {} {}: {}",
            r.record_id,
            r.operator_id,
            one_line(&r.summary)
        ));
    }
    if s.records.is_empty() {
        lines.push("  none".to_owned());
    }
    lines.push(format!(
        "Omitted: work={}, stoppedTargets={}, records={}, partialRecords={}, readiness={}",
        s.omitted.work,
        s.omitted.stopped_targets,
        s.omitted.records,
        s.omitted.partial_records,
        s.omitted.readiness
    ));
    if let Some(c) = &s.next_cursor {
        lines.push(format!("Next cursor: {c}"));
    }
    lines.join("\n")
}

/// The most records a wake's text lists; the rest are counted.
const WAKE_MAX_RECORDS: usize = VIEW_MAX_RECORDS;

/// The text of a delivered supervisor wake: the graph's terminal records
/// since the wake was claimed (the last [`WAKE_MAX_RECORDS`], summaries
/// bounded as in a view, the rest counted) and how much work is pending,
/// then what to do next.
pub(crate) fn render_wake(projection: &Projection, wake_id: &str, since: u64) -> String {
    let records: Vec<_> = projection
        .records()
        .iter()
        .filter(|r| r.emitted_at >= since)
        .collect();
    let shown = &records[records.len().saturating_sub(WAKE_MAX_RECORDS)..];
    let mut lines = vec![format!(
        "Wake {wake_id}: agent graph {} reached a checkpoint. New records ({}):",
        projection.graph_id(),
        records.len()
    )];
    for r in shown {
        let (summary, _) = truncate_utf16(&r.summary, VIEW_MAX_SUMMARY_CHARS);
        lines.push(format!(
            "  {} (work {}, {}): {}",
            r.record_id,
            r.work_id.as_deref().unwrap_or("-"),
            r.outcome.map_or("record", RecordOutcome::as_str),
            one_line(&summary)
        ));
    }
    if records.len() > shown.len() {
        lines.push(format!(
            "  ({} earlier omitted)",
            records.len() - shown.len()
        ));
    }
    lines.push(format!(
        "{} work items are still pending. Inspect with view_agent_graph, schedule or finish \
         with update_agent_graph, then yield_agent_graph.",
        projection.requested().count()
    ));
    lines.join("\n")
}
