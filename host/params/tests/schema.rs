//! Compilation of the value schema DSL and argument validation, table-driven.

use sandgraph_params::{ArgsError, INVALID_ARGS, ParameterSchema, SchemaError, UNSUPPORTED_SCHEMA};
use serde_json::{Value, json};

fn greet_spec() -> Value {
    json!({
        "name": {"type": "string", "required": true, "description": "The name to greet."},
        "style": {
            "type": "string",
            "required": true,
            "enum": ["formal", "casual"],
            "description": "Greeting style.",
        },
        "times": {"type": "integer", "description": "Repeat count.", "default": 1},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Extra tags."},
    })
}

fn greet() -> ParameterSchema {
    ParameterSchema::compile(&greet_spec()).expect("greet parameters compile")
}

const TYPE_SET: &str = "type must be one of string, number, integer, boolean, null, array, object, json (or use oneOf)";

/// A spec that compiles, and the exact JSON Schema it compiles to.
fn accepted() -> Vec<(&'static str, Value, Value)> {
    vec![
        (
            "seed greet_graph",
            greet_spec(),
            json!({"type":"object","properties":{"name":{"type":"string","description":"The name to greet."},"style":{"type":"string","enum":["formal","casual"],"description":"Greeting style."},"times":{"type":"integer","description":"Repeat count.","default":1},"tags":{"type":"array","items":{"type":"string"},"description":"Extra tags."}},"required":["name","style"]}),
        ),
        (
            "empty map",
            json!({}),
            json!({"type": "object", "properties": {}}),
        ),
        (
            "every scalar type, enum and const",
            json!({
                "b": {"type": "boolean", "const": true},
                "i": {"type": "integer", "enum": [1, 2.0, 3], "const": 2},
                "n": {"type": "null", "title": "Nothing"},
                "r": {"type": "number", "enum": [1.5, -2]},
                "s": {"type": "string", "enum": ["a", "b"], "const": "a"},
            }),
            json!({"type": "object", "properties": {
                "b": {"type": "boolean", "const": true},
                "i": {"type": "integer", "enum": [1, 2.0, 3], "const": 2},
                "n": {"type": "null", "title": "Nothing"},
                "r": {"type": "number", "enum": [1.5, -2]},
                "s": {"type": "string", "enum": ["a", "b"], "const": "a"},
            }}),
        ),
        (
            "json node loses its type, keeps annotations and requiredness",
            json!({"data": {
                "type": "json", "required": true, "description": "Anything.",
                "title": "Data", "default": {"a": [1]}, "examples": [null, 2],
            }}),
            json!({
                "type": "object",
                "properties": {"data": {
                    "description": "Anything.", "title": "Data", "default": {"a": [1]}, "examples": [null, 2],
                }},
                "required": ["data"],
            }),
        ),
        (
            "array without items accepts any item",
            json!({"list": {"type": "array"}}),
            json!({"type": "object", "properties": {"list": {"type": "array"}}}),
        ),
        (
            "nested object collects its own required array, closed and open objects",
            json!({"obj": {
                "type": "object",
                "additionalProperties": false,
                "required": true,
                "properties": {
                    "a": {"type": "integer", "required": true},
                    "b": {"type": "object", "additionalProperties": true},
                    "c": {"type": "string", "required": true},
                },
            }}),
            json!({
                "type": "object",
                "properties": {"obj": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {
                        "a": {"type": "integer"},
                        "b": {"type": "object", "additionalProperties": true},
                        "c": {"type": "string"},
                    },
                    "required": ["a", "c"],
                }},
                "required": ["obj"],
            }),
        ),
        (
            "oneOf property with annotations and required",
            json!({"x": {
                "required": true,
                "description": "A number or a list.",
                "oneOf": [{"type": "number"}, {"type": "array", "items": {"type": "json"}}],
            }}),
            json!({
                "type": "object",
                "properties": {"x": {
                    "description": "A number or a list.",
                    "oneOf": [{"type": "number"}, {"type": "array", "items": {}}],
                }},
                "required": ["x"],
            }),
        ),
        (
            "a property named type holding a value schema is an ordinary parameter",
            json!({"type": {"type": "string"}}),
            json!({"type": "object", "properties": {"type": {"type": "string"}}}),
        ),
    ]
}

/// A spec that fails, and the exact violations.
fn rejected() -> Vec<(&'static str, Value, Vec<String>)> {
    let s = |text: &str| text.to_owned();
    vec![
        (
            "parameters not an object",
            json!([]),
            vec![s("parameters must be an object of value schemas")],
        ),
        (
            "parameters null",
            Value::Null,
            vec![s("parameters must be an object of value schemas")],
        ),
        (
            "already compiled JSON Schema",
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
            vec![s("parameters.type must be a value schema object")],
        ),
        (
            "entry not an object",
            json!({"a": "string"}),
            vec![s("parameters.a must be a value schema object")],
        ),
        (
            "required false",
            json!({"a": {"type": "string", "required": false}}),
            vec![s("parameters.a.required must be true when present")],
        ),
        (
            "required as a list",
            json!({"a": {"type": "string", "required": ["a"]}}),
            vec![s("parameters.a.required must be true when present")],
        ),
        (
            "unknown key",
            json!({"q": {"type": "string", "minLength": 3}}),
            vec![s(
                "parameters.q.minLength is not supported by the value schema DSL",
            )],
        ),
        (
            "unknown type",
            json!({"d": {"type": "date"}}),
            vec![format!("parameters.d.{TYPE_SET}")],
        ),
        (
            "misspelt type",
            json!({"d": {"type": "strng"}}),
            vec![format!(
                "parameters.d.{TYPE_SET} (did you mean \"string\"?)"
            )],
        ),
        (
            "misspelt keys",
            json!({"q": {"type": "string", "requried": true, "descripton": "?"}}),
            vec![
                s(
                    "parameters.q.requried is not supported by the value schema DSL (did you mean \"required\"?)",
                ),
                s(
                    "parameters.q.descripton is not supported by the value schema DSL (did you mean \"description\"?)",
                ),
            ],
        ),
        (
            "required is not suggested where it is not allowed",
            json!({"tags": {"type": "array", "items": {"type": "string", "requried": true}}}),
            vec![s(
                "parameters.tags.items.requried is not supported by the value schema DSL",
            )],
        ),
        (
            "missing type",
            json!({"d": {"description": "?"}}),
            vec![format!("parameters.d.{TYPE_SET}")],
        ),
        (
            "type not a string",
            json!({"d": {"type": ["string", "null"]}}),
            vec![format!("parameters.d.{TYPE_SET}")],
        ),
        (
            "json node takes type only",
            json!({"d": {"type": "json", "enum": [1, 2]}}),
            vec![s(
                "parameters.d.enum is not supported by the value schema DSL",
            )],
        ),
        (
            "array keywords outside the DSL",
            json!({"tags": {"type": "array", "items": {"type": "string"}, "minItems": 1}}),
            vec![s(
                "parameters.tags.minItems is not supported by the value schema DSL",
            )],
        ),
        (
            "required on array items",
            json!({"tags": {"type": "array", "items": {"type": "string", "required": true}}}),
            vec![s(
                "parameters.tags.items.required is not supported by the value schema DSL",
            )],
        ),
        (
            "items not a value schema",
            json!({"tags": {"type": "array", "items": "string"}}),
            vec![s("parameters.tags.items must be a value schema object")],
        ),
        (
            "object without additionalProperties",
            json!({"obj": {"type": "object", "properties": {}}}),
            vec![s(
                "parameters.obj.additionalProperties must be explicitly true or false",
            )],
        ),
        (
            "object with non-boolean additionalProperties",
            json!({"obj": {"type": "object", "additionalProperties": {"type": "string"}}}),
            vec![s(
                "parameters.obj.additionalProperties must be explicitly true or false",
            )],
        ),
        (
            "object properties not a map",
            json!({"obj": {"type": "object", "additionalProperties": false, "properties": ["k"]}}),
            vec![s(
                "parameters.obj.properties must be an object of value schemas",
            )],
        ),
        (
            "errors inside nested object properties",
            json!({"obj": {"type": "object", "additionalProperties": false, "properties": {
                "k": {"type": "number", "minimum": 0},
                "r": {"type": "string", "required": "yes"},
            }}}),
            vec![
                s("parameters.obj.properties.k.minimum is not supported by the value schema DSL"),
                s("parameters.obj.properties.r.required must be true when present"),
            ],
        ),
        (
            "oneOf with one branch",
            json!({"x": {"oneOf": [{"type": "string"}]}}),
            vec![s(
                "parameters.x.oneOf must be an array of at least 2 value schemas",
            )],
        ),
        (
            "oneOf not an array",
            json!({"x": {"oneOf": {"type": "string"}}}),
            vec![s(
                "parameters.x.oneOf must be an array of at least 2 value schemas",
            )],
        ),
        (
            "oneOf combined with type",
            json!({"x": {"type": "string", "oneOf": [{"type": "string"}, {"type": "null"}]}}),
            vec![s("parameters.x.oneOf cannot be combined with type")],
        ),
        (
            "oneOf branch carrying required, bad branch",
            json!({"x": {"oneOf": [{"type": "string"}, {"type": "null", "required": true}, 3]}}),
            vec![
                s("parameters.x.oneOf[1].required is not supported by the value schema DSL"),
                s("parameters.x.oneOf[2] must be a value schema object"),
            ],
        ),
        (
            "empty enum",
            json!({"s": {"type": "string", "enum": []}}),
            vec![s("parameters.s.enum must be a non-empty array")],
        ),
        (
            "enum not an array",
            json!({"s": {"type": "string", "enum": "a"}}),
            vec![s("parameters.s.enum must be a non-empty array")],
        ),
        (
            "enum members of the wrong type",
            json!({"s": {"type": "string", "enum": ["a", 1, null]}, "i": {"type": "integer", "enum": [1.5, 1e20]}}),
            vec![
                // Declaration order: `s` is declared before `i`.
                s("parameters.s.enum[1] must be a string"),
                s("parameters.s.enum[2] must be a string"),
                s("parameters.i.enum[0] must be an integer"),
                s("parameters.i.enum[1] must be an integer"),
            ],
        ),
        (
            "const of the wrong type",
            json!({"n": {"type": "number", "const": "1"}}),
            vec![s("parameters.n.const must be a number")],
        ),
        (
            "const outside the enum",
            json!({"s": {"type": "string", "enum": ["a", "b"], "const": "c"}}),
            vec![s("parameters.s.const must be one of the enum values")],
        ),
        (
            "enum and const not lossless",
            json!({"n": {"type": "number", "enum": [-0.0]}, "i": {"type": "integer", "const": 9007199254740992u64}}),
            vec![
                s(
                    "parameters.n.enum[0] must be lossless JSON ($: negative zero (-0) is not allowed)",
                ),
                s(
                    "parameters.i.const must be lossless JSON ($: integer 9007199254740992 is outside the safe range ±(2^53-1))",
                ),
            ],
        ),
        (
            "annotation shapes",
            json!({"a": {"type": "string", "description": 1, "title": null, "examples": "x"}}),
            vec![
                // Declaration order of the keys.
                s("parameters.a.description must be a string"),
                s("parameters.a.title must be a string"),
                s("parameters.a.examples must be an array"),
            ],
        ),
        (
            "annotation not lossless",
            json!({"a": {"type": "json", "default": {"x": [1, -0.0]}}}),
            vec![s(
                "parameters.a.default must be lossless JSON ($.x[1]: negative zero (-0) is not allowed)",
            )],
        ),
        (
            "every error is collected in document order",
            json!({
                "a": {"type": "string", "required": false, "pattern": "x"},
                "b": 7,
                "c": {"type": "object", "properties": {"d": {"type": "wat"}}},
            }),
            vec![
                s("parameters.a.required must be true when present"),
                s("parameters.a.pattern is not supported by the value schema DSL"),
                s("parameters.b must be a value schema object"),
                s("parameters.c.additionalProperties must be explicitly true or false"),
                format!("parameters.c.properties.d.{TYPE_SET}"),
            ],
        ),
    ]
}

#[test]
fn accepted_specs_compile_to_exact_schemas() {
    for (name, spec, expected) in accepted() {
        let compiled =
            ParameterSchema::compile(&spec).unwrap_or_else(|err| panic!("{name}: {err}"));
        assert_eq!(compiled.json_schema(), &expected, "{name}");
        assert_eq!(compiled.spec(), Some(&spec), "{name}");
        assert!(!compiled.is_fallback(), "{name}");
    }
}

#[test]
fn rejected_specs_list_every_violation() {
    let cases = rejected();
    assert!(accepted().len() + cases.len() >= 25);
    for (name, spec, expected) in cases {
        let err = ParameterSchema::compile(&spec).expect_err(name);
        assert_eq!(err.violations, expected, "{name}");
        assert_eq!(err.code(), UNSUPPORTED_SCHEMA);
        assert_eq!(
            err.to_string(),
            format!("unsupported JSON schema: {}", expected.join("; ")),
            "{name}"
        );
    }
}

#[test]
fn nesting_deeper_than_the_limit_is_an_author_error() {
    let mut spec = json!({"type": "string"});
    for _ in 0..70 {
        spec = json!({"type": "array", "items": spec});
    }
    let err = ParameterSchema::compile(&json!({"deep": spec})).expect_err("too deep");
    let expected_path = format!("parameters.deep{}", ".items".repeat(64));
    assert_eq!(
        err.violations,
        vec![format!(
            "{expected_path} is nested deeper than 64 value schemas"
        )]
    );
}

#[test]
fn schema_error_display_joins_violations() {
    let err = SchemaError {
        violations: vec!["a".to_owned(), "b".to_owned()],
    };
    assert_eq!(err.to_string(), "unsupported JSON schema: a; b");
    let err = ArgsError {
        violations: vec!["x".to_owned(), "y".to_owned()],
    };
    assert_eq!(err.to_string(), "invalid arguments: x; y");
    assert_eq!(err.code(), INVALID_ARGS);
}

fn violations(schema: &ParameterSchema, args: &Value) -> Vec<String> {
    match schema.validate(args) {
        Ok(()) => Vec::new(),
        Err(err) => {
            assert_eq!(
                err.to_string(),
                format!("invalid arguments: {}", err.violations.join("; "))
            );
            assert_eq!(err.code(), "INVALID_ARGS");
            err.violations
        }
    }
}

#[test]
fn greet_arguments() {
    let schema = greet();
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (json!({"name": "Ada", "style": "formal"}), vec![]),
        (
            json!({"name": "Ada", "style": "casual", "times": 3, "tags": ["x", "y"]}),
            vec![],
        ),
        // JSON Schema counts 1.0 as an integer.
        (
            json!({"name": "Ada", "style": "casual", "times": 1.0}),
            vec![],
        ),
        // The root is open: undeclared keys pass.
        (
            json!({"name": "Ada", "style": "casual", "extra": {"deep": [1]}}),
            vec![],
        ),
        (
            json!({"style": "loud", "times": 1.5, "tags": [1]}),
            vec![
                r#"missing required property "arguments.name""#,
                r#""arguments.style" must be one of ["formal","casual"]"#,
                r#""arguments.times" must be an integer"#,
                r#""arguments.tags[0]" must be a string"#,
            ],
        ),
        (
            json!({}),
            vec![
                r#"missing required property "arguments.name""#,
                r#"missing required property "arguments.style""#,
            ],
        ),
        (json!([]), vec![r#""arguments" must be an object"#]),
        (Value::Null, vec![r#""arguments" must be an object"#]),
        (json!("hi"), vec![r#""arguments" must be an object"#]),
        // A type error is not followed by an enum error for the same value.
        (
            json!({"name": "Ada", "style": 5}),
            vec![r#""arguments.style" must be a string"#],
        ),
        (
            json!({"name": null, "style": "formal"}),
            vec![r#""arguments.name" must be a string"#],
        ),
        (
            json!({"name": "Ada", "style": "formal", "tags": "x"}),
            vec![r#""arguments.tags" must be an array"#],
        ),
        (
            json!({"name": "Ada", "style": "formal", "tags": ["a", 2, true, "d", null]}),
            vec![
                r#""arguments.tags[1]" must be a string"#,
                r#""arguments.tags[2]" must be a string"#,
                r#""arguments.tags[4]" must be a string"#,
            ],
        ),
        // Safe integers only: 1e20 is integral but not representable everywhere.
        (
            json!({"name": "Ada", "style": "formal", "times": 1e20}),
            vec![r#""arguments.times" must be an integer"#],
        ),
        (
            json!({"name": "Ada", "style": "formal", "times": 9007199254740992u64}),
            vec![r#""arguments.times" must be a lossless JSON value"#],
        ),
        (
            json!({"name": "Ada", "style": "formal", "times": 9007199254740991u64}),
            vec![],
        ),
        (
            json!({"name": "Ada", "style": "formal", "times": -9007199254740991i64}),
            vec![],
        ),
        (
            json!({"name": "Ada", "style": "formal", "times": -0.0}),
            vec![r#""arguments.times" must be a finite JSON number"#],
        ),
        // -0 where a string is expected: the type error is the one reported.
        (
            json!({"name": -0.0, "style": "formal"}),
            vec![r#""arguments.name" must be a string"#],
        ),
        // Lossless rules apply to undeclared keys of the open root too.
        (
            json!({"name": "Ada", "style": "formal", "extra": [0, -0.0, {"big": 18446744073709551615u64}]}),
            vec![
                r#""arguments.extra[1]" must be a finite JSON number"#,
                r#""arguments.extra[2].big" must be a lossless JSON value"#,
            ],
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(violations(&schema, &args), expected, "args {args}");
    }
}

fn nested() -> ParameterSchema {
    ParameterSchema::compile(&json!({
        "choice": {"oneOf": [{"type": "integer"}, {"type": "number"}, {"type": "string", "const": "auto"}]},
        "data": {"type": "json"},
        "flag": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["a", "b"], "const": "a"},
        "nothing": {"type": "null"},
        "obj": {
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "id": {"type": "integer", "required": true},
                "items": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "properties": {"c": {"type": "string", "required": true}},
                }},
                "name": {"type": "string", "required": true},
            },
        },
        "open": {"type": "object", "additionalProperties": true, "properties": {"k": {"type": "number"}}},
    }))
    .expect("nested spec compiles")
}

#[test]
fn nested_arguments() {
    let schema = nested();
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({
                "choice": "auto", "data": {"any": [1, "x", null]}, "flag": true, "mode": "a", "nothing": null,
                "obj": {"id": 1, "name": "n", "items": [{"c": "x"}]}, "open": {"k": 1.5, "more": true},
            }),
            vec![],
        ),
        (json!({"choice": 1.5}), vec![]),
        // 2 matches integer and number.
        (
            json!({"choice": 2}),
            vec![r#""arguments.choice" must match exactly one oneOf branch (matched 2)"#],
        ),
        // One message for the oneOf node, none for its branches.
        (
            json!({"choice": "manual"}),
            vec![r#""arguments.choice" must match exactly one oneOf branch (matched 0)"#],
        ),
        (
            json!({"choice": [1]}),
            vec![r#""arguments.choice" must match exactly one oneOf branch (matched 0)"#],
        ),
        (
            json!({"mode": "b"}),
            vec![r#""arguments.mode" must be "a""#],
        ),
        (
            json!({"mode": "c"}),
            vec![r#""arguments.mode" must be "a""#],
        ),
        (
            json!({"flag": "yes"}),
            vec![r#""arguments.flag" must be a boolean"#],
        ),
        (
            json!({"nothing": 0}),
            vec![r#""arguments.nothing" must be null"#],
        ),
        (
            json!({"open": 1}),
            vec![r#""arguments.open" must be an object"#],
        ),
        (
            json!({"open": {"k": "1"}}),
            vec![r#""arguments.open.k" must be a number"#],
        ),
        (
            json!({"data": {"a": [1, -0.0]}}),
            vec![r#""arguments.data.a[1]" must be a finite JSON number"#],
        ),
        (
            json!({"obj": {"id": "1", "zzz": 1, "items": [{"c": 1}, {}, {"c": "ok", "d": -0.0}, 5], "aaa": null}}),
            vec![
                // An object's missing properties come before its members' violations.
                // Then the members in the order the arguments give them.
                r#"missing required property "arguments.obj.name""#,
                r#""arguments.obj.id" must be an integer"#,
                r#""arguments.obj.zzz" is not a declared property (additionalProperties: false)"#,
                r#""arguments.obj.items[0].c" must be a string"#,
                r#"missing required property "arguments.obj.items[1].c""#,
                // Undeclared wins over not lossless; nothing is said about -0 there.
                r#""arguments.obj.items[2].d" is not a declared property (additionalProperties: false)"#,
                r#""arguments.obj.items[3]" must be an object"#,
                r#""arguments.obj.aaa" is not a declared property (additionalProperties: false)"#,
            ],
        ),
        // Nothing is reported below a value of the wrong type.
        (
            json!({"obj": [{"id": -0.0}]}),
            vec![r#""arguments.obj" must be an object"#],
        ),
        // Nor below an undeclared key.
        (
            json!({"obj": {"id": 1, "name": "n", "x": {"y": -0.0}}}),
            vec![r#""arguments.obj.x" is not a declared property (additionalProperties: false)"#],
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(violations(&schema, &args), expected, "args {args}");
    }
}

#[test]
fn missing_required_properties_follow_required_order() {
    // Declaration order (serde_json preserve_order): the required array
    // keeps `c`, `a`, `b` as declared, and missing properties follow it.
    let schema = ParameterSchema::compile(&json!({
        "c": {"type": "string", "required": true},
        "a": {"type": "string", "required": true},
        "b": {"type": "string", "required": true},
    }))
    .expect("compiles");
    assert_eq!(schema.json_schema()["required"], json!(["c", "a", "b"]));
    assert_eq!(
        violations(&schema, &json!({"b": 1})),
        vec![
            r#"missing required property "arguments.c""#,
            r#"missing required property "arguments.a""#,
            r#""arguments.b" must be a string"#,
        ]
    );
}

#[test]
fn nesting_deeper_than_lossless_json_allows_is_reported_once() {
    let schema = ParameterSchema::compile(&json!({"data": {"type": "json"}})).expect("compiles");
    let mut deep = json!(-0.0);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    // `arguments` is the first container, `data` the second: the 64th level
    // is the last one allowed.
    let path = format!("arguments.data{}", "[0]".repeat(63));
    assert_eq!(
        violations(&schema, &json!({"data": deep})),
        vec![format!("\"{path}\" must be a lossless JSON value")]
    );
}

#[test]
fn fallback_input() {
    let schema =
        ParameterSchema::fallback_input(&[("topic".to_owned(), false), ("log".to_owned(), true)]);
    assert!(schema.is_fallback());
    assert_eq!(schema.spec(), None);
    assert_eq!(
        schema.json_schema(),
        &json!({
            "type": "object",
            "properties": {"input": {"description": "Expected state keys: topic, log (accumulated)."}},
            "required": ["input"],
        })
    );
    assert_eq!(
        schema.validate(&json!({"input": {"topic": "x", "log": []}})),
        Ok(())
    );
    assert_eq!(
        schema.validate(&json!({"input": "any JSON", "other": 1})),
        Ok(())
    );
    assert_eq!(
        violations(&schema, &json!({})),
        vec![r#"missing required property "arguments.input""#]
    );
    assert_eq!(
        violations(&schema, &json!([1])),
        vec![r#""arguments" must be an object"#]
    );
    assert_eq!(
        violations(&schema, &json!({"input": {"n": -0.0}})),
        vec![r#""arguments.input.n" must be a finite JSON number"#]
    );

    let empty = ParameterSchema::fallback_input(&[]);
    assert_eq!(
        empty.json_schema()["properties"]["input"]["description"],
        json!("Expected state keys: none.")
    );
}

#[test]
fn graph_input_for_both_modes() {
    let args = json!({"name": "Ada", "style": "formal"});
    assert_eq!(greet().graph_input(args.clone()), args);

    let fallback = ParameterSchema::fallback_input(&[("topic".to_owned(), false)]);
    assert_eq!(
        fallback.graph_input(json!({"input": {"topic": "t"}})),
        json!({"topic": "t"})
    );
    assert_eq!(
        fallback.graph_input(json!({"input": [1, 2]})),
        json!([1, 2])
    );
    assert_eq!(fallback.graph_input(json!({})), Value::Null);
    assert_eq!(fallback.graph_input(json!(3)), Value::Null);
}

#[test]
fn parsed_negative_zero_is_rejected() {
    // What a model actually sends: text. serde_json keeps the sign of `-0.0`.
    let schema = greet();
    let args: Value =
        serde_json::from_str(r#"{"name":"Ada","style":"formal","times":-0.0}"#).expect("json");
    assert_eq!(
        violations(&schema, &args),
        vec![r#""arguments.times" must be a finite JSON number"#]
    );
}

#[test]
fn keys_needing_pointer_escapes_and_schema_like_annotations() {
    let schema = ParameterSchema::compile(&json!({
        "a/b": {"type": "string", "required": true},
        "": {"type": "integer"},
        "$ref": {"type": "json", "default": {"$ref": "http://example.invalid/x.json"}},
        "o~": {"type": "object", "additionalProperties": false, "properties": {"k/~": {"type": "boolean"}}},
    }))
    .expect("compiles");
    assert_eq!(schema.json_schema()["required"], json!(["a/b"]));
    assert_eq!(
        schema.validate(&json!({"a/b": "x", "": 1, "$ref": 1, "o~": {"k/~": true}})),
        Ok(())
    );
    assert_eq!(
        violations(&schema, &json!({"": "1", "o~": {"k/~": 1, "x/~y": 2}})),
        vec![
            r#"missing required property "arguments.a/b""#,
            r#""arguments." must be an integer"#,
            r#""arguments.o~.k/~" must be a boolean"#,
            r#""arguments.o~.x/~y" is not a declared property (additionalProperties: false)"#,
        ]
    );
}

/// Property tests: the DSL compiler and the argument validator read
/// untrusted JSON (a graph author's `parameters`, a model's arguments); no
/// input makes them panic, and their errors keep their documented shape.
///
/// Cases: `SANDGRAPH_PROPTEST_CASES` (default 256). The RNG seed is fixed so
/// CI runs the same cases every time; `SANDGRAPH_PROPTEST_SEED` picks another.
mod proptests {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngSeed};
    use sandgraph_core::json::check_lossless;
    use sandgraph_params::ParameterSchema;
    use serde_json::{Map, Number, Value};

    fn cases() -> u32 {
        std::env::var("SANDGRAPH_PROPTEST_CASES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(256)
    }

    fn seed() -> u64 {
        std::env::var("SANDGRAPH_PROPTEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5a4d_6772_6170_6802)
    }

    fn config() -> Config {
        Config {
            cases: cases(),
            failure_persistence: None,
            rng_seed: RngSeed::Fixed(seed()),
            ..Config::default()
        }
    }

    /// Names shared by specs and arguments, so arguments meet declared
    /// properties; `""`, `/` and `~` test JSON-pointer escaping.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => prop::sample::select(vec!["a", "b", "input", "", "a/b", "~0", "é"])
                .prop_map(str::to_owned),
            1 => prop::collection::vec(any::<char>(), 0..6).prop_map(String::from_iter),
        ]
    }

    /// Any number serde_json can hold, lossless or not: `-0.0`, integers
    /// past 2^53 and u64s included.
    fn number() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (-100i64..100).prop_map(Value::from),
            any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
            prop::sample::select(vec![-0.0, 1.0, 0.5, 9_007_199_254_740_992.0, 1e300])
                .prop_map(|f| Value::Number(Number::from_f64(f).expect("finite"))),
        ]
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            number(),
            prop_oneof![
                prop::sample::select(vec!["string", "object", "x", ""]).prop_map(str::to_owned),
                prop::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter),
            ]
            .prop_map(Value::String),
        ]
    }

    /// Any JSON value, up to 6 deep, keys from [`name`]; sometimes wrapped
    /// in 60 to 80 arrays (past `MAX_JSON_DEPTH`).
    fn any_json() -> impl Strategy<Value = Value> {
        let tree = scalar().prop_recursive(6, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((name(), inner), 0..6)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            ]
        });
        prop_oneof![
            9 => tree.clone(),
            1 => (tree, 60usize..80).prop_map(|(mut v, depth)| {
                for _ in 0..depth {
                    v = Value::Array(vec![v]);
                }
                v
            }),
        ]
    }

    const TYPES: [&str; 9] = [
        "string", "number", "integer", "boolean", "null", "array", "object", "json", "str",
    ];

    /// A value schema of the DSL, mostly well formed: every DSL key, each
    /// present or not, its value mostly of the right kind, sometimes any.
    fn node() -> impl Strategy<Value = Value> {
        let leaf = prop::sample::select(TYPES.to_vec()).prop_map(|t| {
            let mut m = Map::new();
            m.insert("type".to_owned(), Value::String(t.to_owned()));
            Value::Object(m)
        });
        leaf.prop_recursive(5, 32, 4, |inner| {
            let type_ = prop_oneof![
                6 => prop::sample::select(TYPES.to_vec()).prop_map(|t| Value::String(t.to_owned())),
                1 => any_json(),
            ];
            let required = prop_oneof![Just(Value::Bool(true)), any_json()];
            let text = prop_oneof![
                prop::collection::vec(any::<char>(), 0..8)
                    .prop_map(|c| Value::String(String::from_iter(c))),
                any_json(),
            ];
            let enum_ = prop_oneof![
                prop::collection::vec(scalar(), 0..4).prop_map(Value::Array),
                any_json(),
            ];
            let properties = prop_oneof![
                4 => prop::collection::vec((name(), inner.clone()), 0..4)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
                1 => any_json(),
            ];
            let one_of = prop_oneof![
                4 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                1 => any_json(),
            ];
            let additional = prop_oneof![any::<bool>().prop_map(Value::Bool), any_json()];
            (
                (
                    prop::option::weighted(0.9, type_),
                    prop::option::of(required),
                    prop::option::of(text.clone()),
                    prop::option::weighted(0.2, text),
                    prop::option::weighted(0.2, any_json()),
                    prop::option::weighted(0.2, any_json()),
                ),
                (
                    prop::option::weighted(0.3, enum_),
                    prop::option::weighted(0.2, scalar()),
                    prop::option::weighted(0.3, inner),
                    prop::option::weighted(0.4, properties),
                    prop::option::weighted(0.5, additional),
                    prop::option::weighted(0.2, one_of),
                    prop::option::weighted(0.05, (name(), any_json())),
                ),
            )
                .prop_map(
                    |(
                        (type_, required, description, title, default, examples),
                        (enum_, const_, items, properties, additional, one_of, extra),
                    )| {
                        let mut m = Map::new();
                        let mut put = |k: &str, v: Option<Value>| {
                            if let Some(v) = v {
                                m.insert(k.to_owned(), v);
                            }
                        };
                        put("type", type_);
                        put("required", required);
                        put("description", description);
                        put("title", title);
                        put("default", default);
                        put("examples", examples);
                        put("enum", enum_);
                        put("const", const_);
                        put("items", items);
                        put("properties", properties);
                        put("additionalProperties", additional);
                        put("oneOf", one_of);
                        if let Some((k, v)) = extra {
                            m.insert(k, v);
                        }
                        Value::Object(m)
                    },
                )
        })
    }

    fn object(pairs: Vec<(String, Value)>) -> Value {
        Value::Object(pairs.into_iter().collect())
    }

    /// A property: a node, maybe marked `required: true`.
    fn property(node: Value, required: bool) -> Value {
        match node {
            Value::Object(mut m) if required => {
                m.insert("required".to_owned(), Value::Bool(true));
                Value::Object(m)
            }
            other => other,
        }
    }

    /// Values of a scalar DSL type (for `enum` and `const`).
    fn of_type(t: &'static str) -> BoxedStrategy<Value> {
        match t {
            "string" => prop::collection::vec(any::<char>(), 0..6)
                .prop_map(|c| Value::String(String::from_iter(c)))
                .boxed(),
            "number" => prop_oneof![
                4 => (-1e6..1e6f64).prop_filter_map("not -0", |f| {
                    (f != 0.0).then(|| Number::from_f64(f).map(Value::Number)).flatten()
                }),
                1 => number(),
            ]
            .boxed(),
            "integer" => prop_oneof![
                4 => (-1000i64..1000).prop_map(Value::from),
                2 => (-(1i64 << 53) + 1..1i64 << 53).prop_map(Value::from),
                1 => any::<i64>().prop_map(Value::from),
            ]
            .boxed(),
            "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
            _ => Just(Value::Null).boxed(),
        }
    }

    /// A well-formed value schema, up to 5 deep, so that specs compile and
    /// the validator meets every kind of node.
    fn good_node() -> impl Strategy<Value = Value> {
        let scalar_node =
            prop::sample::select(vec!["string", "number", "integer", "boolean", "null"])
                .prop_flat_map(|t| {
                    (
                        Just(t),
                        prop::option::weighted(0.4, prop::collection::vec(of_type(t), 1..4)),
                        prop::option::weighted(0.2, of_type(t)),
                        prop::option::weighted(0.3, prop::collection::vec(any::<char>(), 0..6)),
                    )
                })
                .prop_map(|(t, enum_, const_, description)| {
                    let mut m = vec![("type".to_owned(), Value::String(t.to_owned()))];
                    if let Some(e) = &enum_ {
                        m.push(("enum".to_owned(), Value::Array(e.clone())));
                    }
                    // `const` must be one of the `enum` members when both are there.
                    match (enum_, const_) {
                        (Some(e), Some(_)) => m.push(("const".to_owned(), e[0].clone())),
                        (None, Some(c)) => m.push(("const".to_owned(), c)),
                        _ => {}
                    }
                    if let Some(d) = description {
                        m.push((
                            "description".to_owned(),
                            Value::String(String::from_iter(d)),
                        ));
                    }
                    object(m)
                });
        let leaf = prop_oneof![
            4 => scalar_node,
            1 => Just(object(vec![("type".to_owned(), Value::String("json".to_owned()))])),
        ];
        leaf.prop_recursive(5, 32, 4, |inner| {
            prop_oneof![
                prop::option::of(inner.clone()).prop_map(|items| {
                    let mut m = vec![("type".to_owned(), Value::String("array".to_owned()))];
                    if let Some(items) = items {
                        m.push(("items".to_owned(), items));
                    }
                    object(m)
                }),
                (
                    prop::collection::vec((name(), inner.clone(), any::<bool>()), 0..4),
                    any::<bool>(),
                )
                    .prop_map(|(props, additional)| {
                        let props = props
                            .into_iter()
                            .map(|(k, node, required)| (k, property(node, required)))
                            .collect();
                        object(vec![
                            ("type".to_owned(), Value::String("object".to_owned())),
                            ("properties".to_owned(), object(props)),
                            ("additionalProperties".to_owned(), Value::Bool(additional)),
                        ])
                    }),
                prop::collection::vec(inner, 2..4).prop_map(|branches| object(vec![(
                    "oneOf".to_owned(),
                    Value::Array(branches)
                )])),
            ]
        })
    }

    /// A `parameters` spec: a map of well-formed nodes, of nodes that may
    /// break any rule, or any JSON at all.
    fn parameters() -> impl Strategy<Value = Value> {
        prop_oneof![
            4 => prop::collection::vec((name(), good_node(), any::<bool>()), 0..5).prop_map(
                |props| object(
                    props
                        .into_iter()
                        .map(|(k, node, required)| (k, property(node, required)))
                        .collect()
                )
            ),
            2 => prop::collection::vec((name(), node()), 0..5).prop_map(object),
            1 => any_json(),
        ]
    }

    /// Checks one validation: no panic, errors never empty and rooted at
    /// `arguments`, the answer stable, and accepted arguments lossless.
    fn check_validate(schema: &ParameterSchema, args: &Value) -> Result<(), TestCaseError> {
        let first = schema.validate(args);
        prop_assert_eq!(&first, &schema.validate(args));
        match first {
            Ok(()) => {
                prop_assert!(check_lossless(args).is_ok(), "accepted {}", args);
                let _ = schema.graph_input(args.clone());
            }
            Err(e) => {
                prop_assert!(!e.violations.is_empty());
                prop_assert_eq!(e.code(), sandgraph_params::INVALID_ARGS);
                for v in &e.violations {
                    prop_assert!(v.contains("\"arguments"), "{}", v);
                }
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(config())]

        /// Compiling any spec never panics; a refusal lists violations
        /// rooted at `parameters`; a compiled spec validates any arguments
        /// without panicking.
        #[test]
        fn any_spec_compiles_or_is_refused_and_validates_any_arguments(
            spec in parameters(),
            args in prop::collection::vec(
                prop_oneof![
                    any_json(),
                    prop::collection::vec((name(), any_json()), 0..5)
                        .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
                ],
                1..4,
            ),
        ) {
            match ParameterSchema::compile(&spec) {
                Ok(schema) => {
                    prop_assert_eq!(&schema.json_schema()["type"], "object");
                    prop_assert_eq!(schema.spec(), Some(&spec));
                    for args in &args {
                        check_validate(&schema, args)?;
                    }
                }
                Err(e) => {
                    prop_assert!(!e.violations.is_empty());
                    prop_assert_eq!(e.code(), sandgraph_params::UNSUPPORTED_SCHEMA);
                    for v in &e.violations {
                        prop_assert!(v.contains("parameters"), "{}", v);
                    }
                    prop_assert_eq!(ParameterSchema::compile(&spec).err(), Some(e));
                }
            }
        }

        /// The fallback schema validates any arguments without panicking.
        #[test]
        fn the_fallback_validates_any_arguments(
            keys in prop::collection::vec((name(), any::<bool>()), 0..4),
            args in any_json(),
            input in any_json(),
        ) {
            let schema = ParameterSchema::fallback_input(&keys);
            check_validate(&schema, &args)?;
            let mut wrapped = Map::new();
            wrapped.insert("input".to_owned(), input);
            check_validate(&schema, &Value::Object(wrapped))?;
        }
    }
}
