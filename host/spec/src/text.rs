//! Guest text made safe to show: bounded, and with every control character
//! rendered as a visible escape.
//!
//! Everything a guest returns is untrusted, and its text ends up in front of
//! a person (a terminal), in a file (logs, the journal) or in a model's
//! context (MCP results, routing feedback). [`guest_text`] caps it at a
//! named bound, marking the cut, and escapes C0 and C1 controls (ESC, BEL,
//! CR, newlines and the rest), DEL and the Unicode bidi and line/paragraph
//! separators, so a guest can neither send a terminal escape sequence nor
//! forge a second log line.

use std::fmt::Write as _;

/// Longest guest message (a node or router error, a `validate` reason, a
/// panic message) kept in an error: 4 KiB says what went wrong; anything
/// longer is a guest trying to flood the operator's terminal, the journal or
/// a model's context.
pub const MAX_GUEST_MESSAGE_BYTES: usize = 4 * 1024;

/// Longest guest-chosen name (a goto or route target, an unknown channel, a
/// backtrace frame) quoted in a message. Real names are identifiers far
/// shorter than this.
pub const MAX_GUEST_NAME_BYTES: usize = 256;

/// `text` with control characters written as Rust-style escapes (`\n`,
/// `\r` and `\t`, the others as `\u{1b}`), capped at `max_bytes` of
/// *escaped* text: the bound holds however many characters need escaping.
/// The cut falls between whole characters (never inside an escape) and is
/// marked `…[N more bytes]`, N counting the bytes of `text` left out. The
/// result holds no character below U+0020, no DEL, no C1 control and no
/// bidi override, so it is one inert line.
pub fn guest_text(text: &str, max_bytes: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_bytes) + 24);
    for (at, c) in text.char_indices() {
        let before = out.len();
        push_safe(&mut out, c);
        if out.len() > max_bytes {
            out.truncate(before);
            let _ = write!(out, "…[{} more bytes]", text.len() - at);
            break;
        }
    }
    out
}

/// [`guest_text`] with [`MAX_GUEST_MESSAGE_BYTES`].
pub fn guest_message(text: &str) -> String {
    guest_text(text, MAX_GUEST_MESSAGE_BYTES)
}

/// [`guest_text`] with [`MAX_GUEST_NAME_BYTES`], quoted: for names a guest
/// chose, inside a host message.
pub fn guest_name(text: &str) -> String {
    format!("\"{}\"", guest_text(text, MAX_GUEST_NAME_BYTES))
}

/// Whether `text` would be changed by [`guest_text`] apart from its length:
/// it holds a character that is escaped.
pub fn has_unsafe_chars(text: &str) -> bool {
    text.chars().any(needs_escape)
}

/// Whether [`guest_text`] escapes `c`: a C0 or C1 control, DEL, a bidi
/// control or a line/paragraph separator.
pub fn is_unsafe_char(c: char) -> bool {
    needs_escape(c)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}'
        )
}

fn push_safe(out: &mut String, c: char) {
    if !needs_escape(c) {
        out.push(c);
        return;
    }
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        other => {
            let _ = write!(out, "\\u{{{:x}}}", other as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_terminal_controls_and_line_breaks() {
        let s = guest_text(
            "\u{1b}]0;pwned\u{7}ok\nerror[ok]: forged\r\u{9b}x\u{202e}",
            100,
        );
        assert_eq!(
            s,
            "\\u{1b}]0;pwned\\u{7}ok\\nerror[ok]: forged\\r\\u{9b}x\\u{202e}"
        );
        assert!(!s.chars().any(needs_escape));
        assert!(has_unsafe_chars("a\u{1b}"));
        assert!(!has_unsafe_chars("plain text, ünïcode ✓"));
    }

    #[test]
    fn caps_on_a_char_boundary_and_marks_the_cut() {
        let s = guest_text(&"é".repeat(10), 5);
        // 5 bytes: two full `é` (4 bytes), the third would split.
        assert_eq!(s, "éé…[16 more bytes]");
        assert_eq!(guest_text("short", 5), "short");
        let big = "x".repeat(MAX_GUEST_MESSAGE_BYTES * 8);
        let m = guest_message(&big);
        assert!(m.len() < MAX_GUEST_MESSAGE_BYTES + 32, "{}", m.len());
        assert!(m.ends_with(&format!("…[{} more bytes]", MAX_GUEST_MESSAGE_BYTES * 7)));
    }

    #[test]
    fn the_bound_counts_the_escapes() {
        // 1,000 ESCs would be 6,000 bytes escaped: the bound is on the
        // output, cut between whole escapes.
        let s = guest_text(&"\u{1b}".repeat(1000), 100);
        assert_eq!(s, format!("{}…[984 more bytes]", "\\u{1b}".repeat(16)));
        assert_eq!(guest_text("a\nb", 2), "a…[2 more bytes]");
        assert_eq!(guest_text("", 0), "");
    }

    #[test]
    fn names_are_quoted_and_capped() {
        assert_eq!(guest_name("a\nb"), "\"a\\nb\"");
        assert!(guest_name(&"n".repeat(1000)).len() < MAX_GUEST_NAME_BYTES + 32);
    }
}
