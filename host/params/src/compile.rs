//! The value schema DSL compiler: `parameters` map → JSON Schema.

use serde_json::{Map, Value};

use sandgraph_core::json::{MAX_JSON_DEPTH, MAX_SAFE_INTEGER, check_lossless};
use sandgraph_core::suggest;

use crate::SchemaError;

/// Keys allowed on every node.
const ANNOTATIONS: [&str; 4] = ["description", "title", "default", "examples"];

/// How many value schemas may enclose one another: the same bound as the
/// nesting of lossless JSON, so compiling never recurses deeply.
const MAX_NODE_DEPTH: usize = MAX_JSON_DEPTH;

/// The DSL's value types, for a did-you-mean on an unknown one.
const TYPES: [&str; 8] = [
    "string", "number", "integer", "boolean", "null", "array", "object", "json",
];

const TYPES_MESSAGE: &str = "type must be one of string, number, integer, boolean, null, array, object, json (or use oneOf)";

/// Compiles the `parameters` map, collecting every author error.
pub(crate) fn compile_parameters(parameters: &Value) -> Result<Value, SchemaError> {
    let Value::Object(map) = parameters else {
        return Err(SchemaError {
            violations: vec!["parameters must be an object of value schemas".to_owned()],
        });
    };
    // An already compiled JSON Schema has a root `type` string; reporting the
    // DSL errors of `properties` and `required` as parameters would only
    // confuse, so this is the one error.
    if map.get("type").is_some_and(|ty| !ty.is_object()) {
        return Err(SchemaError {
            violations: vec!["parameters.type must be a value schema object".to_owned()],
        });
    }
    let mut compiler = Compiler {
        violations: Vec::new(),
    };
    let mut root = Map::new();
    root.insert("type".to_owned(), Value::String("object".to_owned()));
    compiler.compile_properties(map, "parameters", 0, &mut root);
    if compiler.violations.is_empty() {
        Ok(Value::Object(root))
    } else {
        Err(SchemaError {
            violations: compiler.violations,
        })
    }
}

/// Where a node sits, which decides whether it may carry `required`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// An entry of the parameter map or of an object's `properties`.
    Property,
    /// `items` or a `oneOf` branch.
    Nested,
}

struct Compiler {
    violations: Vec<String>,
}

impl Compiler {
    fn error(&mut self, message: String) {
        self.violations.push(message);
    }

    /// Compiles a property map into `out.properties` and `out.required`
    /// (the latter only when non-empty). `path` is the map's own path.
    fn compile_properties(
        &mut self,
        map: &Map<String, Value>,
        path: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) {
        let mut properties = Map::new();
        let mut required = Vec::new();
        for (key, spec) in map {
            let (node, is_required) =
                self.compile_node(spec, &format!("{path}.{key}"), Place::Property, depth + 1);
            if is_required {
                required.push(Value::String(key.clone()));
            }
            properties.insert(key.clone(), node);
        }
        out.insert("properties".to_owned(), Value::Object(properties));
        if !required.is_empty() {
            out.insert("required".to_owned(), Value::Array(required));
        }
    }

    /// Compiles one value schema; returns the JSON Schema node and whether
    /// it is a required property.
    fn compile_node(
        &mut self,
        spec: &Value,
        path: &str,
        place: Place,
        depth: usize,
    ) -> (Value, bool) {
        let mut out = Map::new();
        let Value::Object(node) = spec else {
            self.error(format!("{path} must be a value schema object"));
            return (Value::Object(out), false);
        };
        if depth > MAX_NODE_DEPTH {
            self.error(format!(
                "{path} is nested deeper than {MAX_NODE_DEPTH} value schemas"
            ));
            return (Value::Object(out), false);
        }
        let one_of = node.get("oneOf");
        let ty = node.get("type").and_then(Value::as_str);
        let required = self.compile_keys(node, path, place, vocabulary(one_of, ty), &mut out);
        if let Some(branches) = one_of {
            self.compile_one_of(node, branches, path, depth, &mut out);
        } else {
            self.compile_typed(node, ty, path, depth, &mut out);
        }
        (Value::Object(out), required)
    }

    /// Checks a node's keys against its vocabulary and copies its valid
    /// annotations into `out`; returns whether it carries `required: true`.
    fn compile_keys(
        &mut self,
        node: &Map<String, Value>,
        path: &str,
        place: Place,
        vocabulary: Option<&[&str]>,
        out: &mut Map<String, Value>,
    ) -> bool {
        let mut required = false;
        for (key, value) in node {
            if ANNOTATIONS.contains(&key.as_str()) {
                // Only checked values are copied: an invalid one may be
                // nested arbitrarily deep.
                if self.check_annotation(path, key, value) {
                    out.insert(key.clone(), value.clone());
                }
            } else if key == "required" && place == Place::Property {
                if *value == Value::Bool(true) {
                    required = true;
                } else {
                    self.error(format!("{path}.required must be true when present"));
                }
            } else if let Some(allowed) = vocabulary
                && !allowed.contains(&key.as_str())
            {
                let required = (place == Place::Property).then_some("required");
                let known = allowed.iter().chain(&ANNOTATIONS).copied().chain(required);
                self.error(format!(
                    "{path}.{key} is not supported by the value schema DSL{}",
                    suggest::aside(key, known)
                ));
            }
        }
        required
    }

    /// Compiles a `oneOf` node's branches into `out.oneOf`.
    fn compile_one_of(
        &mut self,
        node: &Map<String, Value>,
        branches: &Value,
        path: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) {
        if node.contains_key("type") {
            self.error(format!("{path}.oneOf cannot be combined with type"));
        }
        let mut compiled = Vec::new();
        match branches {
            Value::Array(list) => {
                if list.len() < 2 {
                    self.error(format!(
                        "{path}.oneOf must be an array of at least 2 value schemas"
                    ));
                }
                for (index, branch) in list.iter().enumerate() {
                    let branch_path = format!("{path}.oneOf[{index}]");
                    let (branch, _) =
                        self.compile_node(branch, &branch_path, Place::Nested, depth + 1);
                    compiled.push(branch);
                }
            }
            _ => self.error(format!(
                "{path}.oneOf must be an array of at least 2 value schemas"
            )),
        }
        out.insert("oneOf".to_owned(), Value::Array(compiled));
    }

    /// Compiles a node without `oneOf` by its `type` into `out`.
    fn compile_typed(
        &mut self,
        node: &Map<String, Value>,
        ty: Option<&str>,
        path: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) {
        match ty {
            Some(scalar @ ("string" | "number" | "integer" | "boolean" | "null")) => {
                out.insert("type".to_owned(), Value::String(scalar.to_owned()));
                self.compile_enum_const(node, path, scalar, out);
            }
            Some("array") => {
                out.insert("type".to_owned(), Value::String("array".to_owned()));
                if let Some(items) = node.get("items") {
                    let (items, _) = self.compile_node(
                        items,
                        &format!("{path}.items"),
                        Place::Nested,
                        depth + 1,
                    );
                    out.insert("items".to_owned(), items);
                }
            }
            Some("object") => self.compile_object(node, path, depth, out),
            // Annotation-only: any lossless JSON value.
            Some("json") => {}
            _ => {
                let hint = ty.map(|ty| suggest::aside(ty, TYPES)).unwrap_or_default();
                self.error(format!("{path}.{TYPES_MESSAGE}{hint}"))
            }
        }
    }

    /// Compiles an `object` node's `additionalProperties` and `properties`
    /// into `out`.
    fn compile_object(
        &mut self,
        node: &Map<String, Value>,
        path: &str,
        depth: usize,
        out: &mut Map<String, Value>,
    ) {
        out.insert("type".to_owned(), Value::String("object".to_owned()));
        match node.get("additionalProperties") {
            Some(Value::Bool(open)) => {
                out.insert("additionalProperties".to_owned(), Value::Bool(*open));
            }
            _ => self.error(format!(
                "{path}.additionalProperties must be explicitly true or false"
            )),
        }
        match node.get("properties") {
            None => {}
            Some(Value::Object(properties)) => {
                self.compile_properties(properties, &format!("{path}.properties"), depth, out);
            }
            Some(_) => self.error(format!(
                "{path}.properties must be an object of value schemas"
            )),
        }
    }

    /// Checks an annotation's shape and losslessness; true when it is valid.
    fn check_annotation(&mut self, path: &str, key: &str, value: &Value) -> bool {
        let shape_ok = match key {
            "description" | "title" => value.is_string(),
            "examples" => value.is_array(),
            _ => true,
        };
        if !shape_ok {
            let what = if key == "examples" {
                "an array"
            } else {
                "a string"
            };
            self.error(format!("{path}.{key} must be {what}"));
            return false;
        }
        if let Err(err) = check_lossless(value) {
            self.error(format!("{path}.{key} must be lossless JSON ({err})"));
            return false;
        }
        true
    }

    /// Checks and copies a scalar node's `enum` and `const`.
    fn compile_enum_const(
        &mut self,
        node: &Map<String, Value>,
        path: &str,
        ty: &str,
        out: &mut Map<String, Value>,
    ) {
        let mut members = None;
        if let Some(enumeration) = node.get("enum") {
            match enumeration {
                Value::Array(list) if !list.is_empty() => {
                    let mut valid = true;
                    for (index, member) in list.iter().enumerate() {
                        valid &= self.check_constant(&format!("{path}.enum[{index}]"), ty, member);
                    }
                    if valid {
                        members = Some(list);
                        out.insert("enum".to_owned(), enumeration.clone());
                    }
                }
                _ => self.error(format!("{path}.enum must be a non-empty array")),
            }
        }
        if let Some(constant) = node.get("const") {
            let const_path = format!("{path}.const");
            if self.check_constant(&const_path, ty, constant) {
                if members
                    .is_some_and(|list| !list.iter().any(|member| json_equal(member, constant)))
                {
                    self.error(format!("{const_path} must be one of the enum values"));
                }
                out.insert("const".to_owned(), constant.clone());
            }
        }
    }

    /// Checks that an `enum` member or `const` is lossless and of type `ty`.
    fn check_constant(&mut self, path: &str, ty: &str, value: &Value) -> bool {
        if let Err(err) = check_lossless(value) {
            self.error(format!("{path} must be lossless JSON ({err})"));
            return false;
        }
        if !has_type(ty, value) {
            self.error(format!("{path} must be {}", type_phrase(ty)));
            return false;
        }
        true
    }
}

/// A node's own vocabulary besides annotations and `required`; `None` when
/// the type is unknown and the vocabulary with it.
fn vocabulary(one_of: Option<&Value>, ty: Option<&str>) -> Option<&'static [&'static str]> {
    match (one_of, ty) {
        (Some(_), _) => Some(&["oneOf", "type"]),
        (None, Some("string" | "number" | "integer" | "boolean" | "null")) => {
            Some(&["type", "enum", "const"])
        }
        (None, Some("array")) => Some(&["type", "items"]),
        (None, Some("object")) => Some(&["type", "properties", "additionalProperties"]),
        (None, Some("json")) => Some(&["type"]),
        _ => None,
    }
}

/// Whether `value` is an instance of the scalar type `ty`, as validation
/// decides it (integers: integral and within ±(2^53−1)).
fn has_type(ty: &str, value: &Value) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => is_safe_integer(value),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        _ => false,
    }
}

/// An integral number (`1.0` counts, as in JSON Schema) of magnitude at most
/// 2^53−1.
pub(crate) fn is_safe_integer(value: &Value) -> bool {
    let Value::Number(number) = value else {
        return false;
    };
    if let Some(i) = number.as_i64() {
        i.unsigned_abs() <= MAX_SAFE_INTEGER.unsigned_abs()
    } else if number.is_u64() {
        // Only values above i64::MAX get here.
        false
    } else {
        number
            .as_f64()
            .is_some_and(|f| f.fract() == 0.0 && f.abs() <= MAX_SAFE_INTEGER as f64)
    }
}

/// `a string`, `an integer`, `null`: the phrase after `must be`.
pub(crate) fn type_phrase(ty: &str) -> String {
    match ty {
        "null" => "null".to_owned(),
        "object" | "array" | "integer" => format!("an {ty}"),
        _ => format!("a {ty}"),
    }
}

/// Equality of scalars with numbers compared by value (`1 == 1.0`), as JSON
/// Schema compares `enum` and `const`.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        _ => a == b,
    }
}
