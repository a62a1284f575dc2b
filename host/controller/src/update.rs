//! `update_agent_graph`: the preprocessors, the syntactic compile of the
//! model's input into a store request (seed-contracts §2.7, steps 1–10), and
//! the checks against the live projection.

use std::collections::HashSet;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::state::{
    AGENT_GRAPH_SCHEMA_VERSION, GraphFinish, ScheduleUpdateRequest, ScheduledWork,
    SelectedResultInput, TargetKind, UpdateSource, WorkStop, WorkTarget,
};

use crate::error::ToolFailure;
use crate::ids::{
    cmp_utf16, deterministic_work_id, graph_update_id, scheduled_work_intent_id, stable_hash,
};
use crate::projection::{Projection, WorkStatus};
use crate::rules::{
    MAX_ADD_WORK, MAX_INPUT_IDS, MAX_SCHEDULE_INSTRUCTION_LENGTH, MAX_SCHEDULE_REASON_CHARS,
    MAX_SCHEDULE_RESULT_IDS, MAX_SELECTED_RESULT_INPUTS, MAX_WORK_STOPS, is_identity, is_text,
    js_trim,
};

/// The `operation` discriminator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Operation {
    AddWork,
    Stop,
    Finish,
}

/// The `targetKind` discriminator of an addWork item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum TargetKindInput {
    NewAgent,
    NewPreset,
    ExistingOperator,
}

/// `replacementMode` of an addWork item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ReplacementMode {
    None,
    Replace,
}

/// The model's input. Unknown keys are never read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UpdateInput {
    pub graph_id: String,
    pub operation: Option<Operation>,
    pub add_work: Option<Vec<AddWorkInput>>,
    pub stop: Option<Vec<StopInput>>,
    pub finish: Option<FinishInput>,
    pub idempotency_key: Option<String>,
}

/// One addWork item as the model sent it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AddWorkInput {
    pub target_kind: Option<TargetKindInput>,
    pub agent_id: Option<String>,
    pub subagent_id: Option<String>,
    pub operator_id: Option<String>,
    pub instruction: String,
    pub input_ids: Option<Vec<String>>,
    pub selected_result_inputs: Option<Vec<SelectedInput>>,
    pub replaces: Option<String>,
    pub replacement_mode: Option<ReplacementMode>,
    pub work_id: Option<String>,
}

/// One selected historical result.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SelectedInput {
    pub source_graph_id: String,
    pub result_id: String,
}

/// One stop.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StopInput {
    pub target_id: String,
    pub reason: String,
}

/// The finish.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FinishInput {
    pub result_ids: Option<Vec<String>>,
    pub reason: String,
}

/// `cleanUpdateInput`: with `operation` set, only that payload (and the
/// graph id and idempotency key) is kept; without it, all three.
pub(crate) fn clean_update_input(input: UpdateInput) -> UpdateInput {
    let UpdateInput {
        graph_id,
        operation,
        add_work,
        stop,
        finish,
        idempotency_key,
    } = input;
    let keep = |op: Operation| operation.is_none() || operation == Some(op);
    UpdateInput {
        graph_id,
        operation,
        add_work: add_work.filter(|_| keep(Operation::AddWork)),
        stop: stop.filter(|_| keep(Operation::Stop)),
        finish: finish.filter(|_| keep(Operation::Finish)),
        idempotency_key,
    }
}

/// `cleanAddWorkInput`: with `targetKind` set, only its identity field is
/// kept (new_agent → agentId, new_preset → subagentId, existing_operator →
/// operatorId); `replacementMode: none` drops `replaces`.
pub(crate) fn clean_add_work_input(input: AddWorkInput) -> AddWorkInput {
    let AddWorkInput {
        target_kind,
        agent_id,
        subagent_id,
        operator_id,
        instruction,
        input_ids,
        selected_result_inputs,
        replaces,
        replacement_mode,
        work_id,
    } = input;
    let (agent_id, subagent_id, operator_id) = match target_kind {
        Some(TargetKindInput::NewAgent) => (agent_id, None, None),
        Some(TargetKindInput::NewPreset) => (None, subagent_id, None),
        Some(TargetKindInput::ExistingOperator) => (None, None, operator_id),
        None => (agent_id, subagent_id, operator_id),
    };
    let replaces = if replacement_mode == Some(ReplacementMode::None) {
        None
    } else {
        replaces
    };
    AddWorkInput {
        target_kind,
        agent_id,
        subagent_id,
        operator_id,
        instruction,
        input_ids,
        selected_result_inputs,
        replaces,
        replacement_mode,
        work_id,
    }
}

fn require_identity(value: Option<&str>, label: &str) -> Result<String, ToolFailure> {
    match value {
        Some(v) if is_identity(v) => Ok(v.to_owned()),
        _ => Err(ToolFailure::invalid(format!("invalid agent graph {label}"))),
    }
}

fn require_text(value: &str, max: usize, label: &str) -> Result<String, ToolFailure> {
    let trimmed = js_trim(value);
    if is_text(trimmed, max) {
        Ok(trimmed.to_owned())
    } else {
        Err(ToolFailure::invalid(format!("invalid agent graph {label}")))
    }
}

fn ensure_unique(values: &[String], label: &str) -> Result<(), ToolFailure> {
    let mut seen = HashSet::with_capacity(values.len());
    if values.iter().all(|v| seen.insert(v.as_str())) {
        Ok(())
    } else {
        Err(ToolFailure::invalid(format!("agent graph repeats {label}")))
    }
}

/// At most 64, each an identity, sorted by UTF-16 units, unique.
fn normalize_unique_identities(
    values: Option<&[String]>,
    label: &str,
) -> Result<Vec<String>, ToolFailure> {
    let Some(values) = values else {
        return Ok(Vec::new());
    };
    if values.len() > MAX_INPUT_IDS {
        return Err(ToolFailure::invalid(format!(
            "agent graph {label} exceeds {MAX_INPUT_IDS} entries (got {})",
            values.len()
        )));
    }
    let mut out = values
        .iter()
        .map(|v| require_identity(Some(v), label))
        .collect::<Result<Vec<_>, _>>()?;
    out.sort_by(|a, b| cmp_utf16(a, b));
    ensure_unique(&out, label)?;
    Ok(out)
}

fn work_target(input: &AddWorkInput) -> Result<WorkTarget, ToolFailure> {
    let target = |kind, id: &Option<String>, label| {
        Ok(WorkTarget {
            kind,
            id: require_identity(id.as_deref(), label)?,
        })
    };
    match input.target_kind {
        Some(TargetKindInput::NewAgent) => target(TargetKind::Agent, &input.agent_id, "agent id"),
        Some(TargetKindInput::NewPreset) => {
            target(TargetKind::Preset, &input.subagent_id, "subagent preset id")
        }
        Some(TargetKindInput::ExistingOperator) => {
            target(TargetKind::Operator, &input.operator_id, "operator id")
        }
        None => {
            let count = [&input.agent_id, &input.subagent_id, &input.operator_id]
                .iter()
                .filter(|v| v.is_some())
                .count();
            if count != 1 {
                Err(ToolFailure::invalid(
                    "exactly one of subagentId, agentId, or operatorId is required",
                ))
            } else if input.subagent_id.is_some() {
                target(TargetKind::Preset, &input.subagent_id, "subagent preset id")
            } else if input.agent_id.is_some() {
                target(TargetKind::Agent, &input.agent_id, "agent id")
            } else {
                target(TargetKind::Operator, &input.operator_id, "operator id")
            }
        }
    }
}

/// Step 6: one cleaned addWork item.
fn compile_add_work(
    input: &AddWorkInput,
    update_id: &str,
    index: usize,
) -> Result<ScheduledWork, ToolFailure> {
    let target = work_target(input)?;
    let instruction = require_text(
        &input.instruction,
        MAX_SCHEDULE_INSTRUCTION_LENGTH,
        "instruction",
    )?;
    let input_ids = normalize_unique_identities(input.input_ids.as_deref(), "input id")?;
    let selected = input
        .selected_result_inputs
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            Ok(SelectedResultInput {
                source_graph_id: require_identity(Some(&s.source_graph_id), "source graph id")?,
                result_id: require_identity(Some(&s.result_id), "selected result id")?,
            })
        })
        .collect::<Result<Vec<_>, ToolFailure>>()?;
    let selected_ids: Vec<String> = selected.iter().map(|s| s.result_id.clone()).collect();
    ensure_unique(&selected_ids, "selected result id")?;
    if input_ids.len() + selected.len() > MAX_INPUT_IDS {
        return Err(ToolFailure::invalid(format!(
            "combined graph inputs must contain at most {MAX_INPUT_IDS} entries"
        )));
    }
    if selected_ids.iter().any(|id| input_ids.contains(id)) {
        return Err(ToolFailure::invalid(
            "a result id cannot be both a current and historical graph input",
        ));
    }
    let work_id = match &input.work_id {
        Some(id) => require_identity(Some(id), "work id")?,
        None => deterministic_work_id(update_id, index),
    };
    let replaces = match &input.replaces {
        Some(r) => Some(require_identity(Some(r), "replacement target id")?),
        None => None,
    };
    // Not enforced by the original; the issue requires it.
    if input.replacement_mode == Some(ReplacementMode::Replace) && replaces.is_none() {
        return Err(ToolFailure::invalid(
            "replacementMode replace requires replaces",
        ));
    }
    Ok(ScheduledWork {
        work_id,
        target,
        instruction,
        input_ids,
        selected_result_inputs: selected,
        replaces,
    })
}

/// `compileAgentGraphScheduleUpdate`: validates the input against every
/// rule and bound and compiles the store request. Reads nothing.
///
/// `call_source` is the call identity (session, `graph_run_<n>`,
/// `graph_turn_<n>`, tool call id); an idempotency key replaces its run,
/// turn and tool call id.
pub(crate) fn compile_update(
    input: UpdateInput,
    call_source: &UpdateSource,
) -> Result<ScheduleUpdateRequest, ToolFailure> {
    // 1. The graph id.
    let graph_id = require_identity(Some(&input.graph_id), "graph id")?;
    let raw = clean_update_input(input);

    // 2. The source and the update id.
    let source = update_source(raw.idempotency_key.as_deref(), call_source)?;
    let update_id = graph_update_id(&graph_id, &source);

    // 3. Payload selection (already done by the cleaning); 4., 5.
    let add_work_input = raw.add_work.unwrap_or_default();
    let stop_input = raw.stop.unwrap_or_default();
    let finish_input = raw.finish;
    check_payload(&add_work_input, &stop_input, finish_input.as_ref())?;

    // 6. The work items; 7. the selected results over all of them.
    let add_work = compile_work_items(add_work_input, &update_id)?;
    // 8. Stops; 9. the finish.
    let stop = compile_stops(&stop_input)?;
    let finish = finish_input.map(compile_finish).transpose()?;

    // 10. The fingerprint.
    let mut semantic = json!({
        "schemaVersion": AGENT_GRAPH_SCHEMA_VERSION,
        "updateId": update_id,
        "graphId": graph_id,
        "source": source,
        "addWork": add_work,
        "stop": stop,
    });
    if let Some(f) = &finish {
        semantic["finish"] = serde_json::to_value(f).expect("a finish serializes");
    }
    let update_fingerprint = stable_hash(&semantic);
    Ok(ScheduleUpdateRequest {
        schema_version: AGENT_GRAPH_SCHEMA_VERSION,
        update_id,
        update_fingerprint,
        graph_id,
        source,
        add_work,
        stop,
        finish,
    })
}

/// Step 2: the call's source, or the idempotency key's (the key replaces
/// run, turn and tool call id).
fn update_source(
    idempotency_key: Option<&str>,
    call_source: &UpdateSource,
) -> Result<UpdateSource, ToolFailure> {
    Ok(match idempotency_key {
        None => UpdateSource {
            orchestration_mode: Some("graph".to_owned()),
            ..call_source.clone()
        },
        Some(key) => {
            let key = require_identity(Some(key), "idempotency key")?;
            UpdateSource {
                session_id: call_source.session_id.clone(),
                run_id: key.clone(),
                turn_id: key.clone(),
                tool_call_id: key,
                orchestration_mode: Some("graph".to_owned()),
            }
        }
    })
}

/// Steps 3 to 5: something to do, no finish with addWork, and the counts.
fn check_payload(
    add_work: &[AddWorkInput],
    stop: &[StopInput],
    finish: Option<&FinishInput>,
) -> Result<(), ToolFailure> {
    if add_work.is_empty() && stop.is_empty() && finish.is_none() {
        return Err(ToolFailure::invalid(
            "at least one addWork, stop, or finish operation is required",
        ));
    }
    if finish.is_some() && !add_work.is_empty() {
        return Err(ToolFailure::invalid(
            "finish cannot be combined with addWork",
        ));
    }
    if add_work.len() > MAX_ADD_WORK {
        return Err(ToolFailure::invalid(format!(
            "one graph update may add at most {MAX_ADD_WORK} work items (got {})",
            add_work.len()
        )));
    }
    if stop.len() > MAX_WORK_STOPS {
        return Err(ToolFailure::invalid(format!(
            "one graph update may stop at most {MAX_WORK_STOPS} targets (got {})",
            stop.len()
        )));
    }
    let results = finish
        .and_then(|f| f.result_ids.as_ref())
        .map_or(0, Vec::len);
    if results > MAX_SCHEDULE_RESULT_IDS {
        return Err(ToolFailure::invalid(format!(
            "finish may select at most {MAX_SCHEDULE_RESULT_IDS} result ids (got {results})"
        )));
    }
    Ok(())
}

/// Steps 6 and 7: the cleaned work items, and the bound on the historical
/// results they select together.
fn compile_work_items(
    items: Vec<AddWorkInput>,
    update_id: &str,
) -> Result<Vec<ScheduledWork>, ToolFailure> {
    let mut add_work = Vec::with_capacity(items.len());
    let mut total_selected = 0;
    for (index, item) in items.into_iter().enumerate() {
        let work = compile_add_work(&clean_add_work_input(item), update_id, index)?;
        total_selected += work.selected_result_inputs.len();
        add_work.push(work);
    }
    if total_selected > MAX_SELECTED_RESULT_INPUTS {
        return Err(ToolFailure::invalid(format!(
            "one graph update may select at most {MAX_SELECTED_RESULT_INPUTS} historical results (got {total_selected})"
        )));
    }
    Ok(add_work)
}

/// Step 8: the stops, sorted by target id, each target once.
fn compile_stops(stops: &[StopInput]) -> Result<Vec<WorkStop>, ToolFailure> {
    let mut stop = stops
        .iter()
        .map(|s| {
            Ok(WorkStop {
                target_id: require_identity(Some(&s.target_id), "stop target id")?,
                reason: require_text(&s.reason, MAX_SCHEDULE_REASON_CHARS, "stop reason")?,
            })
        })
        .collect::<Result<Vec<_>, ToolFailure>>()?;
    stop.sort_by(|a, b| cmp_utf16(&a.target_id, &b.target_id));
    let stop_ids: Vec<String> = stop.iter().map(|s| s.target_id.clone()).collect();
    ensure_unique(&stop_ids, "stop target id")?;
    Ok(stop)
}

/// Step 9: the finish, with at least one result id.
fn compile_finish(f: FinishInput) -> Result<GraphFinish, ToolFailure> {
    let result_ids = normalize_unique_identities(f.result_ids.as_deref(), "finish result id")?;
    let reason = require_text(&f.reason, MAX_SCHEDULE_REASON_CHARS, "finish reason")?;
    if result_ids.is_empty() {
        return Err(ToolFailure::invalid(
            "finish requires at least one result id",
        ));
    }
    Ok(GraphFinish { result_ids, reason })
}

/// `validateUpdateAgainstProjection`, plus the work-id checks the original
/// lacked: self-replacement, new work ids unique in the update and in the
/// graph, `replaces` and stop targets naming existing work, and a finish
/// only with no unclaimed requested work and committed result ids.
pub(crate) fn validate_against_projection(
    request: &ScheduleUpdateRequest,
    projection: &Projection,
) -> Result<(), ToolFailure> {
    let g = &request.graph_id;
    let existing: HashSet<&str> = projection.work().iter().map(|w| w.work_id()).collect();
    check_new_work(g, &request.add_work, &existing)?;
    for stop in &request.stop {
        if !existing.contains(stop.target_id.as_str()) {
            return Err(ToolFailure::invalid(format!(
                "agent graph {g}: stop target {} is not an existing work in the live projection",
                stop.target_id
            )));
        }
    }
    match &request.finish {
        Some(finish) => check_finish(g, finish, projection),
        None => Ok(()),
    }
}

/// The added work against itself and the graph's `existing` work: none
/// replaces itself, ids are new and unique, `replaces` names existing work
/// (not work of this update).
fn check_new_work(
    g: &str,
    add_work: &[ScheduledWork],
    existing: &HashSet<&str>,
) -> Result<(), ToolFailure> {
    for work in add_work {
        if work.replaces.as_deref() == Some(work.work_id.as_str()) {
            return Err(ToolFailure::invalid(format!(
                "agent graph {g}: work {} cannot replace itself",
                work.work_id
            )));
        }
    }
    let mut update_ids: HashSet<&str> = HashSet::new();
    for work in add_work {
        if !update_ids.insert(work.work_id.as_str()) {
            return Err(ToolFailure::invalid(format!(
                "agent graph {g}: work id {} is repeated in this update",
                work.work_id
            )));
        }
        if existing.contains(work.work_id.as_str()) {
            return Err(ToolFailure::invalid(format!(
                "agent graph {g}: work id {} already exists",
                work.work_id
            )));
        }
    }
    for work in add_work {
        let Some(replaces) = &work.replaces else {
            continue;
        };
        if update_ids.contains(replaces.as_str()) || !existing.contains(replaces.as_str()) {
            return Err(ToolFailure::invalid(format!(
                "agent graph {g}: replaces target {replaces} is not an existing work in the live projection"
            )));
        }
    }
    Ok(())
}

/// A finish needs no requested work left unclaimed, and its result ids
/// committed as records.
fn check_finish(g: &str, finish: &GraphFinish, projection: &Projection) -> Result<(), ToolFailure> {
    let claimed: HashSet<&str> = projection
        .claims()
        .iter()
        .map(|c| c.request.intent_id.as_str())
        .collect();
    let pending: Vec<&str> = projection
        .work()
        .iter()
        .filter(|w| {
            w.status() == WorkStatus::Requested
                && !claimed.contains(scheduled_work_intent_id(g, w.work_id()).as_str())
        })
        .map(|w| w.work_id())
        .collect();
    if !pending.is_empty() {
        return Err(ToolFailure::invalid(format!(
            "agent graph {g}: finish requires no pending non-terminal work (pending: {})",
            pending.join(", ")
        )));
    }
    let committed: HashSet<&str> = projection
        .records()
        .iter()
        .map(|r| r.record_id.as_str())
        .collect();
    let missing: Vec<&str> = finish
        .result_ids
        .iter()
        .map(String::as_str)
        .filter(|id| !committed.contains(id))
        .collect();
    if !missing.is_empty() {
        return Err(ToolFailure::invalid(format!(
            "agent graph {g}: finish result ids are not committed graph records: {}",
            missing.join(", ")
        )));
    }
    Ok(())
}

/// Decodes schema-validated arguments.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, ToolFailure> {
    serde_json::from_value(args).map_err(|e| ToolFailure::plain(format!("invalid arguments: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> UpdateSource {
        UpdateSource {
            session_id: "root".into(),
            run_id: "graph_run_1".into(),
            turn_id: "graph_turn_1".into(),
            tool_call_id: "call-1".into(),
            orchestration_mode: None,
        }
    }

    fn input(v: Value) -> UpdateInput {
        decode(v).unwrap()
    }

    #[test]
    fn operation_selects_one_payload() {
        let raw = input(json!({
            "graphId": "g", "operation": "stop",
            "addWork": [{"agentId": "a", "instruction": "x"}],
            "stop": [{"targetId": "w", "reason": "r"}],
            "finish": {"resultIds": ["r"], "reason": "r"},
            "idempotencyKey": "k"
        }));
        let clean = clean_update_input(raw);
        assert!(clean.add_work.is_none() && clean.finish.is_none());
        assert_eq!(clean.stop.unwrap().len(), 1);
        assert_eq!(clean.idempotency_key.as_deref(), Some("k"));
        let all = clean_update_input(input(json!({
            "graphId": "g",
            "addWork": [{"agentId": "a", "instruction": "x"}],
            "stop": [{"targetId": "w", "reason": "r"}],
        })));
        assert!(all.add_work.is_some() && all.stop.is_some());
    }

    #[test]
    fn target_kind_selects_the_identity_field() {
        let item: AddWorkInput = decode(json!({
            "targetKind": "existing_operator", "agentId": "a", "subagentId": "s",
            "operatorId": "o", "instruction": "x", "replaces": "w", "replacementMode": "none"
        }))
        .unwrap();
        let clean = clean_add_work_input(item);
        assert_eq!(clean.operator_id.as_deref(), Some("o"));
        assert!(clean.agent_id.is_none() && clean.subagent_id.is_none());
        assert!(clean.replaces.is_none());
        assert_eq!(clean.replacement_mode, Some(ReplacementMode::None));
    }

    #[test]
    fn compile_is_deterministic_and_sorts_ids() {
        let v = json!({"graphId": "g", "addWork": [{"subagentId": "p", "instruction": " do \n", "inputIds": ["b", "a"]}],
                       "stop": [{"targetId": "z", "reason": "r"}, {"targetId": "y", "reason": " r2 "}]});
        let a = compile_update(input(v.clone()), &source()).unwrap();
        let b = compile_update(input(v), &source()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.add_work[0].instruction, "do");
        assert_eq!(a.add_work[0].input_ids, ["a", "b"]);
        assert_eq!(a.stop[0].target_id, "y");
        assert_eq!(a.stop[0].reason, "r2");
        assert_eq!(
            a.add_work[0].work_id,
            deterministic_work_id(&a.update_id, 0)
        );
        assert_eq!(a.source.orchestration_mode.as_deref(), Some("graph"));
        assert!(a.update_fingerprint.starts_with("sha256:"));
    }

    #[test]
    fn idempotency_key_replaces_run_turn_and_call() {
        let v = json!({"graphId": "g", "stop": [{"targetId": "w", "reason": "r"}], "idempotencyKey": "k"});
        let a = compile_update(input(v.clone()), &source()).unwrap();
        let mut later = source();
        later.run_id = "graph_run_9".into();
        later.turn_id = "graph_turn_9".into();
        later.tool_call_id = "call-9".into();
        let b = compile_update(input(v), &later).unwrap();
        assert_eq!(a.update_id, b.update_id);
        assert_eq!(a.update_fingerprint, b.update_fingerprint);
        assert_eq!(a.source.run_id, "k");
        assert_eq!(a.source.session_id, "root");
    }
}
