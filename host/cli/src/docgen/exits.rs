//! `docs/reference/exit-codes.md`: every exit status of `sandgraph`, its
//! number from `crate::exit` and the codes `error[<code>]` prints with it.

use std::fmt::Write;

use sandgraph_runtime::ErrorCode;

use super::{code, md};
use crate::exit;

/// One row of the table: the status, the codes printed with it, and when.
struct Row {
    exit: u8,
    codes: Vec<&'static str>,
    when: &'static str,
}

/// The exit status of a run error code.
fn run(code: ErrorCode, when: &'static str) -> Row {
    Row {
        exit: exit::exit_code(code),
        codes: vec![code.as_str()],
        when,
    }
}

/// Every row, in order of status.
fn rows() -> Vec<Row> {
    use ErrorCode::*;
    let row = |exit, codes: &[&'static str], when| Row {
        exit,
        codes: codes.to_vec(),
        when,
    };
    let mut rows = vec![
        row(0, &[], "success"),
        row(
            exit::CHECK_FAILED,
            &["lint", "signature"],
            "a CI check failed: a `sandgraph test` case (the report says which), a \
             `check --deny-warnings` warning, a graph that does not `verify`",
        ),
        run(
            InvalidInput,
            "bad input JSON, bad option, an OCI reference that is not \
             `registry/repository:tag` or `@sha256:<hex>`, resume without a pending \
             interrupt, a bad `[llm]`, `[routing]`, `[policy]` or `[agents.<id>]` section",
        ),
        row(
            2,
            &["routing_config"],
            "the routing filter names an unknown graph tool or leaves none, or the \
             fallback is unknown or refuses `{}` (before any model call)",
        ),
        run(
            Load,
            "not a wasm file, a core module instead of a component, another world or \
             version, missing imports, an invalid spec",
        ),
        run(
            Timeout,
            "the run passed its deadline (soft, then hard after the grace period) or \
             was cancelled",
        ),
        run(OutOfFuel, "the run used its fuel budget"),
        run(
            MemoryLimit,
            "an instance hit its memory cap or the host-wide budget",
        ),
        run(
            Trap,
            "the guest trapped (panic, stack overflow, bad memory access); the message \
             quotes the panic and a short guest backtrace",
        ),
        run(
            InvalidOutput,
            "a node returned JSON that is not lossless (NaN, `-0`, unsafe integers, \
             duplicate keys, too deep or too large), with its JSON path",
        ),
        run(
            InvalidUpdate,
            "two writes to a last-value channel in one superstep (names the channel and \
             the nodes), an unknown goto, route or send target",
        ),
        run(
            RecursionLimit,
            "more supersteps than the step budget (default 25)",
        ),
        run(NodeError, "a node or router reported its own failure"),
        row(
            exit::BUILD_FAILED,
            &["build"],
            "`sandgraph build` could not build the graph (e.g. the wasm32-wasip2 target \
             is missing: the message names `rustup target add wasm32-wasip2`)",
        ),
        run(
            InvalidArgs,
            "tool arguments failed the graph's parameter schema",
        ),
        run(
            Validation,
            "the graph's own `validate` rejected a tool call",
        ),
        run(ThreadBusy, "another run is writing the same thread"),
        run(Storage, "the thread database could not be read or written"),
        row(
            exit::MODEL,
            &[
                "missing_key",
                "auth",
                "rate_limited",
                "server",
                "status",
                "timeout",
                "transport",
                "too_large",
                "malformed",
                "config",
            ],
            "the model provider failed: no key, key rejected (401/403), \
             429/500/502/503/504 past the retries, another status, timeout, connection, \
             response too large or unreadable, an unusable `[llm]` setting or flag",
        ),
        row(
            exit::ROUTING_EXHAUSTED,
            &["routing_exhausted"],
            "every routing attempt was rejected: `routing failed after N attempts: <last \
             reason>`",
        ),
        row(
            exit::HOOK,
            &["hook_error"],
            "a `pre-execute` or `post-execute` listener failed",
        ),
        row(
            exit::INTERRUPTED,
            &[],
            "the run stopped at an interrupt and waits for `--resume` (not an error): \
             `run`, `call` and `route` (which also prints `\"interrupted\": true`)",
        ),
        row(
            exit::SUPERVISOR,
            &["supervisor_stalled", "coordinator", "context_overflow"],
            "`sandgraph supervise` could not finish: the supervisor stopped with nothing \
             pending, took `--max-turns` turns, a wake could not be delivered in 3 \
             attempts, or a turn did not fit `[controller].context_budget_tokens` even \
             compacted (the graph stays; `--resume` continues it)",
        ),
        row(
            exit::REGISTRY,
            &[
                "registry_auth",
                "not_found",
                "digest_mismatch",
                "not_a_wasm_artifact",
                "too_large",
                "docker_config",
                "registry",
            ],
            "`push`, `pull`: credentials refused or missing, no such tag or digest, \
             content not matching its digest or size, a manifest that is not the wasm \
             component layout, a size over its bound, a broken docker config, the \
             registry unreachable or failing",
        ),
        row(
            exit::INTERNAL,
            &["internal"],
            "a bug or an environment failure in the host itself",
        ),
        row(
            141,
            &[],
            "stdout was closed early (the output piped into `head`): the status of a \
             process ended by `SIGPIPE`, without a report",
        ),
    ];
    rows.sort_by_key(|r| r.exit);
    rows
}

/// The page.
pub(super) fn page() -> String {
    let mut out = String::from(
        "# Exit codes\n\nFailures print `error[<code>]: <message>` on stderr, nothing on \
         stdout, and exit with the code's number:\n\n| exit | code | when |\n|---|---|---|\n",
    );
    for row in rows() {
        let codes: Vec<String> = row.codes.iter().map(|c| code(c)).collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            row.exit,
            codes.join(", "),
            md(row.when)
        );
    }
    out
}

#[test]
fn every_exit_status_has_a_row() {
    let rows = rows();
    let has = |exit: u8, code: Option<&str>| {
        rows.iter()
            .any(|r| r.exit == exit && code.is_none_or(|c| r.codes.contains(&c)))
    };
    for c in ErrorCode::ALL {
        assert!(
            has(exit::exit_code(c), Some(c.as_str())),
            "exit-codes.md has no row for error code {} (exit {})",
            c.as_str(),
            exit::exit_code(c)
        );
    }
    for status in [
        exit::CHECK_FAILED,
        exit::BUILD_FAILED,
        exit::MODEL,
        exit::ROUTING_EXHAUSTED,
        exit::HOOK,
        exit::INTERRUPTED,
        exit::SUPERVISOR,
        exit::REGISTRY,
        exit::INTERNAL,
    ] {
        assert!(
            has(status, None),
            "exit-codes.md has no row for exit {status}"
        );
    }
}
