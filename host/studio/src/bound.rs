//! Bounds on what the API returns of a graph's text and values: every
//! string a guest controls leaves the server bounded, so a hostile graph
//! cannot make one answer (or one browser tab) hold megabytes.

use sandgraph_core::text::guest_text;
use serde_json::{Map, Value};

/// Longest graph or node description returned, in bytes of escaped text:
/// the spec allows 4096 characters, at most 16 KiB of UTF-8.
pub(crate) const MAX_DESCRIPTION_BYTES: usize = 16 * 1024;

/// Longest name returned (nodes, channels, routers, path-map keys, tools,
/// interrupt nodes): the spec caps identifiers at 256 bytes.
pub(crate) const MAX_NAME_BYTES: usize = 256;

/// Longest error message returned: a run's error quotes a graph's own
/// message (capped by the runtime at 4 KiB) behind the host's words; the
/// same bound as an MCP tool error.
pub(crate) const MAX_ERROR_BYTES: usize = 16 * 1024;

/// Longest string kept whole inside a returned value (state, updates,
/// interrupt payloads, journal arguments): long enough for any text a
/// person reads in the page, far below the 16 MiB a state may hold.
pub(crate) const MAX_VALUE_STRING_BYTES: usize = 64 * 1024;

/// Most entries kept of one array or object inside a returned value.
pub(crate) const MAX_VALUE_ITEMS: usize = 1000;

/// Deepest nesting kept inside a returned value.
pub(crate) const MAX_VALUE_DEPTH: usize = 64;

/// Most bytes of strings and keys returned for one value; past it the
/// rest of the value is replaced by a marker. A run's stream returns many
/// values (one per step), each bounded by this.
pub(crate) const MAX_VALUE_BYTES: usize = 1024 * 1024;

/// A name (or any one-line label) a guest chose: escaped and bounded.
pub(crate) fn name(text: &str) -> String {
    guest_text(text, MAX_NAME_BYTES)
}

/// A description a guest wrote: escaped and bounded.
pub(crate) fn description(text: &str) -> String {
    guest_text(text, MAX_DESCRIPTION_BYTES)
}

/// An error message (which may quote a guest): escaped and bounded.
pub(crate) fn error(text: &str) -> String {
    guest_text(text, MAX_ERROR_BYTES)
}

/// `value` within the value bounds: long strings cut (the cut marked
/// `…[N more bytes]`), the first [`MAX_VALUE_ITEMS`] entries of arrays and
/// objects kept, nesting past [`MAX_VALUE_DEPTH`] and everything after
/// [`MAX_VALUE_BYTES`] of text replaced by markers. Numbers, booleans and
/// null are kept. Control characters stay: JSON escapes them.
pub(crate) fn value(value: &Value) -> Value {
    let mut budget = MAX_VALUE_BYTES;
    walk(value, 0, &mut budget)
}

/// [`value`] of every entry of `map`.
pub(crate) fn object(map: &Map<String, Value>) -> Value {
    let mut budget = MAX_VALUE_BYTES;
    walk_object(map, 0, &mut budget)
}

fn walk(value: &Value, depth: usize, budget: &mut usize) -> Value {
    if *budget == 0 {
        return Value::String("…[omitted]".to_owned());
    }
    match value {
        Value::String(s) => Value::String(cut(s, budget)),
        Value::Array(items) if depth < MAX_VALUE_DEPTH => {
            let mut out: Vec<Value> = items
                .iter()
                .take(MAX_VALUE_ITEMS)
                .map(|v| walk(v, depth + 1, budget))
                .collect();
            if items.len() > MAX_VALUE_ITEMS {
                out.push(Value::String(format!(
                    "…[{} more entries]",
                    items.len() - MAX_VALUE_ITEMS
                )));
            }
            Value::Array(out)
        }
        Value::Object(map) if depth < MAX_VALUE_DEPTH => walk_object(map, depth, budget),
        Value::Array(_) | Value::Object(_) => Value::String("…[nested too deep]".to_owned()),
        other => other.clone(),
    }
}

fn walk_object(map: &Map<String, Value>, depth: usize, budget: &mut usize) -> Value {
    let mut out = Map::new();
    for (k, v) in map.iter().take(MAX_VALUE_ITEMS) {
        let key = cut(k, budget);
        let v = walk(v, depth + 1, budget);
        out.insert(key, v);
    }
    if map.len() > MAX_VALUE_ITEMS {
        out.insert(
            "…".to_owned(),
            Value::String(format!("…[{} more entries]", map.len() - MAX_VALUE_ITEMS)),
        );
    }
    Value::Object(out)
}

/// `s` cut at [`MAX_VALUE_STRING_BYTES`] and at what is left of `budget`
/// (which it spends), between whole characters, the cut marked.
fn cut(s: &str, budget: &mut usize) -> String {
    let max = MAX_VALUE_STRING_BYTES.min(*budget);
    if s.len() <= max {
        *budget -= s.len();
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    *budget -= end;
    format!("{}…[{} more bytes]", &s[..end], s.len() - end)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn long_strings_are_cut_between_characters() {
        let s = "é".repeat(MAX_VALUE_STRING_BYTES);
        let Value::String(out) = value(&json!(s)) else {
            panic!("a string");
        };
        assert!(out.len() < MAX_VALUE_STRING_BYTES + 32, "{}", out.len());
        assert!(
            out.ends_with(&format!("…[{} more bytes]", MAX_VALUE_STRING_BYTES)),
            "{}",
            &out[out.len() - 40..]
        );
        assert_eq!(
            value(&json!({"a": [1, "x", null]})),
            json!({"a": [1, "x", null]})
        );
    }

    #[test]
    fn big_and_deep_values_are_bounded() {
        let many: Vec<u32> = (0..MAX_VALUE_ITEMS as u32 + 5).collect();
        let out = value(&json!(many));
        assert_eq!(out.as_array().unwrap().len(), MAX_VALUE_ITEMS + 1);
        assert_eq!(out[MAX_VALUE_ITEMS], "…[5 more entries]");
        let mut deep = json!(1);
        for _ in 0..MAX_VALUE_DEPTH + 3 {
            deep = json!([deep]);
        }
        assert!(value(&deep).to_string().contains("…[nested too deep]"));
        let chunk = "x".repeat(MAX_VALUE_STRING_BYTES);
        let flood: Vec<&str> = vec![&chunk; 40];
        let out = value(&json!(flood)).to_string();
        assert!(out.len() < MAX_VALUE_BYTES + 64 * 1024, "{}", out.len());
        assert!(out.contains("…[omitted]"));
    }

    #[test]
    fn names_and_errors_are_escaped() {
        assert_eq!(name("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert!(error(&"\n".repeat(MAX_ERROR_BYTES)).len() < MAX_ERROR_BYTES + 32);
    }
}
