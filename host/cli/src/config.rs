//! Configuration of every command, resolved in one place: flags over the
//! operator config (`sandgraph.toml`) over the built-in defaults.
//!
//! The operator config is `--config FILE` (trusted as given), else the
//! first `sandgraph.toml` in the working directory or a folder above it up
//! to the user's home ([`discovered`]: read only when it is the user's own,
//! and it may not grant capabilities, raise limits, or decide where the API
//! key goes, see [`model::check_key_destination`]), else the defaults; it
//! is read once per command ([`LoadedConfig::load`]). On it:
//!
//! - [`limits`]: `--timeout-ms`, `--fuel`, ... over `[limits]` (`call`), or
//!   over the runtime's defaults (`run`, which reads no config);
//! - [`model`]: `--base-url`, `--model`, `--api-key-env` over `[llm]`; the
//!   model of the router or supervisor is `--model`, else
//!   `[routing].model` or `[controller].model`, else `[llm].model`;
//! - [`controller`]: `--max-new-activations`, `--max-turns` over
//!   `[controller]`;
//! - [`studio`]: `[studio]`, the studio operators of `serve --http`;
//! - [`store`]: the data database, `--db`/`--store` over `$SANDGRAPH_STORE`
//!   over `$SANDGRAPH_DB` over the user's data folder, and
//!   `$SANDGRAPH_LEASE_MS`.
//!
//! A command that talks to a model (`route`, `supervise`,
//! `serve --controller`) gets it all as one [`Resolved`].

pub(crate) mod controller;
pub(crate) mod discovered;
pub(crate) mod limits;
pub(crate) mod model;
pub(crate) mod routing;
pub(crate) mod store;
pub(crate) mod studio;

use std::path::Path;

use sandgraph_llm::ClientConfig;
use sandgraph_registry::{LimitOverrides, OperatorConfig};
use sandgraph_router::AgentConfig;

use crate::exit::Failure;

pub(crate) use controller::{Controller, ControllerArgs};
pub(crate) use limits::LimitArgs;
pub(crate) use model::ModelArgs;

/// How the operator config was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConfigOrigin {
    /// Named with `--config`: the operator chose it, so it is trusted.
    Flag,
    /// The first `sandgraph.toml` walking up from the working directory:
    /// it may be anyone's (a cloned repository's), so it may not widen a
    /// sandbox ([`discovered`]) nor decide where secrets go (see
    /// [`model::check_key_destination`]).
    Discovered,
    /// No file: the built-in defaults.
    None,
}

/// The operator config and how it was found; it derefs to the config.
#[derive(Debug)]
pub(crate) struct LoadedConfig {
    pub(crate) config: OperatorConfig,
    pub(crate) origin: ConfigOrigin,
}

impl std::ops::Deref for LoadedConfig {
    type Target = OperatorConfig;

    fn deref(&self) -> &OperatorConfig {
        &self.config
    }
}

impl LoadedConfig {
    /// The config file: `--config` (`flag`), else the first
    /// `sandgraph.toml` walking up from the working directory (none when
    /// the working directory is gone), refused when it is not the user's
    /// own or would widen a sandbox ([`discovered`]), else the defaults.
    pub(crate) fn load(flag: Option<&Path>) -> Result<LoadedConfig, Failure> {
        if let Some(path) = flag {
            let config = OperatorConfig::load(path).map_err(crate::mount::registry_failure)?;
            return Ok(LoadedConfig {
                config,
                origin: ConfigOrigin::Flag,
            });
        }
        let found = std::env::current_dir()
            .ok()
            .and_then(|d| discovered::find(&d));
        Ok(match found {
            Some(path) => LoadedConfig {
                config: discovered::load(&path)?,
                origin: ConfigOrigin::Discovered,
            },
            None => LoadedConfig {
                config: OperatorConfig::default(),
                origin: ConfigOrigin::None,
            },
        })
    }

    /// The config with the command's limit flags over its `[limits]`.
    pub(crate) fn with_limits(mut self, flags: &LimitOverrides) -> LoadedConfig {
        self.config.limits = self.config.limits.merged_with(flags);
        self
    }
}

/// Which agent a command runs, and so which table names its model and
/// which flags go over `[controller]`.
pub(crate) enum Role<'a> {
    /// `route`: the model is `[routing].model`; `[controller]` is not read.
    Router,
    /// `supervise`: the model is `[controller].model`, and `flags` go over
    /// `[controller]`.
    Supervisor(&'a ControllerArgs),
    /// `serve --controller`: as the supervisor, without flags.
    Coordinator,
}

/// The configuration of a command that talks to a model, resolved once.
pub(crate) struct Resolved {
    /// The operator config and how it was found.
    pub(crate) operator: LoadedConfig,
    /// `[llm]`, `[routing]`, `[policy]` and `[agents]` of the file, as
    /// written (the model flags are in [`Resolved::client`]).
    pub(crate) agents: AgentConfig,
    /// The model client's config: the model flags over `[llm]` over the
    /// defaults.
    pub(crate) client: ClientConfig,
    /// The model the router or supervisor asks: `--model`, else
    /// `[routing].model` (router) or `[controller].model` (supervisor),
    /// else the client's.
    pub(crate) model: String,
    /// `[controller]` with the flags over it; all unset for the router.
    pub(crate) controller: Controller,
}

impl Resolved {
    /// Resolves the model and controller settings of `role` over
    /// `operator`, in this order (the first failure is the error):
    /// `[llm]`, `[routing]`, `[policy]`, `[agents]` (with `verbose`, the
    /// lines saying which config file and base URL are used go to stderr
    /// here), where the API key goes, then `[controller]`. `flags` are the
    /// model flags of a command that has them (`None`: `serve`).
    pub(crate) fn resolve(
        operator: LoadedConfig,
        flags: Option<&ModelArgs>,
        verbose: bool,
        role: Role<'_>,
    ) -> Result<Resolved, Failure> {
        let (agents, client) = model::resolve(&operator, flags, verbose)?;
        let controller = match role {
            Role::Router => Controller::default(),
            Role::Supervisor(args) => controller::resolve(&operator, args)?,
            Role::Coordinator => controller::resolve(&operator, &ControllerArgs::default())?,
        };
        let named = match role {
            Role::Router => agents.routing.model.as_ref(),
            Role::Supervisor(_) | Role::Coordinator => controller.model.as_ref(),
        };
        let model = match flags.and_then(ModelArgs::model_flag) {
            Some(m) => m.to_owned(),
            None => named.unwrap_or(&client.model).clone(),
        };
        Ok(Resolved {
            operator,
            agents,
            client,
            model,
            controller,
        })
    }
}
