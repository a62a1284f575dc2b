//! A `sandgraph.toml` the operator did not name: found walking up from the
//! working directory, so possibly a cloned repository's or another user's
//! (`/tmp/sandgraph.toml`). It may tune a run, never widen its sandbox.
//!
//! - **Where the walk goes**: the working directory and the folders above
//!   it, up to the user's home directory (included) and never across a
//!   filesystem boundary (a folder on another device than the working
//!   directory is not looked in), as git's discovery stops.
//! - **Whose file**: the file found is read only when it is owned by the
//!   user running the command and not writable by group or other users (as
//!   git's `safe.directory`); else the command is refused naming the file.
//!   The owner and mode are those of the file as opened, so it cannot be
//!   swapped between the check and the read.
//! - **What it may say**: no `[graphs.<name>.grants]` (no capability at
//!   all, and so no `http.private`), and no limit above the runtime's
//!   defaults in `[limits]`, `[graphs.<name>]` or `[load]`. Lowering
//!   limits, `as_tool`, model aliases and the agent tables are fine (where
//!   the API key goes has its own rule, `model::check_key_destination`).
//!
//! Each refusal is `invalid_input` naming the file and the setting, and
//! says to pass `--config` to use the file anyway: a file named with
//! `--config` is the operator's word and is read as written.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sandgraph_registry::{DEFAULT_CONFIG_FILE, LimitOverrides, OperatorConfig};
use sandgraph_runtime::{ErrorCode, Limits, RunError};

use crate::exit::Failure;

/// Bytes in a MiB.
const MIB: usize = 1 << 20;

/// Largest discovered config read, in bytes: an operator config is a few
/// kilobytes; anything this large is not one.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The first `sandgraph.toml` in `cwd` or a folder above it, within the
/// walk's bounds (the user's home, the working directory's filesystem):
/// the bare file name when it is in `cwd` itself (as messages always named
/// it), else its absolute path.
pub(crate) fn find(cwd: &Path) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| std::fs::canonicalize(&h).unwrap_or_else(|_| PathBuf::from(h)));
    walk(cwd, home.as_deref(), |dir| {
        std::fs::metadata(dir).ok().map(|m| m.dev())
    })
}

/// The walk of [`find`], with `device` saying which filesystem a folder is
/// on (`None`: it cannot be read, and the walk stops there).
fn walk(cwd: &Path, home: Option<&Path>, device: impl Fn(&Path) -> Option<u64>) -> Option<PathBuf> {
    let start = device(cwd)?;
    for dir in cwd.ancestors() {
        if device(dir) != Some(start) {
            return None;
        }
        let candidate = dir.join(DEFAULT_CONFIG_FILE);
        if candidate.is_file() {
            return Some(if dir == cwd {
                PathBuf::from(DEFAULT_CONFIG_FILE)
            } else {
                candidate
            });
        }
        if home == Some(dir) {
            return None;
        }
    }
    None
}

/// Reads the discovered config at `path`: refused when another user owns
/// it or others may write it, and when it grants a capability or raises a
/// limit (see the module doc).
pub(crate) fn load(path: &Path) -> Result<OperatorConfig, Failure> {
    let file = path.display().to_string();
    let text = read_own(path).map_err(|why| refusal(&file, &why))?;
    let config = OperatorConfig::parse(&text, path).map_err(crate::mount::registry_failure)?;
    widening(&config).map_or(Ok(config), |why| Err(refusal(&file, &why)))
}

fn refusal(file: &str, why: &str) -> Failure {
    RunError::new(
        ErrorCode::InvalidInput,
        format!(
            "{file} (found in the working directory or above it, not given with --config) \
             {why}; to use it anyway, pass --config {file}"
        ),
    )
    .into()
}

/// The text of `path` when it is the current user's and only they may
/// write it, checked on the file as opened; `Err` says why not (or that
/// it cannot be read).
fn read_own(path: &Path) -> Result<String, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot be read: {e}"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "is owned by uid {}, not by you (uid {me}), so it is not read",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "is writable by group or other users (mode {mode:04o}), so it is not read (run \
             chmod go-w on it if it is yours to keep)"
        ));
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "is {} bytes, larger than the {MAX_CONFIG_BYTES} a config may be",
            meta.len()
        ));
    }
    let mut text = String::new();
    f.take(MAX_CONFIG_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read: {e}"))?;
    Ok(text)
}

/// The first setting of `config` that would widen a sandbox, said as
/// "sets SETTING: WHY"; `None` when there is none.
fn widening(config: &OperatorConfig) -> Option<String> {
    for (name, graph) in &config.graphs {
        let grants = &graph.grants;
        if grants.http.as_ref().is_some_and(|h| h.private) {
            return Some(format!(
                "sets [graphs.{name}.grants].http.private = true: a config you did not name \
                 cannot let a graph reach loopback or private addresses"
            ));
        }
        let granted = [
            ("llm", grants.llm.is_some()),
            ("tools", grants.tools.is_some()),
            ("http", grants.http.is_some()),
        ];
        if let Some((cap, _)) = granted.iter().find(|(_, set)| *set) {
            return Some(format!(
                "sets [graphs.{name}.grants].{cap}: a config you did not name cannot grant \
                 capabilities"
            ));
        }
    }
    let (defaults, load) = (Limits::default(), Limits::for_load());
    let tables = std::iter::once(("[limits]".to_owned(), config.limits, &defaults))
        .chain(
            config
                .graphs
                .iter()
                .map(|(name, g)| (format!("[graphs.{name}]"), g.limits(), &defaults)),
        )
        .chain(std::iter::once(("[load]".to_owned(), config.load, &load)));
    for (table, overrides, base) in tables {
        if let Some((key, value, default)) = raised(&overrides, base) {
            return Some(format!(
                "sets {table}.{key} = {value}, above the default {default}: a config you did \
                 not name cannot raise limits"
            ));
        }
    }
    None
}

/// The first limit `o` sets above `base`, as (key, value, default) in the
/// file's units.
fn raised(o: &LimitOverrides, base: &Limits) -> Option<(&'static str, u64, u64)> {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let mib = |bytes: usize| u64::try_from(bytes / MIB).unwrap_or(u64::MAX);
    [
        ("timeout_ms", o.timeout_ms, ms(base.timeout)),
        ("fuel", o.fuel, base.fuel),
        ("memory_mb", o.memory_mb, mib(base.memory)),
        (
            "recursion_limit",
            o.recursion_limit.map(u64::from),
            u64::from(base.recursion_limit),
        ),
        ("host_memory_mb", o.host_memory_mb, mib(base.host_bytes)),
        (
            "instances",
            o.instances.map(u64::from),
            u64::from(base.instances),
        ),
    ]
    .into_iter()
    .find_map(|(key, value, default)| {
        value
            .filter(|v| *v > default)
            .map(|value| (key, value, default))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> OperatorConfig {
        OperatorConfig::parse(text, Path::new(DEFAULT_CONFIG_FILE)).unwrap()
    }

    #[test]
    fn the_config_is_the_nearest_sandgraph_toml_walking_up() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        // A folder of that name is not a config.
        std::fs::create_dir(deep.join(DEFAULT_CONFIG_FILE)).unwrap();
        let found = |dir: &Path| walk(dir, None, |_| Some(1));
        std::fs::write(root.path().join("a/sandgraph.toml"), "").unwrap();
        assert_eq!(found(&deep), Some(root.path().join("a/sandgraph.toml")));
        std::fs::write(root.path().join("a/b/sandgraph.toml"), "").unwrap();
        assert_eq!(
            found(&deep),
            Some(root.path().join("a/b/sandgraph.toml")),
            "the nearest wins"
        );
        assert_eq!(
            found(&root.path().join("a/b")),
            Some(PathBuf::from(DEFAULT_CONFIG_FILE)),
            "in the working directory itself, named as before"
        );
    }

    #[test]
    fn the_walk_stops_at_home_and_at_another_filesystem() {
        let root = tempfile::tempdir().unwrap();
        let deep = root.path().join("home/me/project/src");
        std::fs::create_dir_all(&deep).unwrap();
        let top = root.path().join(DEFAULT_CONFIG_FILE);
        std::fs::write(&top, "").unwrap();
        let same = |_: &Path| Some(1);
        assert_eq!(walk(&deep, None, same), Some(top.clone()));
        // Above home is not looked in; home itself is.
        let home = root.path().join("home/me");
        assert_eq!(walk(&deep, Some(&home), same), None);
        std::fs::write(home.join(DEFAULT_CONFIG_FILE), "").unwrap();
        assert_eq!(
            walk(&deep, Some(&home), same),
            Some(home.join(DEFAULT_CONFIG_FILE))
        );
        std::fs::remove_file(home.join(DEFAULT_CONFIG_FILE)).unwrap();
        // `project` is a mount of another filesystem: its parents are not
        // looked in, and neither is it from below another mount.
        let project = root.path().join("home/me/project");
        let mounted = |dir: &Path| Some(if dir.starts_with(&project) { 2 } else { 1 });
        assert_eq!(walk(&deep, None, mounted), None);
        std::fs::write(project.join(DEFAULT_CONFIG_FILE), "").unwrap();
        assert_eq!(
            walk(&deep, None, mounted),
            Some(project.join(DEFAULT_CONFIG_FILE))
        );
        let src_mounted = |dir: &Path| Some(if dir.starts_with(&deep) { 3 } else { 1 });
        assert_eq!(walk(&deep, None, src_mounted), None);
    }

    #[test]
    fn grants_and_raised_limits_are_refused_naming_the_setting() {
        let refused = |text: &str| widening(&parse(text));
        assert_eq!(
            refused("[graphs.r.grants]\nhttp = { allow = [\"http://*:*\", \"https://*:*\"], private = true }\n").as_deref(),
            Some(
                "sets [graphs.r.grants].http.private = true: a config you did not name cannot \
                 let a graph reach loopback or private addresses"
            )
        );
        for (grant, cap) in [
            ("http = { allow = [\"https://example.com\"] }", "http"),
            ("llm = { models = [\"default\"] }", "llm"),
            ("tools = { allow = [\"echo_graph\"] }", "tools"),
        ] {
            let why = refused(&format!("[graphs.r.grants]\n{grant}\n")).unwrap();
            assert_eq!(
                why,
                format!(
                    "sets [graphs.r.grants].{cap}: a config you did not name cannot grant \
                     capabilities"
                )
            );
        }
        assert_eq!(
            refused("[limits]\ntimeout_ms = 600000\n").as_deref(),
            Some(
                "sets [limits].timeout_ms = 600000, above the default 30000: a config you did \
                 not name cannot raise limits"
            )
        );
        for (text, setting) in [
            ("[limits]\nfuel = 200000000001\n", "[limits].fuel"),
            ("[limits]\nmemory_mb = 129\n", "[limits].memory_mb"),
            (
                "[limits]\nrecursion_limit = 1000\n",
                "[limits].recursion_limit",
            ),
            ("[limits]\nhost_memory_mb = 65\n", "[limits].host_memory_mb"),
            ("[limits]\ninstances = 9\n", "[limits].instances"),
            ("[graphs.g]\nfuel = 10000000000000\n", "[graphs.g].fuel"),
            ("[load]\ntimeout_ms = 501\n", "[load].timeout_ms"),
        ] {
            let why = refused(text).unwrap_or_default();
            assert!(
                why.starts_with(&format!("sets {setting} = ")),
                "{text}: {why}"
            );
        }
    }

    #[test]
    fn lowering_limits_and_naming_tools_is_harmless() {
        let text = "[limits]\ntimeout_ms = 30000\nfuel = 1000\nmemory_mb = 64\ninstances = 8\n\
                    [load]\ntimeout_ms = 200\n\
                    [graphs.g]\nas_tool = true\nas_graph_tool = false\ntimeout_ms = 200\n\
                    [llm]\nmodel = \"m\"\n[llm.models]\nfast = \"m\"\n";
        assert_eq!(widening(&parse(text)), None);
    }
}
