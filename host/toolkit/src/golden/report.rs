//! The terminal report of `sandgraph test`: a line per case, the failures
//! with their diffs, a summary. Case names and states may quote a graph's
//! output: every line is made inert (see `crate::show`).

use std::fmt::Write as _;
use std::time::Duration;

use crate::show;

use super::CaseResult;

/// Most lines of either side a diff compares line by line (the table is
/// their product); longer texts are shown whole, both sides, cut at
/// [`MAX_DIFF_BYTES`].
pub const MAX_DIFF_LINES: usize = 2000;
/// Longest diff printed for one failure, in bytes: a state the size of
/// the host budget must not flood the terminal or the JUnit file.
pub const MAX_DIFF_BYTES: usize = 64 * 1024;
/// Unchanged lines shown around each change.
const CONTEXT: usize = 3;

fn millis(d: Duration) -> u128 {
    d.as_millis()
}

/// `test NAME ... ok (12 ms)`.
pub fn case_line(r: &CaseResult) -> String {
    let status = if r.failure.is_some() { "FAILED" } else { "ok" };
    format!(
        "test {} ... {status} ({} ms)",
        show::line(&r.name, show::MAX_LINE_BYTES),
        millis(r.time)
    )
}

/// The text of a failure: its message, then its diff.
pub(crate) fn failure_text(r: &CaseResult) -> Option<String> {
    let f = r.failure.as_ref()?;
    let mut text = show::line(&f.message, show::MAX_REPORT_BYTES);
    if let Some(diff) = &f.diff {
        text.push('\n');
        text.push_str(diff);
    }
    Some(text)
}

/// The failed cases, each with its file, message and diff; `None` when
/// none failed.
pub(crate) fn failures(results: &[CaseResult]) -> Option<String> {
    let failed: Vec<&CaseResult> = results.iter().filter(|r| r.failure.is_some()).collect();
    if failed.is_empty() {
        return None;
    }
    let mut out = String::from("\nfailures:");
    for r in failed {
        let _ = write!(
            out,
            "\n\n---- {} ({}) ----",
            show::line(&r.name, show::MAX_LINE_BYTES),
            show::line(&r.file.display().to_string(), show::MAX_LINE_BYTES)
        );
        if let Some(text) = failure_text(r) {
            out.push('\n');
            out.push_str(&text);
        }
    }
    Some(out)
}

/// `test result: ok. 3 passed; 0 failed; 1 filtered out; finished in 0.42s`.
pub(crate) fn summary(results: &[CaseResult], filtered_out: usize, elapsed: Duration) -> String {
    let failed = results.iter().filter(|r| r.failure.is_some()).count();
    let passed = results.len() - failed;
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    format!(
        "\ntest result: {verdict}. {passed} passed; {failed} failed; {filtered_out} filtered out; \
         finished in {:.2}s",
        elapsed.as_secs_f64()
    )
}

/// A line diff of two texts: `- ` lines only in `expected`, `+ ` lines only
/// in `actual`, `  ` common lines within [`CONTEXT`] lines of a change
/// (longer common runs elided as `  ...`). Every line is made inert, the
/// whole capped at [`MAX_DIFF_BYTES`].
pub(crate) fn line_diff(expected: &str, actual: &str) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = actual.lines().collect();
    let ops = if a.len() <= MAX_DIFF_LINES && b.len() <= MAX_DIFF_LINES {
        lcs_ops(&a, &b)
    } else {
        a.iter()
            .map(|l| Op::Del(l))
            .chain(b.iter().map(|l| Op::Add(l)))
            .collect()
    };
    let near_change = |i: usize| {
        let lo = i.saturating_sub(CONTEXT);
        let hi = (i + CONTEXT + 1).min(ops.len());
        ops[lo..hi].iter().any(|op| !matches!(op, Op::Same(_)))
    };
    let mut out = Block::default();
    let mut elided = false;
    for (i, op) in ops.iter().enumerate() {
        let (mark, text) = match op {
            Op::Same(_) if !near_change(i) => {
                if !elided {
                    out.raw("  ...");
                    elided = true;
                }
                continue;
            }
            Op::Same(l) => ("  ", l),
            Op::Del(l) => ("- ", l),
            Op::Add(l) => ("+ ", l),
        };
        elided = false;
        if !out.line(mark, text) {
            break;
        }
    }
    out.finish()
}

/// `text` (pretty JSON of a graph's output), each line indented and made
/// inert, the whole capped at [`MAX_DIFF_BYTES`].
pub(crate) fn block(text: &str) -> String {
    let mut out = Block::default();
    for l in text.lines() {
        if !out.line("  ", l) {
            break;
        }
    }
    out.finish()
}

/// Lines of guest JSON for the report, bounded.
#[derive(Default)]
struct Block(String);

impl Block {
    fn raw(&mut self, line: &str) {
        self.0.push_str(line);
        self.0.push('\n');
    }

    /// Adds `mark` and the inert `text`; false once the cap is reached
    /// (the text is then cut and marked).
    fn line(&mut self, mark: &str, text: &str) -> bool {
        self.0.push_str(mark);
        self.0
            .push_str(&show::line(&show::json(text), show::MAX_LINE_BYTES));
        self.0.push('\n');
        if self.0.len() <= MAX_DIFF_BYTES {
            return true;
        }
        let mut cut = MAX_DIFF_BYTES;
        while !self.0.is_char_boundary(cut) {
            cut -= 1;
        }
        self.0.truncate(cut);
        self.0.push_str("\n[diff cut]\n");
        false
    }

    fn finish(mut self) -> String {
        while self.0.ends_with('\n') {
            self.0.pop();
        }
        self.0
    }
}

enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Add(&'a str),
}

/// The edit script of a longest common subsequence of `a` and `b`.
fn lcs_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let (n, m) = (a.len(), b.len());
    // table[i][j]: LCS length of a[i..] and b[j..].
    let mut table = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            table[at(i, j)] = if a[i] == b[j] {
                table[at(i + 1, j + 1)] + 1
            } else {
                table[at(i + 1, j)].max(table[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut ops = Vec::with_capacity(n + m);
    while i < n && j < m {
        if a[i] == b[j] {
            ops.push(Op::Same(a[i]));
            i += 1;
            j += 1;
        } else if table[at(i + 1, j)] >= table[at(i, j + 1)] {
            ops.push(Op::Del(a[i]));
            i += 1;
        } else {
            ops.push(Op::Add(b[j]));
            j += 1;
        }
    }
    ops.extend(a[i..].iter().map(|l| Op::Del(l)));
    ops.extend(b[j..].iter().map(|l| Op::Add(l)));
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_marks_changed_lines_and_elides_far_context() {
        let a = "{\n  \"a\": 1,\n  \"b\": 2\n}";
        let b = "{\n  \"a\": 1,\n  \"b\": 3\n}";
        assert_eq!(
            line_diff(a, b),
            "  {\n    \"a\": 1,\n-   \"b\": 2\n+   \"b\": 3\n  }"
        );
        let long_a: String = (0..20).map(|i| format!("{i}\n")).collect();
        let long_b = long_a.replace("10\n", "ten\n");
        let d = line_diff(&long_a, &long_b);
        assert!(d.starts_with("  ...\n  7\n"), "{d}");
        assert!(d.contains("- 10\n+ ten\n"), "{d}");
        assert!(d.ends_with("  13\n  ..."), "{d}");
    }

    #[test]
    fn the_diff_is_inert_and_bounded() {
        let d = line_diff("\"\u{1b}[2J\"", "\"\u{9b}x\"");
        assert!(!d.contains('\u{1b}') && !d.contains('\u{9b}'), "{d}");
        let huge: String = (0..3000)
            .map(|i| format!("line {i} {}\n", "x".repeat(40)))
            .collect();
        let d = line_diff(&huge, "x");
        assert!(d.len() < MAX_DIFF_BYTES + 64, "{}", d.len());
        assert!(d.ends_with("[diff cut]"));
    }
}
