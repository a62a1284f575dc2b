//! Ids and hashing of the agent graph (seed-contracts §2.5).
//!
//! Two hash families, both byte-stable across processes and restarts:
//!
//! * [`h`]: sha256 hex of string parts joined with NUL, behind the store-side
//!   ids (`graph_update_…`, `graph_wake_…`, `graph_claim_…`, …);
//! * [`stable_hash`]: `sha256:` + hex of the canonical JSON of a value, and
//!   [`stable_hash32`], its first 32 hex digits, behind the stream-side ids
//!   (`graph_work_…`, `graph_intent_…`, `graph_record_…`) and fingerprints.
//!
//! Ids are ordered by UTF-16 code units everywhere (`cmp_utf16`), as the
//! original compared JavaScript strings.

use std::cmp::Ordering;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::state::UpdateSource;

/// The `schemaVersion` folded into the derived ids and fingerprints.
pub const ID_SCHEMA_VERSION: u32 = 1;

/// `H(parts…)`: the sha256 hex (64 digits) of the parts joined with `\0`.
pub fn h(parts: &[&str]) -> String {
    hex::encode(Sha256::digest(parts.join("\u{0}").as_bytes()))
}

/// `graph_update_` + H(graph, session, run, turn, tool call).
pub fn graph_update_id(graph_id: &str, source: &UpdateSource) -> String {
    format!(
        "graph_update_{}",
        h(&[
            graph_id,
            &source.session_id,
            &source.run_id,
            &source.turn_id,
            &source.tool_call_id,
        ])
    )
}

/// `graph_wake_` + H(graph, snapshot version).
pub fn graph_wake_id(graph_id: &str, snapshot_version: &str) -> String {
    format!("graph_wake_{}", h(&[graph_id, snapshot_version]))
}

/// `graph_wake_attempt_` + H(wake, decimal index).
pub fn graph_wake_attempt_id(wake_id: &str, index: u64) -> String {
    format!("graph_wake_attempt_{}", h(&[wake_id, &index.to_string()]))
}

/// `graph_operator_` + H(graph, work).
pub fn graph_operator_id(graph_id: &str, work_id: &str) -> String {
    format!("graph_operator_{}", h(&[graph_id, work_id]))
}

/// `graph_claim_` + H(graph, intent).
pub fn graph_claim_id(graph_id: &str, intent_id: &str) -> String {
    format!("graph_claim_{}", h(&[graph_id, intent_id]))
}

/// `graph_provision_` + H(graph, work).
pub fn graph_provision_id(graph_id: &str, work_id: &str) -> String {
    format!("graph_provision_{}", h(&[graph_id, work_id]))
}

/// `graph_edge_` + H(graph, from operator, to operator).
pub fn graph_edge_id(graph_id: &str, from_operator_id: &str, to_operator_id: &str) -> String {
    format!(
        "graph_edge_{}",
        h(&[graph_id, from_operator_id, to_operator_id])
    )
}

/// The canonical JSON text of `value` (the original `stableStringify`):
/// object keys sorted by UTF-16 code units, arrays held directly under a key
/// named `required` or `enum` sorted by the canonical text of their members,
/// no whitespace. JSON has no `undefined`, functions, symbols, bigints or
/// dates, so the original's markers for those never arise.
pub(crate) fn canonical_json(value: &Value) -> String {
    let canonical = canonicalize(value, None);
    serde_json::to_string(&canonical).expect("a JSON value always serializes")
}

fn canonicalize(value: &Value, parent_key: Option<&str>) -> Value {
    match value {
        Value::Array(items) => {
            let mut items: Vec<Value> = items.iter().map(|item| canonicalize(item, None)).collect();
            if matches!(parent_key, Some("required" | "enum")) {
                // The original sorted with `localeCompare`; ids are compared
                // by UTF-16 code units everywhere else, and so are these.
                items.sort_by_cached_key(|item| {
                    serde_json::to_string(item)
                        .expect("a JSON value always serializes")
                        .encode_utf16()
                        .collect::<Vec<u16>>()
                });
            }
            Value::Array(items)
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| cmp_utf16(a, b));
            let mut out = Map::new();
            for key in keys {
                out.insert(key.clone(), canonicalize(&map[key], Some(key)));
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

/// `sha256:` + the hex sha256 of `canonical_json`.
pub fn stable_hash(value: &Value) -> String {
    format!(
        "sha256:{}",
        hex::encode(Sha256::digest(canonical_json(value).as_bytes()))
    )
}

/// The first 32 hex digits of [`stable_hash`] (the suffix of the
/// `graph_work_`, `graph_intent_` and `graph_record_` ids).
pub fn stable_hash32(value: &Value) -> String {
    let hash = stable_hash(value);
    hash["sha256:".len().."sha256:".len() + 32].to_owned()
}

/// The deterministic id of the `index`-th work item of an update:
/// `graph_work_` + stableHash32({schemaVersion: 1, updateId, index}).
pub fn deterministic_work_id(update_id: &str, index: usize) -> String {
    format!(
        "graph_work_{}",
        stable_hash32(&json!({
            "schemaVersion": ID_SCHEMA_VERSION,
            "updateId": update_id,
            "index": index,
        }))
    )
}

/// The intent id of a work item, which its claim carries:
/// `graph_intent_` + stableHash32({schemaVersion: 1, graphId, workId}).
pub fn scheduled_work_intent_id(graph_id: &str, work_id: &str) -> String {
    format!(
        "graph_intent_{}",
        stable_hash32(&json!({
            "schemaVersion": ID_SCHEMA_VERSION,
            "graphId": graph_id,
            "workId": work_id,
        }))
    )
}

/// The id of a record: `graph_record_` + stableHash32({graphId, operatorId,
/// sessionId, runId, runtimeEventId}).
pub fn graph_record_id(
    graph_id: &str,
    operator_id: &str,
    session_id: &str,
    run_id: &str,
    runtime_event_id: &str,
) -> String {
    format!(
        "graph_record_{}",
        stable_hash32(&json!({
            "graphId": graph_id,
            "operatorId": operator_id,
            "sessionId": session_id,
            "runId": run_id,
            "runtimeEventId": runtime_event_id,
        }))
    )
}

/// Orders two strings by their UTF-16 code units, as JavaScript compares
/// strings (this differs from Rust's byte order only between characters
/// above U+FFFF and those in U+E000..=U+FFFF).
pub(crate) fn cmp_utf16(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h_joins_parts_with_nul() {
        // sha256("a\0b")
        assert_eq!(h(&["a", "b"]), hex::encode(Sha256::digest(b"a\x00b")));
        assert_ne!(h(&["a", "b"]), h(&["ab"]));
        assert_eq!(h(&["a", "b"]).len(), 64);
    }

    #[test]
    fn canonical_json_sorts_keys_and_required_enum_arrays_only() {
        let v = json!({"b": 1, "a": {"enum": ["z", "a"], "list": ["z", "a"], "required": [2, 1]}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"enum":["a","z"],"list":["z","a"],"required":[1,2]},"b":1}"#
        );
    }

    #[test]
    fn canonical_json_escapes_like_json_stringify() {
        let v = json!({"s": "q\"\\\n\t\u{1}\u{7f}é"});
        assert_eq!(
            canonical_json(&v),
            "{\"s\":\"q\\\"\\\\\\n\\t\\u0001\u{7f}é\"}"
        );
    }

    #[test]
    fn stable_hash_is_prefixed_sha256_of_canonical_json() {
        let v = json!({"b": [1, 2], "a": null});
        let expected = hex::encode(Sha256::digest(br#"{"a":null,"b":[1,2]}"#));
        assert_eq!(stable_hash(&v), format!("sha256:{expected}"));
        assert_eq!(stable_hash32(&v), expected[..32]);
        // Key order of the input does not matter.
        assert_eq!(
            stable_hash(&v),
            stable_hash(&json!({"a": null, "b": [1, 2]}))
        );
    }

    #[test]
    fn derived_ids_have_their_prefix_and_length() {
        let work = deterministic_work_id("graph_update_x", 0);
        assert!(work.starts_with("graph_work_") && work.len() == "graph_work_".len() + 32);
        assert_ne!(work, deterministic_work_id("graph_update_x", 1));
        let expected = stable_hash32(&json!({"schemaVersion": 1, "graphId": "g", "workId": "w"}));
        assert_eq!(
            scheduled_work_intent_id("g", "w"),
            format!("graph_intent_{expected}")
        );
        // Not the original's store-side formula, H(graph, work): claims
        // hash the JSON object above, as the original's claims did.
        assert_ne!(
            scheduled_work_intent_id("g", "w"),
            format!("graph_intent_{}", h(&["g", "w"]))
        );
        assert_eq!(
            graph_wake_attempt_id("w", 2),
            format!("graph_wake_attempt_{}", h(&["w", "2"]))
        );
        let record = graph_record_id("g", "o", "s", "r", "e");
        assert!(record.starts_with("graph_record_") && record.len() == "graph_record_".len() + 32);
    }

    #[test]
    fn known_answer_vectors() {
        // Computed independently (Python hashlib over the canonical text).
        assert_eq!(
            scheduled_work_intent_id("graph_g1", "w-1"),
            "graph_intent_800442d907eff96e25a0ef5f442fdbd8"
        );
        assert_eq!(
            deterministic_work_id("graph_update_x", 0),
            "graph_work_07d10c77123903fe9b29042a734daeec"
        );
        let source = UpdateSource {
            session_id: "session-root".into(),
            run_id: "graph_run_1".into(),
            turn_id: "graph_turn_1".into(),
            tool_call_id: "call-1".into(),
            orchestration_mode: Some("graph".into()),
        };
        assert_eq!(
            graph_update_id("graph_g1", &source),
            "graph_update_fafb50cc1548eae926adc42da9a76932c2909f2a561c2195bac16d4e2f1ec162"
        );
    }

    #[test]
    fn utf16_order_differs_from_byte_order_above_the_bmp() {
        let astral = "\u{1F600}"; // surrogates D83D DE00
        let private = "\u{E000}";
        assert_eq!(cmp_utf16(astral, private), Ordering::Less);
        assert_eq!(astral.cmp(private), Ordering::Greater);
        assert_eq!(cmp_utf16("a", "b"), Ordering::Less);
    }
}
