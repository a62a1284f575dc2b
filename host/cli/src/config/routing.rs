//! `route`'s flags over `[routing]` over the defaults.

use sandgraph_router::{Fallback, RouterOptions, ToolFilter};

use super::Resolved;

/// The flags of `route` that go over `[routing]`.
#[derive(clap::Args)]
pub(crate) struct RoutingArgs {
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
    #[arg(long, value_name = "NAME", conflicts_with = "fallback_reply")]
    fallback: Option<String>,
    /// Reply {"reply": TEXT} from the host when the model answers in plain text, instead of running a graph [default: [routing].fallback_reply]
    #[arg(long, value_name = "TEXT")]
    fallback_reply: Option<String>,
}

/// The router's options: `--allow` replaces `[routing].allow`, `--deny`
/// adds to `[routing].deny`, `--max-retries`, `--fallback` and
/// `--fallback-reply` go over theirs; the model is the resolved one.
pub(crate) fn router_options(resolved: &Resolved, flags: &RoutingArgs) -> RouterOptions {
    let routing = &resolved.agents.routing;
    let mut deny = routing.deny.clone();
    deny.extend(flags.deny.iter().cloned());
    RouterOptions {
        model: resolved.model.clone(),
        filter: ToolFilter {
            allow: flags.allow.clone().or_else(|| routing.allow.clone()),
            deny,
        },
        max_retries: flags.max_retries.unwrap_or(routing.max_retries),
        fallback: fallback(flags, routing),
        system_prompt: routing.system_prompt.clone(),
    }
}

/// A flag over the config; a graph over a reply at the same level (the
/// config refuses both, the flags conflict).
fn fallback(flags: &RoutingArgs, routing: &sandgraph_router::RoutingConfig) -> Fallback {
    if let Some(name) = &flags.fallback {
        Fallback::Tool(name.clone())
    } else if let Some(reply) = &flags.fallback_reply {
        Fallback::Reply(reply.clone())
    } else if let Some(name) = &routing.fallback {
        Fallback::Tool(name.clone())
    } else if let Some(reply) = &routing.fallback_reply {
        Fallback::Reply(reply.clone())
    } else {
        Fallback::Builtin
    }
}
