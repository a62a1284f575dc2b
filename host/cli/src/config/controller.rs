//! `[controller]` of `sandgraph.toml` (`supervise`, `serve --controller`),
//! with `supervise`'s flags over it.

use sandgraph_runtime::{ErrorCode, RunError};

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
