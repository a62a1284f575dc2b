//! The `llm` grant as `sandgraph.toml` writes it:
//! `[graphs.<name>.grants] llm = { models = [...], max_calls = N,
//! max_tokens = N }`.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{DEFAULT_ALIAS, LlmGrant};

/// The `llm` grant of a graph in the operator's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmGrantConfig {
    /// Model aliases the graph may name: `default` or `[llm.models]` keys.
    pub models: Vec<String>,
    /// Chat calls per run.
    pub max_calls: Option<u32>,
    /// Prompt plus completion tokens per run.
    pub max_tokens: Option<u64>,
}

/// Why an `llm` grant in the configuration cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidLlmGrant {
    /// `models` is empty: the grant would allow nothing.
    #[error("llm.models must name at least one model alias")]
    NoModels,
    /// `models` names an alias the operator's `[llm.models]` does not
    /// define.
    #[error(
        "llm.models names \"{0}\", which [llm.models] does not define \
         (define it there, or grant \"{DEFAULT_ALIAS}\" for [llm].model)"
    )]
    UnknownAlias(String),
    /// A quota of zero: every call would be refused.
    #[error("llm.{0} must be at least 1")]
    ZeroQuota(&'static str),
}

impl LlmGrantConfig {
    /// The runtime's grant.
    pub fn grant(&self) -> LlmGrant {
        LlmGrant {
            models: self.models.clone(),
            max_calls: self.max_calls,
            max_tokens: self.max_tokens,
        }
    }

    /// Checks that the grant can work with the operator's model aliases
    /// (`[llm.models]`, alias to model).
    ///
    /// # Errors
    ///
    /// An empty list, an alias `aliases` does not define, a zero quota.
    pub fn check(&self, aliases: &BTreeMap<String, String>) -> Result<(), InvalidLlmGrant> {
        if self.models.is_empty() {
            return Err(InvalidLlmGrant::NoModels);
        }
        if let Some(alias) = self
            .models
            .iter()
            .find(|alias| *alias != DEFAULT_ALIAS && !aliases.contains_key(*alias))
        {
            return Err(InvalidLlmGrant::UnknownAlias(alias.clone()));
        }
        if self.max_calls == Some(0) {
            return Err(InvalidLlmGrant::ZeroQuota("max_calls"));
        }
        if self.max_tokens == Some(0) {
            return Err(InvalidLlmGrant::ZeroQuota("max_tokens"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(models: &[&str]) -> LlmGrantConfig {
        LlmGrantConfig {
            models: models.iter().map(|m| (*m).to_owned()).collect(),
            ..LlmGrantConfig::default()
        }
    }

    #[test]
    fn a_grant_names_defined_aliases_and_nonzero_quotas() {
        let aliases = BTreeMap::from([("fast".to_owned(), "gpt-x".to_owned())]);
        assert_eq!(grant(&["default", "fast"]).check(&aliases), Ok(()));
        assert_eq!(grant(&[]).check(&aliases), Err(InvalidLlmGrant::NoModels));
        let err = grant(&["slow"]).check(&aliases).unwrap_err();
        assert_eq!(err, InvalidLlmGrant::UnknownAlias("slow".into()));
        assert!(
            err.to_string().contains("[llm.models] does not define"),
            "{err}"
        );
        let zero = LlmGrantConfig {
            max_tokens: Some(0),
            ..grant(&["default"])
        };
        assert_eq!(
            zero.check(&aliases).unwrap_err().to_string(),
            "llm.max_tokens must be at least 1"
        );
        assert_eq!(grant(&["fast"]).grant().models, ["fast"]);
    }
}
