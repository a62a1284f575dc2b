//! `sandgraph route` (a model picks a graph tool and it runs) and
//! `sandgraph journal` (the audit trail of every routing attempt).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use sandgraph_agent::{
    AgentConfig, Fallback, GraphRoutingAgent, RouteError, RouteOptions, RouterOptions, ToolFilter,
};
use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{DEFAULT_CONFIG_FILE, LimitOverrides};
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::{JournalEntry, Store};

use crate::exit::{self, Failure};
use crate::show;
use crate::threads::{db_path, storage};
use crate::tools::{ConfigOrigin, LoadedConfig, MountArgs, load_operator_config};

/// Which model, and where.
#[derive(clap::Args, Clone, Default)]
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
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// Do not record the attempts
    #[arg(long)]
    no_journal: bool,
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

fn invalid(message: String) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

fn parse_agent_config(operator: &LoadedConfig) -> Result<AgentConfig, Failure> {
    AgentConfig::from_operator(operator).map_err(|e| invalid(e.to_string()))
}

/// `[llm]`, `[routing]`, `[policy]`, `[agents]` of the operator config, for
/// a command without model flags (`serve --controller`). A discovered
/// config may not send the API key to another host (see
/// [`check_key_destination`]).
pub fn agent_config(operator: &LoadedConfig) -> Result<AgentConfig, Failure> {
    let config = parse_agent_config(operator)?;
    check_key_destination(operator, None, &config.llm).map_err(invalid)?;
    Ok(config)
}

/// [`agent_config`] for a command with model flags (`route`,
/// `supervise`): the flags go over `[llm]`, and a flag naming the URL or
/// the variable is the operator's word. With `verbose`, says on stderr
/// which config file and base URL are used (before any refusal).
pub fn model_config(
    operator: &LoadedConfig,
    flags: &ModelArgs,
    verbose: bool,
) -> Result<AgentConfig, Failure> {
    let config = parse_agent_config(operator)?;
    let client = flags.client_config(&config.llm);
    if verbose {
        for line in describe(operator, flags, &client) {
            eprintln!("{}", show::line(&line, show::MAX_LINE_BYTES));
        }
    }
    check_key_destination(operator, Some(flags), &client).map_err(invalid)?;
    Ok(config)
}

/// Where the config and the model's URL came from, a line each (not yet
/// escaped).
fn describe(operator: &LoadedConfig, flags: &ModelArgs, client: &ClientConfig) -> [String; 3] {
    let file = || {
        operator
            .source
            .as_ref()
            .map_or_else(String::new, |p| p.display().to_string())
    };
    let config = match operator.origin {
        ConfigOrigin::Flag => format!("config: {} (given with --config)", file()),
        ConfigOrigin::Discovered => format!(
            "config: {} (found in the working directory or above it)",
            file()
        ),
        ConfigOrigin::None => "config: none (the built-in defaults)".to_owned(),
    };
    let from = |flag: bool, key: &str| {
        if flag {
            "from the flag"
        } else if operator.llm.contains_key(key) {
            "from the config"
        } else {
            "the default"
        }
    };
    [
        config,
        format!(
            "base url: {} ({})",
            client.base_url,
            from(flags.base_url.is_some(), "base_url")
        ),
        format!(
            "api key: {} ({}, {})",
            client.api_key_env,
            from(flags.api_key_env.is_some(), "api_key_env"),
            if client.key_is_set() {
                "set"
            } else {
                "not set"
            }
        ),
    ]
}

/// A discovered config (found walking up from the working directory, so
/// possibly a cloned repository's) may not decide where the API key goes:
/// when the key would go anywhere but the default host, its
/// `[llm].base_url` and `[llm].api_key_env` must be the operator's word:
/// the file given with `--config`, or `--base-url` / `--api-key-env`
/// (`flags`; `None` for a command without them). `client` is the config
/// the model client would be built from.
///
/// With no key to send (its variable unset or blank), a discovered config
/// may name another server: nothing secret goes, and `OpenAiClient::new`
/// builds a client without a key only for a loopback server, so nothing
/// leaves the machine either. A project's `sandgraph.toml` naming its
/// local Ollama keeps working; the moment a key is set, it is refused.
pub(crate) fn check_key_destination(
    operator: &LoadedConfig,
    flags: Option<&ModelArgs>,
    client: &ClientConfig,
) -> Result<(), String> {
    if operator.origin != ConfigOrigin::Discovered
        || client.is_default_origin()
        || !client.key_is_set()
    {
        return Ok(());
    }
    let set_by_file =
        |key: &str, flag: Option<&String>| flag.is_none() && operator.llm.contains_key(key);
    let (key, what, flag) = if set_by_file("base_url", flags.and_then(|f| f.base_url.as_ref())) {
        (
            "base_url",
            format!("the API key in {}", client.api_key_env),
            "name the URL with --base-url",
        )
    } else if set_by_file("api_key_env", flags.and_then(|f| f.api_key_env.as_ref())) {
        (
            "api_key_env",
            format!("the key in {}", client.api_key_env),
            "name the variable with --api-key-env",
        )
    } else {
        return Ok(());
    };
    let file = operator
        .source
        .as_ref()
        .map_or_else(|| DEFAULT_CONFIG_FILE.into(), |p| p.display().to_string());
    let how = if flags.is_some() {
        format!("pass --config {file} or {flag}")
    } else {
        format!("pass --config {file}")
    };
    Err(format!(
        "{file} (found in the working directory or above it, not given with --config) \
         sets [llm].{key}: {what} would go to {}, not {}; to send it there, {how}",
        client.origin().unwrap_or_else(|| client.base_url.clone()),
        ClientConfig::default().origin().unwrap_or_default(),
    ))
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
    let config = model_config(&operator, &args.model, args.verbose)?;
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
        Some(crate::threads::open_data(&db_path(args.db.as_deref())?)?)
    };
    let journal = store
        .as_ref()
        .filter(|_| !args.no_journal)
        .map(Store::journal);
    let log = crate::tools::capability_log(store.as_ref(), args.db.as_deref());
    let (registry, _) = crate::tools::open(&args.mount, LimitOverrides::default(), log).await?;
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
    if out.interrupted {
        printed["interrupted"] = true.into();
    }
    outln!(
        "{}",
        show::json(
            &serde_json::to_string_pretty(&printed)
                .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))?
        )
    );
    // As `run` and `call`: an interrupted run is not a success.
    Ok(if out.interrupted {
        ExitCode::from(exit::INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    })
}

/// One capability call as text, every field a graph could shape folded
/// and escaped: `#seq graph capability target decision[: reason] (sizes,
/// tokens, latency)`.
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
    format!(
        "#{} {} {} {} {}{reason} [{} B out, {} B in{tokens}, {} ms]{thread}",
        c.seq,
        show::folded(&c.graph, 60),
        c.capability,
        show::folded(&c.target, 120),
        c.decision,
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
    if !crate::threads::data_exists(&path) {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!("no database at {}: nothing was routed yet", path.display()),
        )
        .into());
    }
    let store = crate::threads::open_data(&path)?;
    if args.capabilities {
        let calls = store
            .capability_journal()
            .entries(args.graph.as_deref(), args.last)
            .map_err(storage)?;
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
    let entries = store
        .journal()
        .entries(args.route.as_deref(), args.last)
        .map_err(storage)?;
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

    /// `text` as a config found in (or given from) the working directory.
    fn loaded(text: &str, origin: ConfigOrigin) -> LoadedConfig {
        LoadedConfig {
            config: sandgraph_registry::OperatorConfig::parse(
                text,
                std::path::Path::new(DEFAULT_CONFIG_FILE),
            )
            .unwrap(),
            origin,
        }
    }

    /// The refusal, if any, of running with `text` and `flags` (`None`:
    /// a command without model flags).
    fn refusal(text: &str, origin: ConfigOrigin, flags: Option<&ModelArgs>) -> Option<String> {
        let operator = loaded(text, origin);
        let config = parse_agent_config(&operator).unwrap();
        let client = flags.map_or_else(|| config.llm.clone(), |f| f.client_config(&config.llm));
        check_key_destination(&operator, flags, &client).err()
    }

    // PATH is set (and not blank) in every test process; the other name is
    // set by nothing.
    const LOCAL: &str = "[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"PATH\"\n";
    const LOCAL_UNSET: &str = "[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"SANDGRAPH_ROUTE_UNIT_UNSET\"\n";

    #[test]
    fn a_discovered_config_cannot_send_the_key_to_another_host() {
        let flags = ModelArgs::default();
        let refused = refusal(LOCAL, ConfigOrigin::Discovered, Some(&flags)).expect("refused");
        assert_eq!(
            refused,
            "sandgraph.toml (found in the working directory or above it, not given \
             with --config) sets [llm].base_url: the API key in PATH would go to \
             http://127.0.0.1:9, not https://api.deepseek.com; to send it there, pass \
             --config sandgraph.toml or name the URL with --base-url"
        );
        // Without model flags (serve --controller) the only way is --config.
        let refused = refusal(LOCAL, ConfigOrigin::Discovered, None).expect("refused");
        assert!(
            refused.ends_with("to send it there, pass --config sandgraph.toml"),
            "{refused}"
        );
        // Another port or plain http on the default host is another host.
        for url in ["http://api.deepseek.com", "https://api.deepseek.com:8443"] {
            let text = format!("[llm]\nbase_url = \"{url}\"\napi_key_env = \"PATH\"\n");
            assert!(
                refusal(&text, ConfigOrigin::Discovered, Some(&flags)).is_some(),
                "{url}"
            );
        }
    }

    #[test]
    fn a_discovered_config_cannot_choose_the_key_sent_to_another_host() {
        // The flag names the host; the file names the variable sent there.
        let flags = ModelArgs {
            base_url: Some("http://127.0.0.1:9".into()),
            ..ModelArgs::default()
        };
        let text = "[llm]\napi_key_env = \"PATH\"\n";
        let refused = refusal(text, ConfigOrigin::Discovered, Some(&flags)).expect("refused");
        assert!(
            refused.contains(
                "sets [llm].api_key_env: the key in PATH would go to http://127.0.0.1:9, not \
                 https://api.deepseek.com; to send it there, pass --config sandgraph.toml or \
                 name the variable with --api-key-env"
            ),
            "{refused}"
        );
        let both = ModelArgs {
            api_key_env: Some("PATH".into()),
            ..flags.clone()
        };
        assert_eq!(refusal(text, ConfigOrigin::Discovered, Some(&both)), None);
        // On the default host the file may name the variable.
        assert_eq!(
            refusal(text, ConfigOrigin::Discovered, Some(&ModelArgs::default())),
            None
        );
    }

    #[test]
    fn what_the_operator_named_is_trusted() {
        let flags = ModelArgs::default();
        // Given with --config.
        assert_eq!(refusal(LOCAL, ConfigOrigin::Flag, Some(&flags)), None);
        assert_eq!(refusal(LOCAL, ConfigOrigin::Flag, None), None);
        // The URL named with --base-url (the file's api_key_env is PATH,
        // so the variable flag is needed too).
        let url = ModelArgs {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            api_key_env: Some("PATH".into()),
            ..ModelArgs::default()
        };
        assert_eq!(refusal(LOCAL, ConfigOrigin::Discovered, Some(&url)), None);
        let only_url = "[llm]\nbase_url = \"http://127.0.0.1:9/v1\"\n";
        let url = ModelArgs {
            base_url: Some("http://127.0.0.1:9/v1".into()),
            ..ModelArgs::default()
        };
        assert_eq!(
            refusal(only_url, ConfigOrigin::Discovered, Some(&url)),
            None
        );
    }

    #[test]
    fn a_discovered_config_may_set_the_model_and_a_keyless_local_server() {
        let flags = ModelArgs::default();
        for text in [
            "[llm]\nmodel = \"m\"\napi_key_env = \"PATH\"\n[routing]\nmax_retries = 1\n",
            "[llm]\nbase_url = \"https://api.deepseek.com/v1\"\napi_key_env = \"PATH\"\n",
            // No key would be sent.
            LOCAL_UNSET,
        ] {
            assert_eq!(
                refusal(text, ConfigOrigin::Discovered, Some(&flags)),
                None,
                "{text}"
            );
            assert_eq!(
                refusal(text, ConfigOrigin::Discovered, None),
                None,
                "{text}"
            );
        }
    }

    #[test]
    fn verbose_names_the_file_and_the_url_and_where_each_came_from() {
        let flags = ModelArgs::default();
        let operator = loaded(LOCAL_UNSET, ConfigOrigin::Discovered);
        let client = flags.client_config(&parse_agent_config(&operator).unwrap().llm);
        assert_eq!(
            describe(&operator, &flags, &client),
            [
                "config: sandgraph.toml (found in the working directory or above it)",
                "base url: http://127.0.0.1:9/v1 (from the config)",
                "api key: SANDGRAPH_ROUTE_UNIT_UNSET (from the config, not set)",
            ]
        );
        let operator = loaded("", ConfigOrigin::Flag);
        let flags = ModelArgs {
            base_url: Some("http://localhost:1".into()),
            ..ModelArgs::default()
        };
        let client = flags.client_config(&parse_agent_config(&operator).unwrap().llm);
        assert_eq!(
            describe(&operator, &flags, &client),
            [
                "config: sandgraph.toml (given with --config)",
                "base url: http://localhost:1 (from the flag)",
                &format!(
                    "api key: DEEPSEEK_API_KEY (the default, {})",
                    if client.key_is_set() {
                        "set"
                    } else {
                        "not set"
                    }
                ),
            ]
        );
        let operator = LoadedConfig {
            config: sandgraph_registry::OperatorConfig::default(),
            origin: ConfigOrigin::None,
        };
        let flags = ModelArgs::default();
        let client = flags.client_config(&parse_agent_config(&operator).unwrap().llm);
        assert_eq!(
            describe(&operator, &flags, &client)[..2],
            [
                "config: none (the built-in defaults)",
                "base url: https://api.deepseek.com (the default)",
            ]
        );
    }
}
