//! The model a command talks to: `--base-url`, `--model` and
//! `--api-key-env` over `[llm]` over the defaults, and the rule that a
//! discovered config may not send the API key elsewhere.

use std::sync::Arc;

use sandgraph_llm::{ClientConfig, OpenAiClient, Provider};
use sandgraph_registry::{DEFAULT_CONFIG_FILE, OperatorConfig};
use sandgraph_router::AgentConfig;
use sandgraph_runtime::{ErrorCode, RunError};

use super::{ConfigOrigin, LoadedConfig};
use crate::exit::{self, Failure};
use crate::show;

/// Which model, and where.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct ModelArgs {
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
    pub(crate) fn model_flag(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The client config: flags over `[llm]` over the defaults.
    pub(crate) fn client_config(&self, base: &ClientConfig) -> ClientConfig {
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

fn invalid(message: String) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

/// `[llm]`, `[routing]`, `[policy]` and `[agents]` of `operator`, and the
/// client config with `flags` over `[llm]` (`None`: a command without
/// model flags). With `verbose`, says on stderr which config file and base
/// URL are used (before any refusal). A discovered config may not send the
/// API key to another host (see [`check_key_destination`]).
pub(crate) fn resolve(
    operator: &LoadedConfig,
    flags: Option<&ModelArgs>,
    verbose: bool,
) -> Result<(AgentConfig, ClientConfig), Failure> {
    let config = AgentConfig::from_operator(operator).map_err(|e| invalid(e.to_string()))?;
    let client = flags.map_or_else(|| config.llm.clone(), |f| f.client_config(&config.llm));
    if let (true, Some(flags)) = (verbose, flags) {
        for line in describe(operator, flags, &client) {
            eprintln!("{}", show::line(&line, show::MAX_LINE_BYTES));
        }
    }
    check_key_destination(operator, flags, &client).map_err(invalid)?;
    Ok((config, client))
}

/// The model config of the graphs granted `llm`: `[llm]` of `operator`,
/// without flags; `Err` says why it cannot be used (as [`resolve`]'s
/// errors, unwrapped).
pub(crate) fn for_graphs(operator: &LoadedConfig) -> Result<ClientConfig, String> {
    let config = AgentConfig::from_operator(operator).map_err(|e| e.to_string())?;
    check_key_destination(operator, None, &config.llm)?;
    Ok(config.llm)
}

/// The model graphs call by default when their calls are answered from a
/// cassette: `[llm].model`, else none (a `[llm]` that does not parse
/// names none either; offline, no key is read).
pub(crate) fn default_model(operator: &OperatorConfig) -> String {
    AgentConfig::from_operator(operator)
        .map(|c| c.llm.model)
        .unwrap_or_default()
}

/// The model client of `client`.
pub(crate) fn provider(client: &ClientConfig) -> Result<Arc<dyn Provider>, Failure> {
    let client = OpenAiClient::new(client.clone())
        .map_err(|e| Failure::new(e.code(), exit::MODEL, e.to_string()))?;
    Ok(Arc::new(client))
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let config = AgentConfig::from_operator(&operator).unwrap();
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
        let client = flags.client_config(&AgentConfig::from_operator(&operator).unwrap().llm);
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
        let client = flags.client_config(&AgentConfig::from_operator(&operator).unwrap().llm);
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
        let client = flags.client_config(&AgentConfig::from_operator(&operator).unwrap().llm);
        assert_eq!(
            describe(&operator, &flags, &client)[..2],
            [
                "config: none (the built-in defaults)",
                "base url: https://api.deepseek.com (the default)",
            ]
        );
    }
}
