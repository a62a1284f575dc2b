//! The operator's `sandgraph.toml`: limits for every graph and per-graph
//! overrides of the registration declarations and limits.
//!
//! ```toml
//! [limits]                 # caps for every graph (all optional)
//! timeout_ms = 20000
//! fuel = 100000000000
//! memory_mb = 64
//! recursion_limit = 50
//! host_memory_mb = 64      # host bytes per run (state, outputs, events)
//! instances = 8            # instances one run may hold at once
//!
//! [graphs.greet_graph]     # per graph (all optional)
//! as_tool = true
//! as_graph_tool = false
//! timeout_ms = 5000
//!
//! [llm.models]             # model aliases graphs may be granted
//! fast = "deepseek-chat"   # ("default" is always [llm].model)
//!
//! [graphs.research.grants] # brokered capabilities; none by default
//! llm = { models = ["fast"], max_calls = 20, max_tokens = 50000 }
//! tools = { allow = ["search_graph"], max_calls = 5 }
//! ```
//!
//! Grants are per run: `max_calls` and `max_tokens` count every call of
//! one run (all its instances), and a run past either gets `quota`. Every
//! alias a grant names must be `default` or defined in `[llm.models]`.
//!
//! A graph's limits are the runtime defaults, replaced by each `[limits]`
//! value that is set, then lowered by the graph's own `[graphs.<name>]`
//! values (a per-graph value never raises a `[limits]` cap; where
//! `[limits]` does not set a field, the per-graph value replaces the
//! default). The graph's declared `timeout_ms` then applies under both.
//!
//! `[load]` takes the same keys for the limits `describe` runs under when a
//! graph is mounted (default 500 ms and 5e9 fuel: a spec is computed at
//! once, so a graph that needs more is broken or hostile).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandgraph_factors::http::{HttpGrant, HttpGrantConfig};
use sandgraph_factors::llm::{DEFAULT_ALIAS, LlmGrant, LlmGrantConfig, MAX_ALIAS_BYTES};
use sandgraph_factors::tools::{ToolsGrant, ToolsGrantConfig};
use sandgraph_runtime::Limits;
use serde::Deserialize;

use crate::RegistryError;

/// Bytes in a MiB.
const MIB: usize = 1 << 20;

/// The file the CLI reads by default, from the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "sandgraph.toml";

/// Limits that may be set in `[limits]` or `[graphs.<name>]`; unset fields
/// keep the value below them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Wall-clock budget of a run, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Fuel budget of a run.
    pub fuel: Option<u64>,
    /// Memory cap per instance, in MiB.
    pub memory_mb: Option<u64>,
    /// Superstep budget of a run.
    pub recursion_limit: Option<u32>,
    /// Host byte budget of a run (state, outputs, events), in MiB.
    pub host_memory_mb: Option<u64>,
    /// Instances a run may hold at once.
    pub instances: Option<u32>,
}

impl LimitOverrides {
    /// `base` with every field that is set here replacing it.
    pub fn replace(&self, mut base: Limits) -> Limits {
        if let Some(ms) = self.timeout_ms {
            base.timeout = Duration::from_millis(ms);
        }
        if let Some(fuel) = self.fuel {
            base.fuel = fuel;
        }
        if let Some(mb) = self.memory_mb {
            base.memory = usize::try_from(mb)
                .unwrap_or(usize::MAX)
                .saturating_mul(MIB);
        }
        if let Some(r) = self.recursion_limit {
            base.recursion_limit = r;
        }
        if let Some(mb) = self.host_memory_mb {
            base.host_bytes = usize::try_from(mb)
                .unwrap_or(usize::MAX)
                .saturating_mul(MIB);
        }
        if let Some(n) = self.instances {
            base.instances = n;
        }
        base
    }

    /// `base` with every field that is set here lowering it (never raising).
    pub fn lower(&self, mut base: Limits) -> Limits {
        let lowered = self.replace(base.clone());
        base.timeout = base.timeout.min(lowered.timeout);
        base.fuel = base.fuel.min(lowered.fuel);
        base.memory = base.memory.min(lowered.memory);
        base.recursion_limit = base.recursion_limit.min(lowered.recursion_limit);
        base.host_bytes = base.host_bytes.min(lowered.host_bytes);
        base.instances = base.instances.min(lowered.instances);
        base
    }

    /// Fields set in `other` replace those of `self`.
    pub fn merged_with(&self, other: &LimitOverrides) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: other.timeout_ms.or(self.timeout_ms),
            fuel: other.fuel.or(self.fuel),
            memory_mb: other.memory_mb.or(self.memory_mb),
            recursion_limit: other.recursion_limit.or(self.recursion_limit),
            host_memory_mb: other.host_memory_mb.or(self.host_memory_mb),
            instances: other.instances.or(self.instances),
        }
    }
}

/// One `[graphs.<name>]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphOverrides {
    /// Overrides the graph's `as_tool` declaration.
    pub as_tool: Option<bool>,
    /// Overrides the graph's `as_graph_tool` declaration.
    pub as_graph_tool: Option<bool>,
    /// Wall-clock budget of a run, in milliseconds.
    pub timeout_ms: Option<u64>,
    /// Fuel budget of a run.
    pub fuel: Option<u64>,
    /// Memory cap per instance, in MiB.
    pub memory_mb: Option<u64>,
    /// Superstep budget of a run.
    pub recursion_limit: Option<u32>,
    /// Host byte budget of a run, in MiB.
    pub host_memory_mb: Option<u64>,
    /// Instances a run may hold at once.
    pub instances: Option<u32>,
    /// `[graphs.<name>.grants]`: the brokered capabilities of its runs.
    #[serde(default)]
    pub grants: GrantsConfig,
}

/// `[graphs.<name>.grants]`: deny by default, so an absent key grants
/// nothing. Unknown keys (a capability this host does not broker) are an
/// error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsConfig {
    /// `llm = { models = [...], max_calls = N, max_tokens = N }`.
    pub llm: Option<LlmGrantConfig>,
    /// `tools = { allow = [...], max_calls = N }`.
    pub tools: Option<ToolsGrantConfig>,
    /// `http = { allow = [...], methods = [...], private = false }`.
    pub http: Option<HttpGrantConfig>,
}

impl GrantsConfig {
    /// The runtime's `llm` grant, if any.
    pub fn llm(&self) -> Option<LlmGrant> {
        self.llm.as_ref().map(LlmGrantConfig::grant)
    }

    /// The runtime's `http` grant, if any (checked at parse time, so a
    /// parsed config always converts).
    pub fn http(&self) -> Option<HttpGrant> {
        self.http.as_ref()?.grant()
    }

    /// The runtime's `tools` grant, if any.
    pub fn tools(&self) -> Option<ToolsGrant> {
        self.tools.as_ref().map(ToolsGrantConfig::grant)
    }

    /// What cannot work: empty lists, zero quotas, aliases `[llm.models]`
    /// does not define.
    fn check(&self, models: &BTreeMap<String, String>) -> Result<(), String> {
        if let Some(llm) = &self.llm {
            llm.check(models).map_err(|e| e.to_string())?;
        }
        if let Some(http) = &self.http {
            http.check().map_err(|e| e.to_string())?;
        }
        if let Some(tools) = &self.tools {
            tools.check().map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

impl GraphOverrides {
    /// The limit fields of this table, applied under the `[limits]` caps.
    pub fn limits(&self) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: self.timeout_ms,
            fuel: self.fuel,
            memory_mb: self.memory_mb,
            recursion_limit: self.recursion_limit,
            host_memory_mb: self.host_memory_mb,
            instances: self.instances,
        }
    }
}

/// The operator's configuration (`sandgraph.toml`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OperatorConfig {
    /// Caps for every graph.
    #[serde(default)]
    pub limits: LimitOverrides,
    /// Per-graph overrides, by graph name.
    #[serde(default)]
    pub graphs: BTreeMap<String, GraphOverrides>,
    /// `[load]`: the limits `describe` runs under when a graph is mounted,
    /// over [`Limits::for_load`] (500 ms, 5e9 fuel).
    #[serde(default)]
    pub load: LimitOverrides,
    /// `[llm]`: the model provider, without its `models` table. Checked
    /// by `sandgraph-router`.
    #[serde(default)]
    pub llm: toml::Table,
    /// `[llm.models]`: model aliases graphs may be granted, alias to the
    /// provider's model name. Taken out of `llm` when the file is parsed.
    #[serde(skip)]
    pub llm_models: BTreeMap<String, String>,
    /// `[routing]`: the routing agent. Checked by `sandgraph-router`.
    #[serde(default)]
    pub routing: toml::Table,
    /// `[policy]`: built-in routing hooks. Checked by `sandgraph-router`.
    #[serde(default)]
    pub policy: toml::Table,
    /// `[agents.<id>]`: routing-agent profiles of the controller. Checked by
    /// `sandgraph-router`.
    #[serde(default)]
    pub agents: toml::Table,
    /// `[controller]`: the agent-graph supervisor. Checked by the CLI
    /// (`supervise`, `serve --controller`).
    #[serde(default)]
    pub controller: toml::Table,
    /// `[studio]`: who the studio serves every graph to. Checked by the
    /// CLI (`serve --http`).
    #[serde(default)]
    pub studio: toml::Table,
    /// The file this was read from, for messages; `None` when built in code.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl OperatorConfig {
    /// Reads and checks `path`.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] naming the file, and the line and column
    /// for TOML and schema errors.
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        let text = std::fs::read_to_string(path).map_err(|e| RegistryError::Config {
            path: path.to_path_buf(),
            message: format!("cannot read the file: {e}"),
        })?;
        Self::parse(&text, path)
    }

    /// Parses and checks `text`, read from `path` (named in errors).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] for TOML syntax, unknown keys, wrong types
    /// and limits that cannot work.
    pub fn parse(text: &str, path: &Path) -> Result<Self, RegistryError> {
        let mut config: OperatorConfig = toml::from_str(text).map_err(|e| {
            let at = e
                .span()
                .map(|span| {
                    let (line, column) = line_column(text, span.start);
                    format!(":{line}:{column}")
                })
                .unwrap_or_default();
            RegistryError::Config {
                path: PathBuf::from(format!("{}{at}", path.display())),
                message: e.message().trim_end_matches('.').to_string(),
            }
        })?;
        config.source = Some(path.to_path_buf());
        if let Some(models) = config.llm.remove("models") {
            config.llm_models =
                models
                    .try_into()
                    .map_err(|e: toml::de::Error| RegistryError::Config {
                        path: path.to_path_buf(),
                        message: format!(
                            "[llm.models]: must map each alias to a model name ({})",
                            e.message().trim_end_matches('.')
                        ),
                    })?;
        }
        config.check()?;
        Ok(config)
    }

    /// Rejects limits that cannot work (zero timeouts, fuel, memory or
    /// steps; memory above the runtime's maximum), naming the table.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Config`] naming the table at fault.
    pub fn check(&self) -> Result<(), RegistryError> {
        let bad = |table: &str, message: String| RegistryError::Config {
            path: self
                .source
                .clone()
                .unwrap_or_else(|| PathBuf::from("<operator config>")),
            message: format!("{table}: {message}"),
        };
        check_overrides(&self.limits).map_err(|m| bad("[limits]", m))?;
        check_overrides(&self.load).map_err(|m| bad("[load]", m))?;
        for (alias, model) in &self.llm_models {
            check_alias(alias, model).map_err(|m| bad("[llm.models]", m))?;
        }
        for (name, graph) in &self.graphs {
            check_overrides(&graph.limits()).map_err(|m| bad(&format!("[graphs.{name}]"), m))?;
            graph
                .grants
                .check(&self.llm_models)
                .map_err(|m| bad(&format!("[graphs.{name}.grants]"), m))?;
        }
        Ok(())
    }

    /// The limits of `describe` at load: [`Limits::for_load`] with `[load]`
    /// applied.
    pub fn load_limits(&self) -> Limits {
        self.load.replace(Limits::for_load())
    }

    /// The overrides of the graph `name`, if any.
    pub fn graph(&self, name: &str) -> Option<&GraphOverrides> {
        self.graphs.get(name)
    }

    /// The effective limits of the graph `name` on top of `defaults` (the
    /// runtime's): `[limits]` replaces, `[graphs.<name>]` lowers.
    pub fn limits_for(&self, name: &str, defaults: &Limits) -> Limits {
        let base = self.limits.replace(defaults.clone());
        match self.graph(name) {
            None => base,
            Some(g) => {
                let g = g.limits();
                // A per-graph value lowers a `[limits]` cap; where no cap is
                // set it replaces the runtime default.
                let capped = LimitOverrides {
                    timeout_ms: g.timeout_ms.filter(|_| self.limits.timeout_ms.is_some()),
                    fuel: g.fuel.filter(|_| self.limits.fuel.is_some()),
                    memory_mb: g.memory_mb.filter(|_| self.limits.memory_mb.is_some()),
                    recursion_limit: g
                        .recursion_limit
                        .filter(|_| self.limits.recursion_limit.is_some()),
                    host_memory_mb: g
                        .host_memory_mb
                        .filter(|_| self.limits.host_memory_mb.is_some()),
                    instances: g.instances.filter(|_| self.limits.instances.is_some()),
                };
                let free = LimitOverrides {
                    timeout_ms: g.timeout_ms.filter(|_| self.limits.timeout_ms.is_none()),
                    fuel: g.fuel.filter(|_| self.limits.fuel.is_none()),
                    memory_mb: g.memory_mb.filter(|_| self.limits.memory_mb.is_none()),
                    recursion_limit: g
                        .recursion_limit
                        .filter(|_| self.limits.recursion_limit.is_none()),
                    host_memory_mb: g
                        .host_memory_mb
                        .filter(|_| self.limits.host_memory_mb.is_none()),
                    instances: g.instances.filter(|_| self.limits.instances.is_none()),
                };
                capped.lower(free.replace(base))
            }
        }
    }
}

fn check_alias(alias: &str, model: &str) -> Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if alias.is_empty() || alias.len() > MAX_ALIAS_BYTES || !alias.chars().all(ok) {
        return Err(format!(
            "the alias \"{}\" must be 1 to {MAX_ALIAS_BYTES} letters, digits, '_', '-' or '.'",
            alias.escape_debug()
        ));
    }
    if alias == DEFAULT_ALIAS {
        return Err(format!(
            "the alias \"{DEFAULT_ALIAS}\" is [llm].model and cannot be redefined"
        ));
    }
    if model.trim().is_empty() {
        return Err(format!("the alias \"{alias}\" maps to an empty model name"));
    }
    Ok(())
}

fn check_overrides(o: &LimitOverrides) -> Result<(), String> {
    if o.timeout_ms == Some(0) {
        return Err("timeout_ms must be greater than zero".into());
    }
    if o.fuel == Some(0) {
        return Err("fuel must be greater than zero".into());
    }
    if let Some(mb) = o.memory_mb
        && !(1..=4096).contains(&mb)
    {
        return Err(format!("memory_mb must be between 1 and 4096, got {mb}"));
    }
    if o.recursion_limit == Some(0) {
        return Err("recursion_limit must be at least 1".into());
    }
    if let Some(mb) = o.host_memory_mb
        && !(1..=1 << 20).contains(&mb)
    {
        return Err(format!(
            "host_memory_mb must be between 1 and 1048576, got {mb}"
        ));
    }
    if o.instances == Some(0) {
        return Err("instances must be at least 1".into());
    }
    Ok(())
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<OperatorConfig, String> {
        OperatorConfig::parse(text, Path::new("sandgraph.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_limits_and_graph_overrides() {
        let c = parse(
            "[limits]\ntimeout_ms = 20000\nfuel = 1000\n\n[graphs.greet_graph]\nas_tool = false\n\
             timeout_ms = 5000\nmemory_mb = 64\n",
        )
        .unwrap();
        assert_eq!(c.limits.timeout_ms, Some(20000));
        let g = c.graph("greet_graph").unwrap();
        assert_eq!(g.as_tool, Some(false));
        assert_eq!(g.as_graph_tool, None);
        assert_eq!(g.memory_mb, Some(64));
        assert_eq!(c.source.as_deref(), Some(Path::new("sandgraph.toml")));
    }

    #[test]
    fn errors_name_the_file_line_and_column() {
        let e = parse("[limits]\ntimeout_ms = 1\nbogus = 3\n").unwrap_err();
        assert!(e.starts_with("sandgraph.toml:3:1: "), "{e}");
        assert!(e.contains("bogus"), "{e}");
        let e = parse("[graphs.g]\nas_tool = \"yes\"\n").unwrap_err();
        assert!(e.starts_with("sandgraph.toml:2:11: "), "{e}");
        let e = parse("[limits\n").unwrap_err();
        assert!(e.starts_with("sandgraph.toml:1:"), "{e}");
        let e = parse("[graphs.g]\nfuel = 0\n").unwrap_err();
        assert_eq!(
            e,
            "sandgraph.toml: [graphs.g]: fuel must be greater than zero"
        );
        let e = parse("[limits]\nmemory_mb = 5000\n").unwrap_err();
        assert_eq!(
            e,
            "sandgraph.toml: [limits]: memory_mb must be between 1 and 4096, got 5000"
        );
        let e = parse("[limits]\ntimeout_ms = -1\n").unwrap_err();
        assert!(e.starts_with("sandgraph.toml:2:14: "), "{e}");
    }

    #[test]
    fn grants_and_model_aliases_parse() {
        let c = parse(
            "[llm]\nmodel = \"deepseek-chat\"\n[llm.models]\nfast = \"deepseek-chat\"\n\
             smart = \"deepseek-reasoner\"\n[graphs.research.grants]\n\
             llm = { models = [\"fast\", \"default\"], max_calls = 20, max_tokens = 50000 }\n\
             tools = { allow = [\"search_graph\"], max_calls = 3 }\n",
        )
        .unwrap();
        // The aliases leave [llm], which the agent checks strictly.
        assert!(!c.llm.contains_key("models"));
        assert_eq!(c.llm_models["smart"], "deepseek-reasoner");
        let grants = &c.graph("research").unwrap().grants;
        assert_eq!(
            grants.llm(),
            Some(LlmGrant {
                models: vec!["fast".into(), "default".into()],
                max_calls: Some(20),
                max_tokens: Some(50000),
            })
        );
        assert_eq!(
            grants.tools(),
            Some(ToolsGrant {
                allow: vec!["search_graph".into()],
                max_calls: Some(3),
            })
        );
        // Deny by default.
        let plain = parse("[graphs.g]\nas_tool = true\n").unwrap();
        assert_eq!(plain.graph("g").unwrap().grants.llm(), None);
        assert_eq!(plain.graph("g").unwrap().grants.tools(), None);
    }

    #[test]
    fn bad_grants_are_errors_naming_the_file_and_key() {
        let e = parse("[graphs.g.grants]\nfilesystem = { allow = [\"/\"] }\n").unwrap_err();
        assert!(e.starts_with("sandgraph.toml:2:1: "), "{e}");
        assert!(e.contains("unknown field `filesystem`"), "{e}");
        let e = parse("[graphs.g.grants]\nllm = { models = [\"default\"], max_cals = 1 }\n")
            .unwrap_err();
        assert!(e.contains("unknown field `max_cals`"), "{e}");
        let e = parse("[graphs.g.grants]\nllm = { models = [\"fast\"] }\n").unwrap_err();
        assert_eq!(
            e,
            "sandgraph.toml: [graphs.g.grants]: llm.models names \"fast\", which [llm.models] \
             does not define (define it there, or grant \"default\" for [llm].model)"
        );
        let e = parse("[graphs.g.grants]\nllm = { models = [] }\n").unwrap_err();
        assert!(
            e.ends_with("llm.models must name at least one model alias"),
            "{e}"
        );
        let e =
            parse("[graphs.g.grants]\ntools = { allow = [\"a\"], max_calls = 0 }\n").unwrap_err();
        assert!(e.ends_with("tools.max_calls must be at least 1"), "{e}");
        let e = parse("[llm.models]\ndefault = \"x\"\n").unwrap_err();
        assert!(e.contains("[llm.models]: the alias \"default\""), "{e}");
        let e = parse("[llm.models]\nfast = 3\n").unwrap_err();
        assert!(
            e.starts_with("sandgraph.toml: [llm.models]: must map"),
            "{e}"
        );
    }

    #[test]
    fn load_limits_come_from_the_load_table() {
        assert_eq!(parse("").unwrap().load_limits(), Limits::for_load());
        let c = parse("[load]\ntimeout_ms = 2000\nfuel = 1000\n").unwrap();
        assert_eq!(c.load_limits().timeout, Duration::from_millis(2000));
        assert_eq!(c.load_limits().fuel, 1000);
        let e = parse("[load]\nfuel = 0\n").unwrap_err();
        assert_eq!(e, "sandgraph.toml: [load]: fuel must be greater than zero");
    }

    #[test]
    fn host_memory_and_instances_are_limits_like_the_others() {
        let defaults = Limits::default();
        let c = parse(
            "[limits]\nhost_memory_mb = 32\n[graphs.a]\nhost_memory_mb = 128\ninstances = 2\n",
        )
        .unwrap();
        let a = c.limits_for("a", &defaults);
        // Never raised above the cap; no cap on instances: replaced.
        assert_eq!(a.host_bytes, 32 * MIB);
        assert_eq!(a.instances, 2);
        assert_eq!(c.limits_for("b", &defaults).instances, defaults.instances);
        let e = parse("[graphs.g]\ninstances = 0\n").unwrap_err();
        assert_eq!(
            e,
            "sandgraph.toml: [graphs.g]: instances must be at least 1"
        );
        let e = parse("[limits]\nhost_memory_mb = 0\n").unwrap_err();
        assert!(e.contains("host_memory_mb must be between 1 and"), "{e}");
    }

    #[test]
    fn per_graph_limits_apply_under_the_operator_caps() {
        let defaults = Limits::default();
        let c = parse(
            "[limits]\ntimeout_ms = 1000\n[graphs.a]\ntimeout_ms = 50\nrecursion_limit = 100\n\
             [graphs.b]\ntimeout_ms = 5000\n",
        )
        .unwrap();
        // Lowered under the cap.
        assert_eq!(
            c.limits_for("a", &defaults).timeout,
            Duration::from_millis(50)
        );
        // Never raised above it.
        assert_eq!(
            c.limits_for("b", &defaults).timeout,
            Duration::from_millis(1000)
        );
        // No cap on steps: the per-graph value replaces the default.
        assert_eq!(c.limits_for("a", &defaults).recursion_limit, 100);
        // Other graphs get the caps.
        let other = c.limits_for("c", &defaults);
        assert_eq!(other.timeout, Duration::from_millis(1000));
        assert_eq!(other.fuel, defaults.fuel);
        assert_eq!(other.recursion_limit, defaults.recursion_limit);
    }
}
