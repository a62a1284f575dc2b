//! Text on the operator's terminal. Messages, reasons and summaries may
//! quote a graph, a model or an MCP client, whatever path they took to get
//! here; every one is written as one inert line: bounded, the cut marked,
//! and each control character (ESC, BEL, CR, newlines, C1, bidi overrides)
//! shown as a visible escape, so nothing printed can drive the terminal or
//! pass for a line of the host's own.

pub use sandgraph_toolkit::show::{MAX_LINE_BYTES, MAX_REPORT_BYTES, folded, json, line, lines};

/// Writes one line of the command's output to stdout; a closed stdout
/// (`BrokenPipe`) ends the process quietly with status 141, the status of
/// a process killed by `SIGPIPE`, as `head` expects of a producer.
pub fn write_out(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = writeln!(out, "{args}") {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
