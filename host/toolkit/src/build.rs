//! Building a graph folder into a component ([`build`]): a Rust crate
//! with cargo for wasm32-wasip2, a Python graph with componentize-py, a
//! JavaScript graph with jco; the component is checked by loading it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::Digest;

use sandgraph_store::CompileCache;

use crate::Error;

/// The compilation target of graph components.
pub const TARGET: &str = "wasm32-wasip2";

/// Fails with the install command when the wasm32-wasip2 standard library is
/// missing, instead of letting cargo print "can't find crate for `core`";
/// returns rustc's sysroot.
pub fn check_target() -> Result<PathBuf, Error> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| Error::build(format!("cannot run rustc: {e}; install Rust with rustup")))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !sysroot
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib")
        .is_dir()
    {
        return Err(Error::build(format!(
            "the {TARGET} target is not installed: run `rustup target add {TARGET}`"
        )));
    }
    Ok(sysroot)
}

/// The cargo profile components are built with.
pub const PROFILE: &str = "sandgraph";

/// What [`PROFILE`] inherits when the crate does not define it.
const BASE_PROFILE: &str = "release";

/// The size settings `sandgraph build` fills in: each applies only when the
/// crate's own `[profile.sandgraph]` (or the profile it inherits, `release`
/// by default) does not set that key, so the crate's settings win. With
/// them the echo example is ~220 KB instead of ~380 KB.
const SIZE_SETTINGS: [(&str, &str); 3] = [
    ("opt-level", "\"s\""),
    ("lto", "true"),
    ("codegen-units", "1"),
];

/// Largest manifest read (a workspace's Cargo.toml for the crate's
/// profiles; pyproject.toml or package.json to tell a folder's language):
/// manifests are kilobytes; past this it is not one.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Deepest `inherits` chain followed through the crate's profiles; cargo
/// itself refuses cycles, this only bounds the walk.
const MAX_PROFILE_DEPTH: usize = 8;

/// Where cargo puts the crate: its workspace root and target directory.
struct Layout {
    workspace_root: PathBuf,
    target_dir: PathBuf,
}

/// Asks cargo for the crate's workspace root and target directory (they
/// honour `CARGO_TARGET_DIR` and the cargo config).
fn layout(cargo: &str, dir: &Path, manifest: &Path) -> Result<Layout, Error> {
    let output = Command::new(cargo)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .arg("--manifest-path")
        .arg(manifest)
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::build(format!("cannot run cargo: {e}")))?;
    if !output.status.success() {
        return Err(Error::build(format!(
            "cargo metadata failed for {}: fix the manifest",
            manifest.display()
        )));
    }
    let meta: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| Error::build(format!("cargo metadata printed no JSON: {e}")))?;
    let path = |key: &str| {
        meta[key].as_str().map(PathBuf::from).ok_or_else(|| {
            Error::build(format!(
                "cargo metadata names no {key} for {}",
                manifest.display()
            ))
        })
    };
    Ok(Layout {
        workspace_root: path("workspace_root")?,
        target_dir: path("target_directory")?,
    })
}

/// The `[profile]` table of the workspace manifest at `root`.
fn manifest_profiles(root: &Path) -> Result<toml::Table, Error> {
    let path = root.join("Cargo.toml");
    let read = |e: std::io::Error| Error::build(format!("cannot read {}: {e}", path.display()));
    let len = std::fs::metadata(&path).map_err(read)?.len();
    if len > MAX_MANIFEST_BYTES {
        return Err(Error::build(format!(
            "{} is {len} bytes, more than a manifest may be ({MAX_MANIFEST_BYTES})",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(read)?;
    let manifest: toml::Table = toml::from_str(&text)
        .map_err(|e| Error::build(format!("{} is not valid TOML: {e}", path.display())))?;
    match manifest.get("profile") {
        Some(toml::Value::Table(t)) => Ok(t.clone()),
        _ => Ok(toml::Table::new()),
    }
}

/// The `--config` settings that define [`PROFILE`]: `inherits` unless the
/// crate defines it, and each size setting the crate's profile chain leaves
/// unset.
fn profile_settings(profiles: &toml::Table) -> Vec<String> {
    let own = profiles.get(PROFILE).and_then(toml::Value::as_table);
    let mut out = Vec::new();
    if own.and_then(|t| t.get("inherits")).is_none() {
        out.push(format!("profile.{PROFILE}.inherits=\"{BASE_PROFILE}\""));
    }
    for (key, value) in SIZE_SETTINGS {
        if !profile_sets(profiles, key) {
            out.push(format!("profile.{PROFILE}.{key}={value}"));
        }
    }
    out
}

/// Whether [`PROFILE`] or a profile it inherits sets `key` in the manifest.
fn profile_sets(profiles: &toml::Table, key: &str) -> bool {
    let mut name = PROFILE.to_owned();
    for _ in 0..MAX_PROFILE_DEPTH {
        let Some(table) = profiles.get(&name).and_then(toml::Value::as_table) else {
            if name != PROFILE {
                return false;
            }
            name = BASE_PROFILE.to_owned();
            continue;
        };
        if table.contains_key(key) {
            return true;
        }
        match table.get("inherits").and_then(toml::Value::as_str) {
            Some(parent) => name = parent.to_owned(),
            None if name == PROFILE => name = BASE_PROFILE.to_owned(),
            None => return false,
        }
    }
    false
}

/// `--remap-path-prefix` flags that take the build's machine-specific
/// folders out of the component, so the same source gives the same bytes
/// wherever it is built: the rust sysroot, the cargo home (registry and git
/// sources), the crate's workspace root and its target directory (build
/// scripts' output). rustc applies the last matching prefix, so the more
/// specific folders come later.
///
/// Every crate gets every flag, so the dependencies rebuild when the same
/// target folder serves a crate in another folder. Passing the workspace
/// remap to the members alone (a `RUSTC_WORKSPACE_WRAPPER`) was tried and
/// is wrong: cargo names a path crate's artifacts by its path relative to
/// the workspace root, so two checkouts of one graph (or of its path
/// dependencies) laid out alike would share artifacts, and cargo's mtime
/// check lets the second reuse the first's; the location in the flags keeps
/// them apart. (Cargo also mixes a wrapper's path into the members' symbol
/// hashes.)
fn remap_flags(sysroot: &Path, layout: &Layout) -> Vec<String> {
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let mut pairs = vec![(sysroot.to_path_buf(), "/sysroot")];
    if let Some(home) = cargo_home {
        pairs.push((home, "/cargo"));
    }
    pairs.push((layout.workspace_root.clone(), "/workspace"));
    pairs.push((layout.target_dir.clone(), "/target"));
    pairs
        .into_iter()
        .map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display()))
        .collect()
}

/// The user's rustflags from the environment, if any: cargo reads
/// `CARGO_ENCODED_RUSTFLAGS` (0x1f-separated) first, then `RUSTFLAGS`
/// (space-separated), and then ignores the cargo config's rustflags.
fn env_rustflags() -> Option<Vec<String>> {
    if let Some(flags) = std::env::var_os("CARGO_ENCODED_RUSTFLAGS") {
        let flags = flags.to_string_lossy().into_owned();
        return Some(
            flags
                .split('\x1f')
                .filter(|f| !f.is_empty())
                .map(str::to_owned)
                .collect(),
        );
    }
    std::env::var_os("RUSTFLAGS").map(|flags| {
        flags
            .to_string_lossy()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    })
}

/// Passes `flags` to rustc after the user's own: appended to the
/// environment's rustflags when it has any, else through the cargo config's
/// `target.wasm32-wasip2.rustflags`, which cargo joins with the config
/// files' own array for the target.
fn add_rustflags(cmd: &mut Command, flags: Vec<String>) {
    match env_rustflags() {
        Some(mut user) => {
            user.extend(flags);
            cmd.env("CARGO_ENCODED_RUSTFLAGS", user.join("\x1f"));
        }
        None => {
            let array = serde_json::to_string(&flags).unwrap_or_else(|_| "[]".to_owned());
            cmd.arg("--config")
                .arg(format!("target.{TARGET}.rustflags={array}"));
        }
    }
}

/// Builds the crate in `dir` with the [`PROFILE`] profile and returns the
/// component path. Without `debug` the debug info is stripped whatever the
/// crate's profile says (the function names stay, for guest backtraces);
/// with it, full DWARF is kept.
fn cargo_build(dir: &Path, sysroot: &Path, debug: bool) -> Result<PathBuf, Error> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Error::build(format!(
            "{} has no Cargo.toml: point at a graph crate",
            dir.display()
        )));
    }
    let manifest = manifest
        .canonicalize()
        .map_err(|e| Error::build(format!("cannot resolve {}: {e}", manifest.display())))?;
    // Cargo reads the config (.cargo/config.toml) from its working
    // directory up: the crate's own folder.
    let dir = manifest.parent().unwrap_or(dir);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let layout = layout(&cargo, dir, &manifest)?;
    let mut settings = profile_settings(&manifest_profiles(&layout.workspace_root)?);
    if debug {
        settings.push(format!("profile.{PROFILE}.debug=true"));
        settings.push(format!("profile.{PROFILE}.strip=\"none\""));
    } else {
        settings.push(format!("profile.{PROFILE}.debug=false"));
        settings.push(format!("profile.{PROFILE}.strip=\"debuginfo\""));
    }
    let mut cmd = Command::new(&cargo);
    // `rustc --lib --crate-type cdylib`: only the component is built, even
    // when the crate lists other crate types too (with an rlib beside it,
    // rustc cannot optimise the cdylib as one unit: 40% larger).
    cmd.current_dir(dir).args([
        "rustc",
        "--lib",
        "--crate-type",
        "cdylib",
        "--profile",
        PROFILE,
        "--target",
        TARGET,
        "--message-format=json-render-diagnostics",
    ]);
    for setting in settings {
        cmd.arg("--config").arg(setting);
    }
    add_rustflags(&mut cmd, remap_flags(sysroot, &layout));
    let output = cmd
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::build(format!("cannot run cargo: {e}")))?;
    if !output.status.success() {
        return Err(Error::build(format!(
            "cargo build failed for {} (cargo's errors are above)",
            manifest.display()
        )));
    }
    component_artifact(&output.stdout, &manifest)
}

/// The component in cargo's JSON messages (`stdout`): the last `.wasm`
/// artifact of the crate at `manifest`.
fn component_artifact(stdout: &[u8], manifest: &Path) -> Result<PathBuf, Error> {
    let mut found = None;
    for line in String::from_utf8_lossy(stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        if msg["manifest_path"].as_str().map(Path::new) != Some(manifest) {
            continue;
        }
        for f in msg["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".wasm")) {
                found = Some(PathBuf::from(f));
            }
        }
    }
    found.ok_or_else(|| {
        Error::build(format!(
            "cargo produced no .wasm for {}: a graph crate is a library (src/lib.rs) that calls \
             `sandgraph_sdk::export_graph!`",
            manifest.display()
        ))
    })
}

/// The language a graph folder is written in, told by the manifest it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `Cargo.toml`: a crate built with the Rust SDK.
    Rust,
    /// `pyproject.toml` with a `[tool.sandgraph]` table (see `build_py`).
    Python,
    /// `package.json` with a `"sandgraph"` field (see `build_js`).
    Js,
}

fn read_manifest(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::metadata(path) {
        Err(_) => Ok(None),
        Ok(m) if m.len() > MAX_MANIFEST_BYTES => Err(Error::build(format!(
            "{} is larger than {MAX_MANIFEST_BYTES} bytes",
            path.display()
        ))),
        Ok(_) => std::fs::read_to_string(path)
            .map(Some)
            .map_err(|e| Error::build(format!("cannot read {}: {e}", path.display()))),
    }
}

fn source_of(dir: &Path) -> Result<Source, Error> {
    if let Some(text) = read_manifest(&dir.join("pyproject.toml"))? {
        let doc: toml::Table = toml::from_str(&text)
            .map_err(|e| Error::build(format!("{}: {e}", dir.join("pyproject.toml").display())))?;
        if doc.get("tool").and_then(|t| t.get("sandgraph")).is_some() {
            return Ok(Source::Python);
        }
    }
    if let Some(text) = read_manifest(&dir.join("package.json"))? {
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::build(format!("{}: {e}", dir.join("package.json").display())))?;
        if doc.get("sandgraph").is_some() {
            return Ok(Source::Js);
        }
    }
    if dir.join("Cargo.toml").is_file() {
        return Ok(Source::Rust);
    }
    Err(Error::build(format!(
        "{} holds no graph: point at a Rust crate (Cargo.toml), a Python graph \
         (pyproject.toml with [tool.sandgraph]) or a JavaScript graph (package.json \
         with a \"sandgraph\" field)",
        dir.display()
    )))
}

/// What to build and where ([`build`]).
pub struct BuildOptions<'a> {
    /// The graph's folder: a Rust crate (Cargo.toml), a Python graph
    /// (pyproject.toml) or a JavaScript graph (package.json).
    pub dir: &'a Path,
    /// Where to write the component (`None`: `<graph name>.wasm` in the
    /// current folder; a graph's name is letters, digits, `_` and `-`: a
    /// plain file name).
    pub out: Option<&'a Path>,
    /// Keep full debug info (DWARF); by default it is stripped.
    pub debug: bool,
    /// The compile cache the check loads through.
    pub cache: Option<&'a CompileCache>,
}

/// A component [`build`] wrote.
#[derive(Debug, Clone)]
pub struct Built {
    /// The name the graph describes itself with.
    pub name: String,
    /// The component's size in bytes.
    pub size: usize,
    /// Its sha256, hex.
    pub sha256: String,
    /// The file written.
    pub path: PathBuf,
}

impl std::fmt::Display for Built {
    /// `built graph `NAME` (N bytes, sha256 HEX) -> PATH`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "built graph `{}` ({} bytes, sha256 {}) -> {}",
            self.name,
            self.size,
            self.sha256,
            self.path.display()
        )
    }
}

/// Builds the graph in `options.dir`, checks it by loading it, and writes
/// it. The check compiles the component through the cache (when there is
/// one), so the first `run`, `test` or `serve` of what was built is warm:
/// a Python or JavaScript graph takes seconds to compile. The build tools
/// write their progress to stderr.
pub async fn build(options: &BuildOptions<'_>) -> Result<Built, Error> {
    let (dir, debug) = (options.dir, options.debug);
    crate::sdk::check_project(dir)?;
    let bytes = match source_of(dir)? {
        Source::Rust => {
            let sysroot = check_target()?;
            let wasm = cargo_build(dir, &sysroot, debug)?;
            std::fs::read(&wasm)
                .map_err(|e| Error::build(format!("cannot read {}: {e}", wasm.display())))?
        }
        Source::Python => crate::build_py::build(dir, debug)?,
        Source::Js => crate::build_js::build(dir, debug)?,
    };
    let rt = sandgraph_factors::runtime(Default::default())?;
    // Loading checks the world, links, and validates the described spec.
    let graph = sandgraph_registry::load_cached(&rt, options.cache, bytes.clone()).await?;
    let out = match options.out {
        Some(out) => out.to_path_buf(),
        None => PathBuf::from(format!("{}.wasm", graph.name())),
    };
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::build(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(&out, &bytes)
        .map_err(|e| Error::build(format!("cannot write {}: {e}", out.display())))?;
    Ok(Built {
        name: graph.name().to_owned(),
        size: bytes.len(),
        sha256: hex::encode(sha2::Sha256::digest(&bytes)),
        path: out,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profiles(text: &str) -> toml::Table {
        let manifest: toml::Table = toml::from_str(text).unwrap();
        match manifest.get("profile") {
            Some(toml::Value::Table(t)) => t.clone(),
            _ => toml::Table::new(),
        }
    }

    #[test]
    fn size_settings_fill_in_what_the_crate_leaves_unset() {
        // No profile at all: sandgraph's profile, over release, all settings.
        assert_eq!(
            profile_settings(&profiles("")),
            [
                "profile.sandgraph.inherits=\"release\"",
                "profile.sandgraph.opt-level=\"s\"",
                "profile.sandgraph.lto=true",
                "profile.sandgraph.codegen-units=1",
            ]
        );
        // The release profile's own settings win.
        let p = profiles("[profile.release]\nopt-level = 3\nlto = \"thin\"\n");
        assert_eq!(
            profile_settings(&p),
            [
                "profile.sandgraph.inherits=\"release\"",
                "profile.sandgraph.codegen-units=1",
            ]
        );
        // A crate's own [profile.sandgraph] and the profile it inherits.
        let p = profiles(
            "[profile.sandgraph]\ninherits = \"small\"\ncodegen-units = 4\n\
             [profile.small]\ninherits = \"release\"\nopt-level = \"z\"\n\
             [profile.release]\nlto = false\n",
        );
        assert_eq!(profile_settings(&p), Vec::<String>::new());
        // [profile.sandgraph] without `inherits` still inherits release.
        let p = profiles("[profile.sandgraph]\nlto = \"fat\"\n[profile.release]\nopt-level = 2\n");
        assert_eq!(
            profile_settings(&p),
            [
                "profile.sandgraph.inherits=\"release\"",
                "profile.sandgraph.codegen-units=1",
            ]
        );
    }

    #[test]
    fn an_inherits_cycle_ends() {
        let p = profiles(
            "[profile.sandgraph]\ninherits = \"a\"\n[profile.a]\ninherits = \"sandgraph\"\n",
        );
        assert!(!profile_sets(&p, "lto"));
    }

    #[test]
    fn the_more_specific_folders_are_remapped_last() {
        let layout = Layout {
            workspace_root: PathBuf::from("/src/ws"),
            target_dir: PathBuf::from("/src/ws/target"),
        };
        let flags = remap_flags(Path::new("/toolchain"), &layout);
        assert_eq!(
            flags.first().unwrap(),
            "--remap-path-prefix=/toolchain=/sysroot"
        );
        assert_eq!(
            flags[flags.len() - 2..],
            [
                "--remap-path-prefix=/src/ws=/workspace",
                "--remap-path-prefix=/src/ws/target=/target",
            ]
        );
    }
}
