//! Lossless JSON: the subset of JSON that every mainstream JSON library reads
//! back to the same value.
//!
//! Graph components hand the host JSON text; the host only trusts values that
//! survive a round trip through Python, JavaScript and Rust alike. That rules
//! out:
//!
//! - duplicate object keys (libraries keep the first, the last, or fail),
//! - non-finite numbers (`NaN`, `Infinity`, or literals like `1e400` that
//!   overflow an `f64`),
//! - negative zero (`-0`, `-0.0`), which many libraries turn into `0`,
//! - integer tokens outside ±(2^53−1), which JavaScript cannot represent,
//! - nesting deeper than [`MAX_JSON_DEPTH`] and texts longer than
//!   [`MAX_JSON_BYTES`], which bound the host's memory and stack use.
//!
//! Errors carry the JSON path of the offending value: `$` for the root,
//! `$.a.b[0]` for identifier keys and array indexes, `$["a b"]` for other keys.

use std::cell::{Cell, RefCell};
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// Deepest nesting of arrays and objects accepted: a value may be enclosed by
/// at most this many containers' worth of nesting, i.e. 64 nested arrays are
/// fine and 65 are not. serde_json's own recursion limit is 128, so this one
/// always triggers first, and it keeps recursive walks over values shallow.
pub const MAX_JSON_DEPTH: usize = 64;

/// Longest JSON text accepted, checked before parsing: 16 MiB bounds the
/// memory a single value can make the host allocate.
pub const MAX_JSON_BYTES: usize = 16 * 1024 * 1024;

/// Largest integer magnitude every JSON library represents exactly:
/// 2^53 − 1, JavaScript's `Number.MAX_SAFE_INTEGER`.
pub const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// Bytes charged for every JSON value the host holds, whatever its kind:
/// the in-memory size of a [`Value`]. Text grows when parsed (`0,` is two
/// bytes of text and a whole `Value` in memory), so budgets count this, not
/// the text.
pub const VALUE_COST: usize = std::mem::size_of::<Value>();

/// Bytes charged per object member on top of its key's length and value:
/// the key's `String` header plus the map's hash and index slots.
pub const ENTRY_COST: usize = std::mem::size_of::<String>() + 16;

/// The host memory `value` takes, as budgets count it: [`VALUE_COST`] per
/// value, [`ENTRY_COST`] plus the key per object member, and the bytes of
/// every string. An estimate (allocator slack is not counted) that grows
/// linearly with what is really allocated, which is what a bound needs.
pub fn value_cost(value: &Value) -> usize {
    let mut cost = VALUE_COST;
    match value {
        Value::String(s) => cost += s.len(),
        Value::Array(items) => {
            for item in items {
                cost = cost.saturating_add(value_cost(item));
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                cost = cost
                    .saturating_add(ENTRY_COST + key.len())
                    .saturating_add(value_cost(item));
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
    cost
}

/// The JSON type of `value`, for messages: `"an object"`, `"a string"`,
/// `"null"`, ...
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// How much a bounded parse may allocate: it asks `grant` for each further
/// chunk of [`GRANT_CHUNK`] bytes (as [`value_cost`] counts them) before it
/// allocates past what was granted, and stops at the first refusal.
pub const GRANT_CHUNK: usize = 64 * 1024;

/// Why a bounded parse stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundedError {
    /// The text is not lossless JSON.
    Json(JsonError),
    /// `grant` refused more memory after `granted` bytes: the parsed value
    /// would not fit the caller's budget. Nothing past `granted` (plus one
    /// value) was allocated.
    OverBudget {
        /// Bytes granted (and to be released by the caller) when it stopped.
        granted: usize,
    },
}

/// A parsed value and the bytes granted for it ([`value_cost`] rounded up
/// to whole chunks): the caller's budget holds them until it drops the
/// value.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounded {
    /// The value.
    pub value: Value,
    /// Bytes granted while parsing, at least `value_cost(&value)`.
    pub granted: usize,
}

/// [`parse_lossless`] that asks `grant(n)` before allocating each further
/// `n` bytes of parsed value (chunks of [`GRANT_CHUNK`]): a text that grows
/// ~30x when parsed is refused when its budget is spent, not after. When
/// the parse fails, the value is dropped: the caller releases everything it
/// granted (its `grant` closure knows how much).
pub fn parse_lossless_within(
    text: &str,
    what: &str,
    grant: &mut dyn FnMut(usize) -> bool,
) -> Result<Bounded, BoundedError> {
    let ctx = ParseCtx {
        grant: Some(RefCell::new(grant)),
        ..ParseCtx::default()
    };
    match parse_with(text, what, &ctx) {
        Ok(value) => Ok(Bounded {
            value,
            granted: ctx.granted.get(),
        }),
        Err(_) if ctx.over_budget.get() => Err(BoundedError::OverBudget {
            granted: ctx.granted.get(),
        }),
        Err(e) => Err(BoundedError::Json(e)),
    }
}

/// A value that is not lossless JSON, or text that is not JSON at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct JsonError {
    /// JSON path of the offending value, e.g. `$.a[0]`.
    pub path: String,
    /// What is wrong, lowercase.
    pub reason: String,
    /// The text is not JSON at all (rather than JSON that breaks a rule).
    syntax: bool,
}

impl JsonError {
    fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        JsonError {
            path: path.into(),
            reason: reason.into(),
            syntax: false,
        }
    }

    /// Whether the text was not JSON at all, rather than JSON breaking a
    /// lossless rule (or too large).
    #[cfg(test)]
    fn is_syntax(&self) -> bool {
        self.syntax
    }

    /// The error as one sentence about the document `what` a person typed
    /// or named (`--resume`, `input file a.json`): `--resume is not valid
    /// json: expected ident at line 1 column 2 (...)`, or, for a rule, `--resume
    /// is not lossless json at $.a: duplicate key "x"`. For a syntax error
    /// at the root the path is left out: it says nothing there.
    pub fn in_document(&self, what: &str) -> String {
        let (path, reason) = (&self.path, &self.reason);
        match (self.syntax, path == "$") {
            (true, true) => format!("{what} is not valid json: {reason}"),
            (true, false) => format!("{what} is not valid json at {path}: {reason}"),
            (false, true) => format!("{what}: {reason}"),
            (false, false) => format!("{what} is not lossless json at {path}: {reason}"),
        }
    }
}

/// Parses `text` as lossless JSON in a single pass.
///
/// `what` names the document (e.g. `output of node "a"`) in the reason that
/// concerns the text as a whole, its size. A syntax error's reason is
/// serde_json's (with a hint for a bare word that was meant as a string),
/// for the caller to put after its own `... is not valid json: `; rule
/// violations are located by their JSON path.
pub fn parse_lossless(text: &str, what: &str) -> Result<Value, JsonError> {
    parse_with(text, what, &ParseCtx::default())
}

fn parse_with(text: &str, what: &str, ctx: &ParseCtx<'_>) -> Result<Value, JsonError> {
    if text.len() > MAX_JSON_BYTES {
        return Err(JsonError::new(
            "$",
            format!(
                "{what} is {} bytes, over the limit of {MAX_JSON_BYTES} bytes",
                text.len()
            ),
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let root = Path::Root;
    let parsed = ValueSeed {
        ctx,
        path: &root,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|value| de.end().map(|()| value));
    let value = match parsed {
        Ok(value) => value,
        Err(err) => {
            if let Some(found) = ctx.error.take() {
                return Err(found);
            }
            let path = ctx.error_path.take().unwrap_or_else(|| "$".to_owned());
            let mut error = JsonError::new(path, syntax_reason(text, &err));
            error.syntax = true;
            return Err(error);
        }
    };
    // Integer tokens too long for u64/i64 reach the visitor as floats; confirm
    // from the text whether the suspicious ones were written as integers.
    let suspects = ctx.suspects.take();
    if !suspects.is_empty() {
        let tokens = number_tokens(text);
        for (index, path) in suspects {
            if let Some(token) = tokens.get(index)
                && is_integer_token(token)
            {
                return Err(JsonError::new(path, integer_range_reason(token)));
            }
        }
    }
    Ok(value)
}

/// Checks an already-built value against the lossless rules (everything but
/// duplicate keys, which a [`Value`] cannot hold).
pub fn check_lossless(value: &Value) -> Result<(), JsonError> {
    check_value(value, &Path::Root, 0)
}

fn check_value(value: &Value, path: &Path<'_>, depth: usize) -> Result<(), JsonError> {
    match value {
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
        Value::Number(n) => check_number(n).map_err(|reason| JsonError::new(path.render(), reason)),
        Value::Array(items) => {
            check_depth(path, depth + 1)?;
            for (i, item) in items.iter().enumerate() {
                check_value(item, &Path::Index(path, i), depth + 1)?;
            }
            Ok(())
        }
        Value::Object(map) => {
            check_depth(path, depth + 1)?;
            for (key, item) in map {
                check_value(item, &Path::Key(path, key), depth + 1)?;
            }
            Ok(())
        }
    }
}

fn check_depth(path: &Path<'_>, depth: usize) -> Result<(), JsonError> {
    if depth > MAX_JSON_DEPTH {
        Err(JsonError::new(path.render(), depth_reason()))
    } else {
        Ok(())
    }
}

fn check_number(n: &Number) -> Result<(), String> {
    if let Some(i) = n.as_i64() {
        check_integer(i128::from(i))
    } else if let Some(u) = n.as_u64() {
        check_integer(i128::from(u))
    } else if let Some(f) = n.as_f64() {
        check_float(f)
    } else {
        Err("number is neither an integer nor a float".to_owned())
    }
}

fn check_integer(i: i128) -> Result<(), String> {
    if i.unsigned_abs() > MAX_SAFE_INTEGER.unsigned_abs().into() {
        Err(integer_range_reason(&i.to_string()))
    } else {
        Ok(())
    }
}

fn check_float(f: f64) -> Result<(), String> {
    if !f.is_finite() {
        Err(format!("number {f} is not finite"))
    } else if f == 0.0 && f.is_sign_negative() {
        Err(negative_zero_reason())
    } else {
        Ok(())
    }
}

fn integer_range_reason(token: &str) -> String {
    format!("integer {token} is outside the safe range ±(2^53-1)")
}

fn negative_zero_reason() -> String {
    "negative zero (-0) is not allowed".to_owned()
}

fn depth_reason() -> String {
    format!("nesting deeper than {MAX_JSON_DEPTH} levels")
}

/// Longest text [`bare_word_hint`] quotes back: a word or two typed where
/// a JSON string was meant; anything longer is not echoed.
const MAX_BARE_WORD_LEN: usize = 64;

/// For text that reads as a bare word or phrase (`yes`, `ship it`) rather
/// than JSON, how to write it as a JSON string, in a shell too: `(a json
/// string needs double quotes: "yes", in a shell '"yes"')`.
pub(crate) fn bare_word_hint(text: &str) -> Option<String> {
    let word = text.trim();
    let starts_like_a_word = word.chars().next().is_some_and(char::is_alphabetic);
    let plain = word
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '_' | '-' | '.' | ',' | '!' | '?'));
    let literal = matches!(word, "true" | "false" | "null");
    if word.len() > MAX_BARE_WORD_LEN || !starts_like_a_word || !plain || literal {
        return None;
    }
    Some(format!(
        "(a json string needs double quotes: \"{word}\", in a shell '\"{word}\"')"
    ))
}

/// Turns a serde_json error the visitor did not raise itself into a reason.
fn syntax_reason(text: &str, err: &serde_json::Error) -> String {
    let message = err.to_string();
    if message.starts_with("number out of range") {
        return format!(
            "number is not finite (out of the range of f64) at line {} column {}",
            err.line(),
            err.column()
        );
    }
    let bad_value = message.starts_with("expected value") || message.starts_with("invalid number");
    if bad_value && mentions_non_finite_literal(text, err.line(), err.column()) {
        return format!(
            "non-finite number (NaN or Infinity) at line {} column {}: json has no such literal",
            err.line(),
            err.column()
        );
    }
    match bare_word_hint(text) {
        Some(hint) => format!("{message} {hint}"),
        None => message,
    }
}

/// Whether the text around serde_json's error position spells `NaN` or
/// `Infinity`, which serde_json reports as a generic syntax error.
fn mentions_non_finite_literal(text: &str, line: usize, column: usize) -> bool {
    let Some(line_start) = text
        .split_inclusive('\n')
        .take(line.saturating_sub(1))
        .map(str::len)
        .try_fold(0usize, usize::checked_add)
    else {
        return false;
    };
    let bytes = text.as_bytes();
    let at = line_start.saturating_add(column);
    let from = at.saturating_sub(3).min(bytes.len());
    let to = at.saturating_add(9).min(bytes.len());
    let window = &bytes[from..to];
    [&b"NaN"[..], &b"Infinity"[..]]
        .iter()
        .any(|needle| window.windows(needle.len()).any(|w| w == *needle))
}

/// The number tokens of (valid) JSON text, in document order.
fn number_tokens(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    i += 1;
                }
                // Number tokens are ASCII, so these are char boundaries.
                tokens.push(text.get(start..i).unwrap_or_default());
            }
            _ => i += 1,
        }
    }
    tokens
}

fn is_integer_token(token: &str) -> bool {
    !token.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'))
}

/// A JSON path as a chain of stack frames, rendered only on error.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl Path<'_> {
    fn render(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("$"),
            Path::Key(parent, key) => {
                write!(f, "{parent}")?;
                if is_identifier(key) {
                    write!(f, ".{key}")
                } else {
                    // Serializing a str cannot fail.
                    let quoted = serde_json::to_string(key).unwrap_or_default();
                    write!(f, "[{quoted}]")
                }
            }
            Path::Index(parent, i) => write!(f, "{parent}[{i}]"),
        }
    }
}

fn is_identifier(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// State shared by every frame of one parse.
#[derive(Default)]
struct ParseCtx<'g> {
    /// Asked before the parsed value grows past `granted` (bounded parses).
    grant: Option<RefCell<&'g mut dyn FnMut(usize) -> bool>>,
    /// Bytes counted so far, as [`value_cost`] counts them.
    cost: Cell<usize>,
    /// Bytes granted so far.
    granted: Cell<usize>,
    /// Set when `grant` refused: the parse stopped for the budget.
    over_budget: Cell<bool>,
    /// The rule violation that aborted the parse, if one did.
    error: RefCell<Option<JsonError>>,
    /// Path of the innermost value being read when serde_json failed.
    error_path: RefCell<Option<String>>,
    /// Number tokens seen so far.
    numbers: Cell<usize>,
    /// Integral floats too large for i64/u64: (number index, path).
    suspects: RefCell<Vec<(usize, String)>>,
}

impl ParseCtx<'_> {
    /// Counts `bytes` more of parsed value; asks for more grant when the
    /// count passes what was granted. `Err` once the budget refuses.
    fn count<E: de::Error>(&self, path: &Path<'_>, bytes: usize) -> Result<(), E> {
        let Some(grant) = &self.grant else {
            return Ok(());
        };
        let cost = self.cost.get().saturating_add(bytes);
        self.cost.set(cost);
        while cost > self.granted.get() {
            let ask = GRANT_CHUNK.max(cost - self.granted.get());
            let ok = (grant.borrow_mut())(ask);
            if !ok {
                self.over_budget.set(true);
                return Err(self.fail(path, "over the memory budget"));
            }
            self.granted.set(self.granted.get().saturating_add(ask));
        }
        Ok(())
    }

    fn fail<E: de::Error>(&self, path: &Path<'_>, reason: impl Into<String>) -> E {
        *self.error.borrow_mut() = Some(JsonError::new(path.render(), reason));
        E::custom("lossless json rule violated")
    }

    /// Remembers where a serde_json error happened; the innermost frame wins.
    fn note_error_path(&self, path: &Path<'_>) {
        let mut slot = self.error_path.borrow_mut();
        if slot.is_none() {
            *slot = Some(path.render());
        }
    }

    fn next_number(&self) -> usize {
        let index = self.numbers.get();
        self.numbers.set(index.saturating_add(1));
        index
    }
}

struct ValueSeed<'c, 'p, 'g> {
    ctx: &'c ParseCtx<'g>,
    path: &'p Path<'p>,
    /// Containers enclosing this value.
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_, '_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a json value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST)?;
        Ok(Value::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST)?;
        Ok(Value::Bool(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST)?;
        self.ctx.next_number();
        check_integer(i128::from(v)).map_err(|reason| self.ctx.fail(self.path, reason))?;
        Ok(Value::from(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST)?;
        self.ctx.next_number();
        check_integer(i128::from(v)).map_err(|reason| self.ctx.fail(self.path, reason))?;
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.ctx.count(self.path, VALUE_COST)?;
        let index = self.ctx.next_number();
        check_float(v).map_err(|reason| self.ctx.fail(self.path, reason))?;
        // Integer tokens beyond i64/u64 arrive here as floats; such a float
        // is integral and at least 2^63 in magnitude.
        if v.fract() == 0.0 && v.abs() >= 9_223_372_036_854_775_808.0 {
            self.ctx
                .suspects
                .borrow_mut()
                .push((index, self.path.render()));
        }
        Number::from_f64(v).map(Value::Number).ok_or_else(|| {
            self.ctx
                .fail(self.path, format!("number {v} is not finite"))
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let depth = self.depth + 1;
        if depth > MAX_JSON_DEPTH {
            return Err(self.ctx.fail(self.path, depth_reason()));
        }
        self.ctx.count(self.path, VALUE_COST)?;
        let mut items = Vec::new();
        loop {
            let path = Path::Index(self.path, items.len());
            let seed = ValueSeed {
                ctx: self.ctx,
                path: &path,
                depth,
            };
            match seq.next_element_seed(seed) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(err) => {
                    self.ctx.note_error_path(&path);
                    return Err(err);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let depth = self.depth + 1;
        if depth > MAX_JSON_DEPTH {
            return Err(self.ctx.fail(self.path, depth_reason()));
        }
        self.ctx.count(self.path, VALUE_COST)?;
        let mut out = Map::new();
        loop {
            let key = match map.next_key::<String>() {
                Ok(Some(key)) => key,
                Ok(None) => return Ok(Value::Object(out)),
                Err(err) => {
                    self.ctx.note_error_path(self.path);
                    return Err(err);
                }
            };
            let path = Path::Key(self.path, &key);
            self.ctx.count(&path, ENTRY_COST + key.len())?;
            if out.contains_key(&key) {
                return Err(self
                    .ctx
                    .fail(&path, format!("duplicate key {}", quote(&key))));
            }
            let seed = ValueSeed {
                ctx: self.ctx,
                path: &path,
                depth,
            };
            match map.next_value_seed(seed) {
                Ok(value) => {
                    out.insert(key, value);
                }
                Err(err) => {
                    self.ctx.note_error_path(&path);
                    return Err(err);
                }
            }
        }
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod bounded_tests {
    use super::*;

    fn parse_with_budget(text: &str, budget: usize) -> (Result<Bounded, BoundedError>, usize) {
        let mut granted = 0usize;
        let mut grant = |n: usize| {
            if granted + n > budget {
                return false;
            }
            granted += n;
            true
        };
        let r = parse_lossless_within(text, "output", &mut grant);
        (r, granted)
    }

    #[test]
    fn a_text_that_blows_up_when_parsed_is_refused_within_its_budget() {
        // 2 MB of `0,` is a million values: ~32 MB parsed.
        let text = format!("[{}0]", "0,".repeat(1_000_000));
        let (r, granted) = parse_with_budget(&text, 4 << 20);
        assert_eq!(r, Err(BoundedError::OverBudget { granted }));
        assert!(granted <= 4 << 20, "{granted}");
    }

    #[test]
    fn grants_cover_the_value_cost_and_match_the_unbounded_parse() {
        let text = r#"{"a":[1,2,{"b":"xyz"}],"c":null,"d":true,"e":-1.5}"#;
        let (r, granted) = parse_with_budget(text, 1 << 20);
        let b = r.unwrap();
        assert_eq!(b.value, parse_lossless(text, "t").unwrap());
        assert_eq!(b.granted, granted);
        assert!(b.granted >= value_cost(&b.value));
        assert!(value_cost(&b.value) > text.len());
    }

    #[test]
    fn rule_errors_stay_json_errors() {
        let (r, _) = parse_with_budget(r#"{"a":1,"a":2}"#, 1 << 20);
        assert!(matches!(r, Err(BoundedError::Json(e)) if e.reason.contains("duplicate key")));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn err(text: &str) -> JsonError {
        match parse_lossless(text, "test input") {
            Ok(value) => panic!("{text} parsed as {value}"),
            Err(e) => e,
        }
    }

    fn nested_arrays(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    fn nested_value(depth: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn parses_ordinary_json() {
        let v = parse_lossless(
            r#"{"a": [1, -2, 1.5, "x", true, null, {}], "b c": 1e300}"#,
            "t",
        )
        .unwrap();
        assert_eq!(
            v,
            json!({"a": [1, -2, 1.5, "x", true, null, {}], "b c": 1e300})
        );
    }

    #[test]
    fn safe_integer_bounds() {
        assert_eq!(
            parse_lossless("9007199254740991", "t").unwrap(),
            json!(9007199254740991_i64)
        );
        assert_eq!(
            parse_lossless("-9007199254740991", "t").unwrap(),
            json!(-9007199254740991_i64)
        );
        let e = err("9007199254740992");
        assert_eq!(e.path, "$");
        assert!(e.reason.contains("9007199254740992"), "{e}");
        let e = err(r#"{"n": -9007199254740992}"#);
        assert_eq!(e.path, "$.n");
        assert!(e.reason.contains("safe range"), "{e}");
    }

    #[test]
    fn integer_tokens_beyond_u64_are_rejected_but_big_floats_are_not() {
        let e = err("[1, 123456789012345678901234567890]");
        assert_eq!(e.path, "$[1]");
        assert!(e.reason.contains("123456789012345678901234567890"), "{e}");
        let e = err(r#"{"s": "1 2 -3", "n": -99999999999999999999}"#);
        assert_eq!(e.path, "$.n");
        // The same magnitudes written as floats are fine.
        assert_eq!(
            parse_lossless("[1e30, 1.0e20, -1E19]", "t").unwrap(),
            json!([1e30, 1e20, -1e19])
        );
        assert_eq!(parse_lossless("1e300", "t").unwrap(), json!(1e300));
        assert_eq!(parse_lossless("1.5", "t").unwrap(), json!(1.5));
    }

    #[test]
    fn negative_zero_is_rejected() {
        for text in ["-0", "-0.0", "-0e3", "[-0.0]"] {
            let e = err(text);
            assert!(e.reason.contains("negative zero"), "{text}: {e}");
        }
        assert_eq!(err("[-0.0]").path, "$[0]");
        assert_eq!(parse_lossless("[0, 0.0]", "t").unwrap(), json!([0, 0.0]));
    }

    #[test]
    fn non_finite_numbers_are_rejected() {
        let e = err(r#"{"a": 1e400}"#);
        assert_eq!(e.path, "$.a");
        assert!(e.reason.contains("not finite"), "{e}");
        let e = err("[1, NaN]");
        assert_eq!(e.path, "$[1]");
        assert!(e.reason.contains("non-finite"), "{e}");
        let e = err(r#"{"x": {"y": -Infinity}}"#);
        assert_eq!(e.path, "$.x.y");
        assert!(e.reason.contains("non-finite"), "{e}");
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        let e = err(r#"{"a":1,"a":2}"#);
        assert_eq!(e, JsonError::new("$.a", r#"duplicate key "a""#));
        assert_eq!(e.to_string(), r#"$.a: duplicate key "a""#);
        let e = err(r#"{"o": [{"k": 1, "a b": 2, "a b": 3}]}"#);
        assert_eq!(e.path, r#"$.o[0]["a b"]"#);
    }

    #[test]
    fn depth_limit() {
        assert_eq!(
            parse_lossless(&nested_arrays(MAX_JSON_DEPTH), "t").unwrap(),
            nested_value(64)
        );
        let e = err(&nested_arrays(MAX_JSON_DEPTH + 1));
        assert_eq!(e.path, format!("${}", "[0]".repeat(MAX_JSON_DEPTH)));
        assert!(e.reason.contains("nesting deeper than 64"), "{e}");
        // Far beyond serde_json's own limit of 128: still our error.
        let e = err(&nested_arrays(500));
        assert!(e.reason.contains("nesting deeper than 64"), "{e}");
        let objects = format!("{}1{}", r#"{"a":"#.repeat(65), "}".repeat(65));
        assert!(err(&objects).reason.contains("nesting"));
    }

    #[test]
    fn size_limit_is_checked_before_parsing() {
        let text = " ".repeat(MAX_JSON_BYTES + 1);
        let e = err(&text);
        assert_eq!(e.path, "$");
        assert!(e.reason.starts_with("test input is 16777217 bytes"), "{e}");
    }

    #[test]
    fn syntax_errors_name_the_document_and_location() {
        let e = err(r#"{"a": [1, 2}"#);
        assert_eq!(e.path, "$.a[2]");
        assert!(e.reason.starts_with("expected `,` or `]`"), "{e}");
        assert!(e.is_syntax());
        assert_eq!(
            e.in_document("--input"),
            "--input is not valid json at $.a[2]: expected `,` or `]` at line 1 column 12"
        );
        let e = err("{} x");
        assert_eq!(e.path, "$");
        assert!(e.reason.contains("trailing characters"), "{e}");
        assert!(err("").is_syntax());
        assert!(err(r#""\ud800""#).is_syntax());
        assert!(!err(r#"{"a":1,"a":2}"#).is_syntax());
    }

    #[test]
    fn a_bare_word_is_told_to_quote_itself_once() {
        let e = err("yes");
        assert_eq!(
            e.in_document("--resume"),
            "--resume is not valid json: expected value at line 1 column 1 \
             (a json string needs double quotes: \"yes\", in a shell '\"yes\"')"
        );
        assert_eq!(
            bare_word_hint(" ship it! ").as_deref(),
            Some("(a json string needs double quotes: \"ship it!\", in a shell '\"ship it!\"')")
        );
        assert_eq!(bare_word_hint("{\"a\": x}"), None, "not a word");
        assert_eq!(
            bare_word_hint("it's"),
            None,
            "would need other shell quoting"
        );
        assert_eq!(
            bare_word_hint("nul"),
            Some("(a json string needs double quotes: \"nul\", in a shell '\"nul\"')".into())
        );
        assert_eq!(bare_word_hint("true"), None);
        assert_eq!(bare_word_hint("1x"), None);
        assert_eq!(
            bare_word_hint(&"y".repeat(MAX_BARE_WORD_LEN + 1)),
            None,
            "not echoed"
        );
        assert_eq!(bare_word_hint("esc\u{1b}[31m"), None);
        // Rule violations name their path; at the root, just the reason.
        assert_eq!(
            err(r#"{"a":1,"a":2}"#).in_document("--input"),
            "--input is not lossless json at $.a: duplicate key \"a\""
        );
        assert_eq!(
            err("-0").in_document("--resume"),
            "--resume: negative zero (-0) is not allowed"
        );
    }

    #[test]
    fn path_formatting() {
        let root = Path::Root;
        let a = Path::Key(&root, "a");
        let b = Path::Key(&a, "b_1");
        let i = Path::Index(&b, 0);
        let odd = Path::Key(&i, "a b\"");
        let digit = Path::Key(&root, "1x");
        assert_eq!(root.render(), "$");
        assert_eq!(i.render(), "$.a.b_1[0]");
        assert_eq!(odd.render(), r#"$.a.b_1[0]["a b\""]"#);
        assert_eq!(digit.render(), r#"$["1x"]"#);
        assert_eq!(Path::Key(&root, "").render(), r#"$[""]"#);
    }

    #[test]
    fn check_lossless_rules() {
        assert!(
            check_lossless(&json!({"a": [1, 1.5, "x", null], "b": 9007199254740991_i64})).is_ok()
        );
        let e = check_lossless(&json!({"a": [0, 9007199254740992_i64]})).unwrap_err();
        assert_eq!(e.path, "$.a[1]");
        let e = check_lossless(&json!({"x y": -9007199254740992_i64})).unwrap_err();
        assert_eq!(e.path, r#"$["x y"]"#);
        assert!(check_lossless(&json!(-9007199254740991_i64)).is_ok());
        assert!(check_lossless(&json!(u64::MAX)).is_err());
        let e = check_lossless(&json!({"z": -0.0})).unwrap_err();
        assert_eq!(e, JsonError::new("$.z", negative_zero_reason()));
        assert!(check_lossless(&json!(1e300)).is_ok());
        assert!(check_lossless(&nested_value(64)).is_ok());
        let e = check_lossless(&nested_value(65)).unwrap_err();
        assert!(e.reason.contains("nesting"), "{e}");
        assert_eq!(e.path, format!("${}", "[0]".repeat(64)));
        assert_eq!(
            check_float(f64::NAN),
            Err("number NaN is not finite".to_owned())
        );
        assert!(check_float(f64::INFINITY).is_err());
    }

    #[test]
    fn number_tokens_skip_strings() {
        let text = r#"{"a\"-1": [-1, 2.5e3], "b": "3", "c": 40}"#;
        assert_eq!(number_tokens(text), vec!["-1", "2.5e3", "40"]);
    }
}

#[cfg(test)]
#[path = "json_proptest.rs"]
mod proptests;
