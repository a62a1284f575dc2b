//! The `tools` grant as `sandgraph.toml` writes it:
//! `[graphs.<name>.grants] tools = { allow = [...], max_calls = N }`.

use serde::Deserialize;

use super::ToolsGrant;

/// The `tools` grant of a graph in the operator's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsGrantConfig {
    /// Graph tools the graph may call.
    pub allow: Vec<String>,
    /// Tool calls per run.
    pub max_calls: Option<u32>,
}

/// Why a `tools` grant in the configuration cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidToolsGrant {
    /// `allow` is empty: the grant would allow nothing.
    #[error("tools.allow must name at least one graph tool")]
    NoTools,
    /// `max_calls = 0`: every call would be refused.
    #[error("tools.max_calls must be at least 1")]
    ZeroQuota,
}

impl ToolsGrantConfig {
    /// The runtime's grant.
    pub fn grant(&self) -> ToolsGrant {
        ToolsGrant {
            allow: self.allow.clone(),
            max_calls: self.max_calls,
        }
    }

    /// Checks that the grant can work.
    ///
    /// # Errors
    ///
    /// An empty list or a zero quota.
    pub fn check(&self) -> Result<(), InvalidToolsGrant> {
        if self.allow.is_empty() {
            return Err(InvalidToolsGrant::NoTools);
        }
        if self.max_calls == Some(0) {
            return Err(InvalidToolsGrant::ZeroQuota);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_names_a_tool_and_a_nonzero_quota() {
        let mut grant = ToolsGrantConfig {
            allow: vec!["search".into()],
            max_calls: Some(2),
        };
        assert_eq!(grant.check(), Ok(()));
        assert_eq!(grant.grant().allow, ["search"]);
        grant.max_calls = Some(0);
        assert_eq!(grant.check(), Err(InvalidToolsGrant::ZeroQuota));
        grant.allow.clear();
        assert_eq!(grant.check(), Err(InvalidToolsGrant::NoTools));
    }
}
