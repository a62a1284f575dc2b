//! `route`'s flags over `[routing]` over the defaults.

use sandgraph_agent::{Fallback, RouterOptions, ToolFilter};

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
    #[arg(long, value_name = "NAME")]
    fallback: Option<String>,
}

/// The router's options: `--allow` replaces `[routing].allow`, `--deny`
/// adds to `[routing].deny`, `--max-retries` and `--fallback` go over
/// theirs; the model is the resolved one.
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
        fallback: match flags.fallback.clone().or_else(|| routing.fallback.clone()) {
            Some(name) => Fallback::Tool(name),
            None => Fallback::Builtin,
        },
        system_prompt: routing.system_prompt.clone(),
    }
}
