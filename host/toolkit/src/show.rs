//! Text for the operator's terminal. Messages, reasons and summaries may
//! quote a graph, a model or an MCP client, whatever path they took to get
//! here; every one is written as one inert line: bounded, the cut marked,
//! and each control character (ESC, BEL, CR, newlines, C1, bidi overrides)
//! shown as a visible escape, so nothing printed can drive the terminal or
//! pass for a line of the host's own.

use std::fmt::Write as _;

use sandgraph_core::text::{guest_text, has_unsafe_chars, is_unsafe_char};

/// The longest `error[<code>]: <message>` message, in bytes as printed. A
/// runtime error quotes a graph's own text (capped at 4 KiB where it is
/// made) behind the host's words; 8 KiB keeps both whole, while a message
/// that still carries a flood stays one screenful.
pub const MAX_REPORT_BYTES: usize = 8 * 1024;

/// The longest warning, progress or table line, in bytes as printed: long
/// enough for a mount failure or a record's summary, short enough that a
/// graph's description or a model's text cannot flood the terminal.
pub const MAX_LINE_BYTES: usize = 4 * 1024;

/// `text` as one inert line of at most `max_bytes` (plus the cut's mark).
pub fn line(text: &str, max_bytes: usize) -> String {
    guest_text(text, max_bytes)
}

/// `text` with its runs of whitespace (newlines included) folded into one
/// space, cut after `max_chars` characters (marked `…`), then made inert:
/// for one-line summaries of free text.
pub fn folded(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut chars = flat.char_indices();
    let cut = match chars.nth(max_chars) {
        Some((at, _)) => &flat[..at],
        None => flat.as_str(),
    };
    let mut out = guest_text(cut, usize::MAX);
    if cut.len() < flat.len() {
        out.push('…');
    }
    out
}

/// Multi-line text the host drew (a Mermaid chart) that quotes guest
/// names: each line made inert, the host's own line breaks kept.
pub fn lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text.split_inclusive('\n') {
        let (body, end) = match l.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (l, ""),
        };
        out.push_str(&guest_text(body, usize::MAX));
        out.push_str(end);
    }
    out
}

/// JSON text for the terminal: every character that a terminal may act on
/// and that `serde_json` writes raw (DEL, the C1 controls, bidi overrides,
/// line and paragraph separators) written as a `\uXXXX` escape instead. The
/// JSON means the same: such characters only occur inside strings, and
/// all of them lie in the Basic Multilingual Plane.
pub fn json(text: &str) -> String {
    if !has_unsafe_chars(text) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c != '\n' && is_unsafe_char(c) {
            let _ = write!(out, "\\u{:04x}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_inert_and_bounded() {
        let s = line("\u{1b}]0;pwned\u{7}\nerror[ok]: forged", 1024);
        assert_eq!(s, "\\u{1b}]0;pwned\\u{7}\\nerror[ok]: forged");
        let long = line(&"\u{1b}".repeat(100_000), MAX_REPORT_BYTES);
        assert!(long.len() < MAX_REPORT_BYTES + 32);
        assert!(long.ends_with("more bytes]"));
    }

    #[test]
    fn folded_joins_whitespace_and_escapes_the_rest() {
        assert_eq!(folded("a\n  b\tc", 80), "a b c");
        assert_eq!(folded("abcdef", 3), "abc…");
        assert_eq!(folded("x\u{1b}[31m", 80), "x\\u{1b}[31m");
        assert_eq!(folded("é\u{9b}", 80), "é\\u{9b}");
    }

    #[test]
    fn lines_keep_the_line_breaks_only() {
        assert_eq!(lines("a\u{1b}\nb\r\n"), "a\\u{1b}\nb\\r\n");
        assert_eq!(lines("x"), "x");
    }

    #[test]
    fn json_escapes_what_serde_leaves_raw() {
        let v = serde_json::json!({"a": "\u{9b}2J\u{7f}\u{202e}é", "b": "\u{1b}"});
        let text = serde_json::to_string_pretty(&v).unwrap();
        let safe = json(&text);
        assert!(!safe.chars().any(|c| c != '\n' && c.is_control()));
        assert!(safe.contains("\\u009b2J\\u007f\\u202eé"));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, v);
        assert_eq!(json("{\n  \"a\": 1\n}"), "{\n  \"a\": 1\n}");
    }
}
