//! The agent sections of `sandgraph.toml`: `[llm]`, `[routing]`, `[policy]`
//! and `[agents.<id>]`.
//!
//! ```toml
//! [llm]
//! base_url = "https://api.deepseek.com"   # OpenAI, Ollama, vLLM, llama.cpp too
//! model = "deepseek-chat"
//! api_key_env = "DEEPSEEK_API_KEY"        # the variable holding the key
//!
//! [routing]
//! allow = ["echo_graph", "greet_graph"]   # optional; intersected with deny
//! deny = ["fanout_graph"]
//! max_retries = 3
//! fallback = "help_graph"                 # a graph accepting {}; default: the built-in no-op
//! # fallback_reply = "I can only route."  # or a host reply {"reply": ...}, not with fallback
//!
//! [policy]
//! deny_tools = ["map_reduce_graph"]
//! [[policy.limit]]
//! tool = "echo_graph"                     # optional: every tool when absent
//! path = "/input/topic"                   # JSON pointer into the arguments
//! max_length = 200
//!
//! [agents.writer]                         # a routing-agent profile (controller)
//! model = "deepseek-chat"
//! allow = ["greet_graph"]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use sandgraph_llm::ClientConfig;
use sandgraph_registry::OperatorConfig;
use serde::Deserialize;

use crate::policy::PolicyConfig;

/// `[routing]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RoutingConfig {
    /// Only these graph tools are candidates.
    pub allow: Option<Vec<String>>,
    /// These graph tools are not candidates.
    pub deny: Vec<String>,
    /// Re-asks after a rejected choice.
    pub max_retries: u32,
    /// A graph tool run with `{}` when the model answers in plain text;
    /// the built-in no-op `graph_routing_fallback` when absent.
    pub fallback: Option<String>,
    /// A reply the host returns as `{"reply": <text>}` when the model
    /// answers in plain text, instead of running a graph; not with
    /// `fallback`.
    pub fallback_reply: Option<String>,
    /// The model, over `[llm].model`.
    pub model: Option<String>,
    /// The system prompt, over the built-in one.
    pub system_prompt: Option<String>,
}

impl Default for RoutingConfig {
    fn default() -> Self {
        RoutingConfig {
            allow: None,
            deny: Vec::new(),
            max_retries: crate::DEFAULT_MAX_RETRIES,
            fallback: None,
            fallback_reply: None,
            model: None,
            system_prompt: None,
        }
    }
}

/// `[agents.<id>]`: a routing agent the controller runs for `agentId`
/// work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentProfile {
    /// Shown to the supervisor.
    pub description: Option<String>,
    /// The model, over `[llm].model`.
    pub model: Option<String>,
    /// The graph tools the agent may choose from.
    pub allow: Option<Vec<String>>,
    /// Graph tools it may not choose.
    pub deny: Vec<String>,
    /// Re-asks after a rejected choice, over `[routing].max_retries`.
    pub max_retries: Option<u32>,
    /// The system prompt, over the built-in one.
    pub system_prompt: Option<String>,
}

/// Everything `sandgraph-router` reads from `sandgraph.toml`.
#[derive(Debug, Clone, Default)]
pub struct AgentConfig {
    /// `[llm]`.
    pub llm: ClientConfig,
    /// `[routing]`.
    pub routing: RoutingConfig,
    /// `[policy]`.
    pub policy: PolicyConfig,
    /// `[agents.<id>]`, by id.
    pub agents: BTreeMap<String, AgentProfile>,
}

/// A section of `sandgraph.toml` that does not parse.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: [{table}]: {message}")]
pub struct ConfigError {
    /// The config file, or `<operator config>`.
    pub path: String,
    /// The table at fault, e.g. `llm` or `agents.writer`.
    pub table: String,
    /// What is wrong.
    pub message: String,
}

fn section<T: serde::de::DeserializeOwned + Default>(
    table: &toml::Table,
    name: &str,
    path: &str,
) -> Result<T, ConfigError> {
    if table.is_empty() {
        return Ok(T::default());
    }
    toml::Value::Table(table.clone())
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError {
            path: path.to_owned(),
            table: name.to_owned(),
            message: e.message().trim_end_matches('.').to_owned(),
        })
}

impl AgentConfig {
    /// Reads the agent sections of an operator config.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and table: unknown keys, wrong types,
    /// and policy limits that cannot work.
    pub fn from_operator(config: &OperatorConfig) -> Result<Self, ConfigError> {
        let path = config
            .source
            .clone()
            .unwrap_or_else(|| PathBuf::from("<operator config>"))
            .display()
            .to_string();
        let llm: ClientConfig = section(&config.llm, "llm", &path)?;
        let routing: RoutingConfig = section(&config.routing, "routing", &path)?;
        if routing.fallback.is_some() && routing.fallback_reply.is_some() {
            return Err(ConfigError {
                path,
                table: "routing".to_owned(),
                message: "set fallback (a graph) or fallback_reply (a host reply), not both"
                    .to_owned(),
            });
        }
        let policy: PolicyConfig = section(&config.policy, "policy", &path)?;
        policy.check().map_err(|message| ConfigError {
            path: path.clone(),
            table: "policy".to_owned(),
            message,
        })?;
        let mut agents = BTreeMap::new();
        for (id, value) in &config.agents {
            let table = format!("agents.{id}");
            let toml::Value::Table(t) = value else {
                return Err(ConfigError {
                    path,
                    table,
                    message: "must be a table".to_owned(),
                });
            };
            agents.insert(id.clone(), section::<AgentProfile>(t, &table, &path)?);
        }
        Ok(AgentConfig {
            llm,
            routing,
            policy,
            agents,
        })
    }
}
