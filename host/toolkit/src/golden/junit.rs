//! `--junit FILE`: the results as JUnit XML, the layout CI dashboards read
//! (`testsuites` > `testsuite` > `testcase`, a `failure` element per
//! failed case, times in seconds).

use std::fmt::Write as _;
use std::time::Duration;

use super::CaseResult;
use super::report::failure_text;

/// `text` as XML character data or attribute text: the five markup
/// characters as entities; a character XML 1.0 cannot carry at all (the
/// C0 controls but tab and newline, and the noncharacters) and every other
/// terminal control or bidi override as a visible `\u{..}` escape, so the
/// file parses and shows what the graph wrote. In an attribute, newlines
/// and tabs are character references too (else they read back as spaces).
pub(crate) fn escape(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' if attribute => out.push_str("&#10;"),
            '\t' if attribute => out.push_str("&#9;"),
            '\n' | '\t' => out.push(c),
            c if sandgraph_core::text::is_unsafe_char(c) || c == '\u{fffe}' || c == '\u{ffff}' => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// The XML document: one suite named after the graph, one case per result,
/// its class name the case file's stem.
pub(crate) fn render(graph: &str, results: &[CaseResult], elapsed: Duration) -> String {
    let failures = results.iter().filter(|r| r.failure.is_some()).count();
    let graph = escape(graph, true);
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let counts = format!(
        "tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{}\"",
        results.len(),
        secs(elapsed)
    );
    let _ = writeln!(x, "<testsuites name=\"sandgraph test\" {counts}>");
    let _ = writeln!(x, "  <testsuite name=\"{graph}\" {counts}>");
    for r in results {
        let class = r
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let _ = write!(
            x,
            "    <testcase name=\"{}\" classname=\"{graph}.{}\" file=\"{}\" time=\"{}\"",
            escape(&r.name, true),
            escape(&class, true),
            escape(&r.file.display().to_string(), true),
            secs(r.time)
        );
        match (&r.failure, failure_text(r)) {
            (Some(f), Some(text)) => {
                let first = f.message.lines().next().unwrap_or_default();
                let _ = writeln!(
                    x,
                    ">\n      <failure message=\"{}\" type=\"mismatch\">{}</failure>\n    </testcase>",
                    escape(&crate::show::line(first, crate::show::MAX_LINE_BYTES), true),
                    escape(&text, false)
                );
            }
            _ => x.push_str("/>\n"),
        }
    }
    x.push_str("  </testsuite>\n</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_for_xml() {
        assert_eq!(escape("a<b & \"c\"", false), "a&lt;b &amp; &quot;c&quot;");
        assert_eq!(escape("x\u{1b}[2J\u{0}", false), "x\\u{1b}[2J\\u{0}");
        assert_eq!(escape("a\nb", true), "a&#10;b");
        assert_eq!(escape("a\nb", false), "a\nb");
    }
}
