//! Argument validation: jsonschema errors reworded to the seed's violation
//! format, plus the lossless-JSON rules JSON Schema cannot express.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Keyword, ValidationError, Validator};
use serde_json::{Map, Value};

use sandgraph_core::json::{MAX_JSON_DEPTH, check_lossless};

use crate::SchemaError;
use crate::compile::{is_safe_integer, type_phrase};

/// Internal keyword added to `integer` nodes of the schema the validator
/// runs (never to the model-facing one): the integer must be within
/// ±(2^53−1).
const SAFE_INTEGER: &str = "x-sandgraph-safe-integer";

/// Root label of argument paths.
const ROOT: &str = "arguments";

/// The fallback schema without its description, which does not affect
/// validation.
static FALLBACK_VALIDATOR: LazyLock<Validator> = LazyLock::new(|| {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"input": {}},
        "required": ["input"],
    });
    build_validator(&schema).expect("the constant fallback schema compiles")
});

/// Builds the validator of a compiled parameter schema.
pub(crate) fn build_validator(schema: &Value) -> Result<Validator, SchemaError> {
    let mut internal = schema.clone();
    add_safe_integer(&mut internal);
    jsonschema::draft202012::options()
        .with_keyword(SAFE_INTEGER, |_, _, _| Ok(Box::new(SafeInteger)))
        .build(&internal)
        .map_err(|err| SchemaError {
            violations: vec![format!(
                "parameters do not compile to a usable JSON Schema: {err}"
            )],
        })
}

/// The validator of [`crate::ParameterSchema::fallback_input`].
pub(crate) fn fallback_validator() -> Validator {
    FALLBACK_VALIDATOR.clone()
}

/// Marks every `integer` node reachable through `properties`, `items` and
/// `oneOf` (the only places the DSL puts subschemas).
fn add_safe_integer(node: &mut Value) {
    let Value::Object(map) = node else {
        return;
    };
    if map.get("type").and_then(Value::as_str) == Some("integer") {
        map.insert(SAFE_INTEGER.to_owned(), Value::Bool(true));
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(add_safe_integer);
    }
    if let Some(items) = map.get_mut("items") {
        add_safe_integer(items);
    }
    if let Some(Value::Array(branches)) = map.get_mut("oneOf") {
        branches.iter_mut().for_each(add_safe_integer);
    }
}

struct SafeInteger;

impl<'i> Keyword<'i> for SafeInteger {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom("integer outside ±(2^53-1)"))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        // Non-integers are the `type` keyword's business.
        !matches!(instance, Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0))
            || is_safe_integer(instance)
    }
}

/// One step of an argument path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// What is wrong at a path. A path keeps only its problem of lowest
/// [`rank`](Problem::rank).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    Missing,
    NotDeclared,
    Type(String),
    NotFinite,
    NotLossless,
    Const(String),
    Enum(String),
    OneOf(usize),
    UnsafeInteger,
    Other(String),
}

impl Problem {
    fn rank(&self) -> u8 {
        match self {
            Problem::Missing | Problem::NotDeclared => 0,
            Problem::Type(_) => 1,
            Problem::NotFinite | Problem::NotLossless => 2,
            Problem::Const(_) => 3,
            Problem::Enum(_) => 4,
            Problem::OneOf(_) | Problem::UnsafeInteger => 5,
            Problem::Other(_) => 6,
        }
    }

    /// Whether nothing below the value should be reported.
    fn blocks_descendants(&self) -> bool {
        self.rank() <= 2
    }

    fn message(&self, path: &str) -> String {
        match self {
            Problem::Missing => format!("missing required property \"{path}\""),
            Problem::NotDeclared => {
                format!("\"{path}\" is not a declared property (additionalProperties: false)")
            }
            Problem::Type(phrase) => format!("\"{path}\" must be {phrase}"),
            Problem::NotFinite => format!("\"{path}\" must be a finite JSON number"),
            Problem::NotLossless => format!("\"{path}\" must be a lossless JSON value"),
            Problem::Const(json) => format!("\"{path}\" must be {json}"),
            Problem::Enum(json) => format!("\"{path}\" must be one of {json}"),
            Problem::OneOf(matched) => {
                format!("\"{path}\" must match exactly one oneOf branch (matched {matched})")
            }
            Problem::UnsafeInteger => format!("\"{path}\" must be an integer"),
            Problem::Other(detail) => format!("\"{path}\" is invalid: {detail}"),
        }
    }
}

/// A problem located in the arguments.
struct Found {
    /// Document order: `2 + position` per step, then `0` for the value
    /// itself, or `1, <index in required>` for a missing property of it.
    order: Vec<usize>,
    path: Vec<Seg>,
    problem: Problem,
}

/// A value's location: its path and its positions in document order.
#[derive(Clone)]
struct Located {
    path: Vec<Seg>,
    positions: Vec<usize>,
}

impl Located {
    fn root() -> Self {
        Located {
            path: Vec::new(),
            positions: Vec::new(),
        }
    }

    fn child(&self, seg: Seg, position: usize) -> Self {
        let mut child = self.clone();
        child.path.push(seg);
        child.positions.push(position.saturating_add(2));
        child
    }

    fn found(&self, problem: Problem) -> Found {
        let mut order = self.positions.clone();
        order.push(0);
        Found {
            order,
            path: self.path.clone(),
            problem,
        }
    }

    fn missing(&self, property: &str, index: usize) -> Found {
        let mut order = self.positions.clone();
        order.extend([1, index]);
        let mut path = self.path.clone();
        path.push(Seg::Key(property.to_owned()));
        Found {
            order,
            path,
            problem: Problem::Missing,
        }
    }
}

/// Validates `args`, returning every violation in document order.
///
/// `schema` is the model-facing schema `validator` was built from.
pub(crate) fn validate(validator: &Validator, schema: &Value, args: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for error in validator.iter_errors(args) {
        schema_problems(&error, schema, args, &mut found);
    }
    if check_lossless(args).is_err() {
        lossless_problems(args, &Located::root(), 0, &mut found);
    }
    report(found)
}

/// Keeps each path's first problem, drops problems below blocking ones and
/// renders the rest in document order.
fn report(found: Vec<Found>) -> Vec<String> {
    let mut best: BTreeMap<Vec<usize>, Found> = BTreeMap::new();
    for item in found {
        match best.get(&item.order) {
            Some(kept) if kept.problem.rank() <= item.problem.rank() => {}
            _ => {
                best.insert(item.order.clone(), item);
            }
        }
    }
    let blockers: Vec<&[usize]> = best
        .iter()
        .filter(|(_, item)| item.problem.blocks_descendants() && item.problem != Problem::Missing)
        .map(|(order, _)| &order[..order.len().saturating_sub(1)])
        .collect();
    best.iter()
        .filter(|(order, _)| {
            !blockers
                .iter()
                .any(|blocker| order.len() > blocker.len() + 1 && order.starts_with(blocker))
        })
        .map(|(_, item)| item.problem.message(&render(&item.path)))
        .collect()
}

/// `arguments.a.b[0].c`
fn render(path: &[Seg]) -> String {
    let mut out = ROOT.to_owned();
    for seg in path {
        match seg {
            Seg::Key(key) => {
                out.push('.');
                out.push_str(key);
            }
            Seg::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

/// Rewords one jsonschema error.
fn schema_problems(
    error: &ValidationError<'_>,
    schema: &Value,
    args: &Value,
    found: &mut Vec<Found>,
) {
    let (at, value) = locate(args, error.instance_path().as_str());
    let problem = match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = match property {
                Value::String(name) => name.clone(),
                other => other.to_string(),
            };
            let index = required_index(schema, error.schema_path().as_str(), &name);
            found.push(at.missing(&name, index));
            return;
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let keys = value.and_then(Value::as_object);
            for key in unexpected {
                let position = keys
                    .and_then(|map| position_of(map, key))
                    .unwrap_or(usize::MAX - 2);
                found.push(
                    at.child(Seg::Key(key.clone()), position)
                        .found(Problem::NotDeclared),
                );
            }
            return;
        }
        ValidationErrorKind::Type { kind } => Problem::Type(match kind {
            TypeKind::Single(ty) => type_phrase(ty.as_str()),
            TypeKind::Multiple(types) => {
                let names: Vec<&str> = types.iter().map(|ty| ty.as_str()).collect();
                format!("one of the types {}", names.join(", "))
            }
        }),
        ValidationErrorKind::Enum { options } => Problem::Enum(options.to_string()),
        ValidationErrorKind::Constant { expected_value } => {
            Problem::Const(expected_value.to_string())
        }
        ValidationErrorKind::OneOfNotValid { .. } => Problem::OneOf(0),
        ValidationErrorKind::OneOfMultipleValid { context } => {
            Problem::OneOf(context.iter().filter(|branch| branch.is_empty()).count())
        }
        ValidationErrorKind::Custom { .. }
            if error.schema_path().as_str().ends_with(SAFE_INTEGER) =>
        {
            Problem::UnsafeInteger
        }
        _ => Problem::Other(error.to_string()),
    };
    found.push(at.found(problem));
}

/// Resolves a JSON pointer into `args`. Steps that do not resolve (which
/// jsonschema never produces) are kept as keys and ordered last.
fn locate<'a>(args: &'a Value, pointer: &str) -> (Located, Option<&'a Value>) {
    let mut at = Located::root();
    let mut current = Some(args);
    for raw in pointer.split('/').skip(1) {
        let token = raw.replace("~1", "/").replace("~0", "~");
        match current {
            Some(Value::Object(map)) if map.contains_key(&token) => {
                let position = position_of(map, &token).unwrap_or(usize::MAX - 2);
                current = map.get(&token);
                at = at.child(Seg::Key(token), position);
            }
            Some(Value::Array(items))
                if token
                    .parse::<usize>()
                    .is_ok_and(|index| index < items.len()) =>
            {
                let index = token.parse::<usize>().unwrap_or_default();
                current = items.get(index);
                at = at.child(Seg::Index(index), index);
            }
            _ => {
                current = None;
                at = at.child(Seg::Key(token), usize::MAX - 2);
            }
        }
    }
    (at, current)
}

fn position_of(map: &Map<String, Value>, key: &str) -> Option<usize> {
    map.keys().position(|k| k == key)
}

/// Position of `name` in the `required` array a Required error points at.
fn required_index(schema: &Value, schema_path: &str, name: &str) -> usize {
    schema
        .pointer(schema_path)
        .and_then(Value::as_array)
        .and_then(|required| {
            required
                .iter()
                .position(|entry| entry.as_str() == Some(name))
        })
        .unwrap_or(usize::MAX)
}

/// Reports every value that is not lossless JSON.
fn lossless_problems(value: &Value, at: &Located, depth: usize, found: &mut Vec<Found>) {
    match value {
        Value::Number(number) => {
            if check_lossless(value).is_err() {
                let negative_zero = number
                    .as_f64()
                    .is_some_and(|f| f == 0.0 && f.is_sign_negative());
                found.push(at.found(if negative_zero {
                    Problem::NotFinite
                } else {
                    Problem::NotLossless
                }));
            }
        }
        Value::Array(items) => {
            if depth + 1 > MAX_JSON_DEPTH {
                found.push(at.found(Problem::NotLossless));
                return;
            }
            for (index, item) in items.iter().enumerate() {
                lossless_problems(item, &at.child(Seg::Index(index), index), depth + 1, found);
            }
        }
        Value::Object(map) => {
            if depth + 1 > MAX_JSON_DEPTH {
                found.push(at.found(Problem::NotLossless));
                return;
            }
            for (position, (key, item)) in map.iter().enumerate() {
                lossless_problems(
                    item,
                    &at.child(Seg::Key(key.clone()), position),
                    depth + 1,
                    found,
                );
            }
        }
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}
