//! `sandgraph build` for a JavaScript graph: a folder whose `package.json`
//! has a `"sandgraph"` field, e.g. `{"sandgraph": {"main": "graph.js"}}`.
//!
//! The SDK (`@sandgraph/sdk`) and the WIT world are embedded in the CLI and
//! written into a temporary build folder, so the graph needs neither
//! installed. There the graph's main module is bundled with the SDK into one
//! ES module by rolldown (jco's own bundler, found through jco), and jco's
//! QuickJS backend (`componentize-qjs`) turns the bundle into a component: a
//! pre-initialised QuickJS snapshot of about 1.8 MB (echo) that imports
//! only `sandgraph:graph/*`. The QuickJS backend is used rather than
//! StarlingMonkey (jco's default) because it works for every example and
//! costs far less: 1.8 MB against 12 MB, a first load (Cranelift compile) of
//! about 2 s against 14-20 s, a compile-cache entry of about 8 MB against
//! 134 MB, and no WASI (StarlingMonkey's default build imports wasi:http,
//! which the host refuses).
//!
//! The bundle's text is reproducible (its modules are named relative to the
//! graph's folder), but the component is not byte for byte: the Wizer
//! snapshot captures hash seeds QuickJS draws from WASI random at build time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Error;

/// The SDK's modules, file by file (`guest-sdk/js/*.js`): `@sandgraph/sdk`
/// resolves to `index.js`, `@sandgraph/sdk/NAME` to `NAME.js`, and the
/// modules import each other by relative path.
const SDK: [(&str, &str); 9] = [
    ("index.js", include_str!("../../../guest-sdk/js/index.js")),
    (
        "capabilities.js",
        include_str!("../../../guest-sdk/js/capabilities.js"),
    ),
    ("http.js", include_str!("../../../guest-sdk/js/http.js")),
    ("jobs.js", include_str!("../../../guest-sdk/js/jobs.js")),
    ("llm.js", include_str!("../../../guest-sdk/js/llm.js")),
    (
        "messages.js",
        include_str!("../../../guest-sdk/js/messages.js"),
    ),
    (
        "prebuilt.js",
        include_str!("../../../guest-sdk/js/prebuilt.js"),
    ),
    (
        "registry.js",
        include_str!("../../../guest-sdk/js/registry.js"),
    ),
    ("tools.js", include_str!("../../../guest-sdk/js/tools.js")),
];
/// The bundling script, run with node in the build folder.
const BUNDLE_MJS: &str = include_str!("../../../guest-sdk/js/build/bundle.mjs");
/// The WIT world, as the Rust SDK ships it.
const GRAPH_WIT: &str = include_str!("../../../guest-sdk/wit/graph.wit");

/// The jco version `sandgraph build` is tested with (pinned in
/// example-graphs/js/package.json).
pub const JCO_VERSION: &str = "1.35.0";

/// The world the component is built for: `graph-component` without the
/// capabilities the graph does not ask for (`"capabilities"` in the
/// `sandgraph` field), since the QuickJS backend imports every interface of
/// the world whether the graph uses it or not.
const WORLD: &str = "js-graph";

/// Capabilities a JavaScript graph may import.
const CAPABILITIES: [&str; 3] = ["llm", "tools", "http"];

/// The namespace `wasi:http` and the WASI packages it uses are renamed to
/// while jco runs: `--backend-qjs-stub-wasi` replaces every `wasi:` import
/// with a trap (the QuickJS runtime's own WASI use), and the graph's
/// `wasi:http` must stay a real import. [`rename_wasi_imports`] gives the
/// component's imports their `wasi:` names back; the stand-in has the same
/// length, so no size changes.
const WASI_STAND_IN: &str = "xasi:";

/// Largest package.json read.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;
/// Largest component read back from jco.
const MAX_COMPONENT_BYTES: u64 = 64 << 20;
/// Bytes of a tool's stdout and stderr kept (each); the rest is discarded.
const MAX_TOOL_OUTPUT: usize = 16 << 10;
/// How long one tool run may take.
const TOOL_TIMEOUT: Duration = Duration::from_secs(600);

/// What the `sandgraph` field of package.json says.
#[derive(Debug, PartialEq)]
struct Manifest {
    /// The graph's main module, relative to the graph's folder.
    main: String,
    capabilities: Vec<String>,
}

/// Builds the JavaScript graph in `dir` into component bytes. `debug` changes
/// nothing: a QuickJS component carries its source, not DWARF.
pub fn build(dir: &Path, _debug: bool) -> Result<Vec<u8>, Error> {
    let manifest = read_manifest(dir)?;
    let main = dir.join(&manifest.main);
    if !main.is_file() {
        return Err(Error::build(format!(
            "{}: the main module {} does not exist",
            dir.join("package.json").display(),
            main.display()
        )));
    }
    let graph_dir = dir
        .canonicalize()
        .map_err(|e| Error::build(format!("cannot resolve {}: {e}", dir.display())))?;
    let jco = find_jco(&graph_dir)?;
    let work = tempfile::Builder::new()
        .prefix("sandgraph-js-")
        .tempdir()
        .map_err(|e| Error::build(format!("cannot create a build folder: {e}")))?;
    let tmp = work.path();
    write_build_folder(tmp, &manifest.capabilities)?;
    let http = manifest.capabilities.iter().any(|c| c == "http");

    let mut bundle = Command::new(node());
    bundle
        .arg(tmp.join("bundle.mjs"))
        .arg(&jco)
        .arg(&graph_dir)
        .arg(&manifest.main)
        .arg(tmp.join("sdk"))
        .arg(tmp.join("bundle.js"))
        .args(manifest.capabilities.iter().map(|c| {
            if c == "http" {
                format!("http@{}", wasi_http_version())
            } else {
                c.clone()
            }
        }))
        .current_dir(tmp);
    run_tool(bundle, "node", &format!("bundling {}", main.display()))?;

    let out = tmp.join("graph.wasm");
    let mut componentize = Command::new(&jco);
    componentize
        .arg("componentize")
        .arg(tmp.join("bundle.js"))
        .arg("--wit")
        .arg(tmp.join("wit"))
        .args(["--world-name", WORLD, "--out"])
        .arg(&out)
        .args([
            "--backend",
            "quickjs",
            "--backend-qjs-disable-async",
            "--backend-qjs-stub-wasi",
        ])
        .current_dir(tmp);
    run_tool(
        componentize,
        "jco",
        &format!("jco componentize of {}", main.display()),
    )?;
    let component = read_component(&out)?;
    if http {
        rename_wasi_imports(component)
    } else {
        Ok(component)
    }
}

/// Writes what jco and the bundler read into the build folder `tmp`: the
/// SDK, the bundling script, and the WIT world narrowed to `capabilities`
/// (with the WASI packages `wasi:http` needs, renamed while jco runs).
fn write_build_folder(tmp: &Path, capabilities: &[String]) -> Result<(), Error> {
    let write = |name: &str, text: &str| {
        let path = tmp.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::build(format!("cannot create {}: {e}", parent.display())))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| Error::build(format!("cannot write {}: {e}", path.display())))
    };
    for (name, source) in SDK {
        write(&format!("sdk/{name}"), source)?;
    }
    write("bundle.mjs", BUNDLE_MJS)?;
    write("wit/graph.wit", GRAPH_WIT)?;
    write("wit/js-graph.wit", &world_wit(capabilities))?;
    let http = capabilities.iter().any(|c| c == "http");
    for (name, text) in crate::build_py::WASI_DEPS.iter().filter(|_| http) {
        write(
            &format!("wit/deps/{name}/{name}.wit"),
            &text.replace("wasi:", WASI_STAND_IN),
        )?;
    }
    Ok(())
}

/// The version of the vendored `wasi:http` (the host's wasmtime-wasi-http).
fn wasi_http_version() -> &'static str {
    crate::build_py::WASI_DEPS
        .iter()
        .find(|(name, _)| *name == "http")
        .and_then(|(_, text)| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix("package wasi:http@"))
        })
        .and_then(|rest| rest.strip_suffix(';'))
        .unwrap_or("0.2.12")
}

/// The id of a component's import section.
const IMPORT_SECTION: u8 = 10;

/// `component` with the names of its own imports renamed from
/// [`WASI_STAND_IN`] to `wasi:`. Only the top-level import sections change:
/// the nested components jco composed keep the names they were linked by
/// (one of them imports both the stubbed `wasi:` and the graph's stand-in).
fn rename_wasi_imports(mut component: Vec<u8>) -> Result<Vec<u8>, Error> {
    let bad = |what: &str| {
        Error::build(format!(
            "jco wrote a component this build cannot read: {what}"
        ))
    };
    if component.len() < 8 || !component.starts_with(b"\0asm") {
        return Err(bad("no wasm header"));
    }
    let mut at = 8;
    let mut renamed = 0;
    while at < component.len() {
        let id = component[at];
        let (size, start) = leb128_u32(&component, at + 1).ok_or_else(|| bad("a section size"))?;
        let end = start
            .checked_add(size as usize)
            .filter(|end| *end <= component.len())
            .ok_or_else(|| bad("a section past the end"))?;
        if id == IMPORT_SECTION {
            let section = &mut component[start..end];
            let mut i = 0;
            while let Some(found) = find(&section[i..], WASI_STAND_IN.as_bytes()) {
                section[i + found..i + found + WASI_STAND_IN.len()].copy_from_slice(b"wasi:");
                i += found + WASI_STAND_IN.len();
                renamed += 1;
            }
        }
        at = end;
    }
    if renamed == 0 {
        return Err(bad("it imports no wasi:http"));
    }
    Ok(component)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The unsigned LEB128 number at `at` and the offset after it.
fn leb128_u32(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    let mut value: u32 = 0;
    for (i, byte) in bytes.get(at..)?.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f).checked_shl(7 * i as u32)?;
        if byte & 0x80 == 0 {
            return Some((value, at + i + 1));
        }
    }
    None
}

/// Reads the `sandgraph` field of `dir/package.json`.
fn read_manifest(dir: &Path) -> Result<Manifest, Error> {
    let path = dir.join("package.json");
    let len = std::fs::metadata(&path)
        .map_err(|e| Error::build(format!("cannot read {}: {e}", path.display())))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(Error::build(format!(
            "{} is larger than {MAX_MANIFEST_BYTES} bytes",
            path.display()
        )));
    }
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Error::build(format!("cannot read {}: {e}", path.display())))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::build(format!("{}: {e}", path.display())))?;
    parse_manifest(&doc).map_err(|e| Error::build(format!("{}: {e}", path.display())))
}

fn parse_manifest(doc: &serde_json::Value) -> Result<Manifest, String> {
    let field = doc
        .get("sandgraph")
        .ok_or("there is no \"sandgraph\" field")?;
    let field = field
        .as_object()
        .ok_or("the \"sandgraph\" field must be an object, e.g. {\"main\": \"graph.js\"}")?;
    for key in field.keys() {
        if key != "main" && key != "capabilities" {
            return Err(format!(
                "the \"sandgraph\" field has an unknown key \"{key}\" (known: main, capabilities)"
            ));
        }
    }
    let main = match field.get("main") {
        Some(serde_json::Value::String(m)) if !m.trim().is_empty() => m.clone(),
        Some(_) => {
            return Err("\"sandgraph\".main must be a module path, e.g. \"graph.js\"".into());
        }
        None => match doc.get("main").and_then(serde_json::Value::as_str) {
            Some(m) => m.to_owned(),
            None => {
                return Err(
                    "the \"sandgraph\" field names no main module: add \"main\": \"graph.js\""
                        .into(),
                );
            }
        },
    };
    let main = main.strip_prefix("./").unwrap_or(&main).to_owned();
    if Path::new(&main).is_absolute() || main.split(['/', '\\']).any(|part| part == "..") {
        return Err(format!(
            "\"sandgraph\".main \"{main}\" must be a path inside the graph's folder"
        ));
    }
    let mut capabilities = Vec::new();
    if let Some(caps) = field.get("capabilities") {
        let list = caps
            .as_array()
            .ok_or("\"sandgraph\".capabilities must be an array, e.g. [\"llm\"]")?;
        for cap in list {
            match cap.as_str() {
                Some(c) if CAPABILITIES.contains(&c) => {
                    if !capabilities.iter().any(|x| x == c) {
                        capabilities.push(c.to_owned());
                    }
                }
                _ => {
                    return Err(format!(
                        "\"sandgraph\".capabilities: {cap} is not one of {}",
                        CAPABILITIES.join(", ")
                    ));
                }
            }
        }
    }
    Ok(Manifest { main, capabilities })
}

/// The world the component is built for, in the package of graph.wit.
fn world_wit(capabilities: &[String]) -> String {
    let version = GRAPH_WIT
        .lines()
        .find_map(|l| l.trim().strip_prefix("package sandgraph:graph@"))
        .and_then(|rest| rest.strip_suffix(';'))
        .unwrap_or("0.2.0");
    let mut wit =
        format!("package sandgraph:graph@{version};\n\nworld {WORLD} {{\n    import host;\n");
    for cap in capabilities {
        if cap == "http" {
            wit.push_str(&format!(
                "    import {WASI_STAND_IN}http/outgoing-handler@{};\n",
                wasi_http_version()
            ));
        } else {
            wit.push_str(&format!("    import {cap};\n"));
        }
    }
    wit.push_str("    export graph;\n}\n");
    wit
}

/// The node binary: `$SANDGRAPH_NODE`, else `node` on PATH.
fn node() -> PathBuf {
    std::env::var_os("SANDGRAPH_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"))
}

/// The install command named when jco is missing.
fn install_hint(dir: &Path) -> String {
    format!(
        "run `npm install --save-dev @bytecodealliance/jco@{JCO_VERSION}` in {} (or an ancestor), \
         or set SANDGRAPH_JCO to a jco command",
        dir.display()
    )
}

/// jco: `$SANDGRAPH_JCO`, else `node_modules/.bin/jco` in `dir` or an
/// ancestor, else `jco` on PATH.
fn find_jco(dir: &Path) -> Result<PathBuf, Error> {
    if let Some(jco) = std::env::var_os("SANDGRAPH_JCO") {
        let jco = PathBuf::from(jco);
        if jco.is_file() {
            return Ok(jco);
        }
        return Err(Error::build(format!(
            "SANDGRAPH_JCO is {}, which is not a file: point it at jco, or unset it and {}",
            jco.display(),
            install_hint(dir)
        )));
    }
    for folder in dir.ancestors() {
        let jco = folder.join("node_modules/.bin/jco");
        if jco.is_file() {
            return Ok(jco);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for folder in std::env::split_paths(&path) {
        let jco = folder.join("jco");
        if jco.is_file() {
            return Ok(jco);
        }
    }
    Err(Error::build(format!(
        "jco is not installed (a JavaScript graph is built with jco's QuickJS backend): {}",
        install_hint(dir)
    )))
}

/// Reads at most [`MAX_TOOL_OUTPUT`] bytes of `pipe` and discards the rest.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<(Vec<u8>, bool)> {
    std::thread::spawn(move || {
        let Some(mut pipe) = pipe else {
            return (Vec::new(), false);
        };
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        let mut cut = false;
        loop {
            match pipe.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = MAX_TOOL_OUTPUT.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                    cut |= n > room;
                }
            }
        }
        (kept, cut)
    })
}

/// Runs `cmd` (the tool `tool`, doing `what`) to completion within
/// [`TOOL_TIMEOUT`]; on failure, the error shows its stderr (or stdout),
/// bounded.
fn run_tool(mut cmd: Command, tool: &str, what: &str) -> Result<(), Error> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            let hint = if tool == "node" {
                "install Node.js 18 or later (or set SANDGRAPH_NODE)".to_owned()
            } else {
                format!(
                    "check that node is installed, or {}",
                    install_hint(Path::new("."))
                )
            };
            Error::build(format!(
                "cannot run {tool} ({}) for {what}: {e}; {hint}",
                cmd.get_program().to_string_lossy()
            ))
        })?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if start.elapsed() > TOOL_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => {
                return Err(Error::build(format!("{what}: cannot wait for {tool}: {e}")));
            }
        }
    };
    let (out, out_cut) = stdout.join().unwrap_or_default();
    let (err, err_cut) = stderr.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(Error::build(format!(
            "{what} did not finish within {} s",
            TOOL_TIMEOUT.as_secs()
        )));
    };
    if status.success() {
        return Ok(());
    }
    let (text, cut) = if String::from_utf8_lossy(&err).trim().is_empty() {
        (out, out_cut)
    } else {
        (err, err_cut)
    };
    let mut text = tool_message(&String::from_utf8_lossy(&text));
    if cut {
        text.push_str("\n(output truncated)");
    }
    Err(Error::build(format!("{what} failed ({status}):\n{text}")))
}

/// The tool's message without its noise: ANSI colours and node's stack
/// frames of the tool itself.
fn tool_message(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
            continue;
        }
        plain.push(c);
    }
    // componentize-qjs wraps what the graph module threw while it was
    // loaded (the Wizer snapshot) in its own error text: keep the thrown
    // error only.
    const THREW: &str = "JavaScript module evaluation: ";
    if let Some(at) = plain.rfind(THREW) {
        let thrown = &plain[at + THREW.len()..];
        let thrown = thrown.split("\n] {").next().unwrap_or(thrown);
        plain = format!("the graph module threw while it was loaded: {thrown}");
    }
    let lines: Vec<&str> = plain
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("at ") && (t.contains("node_modules") || t.contains("node:")))
        })
        .collect();
    lines.join("\n").trim().to_owned()
}

fn read_component(path: &Path) -> Result<Vec<u8>, Error> {
    let len = std::fs::metadata(path)
        .map_err(|e| {
            Error::build(format!(
                "jco reported success but wrote no component at {}: {e}",
                path.display()
            ))
        })?
        .len();
    if len > MAX_COMPONENT_BYTES {
        return Err(Error::build(format!(
            "jco wrote a component of {len} bytes, more than {MAX_COMPONENT_BYTES}"
        )));
    }
    std::fs::read(path).map_err(|e| Error::build(format!("cannot read {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_manifest_names_the_main_module_and_capabilities() {
        assert_eq!(
            parse_manifest(&json!({"sandgraph": {"main": "./src/graph.js"}})),
            Ok(Manifest {
                main: "src/graph.js".into(),
                capabilities: vec![]
            })
        );
        assert_eq!(
            parse_manifest(
                &json!({"main": "g.js", "sandgraph": {"capabilities": ["tools", "llm", "tools"]}})
            ),
            Ok(Manifest {
                main: "g.js".into(),
                capabilities: vec!["tools".into(), "llm".into()]
            })
        );
        let err = |doc| parse_manifest(&doc).unwrap_err();
        assert_eq!(
            err(json!({"sandgraph": true})),
            "the \"sandgraph\" field must be an object, e.g. {\"main\": \"graph.js\"}"
        );
        assert_eq!(
            err(json!({"sandgraph": {}})),
            "the \"sandgraph\" field names no main module: add \"main\": \"graph.js\""
        );
        assert_eq!(
            err(json!({"sandgraph": {"main": "../x.js"}})),
            "\"sandgraph\".main \"../x.js\" must be a path inside the graph's folder"
        );
        assert_eq!(
            err(json!({"sandgraph": {"main": "g.js", "capabilities": ["fs"]}})),
            "\"sandgraph\".capabilities: \"fs\" is not one of llm, tools, http"
        );
        assert_eq!(
            err(json!({"sandgraph": {"mian": "g.js"}})),
            "the \"sandgraph\" field has an unknown key \"mian\" (known: main, capabilities)"
        );
    }

    #[test]
    fn the_world_imports_host_and_the_asked_capabilities_only() {
        assert_eq!(
            world_wit(&[]),
            "package sandgraph:graph@0.2.0;\n\nworld js-graph {\n    import host;\n    export graph;\n}\n"
        );
        assert!(world_wit(&["llm".into()]).contains("    import host;\n    import llm;\n"));
        assert!(
            world_wit(&["http".into()]).contains("    import xasi:http/outgoing-handler@0.2.12;\n"),
            "wasi:http under its stand-in name, at the vendored version"
        );
    }

    #[test]
    fn only_the_components_own_imports_get_their_wasi_names_back() {
        // A header, an import section naming the stand-in twice, and a
        // nested component section naming it once.
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        let imports = b"\x02\0\x13xasi:io/poll@0.2.12\0\x12xasi:http/x@0.2.12";
        bytes.push(IMPORT_SECTION);
        bytes.push(imports.len() as u8);
        bytes.extend_from_slice(imports);
        let nested = b"(import xasi:io/poll@0.2.12)";
        bytes.push(4);
        bytes.push(nested.len() as u8);
        bytes.extend_from_slice(nested);
        let renamed = rename_wasi_imports(bytes.clone()).unwrap();
        let text = String::from_utf8_lossy(&renamed);
        assert!(
            text.contains("\x13wasi:io/poll@0.2.12\0\x12wasi:http/x"),
            "{text}"
        );
        assert!(text.ends_with("(import xasi:io/poll@0.2.12)"), "{text}");
        assert_eq!(renamed.len(), bytes.len());
        let no_http = b"\0asm\x0d\0\x01\0".to_vec();
        assert!(rename_wasi_imports(no_http).is_err());
        let cut = [b"\0asm\x0d\0\x01\0".as_slice(), &[IMPORT_SECTION, 0x7f]].concat();
        assert!(rename_wasi_imports(cut).is_err());
    }

    #[test]
    fn the_embedded_sdk_is_the_whole_package() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk/js");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.ends_with(".js"))
            .collect();
        on_disk.sort();
        let mut embedded: Vec<String> = SDK.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk, "add the new SDK module to build_js::SDK");
    }

    #[test]
    fn tool_messages_lose_colours_and_the_tools_own_frames() {
        let threw = "[Error: : Failed to evaluate user JavaScript module: Failed to finish \
                     JavaScript module evaluation: Error: bad graph\n  edge\n    at compile \
                     (/bundle.js:1:2)\n] {\n  code: 'GenericFailure'\n}\n";
        assert_eq!(
            tool_message(threw),
            "the graph module threw while it was loaded: Error: bad graph\n  edge\n    at compile (/bundle.js:1:2)"
        );
        let text = "\u{1b}[31merror\u{1b}[0m: bad\n    at f (file:///x/node_modules/jco/a.js:1:2)\n    at node:internal/x\n    at graph.js:3:1\n";
        assert_eq!(tool_message(text), "error: bad\n    at graph.js:3:1");
    }
}
