//! `docs/reference/config.md`: every key of `sandgraph.toml`. The table is
//! owned here, and a test holds each table's keys to exactly the fields its
//! deserializer accepts: it feeds every table an unknown key through the
//! code that reads it and compares the fields serde's refusal lists.

use std::collections::BTreeSet;
use std::fmt::Write;
use std::path::Path;

use sandgraph_llm::ClientConfig;
use sandgraph_registry::OperatorConfig;
use sandgraph_runtime::Limits;

use super::{code, md};

/// A default shown in the table: fixed text, or read from the code.
enum Given {
    /// No default: unset means "not set" (the meaning column says what then).
    None,
    /// Fixed text.
    Text(&'static str),
    /// From the runtime's limits of the table ([`Table::base`]).
    Limit(fn(&Limits) -> String),
    /// From the model client's defaults.
    Llm(fn(&ClientConfig) -> String),
}

/// One key.
struct Key {
    name: &'static str,
    ty: &'static str,
    default: Given,
    meaning: &'static str,
}

/// One table of the file.
struct Table {
    /// As written in the file, e.g. `[graphs.<name>]`.
    name: &'static str,
    /// What it is for.
    about: &'static str,
    /// The limits its [`Given::Limit`] defaults come from.
    base: fn() -> Limits,
    /// A file with `PROBE` in this table: refused, listing the table's fields.
    probe: &'static str,
    keys: &'static [Key],
}

/// The unknown key the probes write.
const PROBE: &str = "zz_probe";

const fn key(name: &'static str, ty: &'static str, default: Given, meaning: &'static str) -> Key {
    Key {
        name,
        ty,
        default,
        meaning,
    }
}

fn millis(ms: u128) -> String {
    format!("{ms}")
}

fn mib(bytes: usize) -> String {
    format!("{}", bytes >> 20)
}

/// The limit keys of `[limits]`, `[load]` and `[graphs.<name>]`.
macro_rules! limit_keys {
    ($($extra:expr),* $(,)?) => {
        &[
            $($extra,)*
            key("timeout_ms", "integer", Given::Limit(|l| millis(l.timeout.as_millis())),
                "wall-clock budget of a run, in milliseconds"),
            key("fuel", "integer", Given::Limit(|l| l.fuel.to_string()),
                "fuel budget of a run (about 2e10 per second of compute)"),
            key("memory_mb", "integer", Given::Limit(|l| mib(l.memory)),
                "memory cap per instance, in MiB"),
            key("recursion_limit", "integer", Given::Limit(|l| l.recursion_limit.to_string()),
                "superstep budget of a run"),
            key("host_memory_mb", "integer", Given::Limit(|l| mib(l.host_bytes)),
                "host bytes of a run (state, node outputs, events, checkpoint copies), in MiB"),
            key("instances", "integer", Given::Limit(|l| l.instances.to_string()),
                "instances one run may hold at once"),
        ]
    };
}

const TABLES: &[Table] = &[
    Table {
        name: "(top level)",
        about: "The tables of the file. Any other key is an error naming the file, the line and the column.",
        base: Limits::default,
        probe: "zz_probe = 1",
        keys: &[
            key(
                "limits",
                "table",
                Given::None,
                "caps for every graph: `[limits]`",
            ),
            key(
                "load",
                "table",
                Given::None,
                "the limits `describe` runs under when a graph is mounted: `[load]`",
            ),
            key(
                "graphs",
                "table",
                Given::None,
                "per-graph overrides and grants: `[graphs.<name>]`",
            ),
            key(
                "llm",
                "table",
                Given::None,
                "the model provider: `[llm]` and `[llm.models]`",
            ),
            key(
                "routing",
                "table",
                Given::None,
                "the routing agent: `[routing]`",
            ),
            key(
                "policy",
                "table",
                Given::None,
                "built-in routing hooks: `[policy]`",
            ),
            key(
                "agents",
                "table",
                Given::None,
                "routing-agent profiles of the controller: `[agents.<id>]`",
            ),
            key(
                "controller",
                "table",
                Given::None,
                "the agent-graph supervisor: `[controller]`",
            ),
            key(
                "studio",
                "table",
                Given::None,
                "who the studio serves every graph to: `[studio]`",
            ),
        ],
    },
    Table {
        name: "[limits]",
        about: "Caps for every graph. A graph's limits are the runtime defaults, replaced by each `[limits]` value that is set, then lowered by its own `[graphs.<name>]` values; `sandgraph run` and `call` take the same as flags. A discovered `sandgraph.toml` (not given with `--config`) may not raise a limit.",
        base: Limits::default,
        probe: "[limits]\nzz_probe = 1",
        keys: limit_keys!(),
    },
    Table {
        name: "[load]",
        about: "The limits `describe` (and the instantiation before it) run under when a graph is mounted: a spec is computed at once, so a graph that needs more is broken or hostile.",
        base: Limits::for_load,
        probe: "[load]\nzz_probe = 1",
        keys: limit_keys!(),
    },
    Table {
        name: "[graphs.<name>]",
        about: "Overrides for the graph `<name>`: its registration declarations, and limits that lower (never raise) the `[limits]` caps.",
        base: Limits::default,
        probe: "[graphs.g]\nzz_probe = 1",
        keys: limit_keys!(
            key(
                "as_tool",
                "boolean",
                Given::Text("the graph's declaration"),
                "list the graph as an MCP and routing tool"
            ),
            key(
                "as_graph_tool",
                "boolean",
                Given::Text("the graph's declaration"),
                "offer the graph to other graphs' `tools` calls"
            ),
            key(
                "grants",
                "table",
                Given::None,
                "its brokered capabilities: `[graphs.<name>.grants]`; none by default"
            ),
        ),
    },
    Table {
        name: "[graphs.<name>.grants]",
        about: "The brokered capabilities of the graph's runs, denied by default: an absent key grants nothing, and a capability this host does not broker is an error. Quotas count every call of one run, all its instances and sub-runs.",
        base: Limits::default,
        probe: "[graphs.g.grants]\nzz_probe = 1",
        keys: &[
            key(
                "llm",
                "inline table",
                Given::None,
                "model calls: `{ models = [...], max_calls = N, max_tokens = N }`",
            ),
            key(
                "tools",
                "inline table",
                Given::None,
                "calls of other graph tools: `{ allow = [...], max_calls = N }`",
            ),
            key(
                "http",
                "inline table",
                Given::None,
                "outgoing HTTP: `{ allow = [...], methods = [...], private = false }`",
            ),
        ],
    },
    Table {
        name: "grants.llm",
        about: "The `llm` grant of a graph.",
        base: Limits::default,
        probe: "[graphs.g.grants]\nllm = { models = [\"default\"], zz_probe = 1 }",
        keys: &[
            key(
                "models",
                "array of strings",
                Given::None,
                "model aliases the graph may name: `default` (`[llm].model`) or keys of `[llm.models]`; required, not empty",
            ),
            key(
                "max_calls",
                "integer",
                Given::Text("unlimited"),
                "chat calls per run, at least 1",
            ),
            key(
                "max_tokens",
                "integer",
                Given::Text("unlimited"),
                "prompt plus completion tokens per run, at least 1",
            ),
        ],
    },
    Table {
        name: "grants.tools",
        about: "The `tools` grant of a graph.",
        base: Limits::default,
        probe: "[graphs.g.grants]\ntools = { allow = [\"x\"], zz_probe = 1 }",
        keys: &[
            key(
                "allow",
                "array of strings",
                Given::None,
                "graph tools the graph may call; required, not empty",
            ),
            key(
                "max_calls",
                "integer",
                Given::Text("unlimited"),
                "tool calls per run, at least 1",
            ),
        ],
    },
    Table {
        name: "grants.http",
        about: "The `http` grant of a graph.",
        base: Limits::default,
        probe: "[graphs.g.grants]\nhttp = { allow = [\"https://example.com\"], zz_probe = 1 }",
        keys: &[
            key(
                "allow",
                "array of strings",
                Given::None,
                "origins: `scheme://host[:port]`, `*.domain`, IP literals; required, not empty",
            ),
            key(
                "methods",
                "array of strings",
                Given::Text("`GET`, `HEAD`"),
                "methods; `\"*\"` allows any",
            ),
            key(
                "private",
                "boolean",
                Given::Text("false"),
                "names may resolve to loopback and private ranges",
            ),
        ],
    },
    Table {
        name: "[llm]",
        about: "The model provider of brokered `llm` calls, `route`, `supervise` and `serve --controller`: any OpenAI-compatible chat-completions server. `--base-url`, `--model` and `--api-key-env` go over it. A discovered `sandgraph.toml` may not send a key to any host but the default one.",
        base: Limits::default,
        probe: "[llm]\nzz_probe = 1",
        keys: &[
            key(
                "base_url",
                "string",
                Given::Llm(|c| format!("`{}`", c.base_url)),
                "the server; one on loopback needs no key",
            ),
            key(
                "model",
                "string",
                Given::Llm(|c| format!("`{}`", c.model)),
                "the model, and the `default` alias of grants",
            ),
            key(
                "api_key_env",
                "string",
                Given::Llm(|c| format!("`{}`", c.api_key_env)),
                "the environment variable holding the API key",
            ),
            key(
                "timeout_ms",
                "integer",
                Given::Llm(|c| millis(c.timeout.as_millis())),
                "a whole request, in milliseconds",
            ),
            key(
                "connect_timeout_ms",
                "integer",
                Given::Llm(|c| millis(c.connect_timeout.as_millis())),
                "connecting, in milliseconds",
            ),
            key(
                "max_retries",
                "integer",
                Given::Llm(|c| c.max_retries.to_string()),
                "retries of 429 and 5xx answers and timeouts",
            ),
            key(
                "backoff_ms",
                "integer",
                Given::Llm(|c| millis(c.backoff.as_millis())),
                "the first retry's wait (doubling), in milliseconds",
            ),
            key(
                "max_response_bytes",
                "integer",
                Given::Llm(|c| c.max_response_bytes.to_string()),
                "the largest response body read",
            ),
            key(
                "models",
                "table",
                Given::None,
                "`[llm.models]`: model aliases graphs may be granted, alias = the provider's model name",
            ),
        ],
    },
    Table {
        name: "[routing]",
        about: "The routing agent of `sandgraph route`.",
        base: Limits::default,
        probe: "[routing]\nzz_probe = 1",
        keys: &[
            key(
                "allow",
                "array of strings",
                Given::Text("every graph tool"),
                "only these graph tools are candidates",
            ),
            key(
                "deny",
                "array of strings",
                Given::Text("none"),
                "these graph tools are not candidates",
            ),
            key(
                "max_retries",
                "integer",
                Given::Text("3"),
                "re-asks after a rejected choice",
            ),
            key(
                "fallback",
                "string",
                Given::Text("the built-in no-op"),
                "a graph tool run with `{}` when the model answers in plain text",
            ),
            key(
                "fallback_reply",
                "string",
                Given::None,
                "a reply returned as `{\"reply\": ...}` instead; not with `fallback`",
            ),
            key(
                "model",
                "string",
                Given::Text("`[llm].model`"),
                "the router's model",
            ),
            key(
                "system_prompt",
                "string",
                Given::Text("the built-in prompt"),
                "the router's system prompt",
            ),
        ],
    },
    Table {
        name: "[policy]",
        about: "Built-in `pre-execute` hooks of the routing agent: a violation denies the attempt, and the model hears the reason.",
        base: Limits::default,
        probe: "[policy]\nzz_probe = 1",
        keys: &[
            key(
                "deny_tools",
                "array of strings",
                Given::Text("none"),
                "graph tools the model may never run",
            ),
            key(
                "limit",
                "array of tables",
                Given::Text("none"),
                "`[[policy.limit]]`: limits on argument values",
            ),
        ],
    },
    Table {
        name: "[[policy.limit]]",
        about: "A limit on one argument: an absent argument passes, one of the wrong type for the limit fails it. Each sets at least one of `max_length`, `min`, `max`, `allow`, `deny`.",
        base: Limits::default,
        probe: "[[policy.limit]]\npath = \"/a\"\nzz_probe = 1",
        keys: &[
            key(
                "tool",
                "string",
                Given::Text("every tool"),
                "the tool it applies to",
            ),
            key(
                "path",
                "string",
                Given::None,
                "a JSON pointer into the arguments, e.g. `/topic`",
            ),
            key(
                "max_length",
                "integer",
                Given::None,
                "at most this many characters (strings)",
            ),
            key("min", "number", Given::None, "at least this (numbers)"),
            key("max", "number", Given::None, "at most this (numbers)"),
            key(
                "allow",
                "array",
                Given::None,
                "the value must be one of these",
            ),
            key(
                "deny",
                "array",
                Given::None,
                "the value must not be one of these",
            ),
        ],
    },
    Table {
        name: "[agents.<id>]",
        about: "A routing agent the agent-graph controller runs for work naming `agentId`.",
        base: Limits::default,
        probe: "[agents.a]\nzz_probe = 1",
        keys: &[
            key(
                "description",
                "string",
                Given::None,
                "shown to the supervisor",
            ),
            key("model", "string", Given::Text("`[llm].model`"), "its model"),
            key(
                "allow",
                "array of strings",
                Given::Text("every graph tool"),
                "the graph tools it may choose from",
            ),
            key(
                "deny",
                "array of strings",
                Given::Text("none"),
                "graph tools it may not choose",
            ),
            key(
                "max_retries",
                "integer",
                Given::Text("`[routing].max_retries`"),
                "re-asks after a rejected choice",
            ),
            key(
                "system_prompt",
                "string",
                Given::Text("the built-in prompt"),
                "its system prompt",
            ),
        ],
    },
    Table {
        name: "[controller]",
        about: "The agent-graph supervisor of `sandgraph supervise` and `serve --controller`; `--max-new-activations` and `--max-turns` go over it.",
        base: Limits::default,
        probe: "[controller]\nzz_probe = 1",
        keys: &[
            key(
                "max_new_activations",
                "integer",
                Given::Text("4"),
                "work items run at once",
            ),
            key(
                "max_turns",
                "integer",
                Given::Text("32"),
                "supervisor turns before giving up",
            ),
            key(
                "model",
                "string",
                Given::Text("`[llm].model`"),
                "the model of the supervisor and of preset work",
            ),
            key(
                "wake_backoff_ms",
                "integer",
                Given::Text("30000"),
                "the wait before the first retry of a wake's delivery (the n-th waits n times as long)",
            ),
            key(
                "context_budget_tokens",
                "integer",
                Given::Text("24000"),
                "the most estimated tokens of a supervisor request before its turn is compacted, at least 1",
            ),
        ],
    },
    Table {
        name: "[studio]",
        about: "Who the studio of `serve --http` serves every mounted graph to, hidden ones (`as_tool = false`) included. Only a file given with `--config` may list operators.",
        base: Limits::default,
        probe: "[studio]\nzz_probe = 1",
        keys: &[key(
            "operators",
            "array of strings",
            Given::Text("none"),
            "principals as `/api/session` names them: `principal:<name>` or `peer:<peer>`",
        )],
    },
];

/// The default column of `key` in `table`.
fn default(table: &Table, key: &Key) -> String {
    match &key.default {
        Given::None => "–".to_owned(),
        Given::Text(t) => md(t),
        Given::Limit(f) => f(&(table.base)()),
        Given::Llm(f) => f(&ClientConfig::default()),
    }
}

/// The page.
pub(super) fn page() -> String {
    let mut out = String::from(
        "# sandgraph.toml\n\nThe operator's configuration: `--config FILE`, else the first \
         `sandgraph.toml` in the working folder or a folder above it, up to the home folder. A \
         discovered file is read only when it is the user's own and not writable by others, \
         and it can neither grant a capability nor raise a limit; a file given with `--config` \
         is trusted as given. Unknown keys and wrong types are errors naming the file and the \
         table. Guides: [Hosting and security](../hosting.md), \
         [Capabilities and grants](../capabilities.md), [Routing agent](../routing.md).\n",
    );
    for table in TABLES {
        let _ = writeln!(out, "\n## {}\n\n{}\n", md(table.name), md(table.about));
        out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
        for key in table.keys {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                code(key.name),
                key.ty,
                default(table, key),
                md(key.meaning)
            );
        }
    }
    out
}

/// The error of reading `text` as the operator's config, through every
/// reader of its tables.
fn read_error(text: &str) -> String {
    let operator = match OperatorConfig::parse(text, Path::new("probe.toml")) {
        Ok(config) => config,
        Err(e) => return e.to_string(),
    };
    if let Err(e) = sandgraph_router::AgentConfig::from_operator(&operator) {
        return e.to_string();
    }
    let loaded = crate::config::LoadedConfig {
        config: operator,
        origin: crate::config::ConfigOrigin::Flag,
    };
    if let Err(e) =
        crate::config::controller::resolve(&loaded, &crate::config::ControllerArgs::default())
    {
        return format!("{e:?}");
    }
    if let Err(e) = crate::config::studio::operators(&loaded) {
        return format!("{e:?}");
    }
    String::new()
}

/// The fields serde's unknown-field error lists after "expected".
fn expected_fields(error: &str) -> BTreeSet<String> {
    let after = error
        .split_once(&format!("unknown field `{PROBE}`"))
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("the probe was not refused as an unknown field: {error}"));
    if after.contains("there are no fields") {
        return BTreeSet::new();
    }
    after
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_table_lists_exactly_the_keys_its_reader_accepts() {
    for table in TABLES {
        let error = read_error(table.probe);
        let accepted = expected_fields(&error);
        let documented: BTreeSet<String> = table.keys.iter().map(|k| k.name.to_owned()).collect();
        // `[llm.models]` is taken out of `[llm]` before the client reads it.
        let accepted: BTreeSet<String> = if table.name == "[llm]" {
            accepted.into_iter().chain(["models".to_owned()]).collect()
        } else {
            accepted
        };
        assert_eq!(
            documented, accepted,
            "the keys of {} in reference/config.rs differ from what its reader accepts",
            table.name
        );
    }
}

#[test]
fn the_documented_keys_are_read() {
    // One file setting a key of every table parses.
    let text = "[limits]\ntimeout_ms = 1000\n[load]\nfuel = 1000000\n\
                [graphs.g]\nas_tool = true\n[graphs.g.grants]\n\
                llm = { models = [\"fast\"], max_calls = 1 }\n\
                tools = { allow = [\"x\"] }\nhttp = { allow = [\"https://example.com\"] }\n\
                [llm]\nbase_url = \"http://127.0.0.1:11434/v1\"\n[llm.models]\nfast = \"m\"\n\
                [routing]\nmax_retries = 1\n[policy]\ndeny_tools = [\"x\"]\n\
                [[policy.limit]]\npath = \"/a\"\nmax_length = 3\n[agents.a]\nmodel = \"m\"\n\
                [controller]\nmax_turns = 3\n[studio]\noperators = [\"principal:alice\"]\n";
    assert_eq!(read_error(text), "");
}
