//! The `http` grant as `sandgraph.toml` writes it:
//! `[graphs.<name>.grants] http = { allow = [...], methods = [...],
//! private = false }`.

use serde::Deserialize;

use super::HttpGrant;

/// The `http` grant of a graph in the operator's configuration; see
/// [`HttpGrant::parse`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpGrantConfig {
    /// Origins: `scheme://host[:port]`, `*.domain`, IP literals.
    pub allow: Vec<String>,
    /// Methods; empty: `GET` and `HEAD`; `"*"`: any.
    #[serde(default)]
    pub methods: Vec<String>,
    /// Names may resolve to loopback and private ranges.
    #[serde(default)]
    pub private: bool,
}

/// Why an `http` grant in the configuration cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidHttpGrant(pub(super) String);

impl HttpGrantConfig {
    /// The runtime's grant (checked at parse time by
    /// [`HttpGrantConfig::check`], so a checked config always converts).
    pub fn grant(&self) -> Option<HttpGrant> {
        HttpGrant::parse(&self.allow, &self.methods, self.private).ok()
    }

    /// Checks that the grant can work: at least one origin, every entry
    /// and method valid.
    ///
    /// # Errors
    ///
    /// Which entry and why, as the operator reads it.
    pub fn check(&self) -> Result<(), InvalidHttpGrant> {
        if self.allow.is_empty() {
            return Err(InvalidHttpGrant(
                "http.allow must name at least one origin".into(),
            ));
        }
        HttpGrant::parse(&self.allow, &self.methods, self.private)
            .map(drop)
            .map_err(|e| InvalidHttpGrant(format!("http: {e}")))
    }
}
