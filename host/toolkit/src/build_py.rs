//! `sandgraph build DIR` for a Python graph: a folder whose `pyproject.toml`
//! has a `[tool.sandgraph]` table naming the graph module (`module =
//! "graph"`), built with componentize-py.
//!
//! The CLI carries the WIT world and the Python SDK (`guest-sdk/python`), so
//! nothing needs to be installed but componentize-py itself: they are
//! written into a temporary build folder beside an entry module that imports
//! the graph module and binds the component's exports to the one graph it
//! compiled. componentize-py runs that at build time and snapshots the
//! initialised interpreter, so a graph module that fails to import fails the
//! build with its Python error.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// The componentize-py release the SDK is built and tested with.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// The environment variable naming the componentize-py executable.
pub const TOOL_ENV: &str = "SANDGRAPH_COMPONENTIZE_PY";

/// The WIT world, as the Rust SDK ships it.
const WIT: &str = include_str!("../../../guest-sdk/wit/graph.wit");

/// The world's imports, as `graph.wit` declares them. componentize-py
/// imports every interface of the world it is given, so the build writes a
/// world with `host` and only the capabilities the graph asks for
/// (`[tool.sandgraph] capabilities`): an unused capability is not imported.
const WORLD_IMPORTS: &str =
    "    import host;\n    import llm;\n    import tools;\n    export graph;\n";

/// The capabilities a Python graph may ask for, and the world line each adds.
const CAPABILITIES: [(&str, &str); 3] = [
    ("llm", "    import llm;\n"),
    ("tools", "    import tools;\n"),
    ("http", "    import wasi:http/outgoing-handler@0.2.12;\n"),
];

/// The WASI packages `wasi:http/outgoing-handler@0.2.12` needs, as the
/// host's wasmtime-wasi-http ships them: written under the build's
/// `wit/deps/` when the graph asks for `http` (nothing is downloaded).
pub(crate) const WASI_DEPS: [(&str, &str); 7] = [
    ("http", include_str!("../wit/wasi/http.wit")),
    ("io", include_str!("../wit/wasi/io.wit")),
    ("clocks", include_str!("../wit/wasi/clocks.wit")),
    ("cli", include_str!("../wit/wasi/cli.wit")),
    ("random", include_str!("../wit/wasi/random.wit")),
    ("filesystem", include_str!("../wit/wasi/filesystem.wit")),
    ("sockets", include_str!("../wit/wasi/sockets.wit")),
];

/// [`WIT`] with the world a Python graph asking for `capabilities` is built
/// against.
fn python_wit(capabilities: &[String]) -> Result<String, Error> {
    if WIT.matches(WORLD_IMPORTS).count() != 1 {
        return Err(Error::internal(
            "the embedded graph.wit's world no longer reads as build_py expects: update WORLD_IMPORTS",
        ));
    }
    let mut imports = String::from("    import host;\n");
    for (name, line) in CAPABILITIES {
        if capabilities.iter().any(|c| c == name) {
            imports.push_str(line);
        }
    }
    imports.push_str("    export graph;\n");
    Ok(WIT.replace(WORLD_IMPORTS, &imports))
}

/// The Python SDK, file by file (relative to the build's python path).
const SDK: [(&str, &str); 20] = [
    (
        "sandgraph/__init__.py",
        include_str!("../../../guest-sdk/python/sandgraph/__init__.py"),
    ),
    (
        "sandgraph/_aio.py",
        include_str!("../../../guest-sdk/python/sandgraph/_aio.py"),
    ),
    (
        "sandgraph/_bindings.py",
        include_str!("../../../guest-sdk/python/sandgraph/_bindings.py"),
    ),
    (
        "sandgraph/_component.py",
        include_str!("../../../guest-sdk/python/sandgraph/_component.py"),
    ),
    (
        "sandgraph/constants.py",
        include_str!("../../../guest-sdk/python/sandgraph/constants.py"),
    ),
    (
        "sandgraph/errors.py",
        include_str!("../../../guest-sdk/python/sandgraph/errors.py"),
    ),
    (
        "sandgraph/graph.py",
        include_str!("../../../guest-sdk/python/sandgraph/graph.py"),
    ),
    (
        "sandgraph/host.py",
        include_str!("../../../guest-sdk/python/sandgraph/host.py"),
    ),
    (
        "sandgraph/http.py",
        include_str!("../../../guest-sdk/python/sandgraph/http.py"),
    ),
    (
        "sandgraph/llm.py",
        include_str!("../../../guest-sdk/python/sandgraph/llm.py"),
    ),
    (
        "sandgraph/messages.py",
        include_str!("../../../guest-sdk/python/sandgraph/messages.py"),
    ),
    (
        "sandgraph/prebuilt.py",
        include_str!("../../../guest-sdk/python/sandgraph/prebuilt.py"),
    ),
    (
        "sandgraph/_unoffered.py",
        include_str!("../../../guest-sdk/python/sandgraph/_unoffered.py"),
    ),
    (
        "sandgraph/checkpoint/__init__.py",
        include_str!("../../../guest-sdk/python/sandgraph/checkpoint/__init__.py"),
    ),
    (
        "sandgraph/checkpoint/memory.py",
        include_str!("../../../guest-sdk/python/sandgraph/checkpoint/memory.py"),
    ),
    (
        "sandgraph/checkpoint/sqlite.py",
        include_str!("../../../guest-sdk/python/sandgraph/checkpoint/sqlite.py"),
    ),
    (
        "sandgraph/store/__init__.py",
        include_str!("../../../guest-sdk/python/sandgraph/store/__init__.py"),
    ),
    (
        "sandgraph/store/memory.py",
        include_str!("../../../guest-sdk/python/sandgraph/store/memory.py"),
    ),
    (
        "sandgraph/tools.py",
        include_str!("../../../guest-sdk/python/sandgraph/tools.py"),
    ),
    (
        "sandgraph/types.py",
        include_str!("../../../guest-sdk/python/sandgraph/types.py"),
    ),
];

/// The entry module componentize-py wraps; `{module}` is the graph module.
const ENTRY_NAME: &str = "sandgraph_entry";
const ENTRY: &str = "\
# Written by `sandgraph build`: imports the graph module, then exports the one
# graph it compiled as the component's `graph` interface. The graph's folder
# is mounted writable while this runs: no bytecode is cached into it.
import sys

sys.dont_write_bytecode = True

import importlib

# The component has no file system at run time: a module the stdlib finds
# by name only when it is first used (the `idna` codec, which `urllib` and
# `str.encode('idna')` look up) must be in the snapshot already.
import encodings.idna
import encodings.punycode
import stringprep
import unicodedata
import urllib.parse

# The graph's default name (`compile()` without `name=`): the normalised
# `[project].name` of pyproject.toml, or None.
import sandgraph.graph

sandgraph.graph.set_build_project({project})

importlib.import_module({module})

from sandgraph._component import bind

Graph = bind()
";

/// Module names the build itself uses, which a graph module may not take.
const RESERVED_MODULES: [&str; 5] = [
    "sandgraph",
    ENTRY_NAME,
    "wit_world",
    "componentize_py_types",
    "componentize_py_runtime",
];

/// Largest `pyproject.toml` read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// How much of the tool's stdout and stderr is kept (each); the rest is
/// read and dropped.
const MAX_TOOL_OUTPUT: usize = 64 * 1024;

/// How much of the tool's stderr is shown on failure.
const MAX_SHOWN_ERROR: usize = 6 * 1024;

/// How long componentize-py may run: a build takes 15–20 s on two cores; a
/// graph module that loops at import time would hang it for ever.
const BUILD_TIMEOUT: Duration = Duration::from_secs(600);

/// Builds the Python graph in `dir` into component bytes.
pub fn build(dir: &Path, _debug: bool) -> Result<Vec<u8>, Error> {
    let Manifest {
        module,
        capabilities,
        project,
    } = manifest(dir)?;
    let tool = std::env::var_os(TOOL_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("componentize-py"));
    let work = tempfile::Builder::new()
        .prefix("sandgraph-py-")
        .tempdir()
        .map_err(|e| Error::build(format!("cannot make a temporary build folder: {e}")))?;
    let root = work.path();
    write_build_folder(root, &module, &capabilities, project.as_deref())?;
    let out = root.join("graph.wasm");
    let dir_abs = dir
        .canonicalize()
        .map_err(|e| Error::build(format!("cannot resolve {}: {e}", dir.display())))?;
    let mut cmd = Command::new(&tool);
    cmd.arg("-q")
        .arg("-d")
        .arg(root.join("wit"))
        .args(["-w", "graph-component", "componentize", ENTRY_NAME, "-p"])
        .arg(root.join("sdk"))
        .arg("-p")
        .arg(&dir_abs)
        .arg("-o")
        .arg(&out)
        .current_dir(root)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // componentize-py adds a site-packages folder to the guest's path: the
    // active virtual environment's, else the building Python's own. Outside
    // a virtual environment an empty folder stands in for one, so what the
    // machine has installed does not reach the component; a graph's own
    // dependencies come from its folder or an activated environment.
    if std::env::var_os("VIRTUAL_ENV").is_none_or(|v| v.is_empty()) {
        cmd.env("VIRTUAL_ENV", root.join("venv"));
    }
    let child = cmd.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            missing_tool(&tool)
        } else {
            Error::build(format!("cannot run {}: {e}", tool.display()))
        }
    })?;
    let (status, _stdout, stderr) = wait_bounded(child, BUILD_TIMEOUT).map_err(|e| {
        Error::build(format!(
            "componentize-py did not finish building {}: {e}",
            dir.display()
        ))
    })?;
    if !status.success() {
        return Err(tool_failure(&dir_abs, &module, &stderr, status));
    }
    read_component(&out)
}

/// What `[tool.sandgraph]` in a graph's `pyproject.toml` asks for.
struct Manifest {
    /// The graph module (default `graph`), checked to exist in the folder.
    module: String,
    /// The capabilities to import, each a name of [`CAPABILITIES`].
    capabilities: Vec<String>,
    /// `[project].name` as a graph name (see [`graph_name`]): the name of a
    /// graph compiled without `name=`.
    project: Option<String>,
}

/// The `[tool.sandgraph]` table of `dir/pyproject.toml`.
fn manifest(dir: &Path) -> Result<Manifest, Error> {
    let path = dir.join("pyproject.toml");
    let read = |e: std::io::Error| Error::build(format!("cannot read {}: {e}", path.display()));
    let len = std::fs::metadata(&path).map_err(read)?.len();
    if len > MAX_MANIFEST_BYTES {
        return Err(Error::build(format!(
            "{} is larger than {MAX_MANIFEST_BYTES} bytes",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path).map_err(read)?;
    let doc: toml::Table =
        toml::from_str(&text).map_err(|e| Error::build(format!("{}: {e}", path.display())))?;
    let table = doc
        .get("tool")
        .and_then(|t| t.get("sandgraph"))
        .and_then(toml::Value::as_table)
        .ok_or_else(|| {
            Error::build(format!(
                "{}: [tool.sandgraph] must be a table naming the graph module (module = \"graph\")",
                path.display()
            ))
        })?;
    for key in table.keys() {
        if key != "module" && key != "capabilities" {
            return Err(Error::build(format!(
                "{}: [tool.sandgraph] has an unknown key {key:?} (the keys are `module` and \
                 `capabilities`)",
                path.display()
            )));
        }
    }
    let capabilities = capabilities(table.get("capabilities"))
        .map_err(|why| Error::build(format!("{}: [tool.sandgraph] {why}", path.display())))?;
    let module = module_of(dir, &path, table.get("module"))?;
    let project = project_graph_name(&path, doc.get("project").and_then(|p| p.get("name")))?;
    Ok(Manifest {
        module,
        capabilities,
        project,
    })
}

/// The graph module `[tool.sandgraph] module` of `path` names (default
/// `graph`), checked to be a module name and to exist in `dir`.
fn module_of(dir: &Path, path: &Path, value: Option<&toml::Value>) -> Result<String, Error> {
    let module = match value {
        None => "graph".to_owned(),
        Some(toml::Value::String(m)) => m.clone(),
        Some(_) => {
            return Err(Error::build(format!(
                "{}: [tool.sandgraph] module must be a string (a module name such as \"graph\")",
                path.display()
            )));
        }
    };
    check_module_name(&module).map_err(|why| {
        Error::build(format!(
            "{}: [tool.sandgraph] module {module:?} {why}",
            path.display()
        ))
    })?;
    let rel: PathBuf = module.split('.').collect();
    let file = dir.join(&rel).with_extension("py");
    let package = dir.join(&rel).join("__init__.py");
    if !file.is_file() && !package.is_file() {
        return Err(Error::build(format!(
            "{}: [tool.sandgraph] module {module:?} is not in {}: there is no {} or {}",
            path.display(),
            dir.display(),
            file.display(),
            package.display()
        )));
    }
    Ok(module)
}

/// `[project] name` of `path` as a graph name, if it has one.
fn project_graph_name(path: &Path, name: Option<&toml::Value>) -> Result<Option<String>, Error> {
    match name {
        None => Ok(None),
        Some(toml::Value::String(name)) => graph_name(name).map(Some).map_err(|why| {
            Error::build(format!(
                "{}: [project] name {name:?} cannot name the graph: {why} (rename the \
                 project)",
                path.display()
            ))
        }),
        Some(_) => Err(Error::build(format!(
            "{}: [project] name must be a string",
            path.display()
        ))),
    }
}

/// A Python project name as a graph (tool) name: `.` becomes `-` (the host
/// allows ASCII letters, digits, `_` and `-`, at most
/// [`sandgraph_core::MAX_NAME_LEN`] characters, and not
/// [`sandgraph_core::RESERVED_GRAPH_NAME`]); `Err` says why it cannot be one.
fn graph_name(project: &str) -> Result<String, String> {
    let name = project.trim().replace('.', "-");
    if name.is_empty() {
        return Err("it is empty".to_owned());
    }
    if name.chars().count() > sandgraph_core::MAX_NAME_LEN {
        return Err(format!(
            "it is longer than {} characters",
            sandgraph_core::MAX_NAME_LEN
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "{c:?} is not allowed: a graph name has ascii letters, digits, \"_\" and \"-\""
        ));
    }
    if name == sandgraph_core::RESERVED_GRAPH_NAME {
        return Err(format!("{name:?} is reserved"));
    }
    Ok(name)
}

/// The `capabilities` array: names of [`CAPABILITIES`], duplicates dropped.
fn capabilities(value: Option<&toml::Value>) -> Result<Vec<String>, String> {
    let known = || {
        CAPABILITIES
            .iter()
            .map(|(n, _)| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let items = value.as_array().ok_or_else(|| {
        format!(
            "capabilities must be an array of capability names (some of {})",
            known()
        )
    })?;
    let mut names: Vec<String> = Vec::new();
    for item in items {
        let name = item.as_str().ok_or_else(|| {
            format!(
                "capabilities holds {item}, not a capability name (one of {})",
                known()
            )
        })?;
        if !CAPABILITIES.iter().any(|(n, _)| *n == name) {
            return Err(format!(
                "capabilities names an unknown capability {name:?} (the capabilities are {})",
                known()
            ));
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

/// A dotted Python module name that the build does not use itself.
fn check_module_name(module: &str) -> Result<(), &'static str> {
    let ident = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    if module.ends_with(".py") {
        return Err("is a file name: name the module instead (\"graph\" for graph.py)");
    }
    if !module.split('.').all(ident) {
        return Err("is not a module name (dotted ascii identifiers, such as \"graph\")");
    }
    let top = module.split('.').next().unwrap_or_default();
    if RESERVED_MODULES.contains(&top) {
        return Err("is a name the build uses itself: rename the module");
    }
    Ok(())
}

/// Writes the WIT world, the SDK, the entry module and an empty stand-in
/// for a virtual environment into `root`.
fn write_build_folder(
    root: &Path,
    module: &str,
    capabilities: &[String],
    project: Option<&str>,
) -> Result<(), Error> {
    // Both are checked ascii names, so Rust's quoting is Python's too.
    let project = project.map_or_else(|| "None".to_owned(), |p| format!("{p:?}"));
    let entry = ENTRY
        .replace("{module}", &format!("{module:?}"))
        .replace("{project}", &project);
    let wit = python_wit(capabilities)?;
    let http = capabilities.iter().any(|c| c == "http");
    let deps = WASI_DEPS
        .iter()
        .filter(|_| http)
        .map(|(name, text)| (root.join(format!("wit/deps/{name}/{name}.wit")), *text));
    // An empty site-packages folder: componentize-py adds nothing of the
    // machine's (and does not warn that there is none).
    let venv = root.join("venv/lib/site-packages");
    let files = SDK
        .iter()
        .map(|(path, text)| (root.join("sdk").join(path), *text))
        .chain([
            (root.join("wit/graph.wit"), wit.as_str()),
            (
                root.join("sdk").join(format!("{ENTRY_NAME}.py")),
                entry.as_str(),
            ),
        ])
        .chain(deps);
    for (path, text) in files {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| write_failure(parent, e))?;
        }
        std::fs::write(&path, text).map_err(|e| write_failure(&path, e))?;
    }
    std::fs::create_dir_all(&venv).map_err(|e| write_failure(&venv, e))
}

fn write_failure(path: &Path, e: std::io::Error) -> Error {
    Error::build(format!("cannot write {}: {e}", path.display()))
}

fn missing_tool(tool: &Path) -> Error {
    Error::build(format!(
        "componentize-py is not installed (no {}): install it with `python3 -m pip install \
         componentize-py=={COMPONENTIZE_PY_VERSION}`, or point {TOOL_ENV} at it",
        tool.display()
    ))
}

/// Waits for `child`, keeping the first [`MAX_TOOL_OUTPUT`] bytes of its
/// stdout and stderr, and kills it after `timeout`.
fn wait_bounded(
    mut child: Child,
    timeout: Duration,
) -> Result<(ExitStatus, Vec<u8>, Vec<u8>), String> {
    fn drain(stream: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            if let Some(mut stream) = stream {
                let mut buf = [0u8; 8192];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let room = MAX_TOOL_OUTPUT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            }
            kept
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "it ran for more than {} s and was stopped",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    Ok((status, stdout, stderr))
}

/// The failure of a componentize-py run: the graph module's Python error
/// when it failed to import (componentize-py reports it as an
/// `AssertionError` wrapping the guest's traceback), else the tool's own
/// error; shown on stderr (bounded), summarised in the failure.
fn tool_failure(dir: &Path, module: &str, stderr: &[u8], status: ExitStatus) -> Error {
    let text = String::from_utf8_lossy(stderr);
    if let Some(traceback) = guest_traceback(&text, dir) {
        eprintln!("{}", crate::show::lines(&bounded(&traceback)));
        let last = traceback
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("an error")
            .trim();
        return Error::build(format!(
            "the graph module {module:?} in {} failed at import: {last} (its traceback is above)",
            dir.display()
        ));
    }
    let shown = text
        .split("\nStack backtrace:")
        .next()
        .unwrap_or_default()
        .trim();
    if !shown.is_empty() {
        eprintln!("{}", crate::show::lines(&bounded(shown)));
    }
    Error::build(format!(
        "componentize-py failed to build {} ({status}; its errors are above; sandgraph is \
         tested with componentize-py {COMPONENTIZE_PY_VERSION})",
        dir.display()
    ))
}

/// The guest's traceback in componentize-py's stderr, with the build's
/// virtual paths (`/0/` the SDK, `/1/` the graph folder) made real.
fn guest_traceback(text: &str, dir: &Path) -> Option<String> {
    let start = text.find("AssertionError: Traceback")? + "AssertionError: ".len();
    let rest = &text[start..];
    let end = rest.find("\n\nCaused by:").unwrap_or(rest.len());
    let folder = format!("File \"{}/", dir.display());
    Some(
        rest[..end]
            .replace("File \"/1/", &folder)
            .replace("File \"/0/", "File \"<sandgraph sdk>/")
            .trim_end()
            .to_owned(),
    )
}

/// `text` cut to [`MAX_SHOWN_ERROR`] bytes, keeping its end (where a
/// traceback says what went wrong).
fn bounded(text: &str) -> String {
    if text.len() <= MAX_SHOWN_ERROR {
        return text.to_owned();
    }
    let mut cut = text.len() - MAX_SHOWN_ERROR;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    format!("…{}", &text[cut..])
}

fn read_component(path: &Path) -> Result<Vec<u8>, Error> {
    let read = |e: std::io::Error| Error::build(format!("cannot read {}: {e}", path.display()));
    let len = std::fs::metadata(path).map_err(read)?.len();
    let max = crate::cache::MAX_COMPONENT_BYTES;
    if len > max {
        return Err(Error::build(format!(
            "componentize-py wrote a component of {len} bytes, more than a component may be ({max})"
        )));
    }
    std::fs::read(path).map_err(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_python_world_imports_only_the_asked_capabilities() {
        let wit = python_wit(&[]).unwrap();
        assert!(wit.contains("world graph-component {\n    import host;\n    export graph;\n}"));
        assert!(!wit.contains("import llm;") && !wit.contains("import tools;"));
        let wit = python_wit(&["http".into(), "llm".into()]).unwrap();
        assert!(
            wit.contains(
                "world graph-component {\n    import host;\n    import llm;\n    \
                 import wasi:http/outgoing-handler@0.2.12;\n    export graph;\n}"
            ),
            "{wit}"
        );
        assert!(!wit.contains("import tools;"));
    }

    #[test]
    fn capabilities_are_known_names() {
        let parse = |text: &str| {
            let table: toml::Table = toml::from_str(text).unwrap();
            capabilities(table.get("capabilities"))
        };
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(
            parse("capabilities = [\"tools\", \"llm\", \"tools\"]"),
            Ok(vec!["tools".to_owned(), "llm".to_owned()])
        );
        let err = parse("capabilities = [\"llm\", \"fs\"]").unwrap_err();
        assert_eq!(
            err,
            "capabilities names an unknown capability \"fs\" (the capabilities are \"llm\", \
             \"tools\", \"http\")"
        );
        assert!(
            parse("capabilities = \"llm\"")
                .unwrap_err()
                .contains("must be an array")
        );
        assert!(parse("capabilities = [1]").unwrap_err().contains("holds 1"));
    }

    #[test]
    fn an_http_build_writes_the_wasi_packages() {
        let dir = tempfile::tempdir().unwrap();
        write_build_folder(dir.path(), "graph", &["http".into()], Some("my-graph")).unwrap();
        let entry = std::fs::read_to_string(dir.path().join("sdk/sandgraph_entry.py")).unwrap();
        assert!(
            entry.contains("sandgraph.graph.set_build_project(\"my-graph\")"),
            "{entry}"
        );
        let http = std::fs::read_to_string(dir.path().join("wit/deps/http/http.wit")).unwrap();
        assert!(http.starts_with("package wasi:http@0.2.12;"), "{http}");
        let other = tempfile::tempdir().unwrap();
        write_build_folder(other.path(), "graph", &["llm".into()], None).unwrap();
        let entry = std::fs::read_to_string(other.path().join("sdk/sandgraph_entry.py")).unwrap();
        assert!(entry.contains("set_build_project(None)"), "{entry}");
        assert!(!other.path().join("wit/deps").exists());
    }

    #[test]
    fn project_names_become_graph_names() {
        assert_eq!(graph_name("research"), Ok("research".to_owned()));
        assert_eq!(graph_name("acme.triage_2"), Ok("acme-triage_2".to_owned()));
        assert_eq!(graph_name("a".repeat(64).as_str()).map(|n| n.len()), Ok(64));
        assert!(
            graph_name(&"a".repeat(65))
                .unwrap_err()
                .contains("longer than 64")
        );
        assert_eq!(
            graph_name("my graph"),
            Err(
                "' ' is not allowed: a graph name has ascii letters, digits, \"_\" and \"-\""
                    .into()
            )
        );
        assert_eq!(
            graph_name("run_code"),
            Err("\"run_code\" is reserved".into())
        );
        assert_eq!(graph_name(" "), Err("it is empty".into()));
    }

    #[test]
    fn module_names() {
        assert_eq!(check_module_name("graph"), Ok(()));
        assert_eq!(check_module_name("pkg.graph_2"), Ok(()));
        for bad in ["", "2x", "a-b", "a..b", "a.", "graph.py", "é"] {
            assert!(check_module_name(bad).is_err(), "{bad:?}");
        }
        for reserved in [
            "sandgraph",
            "sandgraph.graph",
            "sandgraph_entry",
            "wit_world",
        ] {
            assert_eq!(
                check_module_name(reserved),
                Err("is a name the build uses itself: rename the module")
            );
        }
    }

    #[test]
    fn the_guest_traceback_names_the_graph_folder() {
        let stderr = "Traceback (most recent call last):\n  File \"/usr/bin/componentize-py\", \
                      line 8, in <module>\nAssertionError: Traceback (most recent call last):\n  \
                      File \"/0/sandgraph_entry.py\", line 2, in <module>\n  File \"/1/graph.py\", \
                      line 2\n    def f(:\n          ^\nSyntaxError: invalid syntax\n\n\nCaused by:\n    \
                      SyntaxError\n\nStack backtrace:\n   0: x\n";
        let tb = guest_traceback(stderr, Path::new("/g")).unwrap();
        assert!(
            tb.starts_with("Traceback (most recent call last):\n"),
            "{tb}"
        );
        assert!(tb.contains("File \"/g/graph.py\", line 2"), "{tb}");
        assert!(
            tb.contains("File \"<sandgraph sdk>/sandgraph_entry.py\""),
            "{tb}"
        );
        assert!(tb.ends_with("SyntaxError: invalid syntax"), "{tb}");
        assert_eq!(
            guest_traceback("error: no such world", Path::new("/g")),
            None
        );
    }

    #[test]
    fn shown_errors_keep_their_end() {
        let long = format!("{}END", "x".repeat(MAX_SHOWN_ERROR * 2));
        let shown = bounded(&long);
        assert!(shown.ends_with("END") && shown.len() <= MAX_SHOWN_ERROR + 4);
        assert_eq!(bounded("short"), "short");
    }

    #[test]
    fn the_embedded_sdk_is_the_whole_package() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk/python");
        // The package and its subpackages (`sandgraph/checkpoint/...`).
        let mut on_disk: Vec<String> = Vec::new();
        let mut dirs = vec![root.join("sandgraph")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()) {
                let path = entry.path();
                if path.is_dir() && path.join("__init__.py").is_file() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "py") {
                    let rel = path.strip_prefix(&root).unwrap();
                    on_disk.push(rel.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = SDK.iter().map(|(p, _)| (*p).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add the new SDK file to build_py::SDK");
    }
}
