//! Keeps the DSL reference page (`guest-sdk/PARAMETERS.md`) true: every
//! ```` ```json dsl ```` block there must compile to the ```` ```json schema ````
//! block after it, or fail with the ```` ```text error ```` block after it.

use serde_json::Value;

use crate::ParameterSchema;

const PAGE: &str = include_str!("../../../guest-sdk/PARAMETERS.md");

/// The fenced blocks of `page`: (info string, body).
fn blocks(page: &str) -> Vec<(&str, String)> {
    let mut out = Vec::new();
    let mut open: Option<(&str, String)> = None;
    for line in page.lines() {
        match (&mut open, line.strip_prefix("```")) {
            (None, Some(info)) => open = Some((info.trim(), String::new())),
            (Some(_), Some("")) => out.extend(open.take()),
            (Some((_, body)), _) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "PARAMETERS.md has an unclosed code block");
    out
}

#[test]
fn every_example_of_the_reference_page_holds() {
    let blocks = blocks(PAGE);
    let mut checked = 0;
    for (i, (info, body)) in blocks.iter().enumerate() {
        if *info != "json dsl" {
            continue;
        }
        let dsl: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("dsl block {i} is not JSON: {e}\n{body}"));
        let (next, expected) = blocks
            .get(i + 1)
            .unwrap_or_else(|| panic!("dsl block {i} has no expected block after it"));
        let compiled = ParameterSchema::compile(&dsl);
        match *next {
            "json schema" => {
                let want: Value = serde_json::from_str(expected)
                    .unwrap_or_else(|e| panic!("schema block {} is not JSON: {e}", i + 1));
                let got = compiled
                    .unwrap_or_else(|e| panic!("dsl block {i} does not compile: {e}\n{body}"));
                assert_eq!(
                    got.json_schema(),
                    &want,
                    "dsl block {i} compiles to\n{:#}",
                    got.json_schema()
                );
            }
            "text error" => {
                let err = compiled.err().unwrap_or_else(|| {
                    panic!("dsl block {i} compiles, but the page says it fails")
                });
                assert_eq!(err.to_string(), expected.trim_end(), "dsl block {i}");
            }
            other => panic!("dsl block {i} is followed by a `{other}` block"),
        }
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} examples found on the page");
}
