//! `[controller]` of `sandgraph.toml` (`supervise`, `serve --controller`),
//! with `supervise`'s flags over it.

use std::num::NonZeroU64;
use std::time::Duration;

use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_supervisor::SupervisorOptions;

use crate::exit::Failure;

/// The flags of `supervise` that go over `[controller]`.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct ControllerArgs {
    /// Work items run at once [default: [controller].max_new_activations, else 4]
    #[arg(long, value_name = "N")]
    max_new_activations: Option<usize>,
    /// Supervisor turns before giving up [default: 32]
    #[arg(long, value_name = "N")]
    max_turns: Option<u64>,
}

/// `[controller]` as written: unknown keys and wrong types are refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ControllerTable {
    max_new_activations: Option<usize>,
    max_turns: Option<u64>,
    model: Option<String>,
    wake_backoff_ms: Option<u64>,
    context_budget_tokens: Option<NonZeroU64>,
}

/// `[controller]` with the flags over it, over the defaults.
#[derive(Debug, Default)]
pub(crate) struct Controller {
    /// Work items run at once: the flag, else the file, else
    /// [`sandgraph_supervisor::DEFAULT_MAX_NEW_ACTIVATIONS`].
    pub(crate) max_new_activations: usize,
    /// Supervisor turns before giving up: the flag, else the file; `None`
    /// keeps the supervisor's default.
    pub(crate) max_turns: Option<u64>,
    /// The model of the supervisor and of preset work, over `[llm].model`.
    pub(crate) model: Option<String>,
    /// The wait before the first retry of a wake's delivery (the n-th
    /// waits n times as long): `wake_backoff_ms` of the file; `None` keeps
    /// the supervisor's default (30 s).
    pub(crate) wake_backoff: Option<Duration>,
    /// The most estimated tokens (JSON bytes / 4) of a supervisor request
    /// before its turn is compacted: `context_budget_tokens` of the file, at
    /// least 1; `None` keeps the supervisor's default
    /// ([`sandgraph_supervisor::DEFAULT_CONTEXT_BUDGET_TOKENS`]).
    pub(crate) context_budget_tokens: Option<u64>,
}

impl Controller {
    /// The supervisor's options for `model` with these settings over the
    /// supervisor's defaults.
    pub(crate) fn supervisor_options(&self, model: String) -> SupervisorOptions {
        let mut options = SupervisorOptions::new(model);
        options.max_new_activations = self.max_new_activations;
        if let Some(turns) = self.max_turns {
            options.max_turns = turns;
        }
        if let Some(backoff) = self.wake_backoff {
            options.wake_backoff = backoff;
        }
        if let Some(budget) = self.context_budget_tokens {
            options.context_budget_tokens = budget;
        }
        options
    }
}

/// `[controller]` of `operator` with `flags` over it: unknown keys and
/// wrong types are `invalid_input` naming the file and the table.
pub(crate) fn resolve(
    operator: &sandgraph_registry::OperatorConfig,
    flags: &ControllerArgs,
) -> Result<Controller, Failure> {
    let file = table(operator)?;
    Ok(Controller {
        max_new_activations: flags
            .max_new_activations
            .or(file.max_new_activations)
            .unwrap_or(sandgraph_supervisor::DEFAULT_MAX_NEW_ACTIVATIONS),
        max_turns: flags.max_turns.or(file.max_turns),
        model: file.model,
        wake_backoff: file.wake_backoff_ms.map(Duration::from_millis),
        context_budget_tokens: file.context_budget_tokens.map(NonZeroU64::get),
    })
}

fn table(operator: &sandgraph_registry::OperatorConfig) -> Result<ControllerTable, Failure> {
    if operator.controller.is_empty() {
        return Ok(ControllerTable::default());
    }
    toml::Value::Table(operator.controller.clone())
        .try_into()
        .map_err(|e: toml::de::Error| {
            let path = operator.source.as_ref().map_or_else(
                || "<operator config>".to_owned(),
                |p| p.display().to_string(),
            );
            RunError::new(
                ErrorCode::InvalidInput,
                format!(
                    "{path}: [controller]: {}",
                    e.message().trim_end_matches('.')
                ),
            )
            .into()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(text: &str) -> Result<Controller, Failure> {
        let operator =
            sandgraph_registry::OperatorConfig::parse(text, std::path::Path::new("sandgraph.toml"))
                .unwrap();
        resolve(&operator, &ControllerArgs::default())
    }

    #[test]
    fn wake_backoff_ms_is_the_supervisors_wake_backoff() {
        let controller = resolved("[controller]\nwake_backoff_ms = 250\n").unwrap();
        let options = controller.supervisor_options("m".to_owned());
        assert_eq!(options.wake_backoff, Duration::from_millis(250));
        assert_eq!(options.wake_retry_delay(3), Duration::from_millis(750));
        // Unset: the supervisor's default, 30 s.
        let options = resolved("").unwrap().supervisor_options("m".to_owned());
        assert_eq!(options.wake_backoff, Duration::from_secs(30));
        // Not a count of milliseconds: refused, naming the table.
        let refused = resolved("[controller]\nwake_backoff_ms = -1\n").unwrap_err();
        assert!(
            format!("{refused:?}").contains("[controller]"),
            "{refused:?}"
        );
    }

    #[test]
    fn context_budget_tokens_is_the_supervisors_context_budget() {
        let controller = resolved("[controller]\ncontext_budget_tokens = 6000\n").unwrap();
        let options = controller.supervisor_options("m".to_owned());
        assert_eq!(options.context_budget_tokens, 6_000);
        // Unset: the supervisor's default.
        let options = resolved("").unwrap().supervisor_options("m".to_owned());
        assert_eq!(
            options.context_budget_tokens,
            sandgraph_supervisor::DEFAULT_CONTEXT_BUDGET_TOKENS
        );
        // No budget at all: refused, naming the table and the key.
        for bad in ["0", "-1", "\"big\""] {
            let refused =
                resolved(&format!("[controller]\ncontext_budget_tokens = {bad}\n")).unwrap_err();
            let refused = format!("{refused:?}");
            assert!(refused.contains("[controller]"), "{refused}");
        }
    }
}
