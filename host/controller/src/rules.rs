//! The identity and text rules of the supervisor tools and every bound they
//! enforce (seed-contracts §2.6–2.7). Lengths are counted in UTF-16 code
//! units, as the original counted JavaScript string lengths, so a character
//! above U+FFFF counts twice.

/// Work items one update may add (seed: `MAX_ADD_WORK`, 32).
pub const MAX_ADD_WORK: usize = 32;
/// Input ids per work item, and inputs plus selected results per work item
/// (seed: `MAX_INPUT_IDS`, 64).
pub const MAX_INPUT_IDS: usize = 64;
/// Selected historical results over all work items of one update (seed:
/// `MAX_SELECTED_RESULT_INPUTS`, 64).
pub const MAX_SELECTED_RESULT_INPUTS: usize = 64;
/// UTF-16 units of a work instruction (seed:
/// `MAX_SCHEDULE_INSTRUCTION_LENGTH`, 60000).
pub const MAX_SCHEDULE_INSTRUCTION_LENGTH: usize = 60_000;
/// Stop targets of one update (seed: `MAX_WORK_STOPS`, 20).
pub const MAX_WORK_STOPS: usize = 20;
/// UTF-16 units of a stop or finish reason (seed:
/// `MAX_SCHEDULE_REASON_CHARS`, 4000).
pub const MAX_SCHEDULE_REASON_CHARS: usize = 4_000;
/// Result ids a finish may select (seed: `MAX_SCHEDULE_RESULT_IDS`, 64).
pub const MAX_SCHEDULE_RESULT_IDS: usize = 64;
/// UTF-16 units of an identity (seed: the identity rule, 1..=256).
pub const MAX_IDENTITY_LENGTH: usize = 256;

/// Terminal work items shown on every view page, the last ones (seed:
/// `TOOL_VIEW_MAX_TERMINAL_WORK`, 64).
pub const VIEW_MAX_TERMINAL_WORK: usize = 64;
/// Stopped targets shown, the last ones (seed:
/// `TOOL_VIEW_MAX_STOPPED_TARGETS`, 64).
pub const VIEW_MAX_STOPPED_TARGETS: usize = 64;
/// UTF-16 units of an instruction in a view before it is cut (seed:
/// `TOOL_VIEW_MAX_INSTRUCTION_CHARS`, 2000).
pub const VIEW_MAX_INSTRUCTION_CHARS: usize = 2_000;
/// Records on one view page (seed: `TOOL_VIEW_MAX_RECORDS`, 64).
pub const VIEW_MAX_RECORDS: usize = 64;
/// UTF-16 units of a record summary in a view before it is cut (seed:
/// `TOOL_VIEW_MAX_SUMMARY_CHARS`, 512).
pub const VIEW_MAX_SUMMARY_CHARS: usize = 512;
/// Readiness intents on one view page (seed: `TOOL_VIEW_MAX_READINESS`, 64).
pub const VIEW_MAX_READINESS: usize = 64;
/// Live entries (requested work, records, intents) on one view page (seed:
/// `TOOL_VIEW_MAX_LIVE_STATE`, 64).
pub const VIEW_MAX_LIVE_STATE: usize = 64;
/// UTF-16 units of the one-line form of an instruction or summary in the
/// text rendering (seed: `oneLine`, 120).
pub const RENDER_MAX_LINE_CHARS: usize = 120;

/// The ellipsis appended to a cut instruction or summary (U+2026).
pub const ELLIPSIS: char = '\u{2026}';

/// The length of `s` in UTF-16 code units (a JavaScript string length).
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// The longest prefix of `s` of at most `max` UTF-16 units that does not
/// split a surrogate pair (a character above U+FFFF is kept whole or not at
/// all).
pub fn utf16_prefix(s: &str, max: usize) -> &str {
    let mut units = 0;
    for (at, c) in s.char_indices() {
        units += c.len_utf16();
        if units > max {
            return &s[..at];
        }
    }
    s
}

/// `s` cut to `max` UTF-16 units with `…` appended when it is longer;
/// whether it was cut.
pub fn truncate_utf16(s: &str, max: usize) -> (String, bool) {
    if utf16_len(s) <= max {
        return (s.to_owned(), false);
    }
    let mut out = utf16_prefix(s, max).to_owned();
    out.push(ELLIPSIS);
    (out, true)
}

/// Whitespace as JavaScript's `String.prototype.trim` and `\s` see it:
/// WhiteSpace and LineTerminator (this differs from Rust's
/// [`char::is_whitespace`], which has U+0085 but not U+FEFF).
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}' | '\u{a}' | '\u{b}' | '\u{c}' | '\u{d}' | ' ' | '\u{a0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200a}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202f}'
                | '\u{205f}'
                | '\u{3000}'
                | '\u{feff}'
    )
}

/// `s.trim()` in JavaScript.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// The identity rule: 1..=256 UTF-16 units, no leading or trailing
/// whitespace, no C0 control character and no DEL.
pub fn is_identity(s: &str) -> bool {
    let len = utf16_len(s);
    (1..=MAX_IDENTITY_LENGTH).contains(&len)
        && js_trim(s) == s
        && !s.chars().any(|c| c <= '\u{1f}' || c == '\u{7f}')
}

/// The text rule: 1..=`max` UTF-16 units, no leading or trailing whitespace,
/// and no control character but tab, LF and CR (no other C0 character, no
/// DEL).
pub fn is_text(s: &str, max: usize) -> bool {
    let len = utf16_len(s);
    (1..=max).contains(&len)
        && js_trim(s) == s
        && !s
            .chars()
            .any(|c| (c <= '\u{1f}' && !matches!(c, '\t' | '\n' | '\r')) || c == '\u{7f}')
}

/// The one-line form of the text rendering: every run of whitespace becomes
/// one space, the ends are trimmed, and the result is cut to 120 UTF-16
/// units (never inside a surrogate pair; no ellipsis).
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(512));
    let mut in_space = false;
    for c in text.chars() {
        if is_js_whitespace(c) {
            if !in_space {
                out.push(' ');
                in_space = true;
            }
        } else {
            out.push(c);
            in_space = false;
        }
    }
    let trimmed = js_trim(&out);
    utf16_prefix(trimmed, RENDER_MAX_LINE_CHARS).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_counts_astral_characters_twice() {
        assert_eq!(utf16_len("abc"), 3);
        assert_eq!(utf16_len("é"), 1);
        assert_eq!(utf16_len("\u{1F600}"), 2);
    }

    #[test]
    fn truncation_never_splits_a_surrogate_pair() {
        let s = format!("{}\u{1F600}z", "a".repeat(4));
        // 4 + 2 + 1 = 7 units; a cut at 5 would split the emoji.
        assert_eq!(truncate_utf16(&s, 5), ("aaaa\u{2026}".to_owned(), true));
        assert_eq!(
            truncate_utf16(&s, 6),
            ("aaaa\u{1F600}\u{2026}".to_owned(), true)
        );
        assert_eq!(truncate_utf16(&s, 7), (s.clone(), false));
    }

    #[test]
    fn identity_rule() {
        assert!(is_identity("a"));
        assert!(is_identity(&"a".repeat(256)));
        assert!(!is_identity(&"a".repeat(257)));
        assert!(!is_identity(&format!("{}\u{1F600}", "a".repeat(255))));
        assert!(!is_identity(""));
        assert!(!is_identity(" a"));
        assert!(!is_identity("a\u{feff}"));
        assert!(!is_identity("a\u{7f}b"));
        assert!(!is_identity("a\tb"));
        assert!(is_identity("a b"));
        assert!(is_identity("a\u{85}"));
    }

    #[test]
    fn text_rule() {
        assert!(is_text("a\tb\nc\rd", 10));
        assert!(!is_text("a\u{1}b", 10));
        assert!(!is_text("a\u{b}b", 10));
        assert!(!is_text("a\u{7f}b", 10));
        assert!(!is_text(" a", 10));
        assert!(!is_text("", 10));
        assert!(is_text("aaaa", 4));
        assert!(!is_text("aaaaa", 4));
    }

    #[test]
    fn one_line_collapses_whitespace_and_cuts_at_120() {
        assert_eq!(one_line("  a \n\t b\u{3000}c  "), "a b c");
        assert_eq!(one_line(&"x".repeat(200)), "x".repeat(120));
        let s = format!("{}\u{1F600}", "x".repeat(119));
        assert_eq!(one_line(&s), "x".repeat(119));
    }
}
