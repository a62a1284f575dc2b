//! The case files of `sandgraph test`: every `*.json` of the cases folder,
//! in name order. A file holds one case object or an array of them:
//!
//! ```json
//! {
//!   "name": "echoes the topic",
//!   "input": {"topic": "wasm"},
//!   "state": {"topic": "wasm", "log": ["seen:wasm"]}
//! }
//! ```
//!
//! Keys of a case (all but the start and one expectation optional):
//!
//! - `name`: shown in the report; default the file's stem (required when
//!   a file holds several cases). Names are unique.
//! - the start, one of: `input` (the graph's input state, as `sandgraph
//!   run --input`) or `args` (tool arguments, checked against the graph's
//!   parameters and its `validate` export, as `sandgraph call --args`).
//! - the expectation of the run, one or more of: `state` (the exact final
//!   state), `assert` (a list of `{"pointer": "/log/0", "equals": V}` or
//!   `{"pointer": "/x", "exists": false}` on the final state), `error` (the
//!   error code the run fails with, e.g. `"node_error"`, with an optional
//!   `error_contains` substring of its message), `interrupts` (the values
//!   of the interrupts the run stops at, in order).
//! - `steps`: resume values, run in order on a throwaway durable thread:
//!   each `{"resume": V, ...expectation}`; every run but the last must stop
//!   at an interrupt.
//! - `limits`: `timeout_ms`, `fuel`, `memory_mb`, `recursion_limit`,
//!   `host_memory_mb`, `instances`, over the operator config's `[limits]`.
//! - `grants`: the graph's grants for this case, as `[graphs.<name>.grants]`
//!   (`llm`, `tools`, `http`), replacing the config's.
//! - `cassette`: a file (relative to the case file) of recorded llm and
//!   http exchanges (`sandgraph call --record`), answered offline.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sandgraph_core::json;
use sandgraph_registry::{GrantsConfig, LimitOverrides};
use sandgraph_runtime::{ErrorCode, RunError};
use serde_json::{Map, Value};

use crate::Error;

/// Largest case file read: expected states of real graphs are a few KiB;
/// 4 MiB leaves room for big fixtures and keeps a stray file from being
/// read whole.
pub const MAX_CASE_FILE_BYTES: u64 = 4 << 20;
/// Most case files in a folder, and most cases in all: a suite is tens of
/// cases; the bound keeps a wrong folder from starting thousands of runs.
pub const MAX_CASES: usize = 1000;
/// Most resume steps of one case: an interrupt sequence is a handful of
/// answers; each step is a run.
pub const MAX_STEPS: usize = 100;
/// Most pointer assertions of one run.
pub const MAX_ASSERTS: usize = 1000;
/// Longest case name, in bytes: it is printed on one line and in XML.
pub const MAX_NAME_BYTES: usize = 256;

/// One golden case.
#[derive(Debug, Clone)]
pub(crate) struct Case {
    pub(crate) file: PathBuf,
    pub(crate) name: String,
    pub(crate) begin: Begin,
    pub(crate) expect: Expect,
    pub(crate) steps: Vec<Step>,
    pub(crate) limits: LimitOverrides,
    pub(crate) grants: Option<GrantsConfig>,
    /// Resolved against the case file's folder.
    pub(crate) cassette: Option<PathBuf>,
}

/// How a case starts its run.
#[derive(Debug, Clone)]
pub(crate) enum Begin {
    Input(Value),
    Args(Value),
}

/// One resume step.
#[derive(Debug, Clone)]
pub(crate) struct Step {
    pub(crate) resume: Value,
    pub(crate) expect: Expect,
}

/// What one run must come to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Expect {
    pub(crate) state: Option<Value>,
    pub(crate) asserts: Vec<Assert>,
    pub(crate) error: Option<String>,
    pub(crate) error_contains: Option<String>,
    pub(crate) interrupts: Option<Vec<Value>>,
}

/// A JSON-pointer assertion on the state.
#[derive(Debug, Clone)]
pub(crate) struct Assert {
    pub(crate) pointer: String,
    pub(crate) check: Check,
}

#[derive(Debug, Clone)]
pub(crate) enum Check {
    Equals(Value),
    Exists(bool),
}

impl Assert {
    /// `Err` says what the state holds instead.
    pub(crate) fn check(&self, state: &Value) -> Result<(), String> {
        let found = state.pointer(&self.pointer);
        let p = &self.pointer;
        let text = |v: &Value| crate::show::line(&v.to_string(), crate::show::MAX_LINE_BYTES);
        match (&self.check, found) {
            (Check::Equals(want), Some(got)) if want == got => Ok(()),
            (Check::Equals(want), Some(got)) => Err(format!(
                "assert {p:?}: expected {}, got {}",
                text(want),
                text(got)
            )),
            (Check::Equals(want), None) => Err(format!(
                "assert {p:?}: expected {}, but the state has no value there",
                text(want)
            )),
            (Check::Exists(true), None) => {
                Err(format!("assert {p:?}: the state has no value there"))
            }
            (Check::Exists(false), Some(got)) => Err(format!(
                "assert {p:?}: expected no value, got {}",
                text(got)
            )),
            (Check::Exists(_), _) => Ok(()),
        }
    }
}

fn invalid(message: String) -> Error {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

/// Every case of the `*.json` files of `dir`, in file order; names unique.
pub(crate) fn load_dir(dir: &Path) -> Result<Vec<Case>, Error> {
    let files = crate::cache::files_in(
        dir,
        "json",
        MAX_CASES,
        "; write golden cases there as *.json (see the README's \"Golden tests\"), or name \
         another folder with --cases",
    )?;
    let mut cases = Vec::new();
    let mut names = BTreeSet::new();
    for file in files {
        for case in load_file(&file)? {
            if !names.insert(case.name.clone()) {
                return Err(invalid(format!(
                    "{}: a case named {:?} is defined twice; case names are unique",
                    file.display(),
                    case.name
                )));
            }
            cases.push(case);
            if cases.len() > MAX_CASES {
                return Err(invalid(format!(
                    "{} holds more than {MAX_CASES} cases",
                    dir.display()
                )));
            }
        }
    }
    Ok(cases)
}

/// The cases of one file.
pub(crate) fn load_file(file: &Path) -> Result<Vec<Case>, Error> {
    use std::io::Read;
    let cannot = |e: std::io::Error| invalid(format!("cannot read {}: {e}", file.display()));
    let mut text = String::new();
    std::fs::File::open(file)
        .map_err(cannot)?
        .take(MAX_CASE_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(cannot)?;
    if text.len() as u64 > MAX_CASE_FILE_BYTES {
        return Err(invalid(format!(
            "{} is larger than {MAX_CASE_FILE_BYTES} bytes",
            file.display()
        )));
    }
    let value = json::parse_lossless(&text, &file.display().to_string())
        .map_err(|e| invalid(format!("{} is not valid JSON: {e}", file.display())))?;
    let bad = |at: &str, m: String| invalid(format!("{}: {at}: {m}", file.display()));
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match value {
        Value::Array(items) => {
            if items.is_empty() {
                return Err(bad("$", "the file holds no case".into()));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    parse_case(file, v, &format!("$[{i}]"), None).map_err(|(at, m)| bad(&at, m))
                })
                .collect()
        }
        v => parse_case(file, &v, "$", Some(&stem))
            .map(|c| vec![c])
            .map_err(|(at, m)| bad(&at, m)),
    }
}

/// An error at a JSON path of the file.
type At = (String, String);

const CASE_KEYS: &[&str] = &[
    "name",
    "input",
    "args",
    "steps",
    "limits",
    "grants",
    "cassette",
    "state",
    "assert",
    "error",
    "error_contains",
    "interrupts",
];
const STEP_KEYS: &[&str] = &[
    "resume",
    "state",
    "assert",
    "error",
    "error_contains",
    "interrupts",
];

fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, At> {
    v.as_object().ok_or_else(|| {
        (
            at.to_owned(),
            format!("must be an object, not {}", json::kind(v)),
        )
    })
}

fn known_keys(o: &Map<String, Value>, keys: &[&str], at: &str) -> Result<(), At> {
    match o.keys().find(|k| !keys.contains(&k.as_str())) {
        Some(k) => Err((
            format!("{at}.{k}"),
            format!("unknown key (known keys: {})", keys.join(", ")),
        )),
        None => Ok(()),
    }
}

fn string<'a>(o: &'a Map<String, Value>, key: &str, at: &str) -> Result<Option<&'a str>, At> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err((
            format!("{at}.{key}"),
            format!("must be a string, not {}", json::kind(v)),
        )),
    }
}

fn parse_case(file: &Path, v: &Value, at: &str, stem: Option<&str>) -> Result<Case, At> {
    let o = object(v, at)?;
    known_keys(o, CASE_KEYS, at)?;
    let name = parse_name(o, at, stem)?;
    let begin = parse_begin(o, at)?;
    let steps = match o.get("steps") {
        None => Vec::new(),
        Some(v) => parse_steps(v, at)?,
    };
    let expect = parse_expect(o, at, !steps.is_empty())?;
    let limits = match o.get("limits") {
        None => LimitOverrides::default(),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| (format!("{at}.limits"), e.to_string()))?,
    };
    let grants = match o.get("grants") {
        None => None,
        Some(v) => Some(
            serde_json::from_value(v.clone())
                .map_err(|e| (format!("{at}.grants"), e.to_string()))?,
        ),
    };
    let cassette = string(o, "cassette", at)?.map(|c| {
        file.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .join(c)
    });
    Ok(Case {
        file: file.to_path_buf(),
        name,
        begin,
        expect,
        steps,
        limits,
        grants,
        cassette,
    })
}

/// The case's `name`, else the file's stem when the file holds one case.
fn parse_name(o: &Map<String, Value>, at: &str, stem: Option<&str>) -> Result<String, At> {
    let name = match (string(o, "name", at)?, stem) {
        (Some(n), _) => n.to_owned(),
        (None, Some(stem)) => stem.to_owned(),
        (None, None) => {
            return Err((
                format!("{at}.name"),
                "is required when a file holds several cases".into(),
            ));
        }
    };
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err((
            format!("{at}.name"),
            format!("must be 1 to {MAX_NAME_BYTES} bytes long"),
        ));
    }
    Ok(name)
}

/// `input` (graph input) or `args` (tool arguments): one of them.
fn parse_begin(o: &Map<String, Value>, at: &str) -> Result<Begin, At> {
    match (o.get("input"), o.get("args")) {
        (Some(_), Some(_)) => Err((
            at.to_owned(),
            "give either \"input\" (graph input) or \"args\" (tool arguments), not both".into(),
        )),
        (Some(v), None) => {
            object(v, &format!("{at}.input"))?;
            Ok(Begin::Input(v.clone()))
        }
        (None, Some(v)) => {
            object(v, &format!("{at}.args"))?;
            Ok(Begin::Args(v.clone()))
        }
        (None, None) => Err((
            at.to_owned(),
            "the case needs \"input\" (graph input) or \"args\" (tool arguments)".into(),
        )),
    }
}

/// `steps`: 1 to [`MAX_STEPS`] resume steps, each with its expectation.
fn parse_steps(v: &Value, at: &str) -> Result<Vec<Step>, At> {
    let Value::Array(items) = v else {
        return Err((
            format!("{at}.steps"),
            format!("must be an array, not {}", json::kind(v)),
        ));
    };
    if items.is_empty() || items.len() > MAX_STEPS {
        return Err((
            format!("{at}.steps"),
            format!("must hold 1 to {MAX_STEPS} steps"),
        ));
    }
    let mut steps = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let sat = format!("{at}.steps[{i}]");
        let so = object(item, &sat)?;
        known_keys(so, STEP_KEYS, &sat)?;
        let resume = so.get("resume").cloned().ok_or_else(|| {
            (
                sat.clone(),
                "a step needs \"resume\": the value the interrupt is answered with".into(),
            )
        })?;
        steps.push(Step {
            resume,
            expect: parse_expect(so, &sat, i + 1 < items.len())?,
        });
    }
    Ok(steps)
}

/// The expectation keys of `o`; `more`: resume steps follow this run.
fn parse_expect(o: &Map<String, Value>, at: &str, more: bool) -> Result<Expect, At> {
    let mut e = Expect {
        state: o.get("state").cloned(),
        error: string(o, "error", at)?.map(str::to_owned),
        error_contains: string(o, "error_contains", at)?.map(str::to_owned),
        ..Expect::default()
    };
    if let Some(s) = &e.state {
        object(s, &format!("{at}.state"))?;
    }
    if let Some(code) = &e.error
        && !ErrorCode::ALL.iter().any(|c| c.as_str() == code)
    {
        let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        return Err((
            format!("{at}.error"),
            format!("unknown error code {code:?} (codes: {})", codes.join(", ")),
        ));
    }
    if e.error_contains.is_some() && e.error.is_none() {
        return Err((
            format!("{at}.error_contains"),
            "needs \"error\" (the code the run fails with)".into(),
        ));
    }
    match o.get("interrupts") {
        None => {}
        Some(Value::Array(items)) => e.interrupts = Some(items.clone()),
        Some(v) => {
            return Err((
                format!("{at}.interrupts"),
                format!(
                    "must be an array of interrupt values, not {}",
                    json::kind(v)
                ),
            ));
        }
    }
    e.asserts = parse_asserts(o.get("assert"), at)?;
    check_combination(&e, at, more)?;
    Ok(e)
}

/// The `assert` key: at most [`MAX_ASSERTS`] assertions.
fn parse_asserts(v: Option<&Value>, at: &str) -> Result<Vec<Assert>, At> {
    match v {
        None => Ok(Vec::new()),
        Some(Value::Array(items)) if items.len() <= MAX_ASSERTS => items
            .iter()
            .enumerate()
            .map(|(i, item)| parse_assert(item, &format!("{at}.assert[{i}]")))
            .collect(),
        Some(Value::Array(_)) => Err((
            format!("{at}.assert"),
            format!("more than {MAX_ASSERTS} assertions"),
        )),
        Some(v) => Err((
            format!("{at}.assert"),
            format!("must be an array of assertions, not {}", json::kind(v)),
        )),
    }
}

/// An expectation either fails the run (`error`, last step only) or checks
/// its state (`state`, `assert`, `interrupts`), never both or neither.
fn check_combination(e: &Expect, at: &str, more: bool) -> Result<(), At> {
    let checks_state = e.state.is_some() || !e.asserts.is_empty() || e.interrupts.is_some();
    if e.error.is_some() && checks_state {
        return Err((
            at.to_owned(),
            "\"error\" expects the run to fail: it excludes \"state\", \"assert\" and \
             \"interrupts\""
                .into(),
        ));
    }
    if e.error.is_some() && more {
        return Err((
            format!("{at}.error"),
            "a run expected to fail cannot be resumed by later steps".into(),
        ));
    }
    if e.error.is_none() && !checks_state {
        return Err((
            at.to_owned(),
            "no expectation: give \"state\", \"assert\", \"error\" or \"interrupts\"".into(),
        ));
    }
    Ok(())
}

fn parse_assert(v: &Value, at: &str) -> Result<Assert, At> {
    let o = object(v, at)?;
    known_keys(o, &["pointer", "equals", "exists"], at)?;
    let pointer = string(o, "pointer", at)?
        .ok_or_else(|| (at.to_owned(), "an assertion needs \"pointer\"".to_owned()))?;
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err((
            format!("{at}.pointer"),
            format!("{pointer:?} is not a JSON pointer: it starts with \"/\" (e.g. \"/log/0\")"),
        ));
    }
    let check = match (o.get("equals"), o.get("exists")) {
        (Some(v), None) => Check::Equals(v.clone()),
        (None, Some(Value::Bool(b))) => Check::Exists(*b),
        (None, Some(v)) => {
            return Err((
                format!("{at}.exists"),
                format!("must be a boolean, not {}", json::kind(v)),
            ));
        }
        _ => {
            return Err((
                at.to_owned(),
                "an assertion needs one of \"equals\" or \"exists\"".into(),
            ));
        }
    };
    Ok(Assert {
        pointer: pointer.to_owned(),
        check,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<Case, At> {
        parse_case(Path::new("tests/a.json"), &v, "$", Some("a"))
    }

    #[test]
    fn a_minimal_case_takes_its_name_from_the_file() {
        let c = parse(serde_json::json!({"input": {}, "state": {"x": 1}})).unwrap();
        assert_eq!(c.name, "a");
        assert!(matches!(c.begin, Begin::Input(_)));
    }

    #[test]
    fn malformed_cases_name_the_json_path() {
        let err = |v: Value| parse(v).unwrap_err();
        assert_eq!(
            err(serde_json::json!({"input": {}, "stat": {}})).0,
            "$.stat"
        );
        assert_eq!(
            err(serde_json::json!({"input": {}, "assert": [{"pointer": "log", "equals": 1}]})).0,
            "$.assert[0].pointer"
        );
        assert_eq!(
            err(serde_json::json!({"input": {}, "interrupts": [1], "steps": [{"resume": 1, "error": "nope"}]})).0,
            "$.steps[0].error"
        );
        assert_eq!(
            err(serde_json::json!({"input": {}, "interrupts": [1], "steps": [{"state": {}}]})).0,
            "$.steps[0]"
        );
        assert_eq!(
            err(serde_json::json!({"input": {}, "limits": {"fuel": "x"}, "state": {}})).0,
            "$.limits"
        );
        let (at, m) = err(serde_json::json!({"input": {}}));
        assert_eq!(at, "$");
        assert!(m.contains("no expectation"), "{m}");
        let (_, m) = err(serde_json::json!({"args": {}, "error": "node_error", "state": {}}));
        assert!(m.contains("excludes"), "{m}");
    }

    #[test]
    fn assertions_report_what_the_state_holds() {
        let state = serde_json::json!({"log": ["a"]});
        let a = |pointer: &str, check: Check| Assert {
            pointer: pointer.into(),
            check,
        };
        assert!(a("/log/0", Check::Equals("a".into())).check(&state).is_ok());
        let m = a("/log/0", Check::Equals("b".into()))
            .check(&state)
            .unwrap_err();
        assert_eq!(m, "assert \"/log/0\": expected \"b\", got \"a\"");
        assert!(a("/log/1", Check::Exists(false)).check(&state).is_ok());
        assert!(a("/log/1", Check::Exists(true)).check(&state).is_err());
    }
}
