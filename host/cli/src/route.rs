//! `sandgraph route` (a model picks a graph tool and it runs) and
//! `sandgraph journal` (the audit trail of every routing attempt).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sandgraph_agent::{
    AgentConfig, Fallback, GraphRoutingAgent, RouteError, RouteOptions, RouterOptions, ToolFilter,
};
use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::LimitOverrides;
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::{JournalEntry, Store};

use crate::exit::{self, Failure};
use crate::show;
use crate::threads::{db_path, storage};
use crate::tools::{MountArgs, load_operator_config};

/// Which model, and where.
#[derive(clap::Args, Clone)]
pub struct ModelArgs {
    /// OpenAI-compatible base URL [default: [llm].base_url, else https://api.deepseek.com]
    #[arg(long, value_name = "URL")]
    base_url: Option<String>,
    /// Model name [default: [llm].model, else deepseek-chat]
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Environment variable holding the API key [default: [llm].api_key_env, else DEEPSEEK_API_KEY]
    #[arg(long, value_name = "VAR")]
    api_key_env: Option<String>,
}

impl ModelArgs {
    /// `--model`, when given.
    pub fn model_flag(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The client config: flags over `[llm]` over the defaults.
    pub fn client_config(&self, base: &ClientConfig) -> ClientConfig {
        let mut c = base.clone();
        if let Some(u) = &self.base_url {
            c.base_url.clone_from(u);
        }
        if let Some(m) = &self.model {
            c.model.clone_from(m);
        }
        if let Some(k) = &self.api_key_env {
            c.api_key_env.clone_from(k);
        }
        c
    }
}

/// `sandgraph route REQUEST ...`
#[derive(clap::Args)]
pub struct RouteArgs {
    /// The request, in plain words
    request: String,
    #[command(flatten)]
    mount: MountArgs,
    #[command(flatten)]
    model: ModelArgs,
    /// Only these graph tools are candidates (comma-separated) [default: [routing].allow, else all]
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    allow: Option<Vec<String>>,
    /// Never these graph tools (comma-separated), with [routing].deny
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    deny: Vec<String>,
    /// Re-asks after a rejected choice [default: [routing].max_retries, else 3]
    #[arg(long, value_name = "N")]
    max_retries: Option<u32>,
    /// Graph tool to run with {} when the model answers in plain text [default: the built-in no-op]
    #[arg(long, value_name = "NAME")]
    fallback: Option<String>,
    /// Durable thread: the chosen graph runs on thread ID/<tool> in --db, continuing its state
    #[arg(long = "thread", value_name = "ID")]
    thread: Option<String>,
    /// Database of the audit journal (see `sandgraph journal`) and of --thread [default: as `threads`]
    #[arg(long, value_name = "PATH")]
    db: Option<PathBuf>,
    /// Do not record the attempts
    #[arg(long)]
    no_journal: bool,
}

/// `sandgraph journal ...`
#[derive(clap::Args)]
pub struct JournalArgs {
    /// Only the attempts of this routed request
    #[arg(long, value_name = "ROUTE_ID")]
    route: Option<String>,
    /// Only the last N attempts
    #[arg(long, value_name = "N")]
    last: Option<usize>,
    /// One JSON object per line
    #[arg(long)]
    json: bool,
    /// The database [default: as `threads`]
    #[arg(long, value_name = "PATH")]
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

/// `[llm]`, `[routing]`, `[policy]`, `[agents]` of the operator config.
pub fn agent_config(config: &sandgraph_registry::OperatorConfig) -> Result<AgentConfig, Failure> {
    AgentConfig::from_operator(config)
        .map_err(|e| RunError::new(ErrorCode::InvalidInput, e.to_string()).into())
}

/// The model client of `config`, with the flags over it.
pub fn provider(
    args: &ModelArgs,
    config: &AgentConfig,
) -> Result<(Arc<dyn Provider>, String), Failure> {
    let client_config = args.client_config(&config.llm);
    let model = client_config.model.clone();
    let client = OpenAiClient::new(client_config)
        .map_err(|e| Failure::new(e.code(), exit::MODEL, e.to_string()))?;
    Ok((Arc::new(client), model))
}

/// `sandgraph route`.
pub async fn route(args: RouteArgs) -> Result<ExitCode, Failure> {
    let operator = load_operator_config(args.mount.config.as_deref())?;
    let config = agent_config(&operator)?;
    let (provider, mut model) = provider(&args.model, &config)?;
    if args.model.model.is_none()
        && let Some(m) = &config.routing.model
    {
        model.clone_from(m);
    }
    // The database holds the journal and, with --thread, the thread.
    let store = if args.no_journal && args.thread.is_none() {
        None
    } else {
        let path = db_path(args.db.as_deref())?;
        Some(Store::open(&path).map_err(storage)?)
    };
    let journal = store
        .as_ref()
        .filter(|_| !args.no_journal)
        .map(Store::journal);
    let (registry, _) = crate::tools::open(&args.mount, LimitOverrides::default()).await?;
    let mut deny = config.routing.deny.clone();
    deny.extend(args.deny.iter().cloned());
    let options = RouterOptions {
        model,
        filter: ToolFilter {
            allow: args.allow.clone().or_else(|| config.routing.allow.clone()),
            deny,
        },
        max_retries: args.max_retries.unwrap_or(config.routing.max_retries),
        fallback: match args
            .fallback
            .clone()
            .or_else(|| config.routing.fallback.clone())
        {
            Some(name) => Fallback::Tool(name),
            None => Fallback::Builtin,
        },
        system_prompt: config.routing.system_prompt.clone(),
    };
    let mut agent = GraphRoutingAgent::new(registry, provider, options).map_err(route_failure)?;
    if let Some(journal) = journal {
        agent = agent.with_journal(journal);
    }
    config.policy.install(agent.hooks_mut());
    let cancel = sandgraph_runtime::CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let out = agent
        .route_with(
            &args.request,
            RouteOptions {
                cancel,
                thread_id: args.thread.clone(),
                threads: args.thread.as_ref().and(store.as_ref()).map(Store::threads),
                ..RouteOptions::default()
            },
        )
        .await
        .map_err(route_failure)?;
    let mut printed = serde_json::json!({
        "tool": out.tool,
        "args": out.args,
        "result": out.result,
        "attempts": out.attempts,
    });
    if out.fallback {
        printed["fallback"] = true.into();
    }
    println!(
        "{}",
        show::json(
            &serde_json::to_string_pretty(&printed)
                .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?
        )
    );
    Ok(ExitCode::SUCCESS)
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
    if !path.exists() {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!("no database at {}: nothing was routed yet", path.display()),
        )
        .into());
    }
    let store = Store::open(&path).map_err(storage)?;
    let entries = store
        .journal()
        .entries(args.route.as_deref(), args.last)
        .map_err(storage)?;
    for e in &entries {
        if args.json {
            println!(
                "{}",
                show::json(
                    &serde_json::to_string(e)
                        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?
                )
            );
        } else {
            println!("{}", line(e));
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
