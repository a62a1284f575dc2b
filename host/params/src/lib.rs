//! The parameter-spec DSL of graph tools: compilation to JSON Schema and
//! validation of tool arguments.
//!
//! A graph mounted as an LLM tool declares its arguments with a small DSL (the
//! seed's `ParameterSchemaSpec`): a map from parameter name to a *value
//! schema* such as `{"type": "string", "required": true, "description": ".."}`.
//! [`ParameterSchema::compile`] turns that map into the JSON Schema shown to
//! the model, `{"type": "object", "properties": {..}, "required": [..]}`, and
//! [`ParameterSchema::validate`] checks the arguments a model sends against it
//! before the graph runs. A graph that declares no parameters gets
//! [`ParameterSchema::fallback_input`]: one required `input` of any JSON value,
//! which becomes the graph input on its own ([`ParameterSchema::graph_input`]).
//!
//! # The DSL
//!
//! * The map is an implicit object root. Each entry must be a plain object.
//!   `required` is allowed only on properties (entries of the map and of a
//!   nested object's `properties`) and only as the literal `true`; required
//!   names are collected into the parent's `required` array, which is omitted
//!   when empty. Built this way, `required` only ever names declared
//!   properties.
//! * Annotations `description`, `title`, `default` and `examples` are allowed
//!   on every node. `description` and `title` must be strings, `examples` an
//!   array, and all four lossless JSON. `default` is not checked against the
//!   node.
//! * Scalars (`string`, `number`, `integer`, `boolean`, `null`) allow `type`,
//!   `enum` and `const`. `enum` is a non-empty array of values of the node's
//!   type; `const` has the node's type and is one of the `enum` members when
//!   both are present.
//! * `array` allows `type` and an optional `items` value schema.
//! * `object` allows `type`, `properties` and `additionalProperties`, which is
//!   mandatory and boolean.
//! * `json` allows only `type` and compiles to an annotation-only node with no
//!   `type` key, which accepts any lossless JSON value.
//! * A node with `oneOf` lists at least two value schemas (which may not carry
//!   `required`) and has no `type`.
//! * Every other key is an error. Author errors are all collected, in document
//!   order, with paths rooted at `parameters` (`parameters.tags.items`,
//!   `parameters.x.oneOf[1]`, `parameters.obj.properties.k`).
//!
//! Declaration order is the iteration order of the [`serde_json::Map`] that
//! holds the spec: the host enables serde_json's `preserve_order`, so
//! `required` arrays and violation lists follow the spec text the graph sent
//! (a guest whose serde_json lacks the feature sends its keys sorted).
//!
//! The user-facing reference of the DSL, with examples checked by a test,
//! is `guest-sdk/PARAMETERS.md`.
//!
//! # Argument validation
//!
//! The compiled schema is evaluated with the [`jsonschema`] crate (draft
//! 2020-12) and each of its errors is reworded to the seed's violation format,
//! paths rooted at `arguments` (`arguments.a.b[0].c`). Integers follow JSON
//! Schema, so `1.0` is an integer; an `integer` node additionally requires a
//! magnitude of at most 2^53−1. On top of the schema, every value must be
//! lossless JSON (see [`sandgraph_core::json`]): `-0` is reported as
//! `must be a finite JSON number`, integers outside ±(2^53−1) and nesting
//! deeper than [`sandgraph_core::json::MAX_JSON_DEPTH`] as
//! `must be a lossless JSON value`. See [`ParameterSchema::validate`] for how
//! violations are ordered and deduplicated.

#![deny(missing_docs)]
// Every declared dependency is used: CI's build makes this an error.
#![cfg_attr(not(test), warn(unused_crate_dependencies))]

mod compile;
#[cfg(test)]
mod reference_doc;
mod validate;

use serde_json::{Map, Value};

/// Error code of [`SchemaError`].
pub const UNSUPPORTED_SCHEMA: &str = "UNSUPPORTED_SCHEMA";

/// Error code of [`ArgsError`].
pub const INVALID_ARGS: &str = "INVALID_ARGS";

/// A `parameters` spec that does not follow the value schema DSL.
///
/// Displays as `unsupported JSON schema: <v1>; <v2>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported JSON schema: {}", .violations.join("; "))]
pub struct SchemaError {
    /// Every author error found, in document order, paths rooted at
    /// `parameters`. Never empty.
    pub violations: Vec<String>,
}

impl SchemaError {
    /// The stable error code, [`UNSUPPORTED_SCHEMA`].
    pub fn code(&self) -> &'static str {
        UNSUPPORTED_SCHEMA
    }
}

/// Tool arguments that do not satisfy a [`ParameterSchema`].
///
/// Displays as `invalid arguments: <v1>; <v2>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid arguments: {}", .violations.join("; "))]
pub struct ArgsError {
    /// Every violation, in document order, paths rooted at `arguments`.
    /// Never empty.
    pub violations: Vec<String>,
}

impl ArgsError {
    /// The stable error code, [`INVALID_ARGS`].
    pub fn code(&self) -> &'static str {
        INVALID_ARGS
    }
}

/// The compiled parameters of a graph tool: the JSON Schema shown to the
/// model, the spec it came from, and a validator for the tool's arguments.
#[derive(Debug, Clone)]
pub struct ParameterSchema {
    /// The model-facing JSON Schema.
    schema: Value,
    /// The DSL map it was compiled from; `None` for the fallback.
    spec: Option<Value>,
    /// Evaluates `schema` plus the internal safe-integer keyword.
    validator: jsonschema::Validator,
}

impl ParameterSchema {
    /// Compiles a `parameters` DSL map (see the [crate docs](crate)).
    ///
    /// # Errors
    ///
    /// [`SchemaError`] listing every author error, paths rooted at
    /// `parameters`. A spec that is already a compiled JSON Schema (its root
    /// has a `type` entry that is not an object) fails with the single
    /// violation `parameters.type must be a value schema object`.
    pub fn compile(parameters: &Value) -> Result<Self, SchemaError> {
        let schema = compile::compile_parameters(parameters)?;
        let validator = validate::build_validator(&schema)?;
        Ok(ParameterSchema {
            schema,
            spec: Some(parameters.clone()),
            validator,
        })
    }

    /// The schema of a graph that declares no parameters: one required
    /// `input` parameter of type `json`, whose description lists the graph's
    /// state keys, accumulated channels (those with a reducer) marked, e.g.
    /// `Expected state keys: topic, log (accumulated).` With no keys the
    /// description is `Expected state keys: none.`
    pub fn fallback_input(state_keys: &[(String, bool)]) -> Self {
        let description = fallback_description(state_keys);
        let mut input = Map::new();
        input.insert("description".to_owned(), Value::String(description));
        let mut properties = Map::new();
        properties.insert("input".to_owned(), Value::Object(input));
        let mut root = Map::new();
        root.insert("type".to_owned(), Value::String("object".to_owned()));
        root.insert("properties".to_owned(), Value::Object(properties));
        root.insert(
            "required".to_owned(),
            Value::Array(vec![Value::String("input".to_owned())]),
        );
        let schema = Value::Object(root);
        let validator = validate::fallback_validator();
        ParameterSchema {
            schema,
            spec: None,
            validator,
        }
    }

    /// The compiled JSON Schema: `{"type": "object", "properties": {..},
    /// "required": [..]}`, `required` omitted when empty.
    pub fn json_schema(&self) -> &Value {
        &self.schema
    }

    /// The DSL map this schema was compiled from; `None` for the fallback.
    pub fn spec(&self) -> Option<&Value> {
        self.spec.as_ref()
    }

    /// Whether this is the [`fallback_input`](Self::fallback_input) schema.
    pub fn is_fallback(&self) -> bool {
        self.spec.is_none()
    }

    /// Validates tool arguments.
    ///
    /// # Errors
    ///
    /// [`ArgsError`] listing every violation, in the seed's wording:
    ///
    /// * `missing required property "<path>"`
    /// * `"<path>" must be an object` (an array, a string, a boolean, null,
    ///   a number, an integer)
    /// * `"<path>" must be a finite JSON number` (`-0`)
    /// * `"<path>" must be one of <enum-json>` / `"<path>" must be <const-json>`
    /// * `"<path>" is not a declared property (additionalProperties: false)`
    /// * `"<path>" must match exactly one oneOf branch (matched N)`
    /// * `"<path>" must be a lossless JSON value`
    ///
    /// Each path gets at most one violation, the first of: not a declared
    /// property, wrong type, not lossless, not the `const`, not in the
    /// `enum`, oneOf mismatch or unsafe integer. Nothing is reported below a
    /// value that is undeclared, of the wrong type or nested too deeply.
    /// Violations are ordered by the position of their value in `args`; the
    /// missing required properties of an object come after the object's own
    /// violation and before those of its members, in `required` order.
    pub fn validate(&self, args: &Value) -> Result<(), ArgsError> {
        let violations = validate::validate(&self.validator, &self.schema, args);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(ArgsError { violations })
        }
    }

    /// The graph input for arguments that passed [`validate`](Self::validate):
    /// `args` itself when parameters are declared, `args.input` for the
    /// fallback (`null` if `args` has no `input`, which validation rules out).
    pub fn graph_input(&self, args: Value) -> Value {
        if !self.is_fallback() {
            return args;
        }
        match args {
            Value::Object(mut map) => map.remove("input").unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }
}

/// `Expected state keys: topic, log (accumulated).`
fn fallback_description(state_keys: &[(String, bool)]) -> String {
    if state_keys.is_empty() {
        return "Expected state keys: none.".to_owned();
    }
    let keys: Vec<String> = state_keys
        .iter()
        .map(|(key, accumulated)| {
            if *accumulated {
                format!("{key} (accumulated)")
            } else {
                key.clone()
            }
        })
        .collect();
    format!("Expected state keys: {}.", keys.join(", "))
}
