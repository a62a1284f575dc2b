//! The book's reference pages that are generated from the code:
//! `docs/reference/cli.md` (the clap definitions), `config.md` (the keys
//! `sandgraph.toml` accepts, checked against its deserializers) and
//! `exit-codes.md` (`crate::exit`). The pages are committed; the test
//! regenerates them and fails when they differ, and with
//! `SANDGRAPH_BLESS=1` writes them instead.

mod cli;
mod config;
mod exits;

use std::path::{Path, PathBuf};

/// The environment variable that makes the test write the pages.
const BLESS: &str = "SANDGRAPH_BLESS";

/// The line every generated page starts with, so nobody edits one by hand.
const GENERATED: &str = "<!-- generated from the code by `SANDGRAPH_BLESS=1 cargo test -p \
                         sandgraph-cli --bin sandgraph -- docgen`: do not edit -->";

/// The book's folder.
fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs")
}

/// Every generated page: its path under `docs/` and its text.
fn pages() -> Vec<(&'static str, String)> {
    vec![
        ("reference/cli.md", cli::page()),
        ("reference/config.md", config::page()),
        ("reference/exit-codes.md", exits::page()),
    ]
}

/// Text for a markdown paragraph or table cell: `<`, `>`, `*` and `|`
/// escaped outside code spans, so clap's `<VALUE>` and `a|b` stay text.
fn md(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, part) in text.split('`').enumerate() {
        if i > 0 {
            out.push('`');
        }
        if i % 2 == 1 {
            out.push_str(part);
            continue;
        }
        for c in part.chars() {
            match c {
                '<' => out.push_str("&lt;"),
                '>' => out.push_str("&gt;"),
                '*' => out.push_str("\\*"),
                '|' => out.push_str("\\|"),
                _ => out.push(c),
            }
        }
    }
    out
}

/// A code span for a table cell: `|` is escaped even in code there.
fn code(text: &str) -> String {
    format!("`{}`", text.replace('|', "\\|"))
}

#[test]
fn reference_pages_match_the_code() {
    let bless = std::env::var_os(BLESS).is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (name, text) in pages() {
        let path = docs().join(name);
        let text = format!("{GENERATED}\n\n{text}");
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        if on_disk == text {
            continue;
        }
        if bless {
            std::fs::write(&path, &text)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        } else {
            stale.push(format!("docs/{name}"));
        }
    }
    assert!(
        stale.is_empty(),
        "{} differ from the code: run SANDGRAPH_BLESS=1 cargo test -p sandgraph-cli --bin \
         sandgraph -- docgen to regenerate",
        stale.join(", ")
    );
}

#[test]
fn markdown_text_escapes_outside_code_spans() {
    assert_eq!(md("a <B> `<C>` x|y *z*"), "a &lt;B&gt; `<C>` x\\|y \\*z\\*");
    assert_eq!(code("sync|async"), "`sync\\|async`");
}
