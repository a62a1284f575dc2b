//! `[studio]` of `sandgraph.toml` (`serve --http`): the studio operators,
//! the principals the studio serves every mounted graph to, those MCP
//! hides (`as_tool = false`) included.
//!
//! ```toml
//! [studio]
//! operators = ["principal:alice"]   # as /api/session names the caller
//! ```
//!
//! Only a config the operator named with `--config` may list operators: a
//! discovered `sandgraph.toml` (anyone's, in a folder above the working
//! directory) cannot widen who sees hidden graphs.

use sandgraph_registry::OperatorConfig;
use sandgraph_runtime::{ErrorCode, RunError};

use crate::config::{ConfigOrigin, LoadedConfig};
use crate::exit::Failure;

/// Longest principal name or peer in an `operators` entry: principal
/// names are at most 64 bytes (mcp's tokens file rule), and a peer is an
/// IP address or `uid <n>`.
const MAX_OPERATOR_NAME_BYTES: usize = 64;

/// `[studio]` as written: unknown keys and wrong types are refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct StudioTable {
    operators: Vec<String>,
}

/// The studio operators of `operator`'s `[studio]`, as principal keys
/// (`principal:<name>` or `peer:<peer>`): `invalid_input` naming the file
/// and the table for unknown keys, wrong types, an entry that names no
/// principal, or operators in a config that was discovered rather than
/// given with `--config`.
pub(crate) fn operators(operator: &LoadedConfig) -> Result<Vec<String>, Failure> {
    let file = table(operator)?;
    if !file.operators.is_empty() && operator.origin == ConfigOrigin::Discovered {
        return Err(refused(
            operator,
            "operators: only read from a config given with --config (a discovered \
             sandgraph.toml may not widen who sees hidden graphs)",
        ));
    }
    for entry in &file.operators {
        if !is_principal_key(entry) {
            let shown: String = entry.chars().take(2 * MAX_OPERATOR_NAME_BYTES).collect();
            return Err(refused(
                operator,
                &format!(
                    "operators: {shown:?} names no principal: write \"principal:<name>\" (a name \
                     of the tokens file, or \"token\" for --token-env) or \"peer:<peer>\", as \
                     /api/session names the caller"
                ),
            ));
        }
    }
    Ok(file.operators)
}

/// Whether `entry` is a principal key as mcp writes them.
fn is_principal_key(entry: &str) -> bool {
    let fits = |s: &str| !s.is_empty() && s.len() <= MAX_OPERATOR_NAME_BYTES;
    if let Some(name) = entry.strip_prefix("principal:") {
        return fits(name)
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
    }
    entry
        .strip_prefix("peer:")
        .is_some_and(|peer| fits(peer) && !peer.chars().any(char::is_control))
}

fn table(operator: &OperatorConfig) -> Result<StudioTable, Failure> {
    if operator.studio.is_empty() {
        return Ok(StudioTable::default());
    }
    toml::Value::Table(operator.studio.clone())
        .try_into()
        .map_err(|e: toml::de::Error| refused(operator, e.message().trim_end_matches('.')))
}

/// `invalid_input`: `<file>: [studio]: <message>`.
fn refused(operator: &OperatorConfig, message: &str) -> Failure {
    let path = operator.source.as_ref().map_or_else(
        || "<operator config>".to_owned(),
        |p| p.display().to_string(),
    );
    RunError::new(
        ErrorCode::InvalidInput,
        format!("{path}: [studio]: {message}"),
    )
    .into()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn loaded(text: &str, origin: ConfigOrigin) -> LoadedConfig {
        LoadedConfig {
            config: OperatorConfig::parse(text, Path::new("sandgraph.toml")).unwrap(),
            origin,
        }
    }

    #[test]
    fn operators_are_principal_keys_from_a_named_config() {
        let text = "[studio]\noperators = [\"principal:alice\", \"peer:uid 1000\"]\n";
        let ops = operators(&loaded(text, ConfigOrigin::Flag)).unwrap();
        assert_eq!(ops, ["principal:alice", "peer:uid 1000"]);
        assert!(
            operators(&loaded("", ConfigOrigin::None))
                .unwrap()
                .is_empty()
        );
        // An empty list is no widening, wherever it was found.
        let empty = "[studio]\noperators = []\n";
        assert!(
            operators(&loaded(empty, ConfigOrigin::Discovered))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_discovered_config_names_no_operators() {
        let text = "[studio]\noperators = [\"principal:alice\"]\n";
        let refused = operators(&loaded(text, ConfigOrigin::Discovered)).unwrap_err();
        let refused = format!("{refused:?}");
        assert!(refused.contains("sandgraph.toml: [studio]"), "{refused}");
        assert!(refused.contains("--config"), "{refused}");
    }

    #[test]
    fn bad_entries_and_keys_are_refused_naming_the_table() {
        for bad in [
            "operators = [\"alice\"]",
            "operators = [\"principal:\"]",
            "operators = [\"principal:a b\"]",
            "operators = [\"peer:\"]",
            "operators = \"principal:alice\"",
            "admins = [\"principal:alice\"]",
        ] {
            let text = format!("[studio]\n{bad}\n");
            let refused = operators(&loaded(&text, ConfigOrigin::Flag)).unwrap_err();
            let refused = format!("{refused:?}");
            assert!(refused.contains("[studio]"), "{bad}: {refused}");
        }
    }
}
