//! `sandgraph route` (a model picks a graph tool and it runs) and
//! `sandgraph journal` (the audit trail of every routing attempt).

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_factors::journal::CapabilityJournal;
use sandgraph_router::{GraphRoutingAgent, RouteError, RouteOptions, RouteOutcome};
use sandgraph_router::{Journal, JournalEntry};
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::Store;

use crate::config::routing::{RoutingArgs, router_options};
use crate::config::store::{data_exists, db_path, open_data, shown, table_storage};
use crate::config::{LoadedConfig, ModelArgs, Resolved, Role};
use crate::exit::{self, Failure};
use crate::mount::{self, MountArgs};
use crate::show;

/// `sandgraph route REQUEST ...`
#[derive(clap::Args)]
pub struct RouteArgs {
    /// The request, in plain words
    request: String,
    #[command(flatten)]
    mount: MountArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    routing: RoutingArgs,
    /// Durable thread: the chosen graph runs on thread ID/<tool> in --db, continuing its state
    #[arg(long = "thread", value_name = "ID")]
    thread: Option<String>,
    /// Database of the audit journal (see `sandgraph journal`) and of --thread [default: as `threads`]
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// Do not record the attempts
    #[arg(long)]
    no_journal: bool,
    #[command(flatten)]
    configurable: crate::ConfigurableArg,
    /// Print which config file and base URL are used, on stderr
    #[arg(long, short)]
    verbose: bool,
}

/// `sandgraph journal ...`
#[derive(clap::Args)]
pub struct JournalArgs {
    /// Only the attempts of this routed request
    #[arg(long, value_name = "ROUTE_ID", conflicts_with = "capabilities")]
    route: Option<String>,
    /// The capability journal instead: every llm, tools and http call of a graph, allowed or refused
    #[arg(long)]
    capabilities: bool,
    /// With --capabilities: only the calls of this graph
    #[arg(long, value_name = "NAME", requires = "capabilities")]
    graph: Option<String>,
    /// Only the last N attempts
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// One JSON object per line
    #[arg(long)]
    json: bool,
    /// The database [default: as `threads`]
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    db: Option<PathBuf>,
}

/// The exit code and `error[code]` of a routing failure.
pub fn route_failure(e: RouteError) -> Failure {
    match e {
        RouteError::Graph(e) => e.into(),
        RouteError::Config(_) => Failure::new("routing_config", 2, e.to_string()),
        RouteError::Llm(ref l) => Failure::new(l.code(), exit::MODEL, e.to_string()),
        RouteError::Exhausted { .. } => {
            Failure::new("routing_exhausted", exit::ROUTING_EXHAUSTED, e.to_string())
        }
        RouteError::Hook { .. } => Failure::new("hook_error", exit::HOOK, e.to_string()),
        RouteError::Cancelled => RunError::new(ErrorCode::Timeout, e.to_string()).into(),
    }
}

/// `sandgraph route`.
pub async fn route(args: RouteArgs) -> Result<ExitCode, Failure> {
    let operator = LoadedConfig::load(args.mount.config.as_deref())?;
    let resolved = Resolved::resolve(operator, Some(&args.model), args.verbose, Role::Router)?;
    let provider = crate::config::model::provider(&resolved.client)?;
    // The database holds the journal and, with --thread, the thread.
    let store = if args.no_journal && args.thread.is_none() {
        None
    } else {
        Some(open_data(&db_path(args.db.as_deref())?)?)
    };
    let log = mount::capability_log(store.as_ref(), args.db.as_deref());
    let (registry, _) = mount::open(&args.mount, &resolved.operator, log).await?;
    let options = router_options(&resolved, &args.routing);
    let mut agent = GraphRoutingAgent::new(registry, provider, options).map_err(route_failure)?;
    if let Some(journal) = store.as_ref().filter(|_| !args.no_journal) {
        agent = agent.with_journal(Journal::open(journal));
    }
    resolved.agents.policy.install(agent.hooks_mut());
    let options = RouteOptions {
        cancel: cancel_on_ctrl_c(),
        thread_id: args.thread.clone(),
        threads: args.thread.as_ref().and(store.as_ref()).map(Store::threads),
        configurable: args.configurable.parse()?,
        ..RouteOptions::default()
    };
    let out = agent
        .route_with(&args.request, options)
        .await
        .map_err(route_failure)?;
    print_outcome(&out)
}

/// A token cancelled when the process gets SIGINT.
fn cancel_on_ctrl_c() -> sandgraph_runtime::CancellationToken {
    let cancel = sandgraph_runtime::CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    cancel
}

/// Prints `{tool, args, result, attempts}` (and `fallback`, `interrupted`
/// when set); an interrupted run exits [`exit::INTERRUPTED`].
fn print_outcome(out: &RouteOutcome) -> Result<ExitCode, Failure> {
    let mut printed = serde_json::json!({
        "tool": out.tool,
        "args": out.args,
        "result": out.result,
        "attempts": out.attempts,
    });
    if out.fallback {
        printed["fallback"] = true.into();
    }
    if out.interrupted {
        printed["interrupted"] = true.into();
    }
    crate::print_pretty(&printed)?;
    // As `run` and `call`: an interrupted run is not a success.
    Ok(if out.interrupted {
        ExitCode::from(exit::INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// One capability call as text, every field a graph could shape folded
/// and escaped: `#seq graph capability target decision[ xN][: reason]
/// (sizes, tokens, latency)[ thread][ via chain]`, where `xN` counts the
/// refusals of one kind a row stands for.
fn capability_line(c: &sandgraph_core::audit::CapabilityCall) -> String {
    let reason = c
        .reason
        .as_deref()
        .map(|r| format!(": {}", show::folded(r, 200)))
        .unwrap_or_default();
    let tokens = c
        .tokens
        .map(|t| format!(", {t} tokens"))
        .unwrap_or_default();
    let thread = c
        .thread_id
        .as_deref()
        .map(|t| format!(" thread {}", show::folded(t, 60)))
        .unwrap_or_default();
    let count = if c.count == 1 {
        String::new()
    } else {
        format!(" x{}", c.count)
    };
    let chain = if c.chain.is_empty() {
        String::new()
    } else {
        format!(" via {}", show::folded(&c.chain.join(" -> "), 200))
    };
    format!(
        "#{} {} {} {} {}{count}{reason} [{} B out, {} B in{tokens}, {} ms]{thread}{chain}",
        c.seq,
        show::folded(&c.graph, 60),
        c.capability,
        show::folded(&c.target, 120),
        show::folded(&c.decision, 40),
        c.request_bytes,
        c.response_bytes,
        c.latency_ms,
    )
}

/// One journal entry as text. Every field a person, a model or a graph
/// wrote (request, tool, arguments, reason) is folded onto its line and
/// escaped, so an entry can neither forge another nor drive the terminal.
fn line(e: &JournalEntry) -> String {
    let decision = match &e.stage {
        Some(stage) => format!(
            "{} ({})",
            show::folded(&e.decision, 40),
            show::folded(stage, 40)
        ),
        None => show::folded(&e.decision, 40),
    };
    let args = e
        .args
        .as_ref()
        .map(|a| show::folded(&a.to_string(), 80))
        .unwrap_or_default();
    let mut s = format!(
        "#{} {} attempt {} {} {}{}",
        e.seq,
        show::folded(&e.route_id, 80),
        e.attempt,
        decision,
        e.tool
            .as_deref()
            .map_or_else(|| "-".to_owned(), |t| show::folded(t, 80)),
        if args.is_empty() {
            String::new()
        } else {
            format!(" {args}")
        },
    );
    s.push_str(&format!(
        " [model {} ms, checks {} ms{}]",
        e.model_ms,
        e.check_ms,
        e.run_ms
            .map(|r| format!(", run {r} ms"))
            .unwrap_or_default()
    ));
    if let Some(reason) = &e.reason {
        s.push_str(&format!("\n    reason: {}", show::folded(reason, 200)));
    }
    if e.attempt == 1 {
        s = format!(
            "{}\n{s}",
            format_args!("request: {}", show::folded(&e.request, 200))
        );
    }
    s
}

/// `sandgraph journal`.
pub async fn journal(args: JournalArgs) -> Result<ExitCode, Failure> {
    let path = db_path(args.db.as_deref())?;
    if !data_exists(&path) {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!("no database at {}: nothing was routed yet", shown(&path)),
        )
        .into());
    }
    let store = open_data(&path)?;
    if args.capabilities {
        let calls = CapabilityJournal::open(&store)
            .entries(args.graph.as_deref(), args.last)
            .map_err(table_storage)?;
        for c in &calls {
            if args.json {
                outln!(
                    "{}",
                    show::json(
                        &serde_json::to_string(c)
                            .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?
                    )
                );
            } else {
                outln!("{}", capability_line(c));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let entries = Journal::open(&store)
        .entries(args.route.as_deref(), args.last)
        .map_err(table_storage)?;
    for e in &entries {
        if args.json {
            outln!(
                "{}",
                show::json(
                    &serde_json::to_string(e)
                        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?
                )
            );
        } else {
            outln!("{}", line(e));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_journal_entry_cannot_forge_lines_or_drive_the_terminal() {
        let e = JournalEntry {
            seq: 1,
            route_id: "route-1".into(),
            attempt: 1,
            at_ms: 0,
            request: "hi\u{1b}]0;pwned\u{7}\nerror[ok]: forged".into(),
            tool: Some("ghost\u{1b}[31m".into()),
            args: Some(json!({"a": "\u{9b}2J"})),
            decision: "rejected".into(),
            stage: Some("unknown_tool".into()),
            reason: Some("bad\r\nerror[ok]: forged\u{202e}".into()),
            outcome: None,
            model_ms: 1,
            check_ms: 2,
            run_ms: None,
            graph_digest: None,
        };
        let text = line(&e);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(
            lines[0],
            "request: hi\\u{1b}]0;pwned\\u{7} error[ok]: forged"
        );
        assert!(
            lines[1].starts_with("#1 route-1 attempt 1 rejected (unknown_tool) ghost\\u{1b}[31m "),
            "{text}"
        );
        assert!(lines[1].contains("\\u{9b}2J"), "{text}");
        assert_eq!(lines[2], "    reason: bad error[ok]: forged\\u{202e}");
        assert!(!text.chars().any(|c| c != '\n' && c.is_control()));
    }
}
