//! `sandgraph supervise` (a durable agent graph driven by a supervisor
//! model) and `sandgraph agent-graph show` (its work, records and wakes).

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_controller::{OpenAgentGraphs, SupervisorWake, WakeAttempt};
use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_store::Store;
use sandgraph_supervisor::{Event, SuperviseError, Supervisor, SupervisorRun, SupervisorRuns};
use serde_json::json;

use crate::config::store::{data_exists, db_path, open_data, shown, table_storage};
use crate::config::{ControllerArgs, LoadedConfig, ModelArgs, Resolved, Role};
use crate::exit::{self, Failure};
use crate::mount::{self, MountArgs};
use crate::show;

/// `sandgraph supervise GOAL ...` / `sandgraph supervise --resume ID ...`
#[derive(clap::Args)]
pub struct SuperviseArgs {
    /// The goal, in plain words (not with --resume)
    #[arg(required_unless_present = "resume", conflicts_with = "resume")]
    goal: Option<String>,
    /// Continue the agent graph GRAPH_ID where it stopped
    #[arg(long, value_name = "GRAPH_ID")]
    resume: Option<String>,
    /// The id of the new agent graph [default: a fresh agent_graph_… id]
    #[arg(long, value_name = "ID", conflicts_with = "resume")]
    graph_id: Option<String>,
    #[command(flatten)]
    mount: MountArgs,
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    controller: ControllerArgs,
    /// The database of the graph [default: as `threads`]
    #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
    db: Option<PathBuf>,
    /// Print the config file and base URL used, and progress (turns, tool calls, records), on stderr
    #[arg(long, short)]
    verbose: bool,
}

/// `sandgraph agent-graph ...`
#[derive(clap::Subcommand)]
pub enum AgentGraphCommand {
    /// Print an agent graph's work, records and wakes
    Show {
        /// The agent graph
        graph_id: String,
        /// Print JSON instead of text
        #[arg(long)]
        json: bool,
        /// The database [default: as `threads`]
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
    /// List the supervised agent graphs
    List {
        /// The database [default: as `threads`]
        #[arg(long, visible_alias = "store", value_name = "PATH|URL")]
        db: Option<PathBuf>,
    },
}

/// The exit and message of a supervisor failure; `db` is the database the
/// run used, named where the fix is to look there.
fn failure(e: SuperviseError, db: &std::path::Path) -> Failure {
    match &e {
        SuperviseError::Llm(l) => Failure::new(l.code(), exit::MODEL, e.to_string()),
        SuperviseError::UnknownGraph(_) => RunError::new(
            ErrorCode::InvalidInput,
            format!(
                "{e} in {db}: list the ones it holds with `sandgraph agent-graph list --db {db}`",
                db = shown(db)
            ),
        )
        .into(),
        SuperviseError::InvalidGraphId(_) => {
            RunError::new(ErrorCode::InvalidInput, e.to_string()).into()
        }
        SuperviseError::Store(_) => RunError::new(ErrorCode::Storage, e.to_string()).into(),
        SuperviseError::Stalled(_)
        | SuperviseError::Coordinator(_)
        | SuperviseError::ContextOverflow { .. } => {
            Failure::new(e.code(), exit::SUPERVISOR, e.to_string())
        }
    }
}

fn progress(e: &Event) {
    match e {
        Event::Turn { turn } => eprintln!("supervisor turn {turn}"),
        Event::ToolCall { tool, result } => eprintln!(
            "  {}: {}",
            show::folded(tool, 80),
            show::line(result, show::MAX_LINE_BYTES)
        ),
        Event::Wave { records } => {
            for r in records {
                eprintln!(
                    "  record {} (work {}): {}",
                    show::folded(&r.record_id, 80),
                    show::folded(r.work_id.as_deref().unwrap_or("-"), 80),
                    show::folded(r.summary.lines().next().unwrap_or(""), 400)
                );
            }
        }
        Event::WakeDelivered { wake_id } => {
            eprintln!("  wake {} delivered", show::folded(wake_id, 80));
        }
        Event::Compacted {
            estimated_tokens,
            budget_tokens,
            digested_calls,
            omitted,
            ..
        } => eprintln!(
            "  context compacted: about {estimated_tokens} estimated tokens, over the budget of {budget_tokens}; {digested_calls} tool calls digested, {omitted} entries left out of the message"
        ),
    }
}

/// `sandgraph supervise`.
pub async fn supervise(args: SuperviseArgs) -> Result<ExitCode, Failure> {
    let operator = LoadedConfig::load(args.mount.config.as_deref())?;
    let role = Role::Supervisor(&args.controller);
    let resolved = Resolved::resolve(operator, Some(&args.model), args.verbose, role)?;
    let provider = crate::config::model::provider(&resolved.client)?;
    let path = db_path(args.db.as_deref())?;
    let store = open_data(&path)?;
    let log = mount::capability_log(Some(&store), None);
    let (registry, _) = mount::open(&args.mount, &resolved.operator, log).await?;
    let options = resolved.controller.supervisor_options(resolved.model);
    let mut supervisor = Supervisor::new(store, registry, provider, resolved.agents, options, true);
    if args.verbose {
        supervisor = supervisor.on_event(progress);
    }
    let outcome = match (&args.resume, &args.goal) {
        (Some(id), _) => supervisor.resume(id).await,
        (None, Some(goal)) => {
            let graph_id = args.graph_id.clone();
            supervisor.start(goal, graph_id).await
        }
        (None, None) => unreachable!("clap requires a goal without --resume"),
    }
    .map_err(|e| failure(e, &path))?;
    crate::print_pretty(&json!({
        "graph_id": outcome.graph_id,
        "status": "finished",
        "result_ids": outcome.result_ids,
        "reason": outcome.reason,
        "results": outcome.results,
        "turns": outcome.turns,
    }))?;
    Ok(ExitCode::SUCCESS)
}

fn open_existing(db: Option<&std::path::Path>) -> Result<Store, Failure> {
    let path = db_path(db)?;
    if !data_exists(&path) {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!(
                "no database at {}: nothing was supervised with it yet; pass the --db that \
                 `sandgraph supervise` used",
                shown(&path)
            ),
        )
        .into());
    }
    open_data(&path)
}

/// `sandgraph agent-graph ...`.
pub async fn agent_graph(cmd: AgentGraphCommand) -> Result<ExitCode, Failure> {
    match cmd {
        AgentGraphCommand::List { db } => {
            let store = open_existing(db.as_deref())?;
            for run in SupervisorRuns::open(&store).list().map_err(table_storage)? {
                let closed = store
                    .agent_graphs()
                    .is_closed(&run.graph_id)
                    .map_err(|e| RunError::new(ErrorCode::Storage, e.message))?;
                outln!(
                    "{}\t{}\t{} turns\t{}",
                    show::folded(&run.graph_id, 80),
                    if closed { "finished" } else { "open" },
                    run.turns,
                    show::folded(&run.goal, 400)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        AgentGraphCommand::Show { graph_id, json, db } => {
            let store = open_existing(db.as_deref())?;
            show(&store, &graph_id, json)
        }
    }
}

/// What `agent-graph show` prints: the graph's run, projection and wakes.
struct Shown {
    graph_id: String,
    run: Option<SupervisorRun>,
    projection: sandgraph_controller::Projection,
    wakes: Vec<(SupervisorWake, Vec<WakeAttempt>)>,
}

fn show(store: &Store, graph_id: &str, as_json: bool) -> Result<ExitCode, Failure> {
    let shown = load_shown(store, graph_id)?;
    if as_json {
        outln!("{}", show::json(&shown_json(&shown)?));
    } else {
        print!("{}", shown_text(&shown));
    }
    Ok(ExitCode::SUCCESS)
}

fn load_shown(store: &Store, graph_id: &str) -> Result<Shown, Failure> {
    let graphs = store.agent_graphs();
    let ctl = |e: sandgraph_controller::ControlError| -> Failure {
        RunError::new(ErrorCode::Storage, e.message).into()
    };
    let run = SupervisorRuns::open(store)
        .get(graph_id)
        .map_err(table_storage)?;
    let projection = sandgraph_controller::Projection::load(&graphs, graph_id)
        .map_err(|e| RunError::new(ErrorCode::Storage, e.to_string()))?;
    if run.is_none() && projection.revision() == 0 {
        return Err(RunError::new(
            ErrorCode::InvalidInput,
            format!("no agent graph {graph_id} in this database"),
        )
        .into());
    }
    let mut wakes = Vec::new();
    for w in graphs.list_supervisor_wakes(graph_id).map_err(ctl)? {
        let attempts = graphs
            .list_supervisor_wake_attempts(graph_id, &w.wake_id)
            .map_err(ctl)?;
        wakes.push((w, attempts));
    }
    Ok(Shown {
        graph_id: graph_id.to_owned(),
        run,
        projection,
        wakes,
    })
}

fn shown_json(shown: &Shown) -> Result<String, Failure> {
    let (run, projection) = (&shown.run, &shown.projection);
    let value = json!({
        "graph_id": shown.graph_id,
        "goal": run.as_ref().map(|r| r.goal.clone()),
        "turns": run.as_ref().map(|r| r.turns),
        "closed": projection.closed(),
        "revision": projection.revision(),
        "work": projection.work().iter().map(|w| json!({
            "work": w.work(),
            "status": w.status().as_str(),
            "revision": w.revision(),
            "claim": projection.claim_of(w.work_id()),
        })).collect::<Vec<_>>(),
        "records": projection.records(),
        "finish": projection.finish().map(|f| json!({"result_ids": f.result_ids, "reason": f.reason})),
        "wakes": shown.wakes.iter().map(|(w, a)| json!({"wake": w, "attempts": a})).collect::<Vec<_>>(),
    });
    serde_json::to_string_pretty(&value)
        .map_err(|e| Failure::internal(format!("cannot render JSON: {e}")))
}

/// The snake_case word serde writes for a unit enum value.
fn word(value: impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `heading:` and its lines, or `  none`.
fn section(out: &mut String, heading: &str, lines: Vec<String>) {
    out.push_str(&format!("\n{heading}:\n"));
    if lines.is_empty() {
        out.push_str("  none\n");
    }
    for line in lines {
        out.push_str(&line);
    }
}

fn shown_text(shown: &Shown) -> String {
    let p = &shown.projection;
    let state = if p.closed() { "finished" } else { "open" };
    let mut out = format!(
        "agent graph {} ({state}, revision {}, {} updates)\n",
        show::folded(&shown.graph_id, 80),
        p.revision(),
        p.update_count()
    );
    if let Some(run) = &shown.run {
        out.push_str(&format!(
            "goal: {}\nsupervisor turns: {}\n",
            show::folded(&run.goal, 4096),
            run.turns
        ));
    }
    let work = p.work().iter().map(|w| {
        let claim = p
            .claim_of(w.work_id())
            .map(|c| format!(" claim {}", word(c.admission_status)))
            .unwrap_or_default();
        format!(
            "  {} {} {}:{}{claim} — {}\n",
            w.status().as_str(),
            show::folded(w.work_id(), 80),
            w.work().target.kind.as_str(),
            show::folded(&w.work().target.id, 80),
            show::folded(&w.work().instruction, 4096)
        )
    });
    section(&mut out, "work", work.collect());
    let records = p.records().iter().map(|r| {
        format!(
            "  {} (work {}, {}): {}\n",
            show::folded(&r.record_id, 80),
            show::folded(r.work_id.as_deref().unwrap_or("-"), 80),
            r.outcome.map_or_else(|| "record".to_owned(), word),
            show::folded(&r.summary, 4096)
        )
    });
    section(&mut out, "records", records.collect());
    section(
        &mut out,
        "wakes",
        shown.wakes.iter().map(wake_lines).collect(),
    );
    if let Some(f) = p.finish() {
        out.push_str(&format!(
            "\nfinished: {} — {}\n",
            show::folded(&f.result_ids.join(", "), 4096),
            show::folded(&f.reason, 4096)
        ));
    }
    out
}

/// A wake's line and one line per attempt.
fn wake_lines((w, attempts): &(SupervisorWake, Vec<WakeAttempt>)) -> String {
    let mut out = format!(
        "  {} {} ({} attempts)\n",
        word(w.status),
        show::folded(&w.wake_id, 80),
        w.attempt_count
    );
    for a in attempts {
        let reason = a
            .failure_reason
            .as_deref()
            .map(|r| format!(": {}", show::folded(r, 4096)))
            .unwrap_or_default();
        out.push_str(&format!(
            "    attempt {} {}{reason}\n",
            show::folded(&a.attempt_id, 80),
            word(a.status)
        ));
    }
    out
}
