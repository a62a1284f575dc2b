//! `sandgraph new NAME`: writes a graph crate that builds with `sandgraph
//! build` and passes `cargo test` at once.
//!
//! The files are templates under `host/cli/templates/`, embedded with
//! `include_str!`; `{{key}}` placeholders are replaced by [`render`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use sandgraph_runtime::{ErrorCode, RunError};

use crate::exit::Failure;
use crate::show;

/// Longest crate and graph name: graph names are tool names, which MCP
/// clients and model providers cap at 64 characters.
pub const MAX_NAME_LEN: usize = sandgraph_core::MAX_NAME_LEN;

/// Longest `--sdk-git` URL: a repository URL is well under this; the bound
/// keeps the Cargo.toml line sane.
pub const MAX_GIT_URL_BYTES: usize = 2048;

/// Largest `Cargo.toml` read at `--sdk-path` to check that it is the SDK's:
/// a manifest is kilobytes.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// The SDK's crate name.
const SDK_CRATE: &str = "sandgraph-sdk";

/// The crate name the CLI is installed from.
const CLI_CRATE: &str = "sandgraph-cli";

/// Names a crate may not take: Rust keywords (a library named after one
/// cannot be used), cargo's reserved names, and the template's own
/// dependencies (a package cannot depend on its own name).
const RESERVED_NAMES: &[&str] = &[
    "abstract",
    "alloc",
    "as",
    "async",
    "await",
    "become",
    "box",
    "break",
    "build",
    "const",
    "continue",
    "core",
    "crate",
    "do",
    "dyn",
    "else",
    "enum",
    "extern",
    "false",
    "final",
    "fn",
    "for",
    "gen",
    "if",
    "impl",
    "in",
    "let",
    "loop",
    "macro",
    "match",
    "mod",
    "move",
    "mut",
    "override",
    "priv",
    "proc_macro",
    "pub",
    "ref",
    "return",
    "sandgraph_sdk",
    "self",
    "serde",
    "static",
    "std",
    "struct",
    "super",
    "test",
    "trait",
    "true",
    "try",
    "type",
    "typeof",
    "unsafe",
    "unsized",
    "use",
    "virtual",
    "where",
    "while",
    "yield",
];

/// What the new graph does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Template {
    /// Two nodes over a text: count its words, log the count
    Basic,
    /// One node that asks a model through the host; its golden case replays a recorded exchange
    Agent,
}

/// `sandgraph new`
#[derive(clap::Args)]
#[command(after_long_help = NEW_HELP)]
pub struct NewArgs {
    /// Name of the crate and of the graph: ASCII letters, digits, `-` and `_`, starting with a letter, at most 64
    name: String,
    /// Folder to write the crate into; it must not exist or be empty [default: ./NAME]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// What the graph does
    #[arg(long, value_enum, default_value_t = Template::Basic)]
    template: Template,
    /// Depend on the SDK in this local folder (written as an absolute path) instead of the published crate
    #[arg(long, value_name = "DIR", conflicts_with = "sdk_git")]
    sdk_path: Option<PathBuf>,
    /// Depend on the SDK from this git repository instead of the published crate
    #[arg(long, value_name = "URL")]
    sdk_git: Option<String>,
}

const NEW_HELP: &str = "\
The crate: Cargo.toml (a cdylib, a release profile tuned for size, a workspace of \
its own), src/lib.rs (a strict graph and native tests), tests/*.json (golden cases for \
`sandgraph test`), .gitignore, README.md and .github/workflows/graph.yml (GitHub Actions: \
cargo test, sandgraph build, test and check, the component uploaded).

The SDK dependency is `sandgraph-sdk = \"<this CLI's version>\"` unless --sdk-path or \
--sdk-git says otherwise; serde with `derive` comes with it.";

/// One file of the crate: where it goes, and its template.
type File = (&'static str, &'static str);

const COMMON: [File; 4] = [
    ("Cargo.toml", include_str!("../templates/Cargo.toml.in")),
    (".gitignore", include_str!("../templates/gitignore")),
    ("README.md", include_str!("../templates/README.md")),
    (
        ".github/workflows/graph.yml",
        include_str!("../templates/graph.yml"),
    ),
];

const BASIC: [File; 2] = [
    ("src/lib.rs", include_str!("../templates/basic/lib.rs")),
    (
        "tests/basic.json",
        include_str!("../templates/basic/basic.json"),
    ),
];

const AGENT: [File; 4] = [
    ("src/lib.rs", include_str!("../templates/agent/lib.rs")),
    (
        "tests/basic.json",
        include_str!("../templates/agent/basic.json"),
    ),
    (
        "tests/basic.cassette.jsonl",
        include_str!("../templates/agent/basic.cassette.jsonl"),
    ),
    (
        "tests/denied.json",
        include_str!("../templates/agent/denied.json"),
    ),
];

impl Template {
    fn files(self) -> &'static [File] {
        match self {
            Template::Basic => &BASIC,
            Template::Agent => &AGENT,
        }
    }

    /// The README's one-line summary, example input, layout and notes.
    fn readme(self) -> [(&'static str, &'static str); 4] {
        match self {
            Template::Basic => [
                (
                    "summary",
                    "it counts the words of `text` and logs the count.",
                ),
                ("input", r#"{"text": "hello wasm world"}"#),
                ("layout", ""),
                ("notes", ""),
            ],
            Template::Agent => [
                (
                    "summary",
                    "it answers `question` in one sentence, asking a model through the host.",
                ),
                ("input", r#"{"question": "What is WebAssembly?"}"#),
                (
                    "layout",
                    "\n- `tests/basic.cassette.jsonl`: the recorded model exchange \
                     `tests/basic.json` replays.",
                ),
                ("notes", include_str!("../templates/agent/notes.md")),
            ],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Template::Basic => "basic",
            Template::Agent => "agent",
        }
    }
}

fn invalid(message: impl Into<String>) -> Failure {
    RunError::new(ErrorCode::InvalidInput, message).into()
}

/// `Err` says why `name` cannot name both a crate and a graph.
fn check_name(name: &str) -> Result<(), String> {
    let Some(first) = name.chars().next() else {
        return Err("the name is empty".to_owned());
    };
    if name.len() > MAX_NAME_LEN {
        return Err(format!("it is longer than {MAX_NAME_LEN} characters"));
    }
    if !first.is_ascii_alphabetic() {
        return Err("it must start with an ASCII letter".to_owned());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{c:?} is not allowed: use ASCII letters, digits, `-` and `_`"
        ));
    }
    let normalized = name.replace('-', "_");
    if RESERVED_NAMES.contains(&normalized.as_str()) {
        return Err(format!(
            "`{name}` is reserved (a Rust keyword, a name cargo keeps, or a dependency of the crate)"
        ));
    }
    Ok(())
}

/// `text` as a TOML basic string, quotes included.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Where the crate gets the SDK.
enum SdkSource {
    Registry,
    Path(PathBuf),
    Git(String),
}

impl SdkSource {
    fn from_args(args: &NewArgs) -> Result<SdkSource, Failure> {
        if let Some(path) = &args.sdk_path {
            return sdk_path(path).map(SdkSource::Path);
        }
        if let Some(url) = &args.sdk_git {
            if url.is_empty()
                || url.len() > MAX_GIT_URL_BYTES
                || url.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(invalid(format!(
                    "--sdk-git {}: give a repository URL of at most {MAX_GIT_URL_BYTES} bytes, \
                     without spaces or control characters",
                    show::line(url, show::MAX_LINE_BYTES)
                )));
            }
            return Ok(SdkSource::Git(url.clone()));
        }
        Ok(SdkSource::Registry)
    }

    /// The `[dependencies]` line.
    fn dependency(&self) -> String {
        let version = env!("CARGO_PKG_VERSION");
        match self {
            SdkSource::Registry => format!("{SDK_CRATE} = {}", toml_string(version)),
            SdkSource::Path(p) => format!(
                "{SDK_CRATE} = {{ path = {} }}",
                toml_string(&p.to_string_lossy())
            ),
            SdkSource::Git(url) => format!("{SDK_CRATE} = {{ git = {} }}", toml_string(url)),
        }
    }

    /// What the CI workflow passes to `cargo install --locked`.
    fn cli_install(&self) -> String {
        match self {
            SdkSource::Git(url) => format!("--git {url} {CLI_CRATE}"),
            // A local path means nothing on a CI runner: the published CLI.
            SdkSource::Registry | SdkSource::Path(_) => {
                format!("{CLI_CRATE} --version {}", env!("CARGO_PKG_VERSION"))
            }
        }
    }
}

/// The absolute path of the SDK crate at `path`, checked to be the SDK's.
fn sdk_path(path: &Path) -> Result<PathBuf, Failure> {
    let not_sdk = |why: String| {
        invalid(format!(
            "--sdk-path {}: {why}; point it at the sandgraph repository's guest-sdk folder",
            path.display()
        ))
    };
    let abs = path
        .canonicalize()
        .map_err(|e| not_sdk(format!("cannot resolve it: {e}")))?;
    let manifest = abs.join("Cargo.toml");
    let len = std::fs::metadata(&manifest)
        .map_err(|e| not_sdk(format!("cannot read its Cargo.toml: {e}")))?
        .len();
    if len > MAX_MANIFEST_BYTES {
        return Err(not_sdk(format!(
            "its Cargo.toml is {len} bytes, more than a manifest may be ({MAX_MANIFEST_BYTES})"
        )));
    }
    let text = std::fs::read_to_string(&manifest)
        .map_err(|e| not_sdk(format!("cannot read its Cargo.toml: {e}")))?;
    let parsed: toml::Table =
        toml::from_str(&text).map_err(|e| not_sdk(format!("its Cargo.toml is not TOML: {e}")))?;
    let name = parsed
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(toml::Value::as_str);
    if name != Some(SDK_CRATE) {
        return Err(not_sdk(format!(
            "its Cargo.toml is not the {SDK_CRATE} package"
        )));
    }
    Ok(abs)
}

/// `template` with each `{{key}}` replaced by its value.
fn render(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (key, value) in values {
        out = out.replace(&format!("{{{{{key}}}}}"), value);
    }
    out
}

/// Fails unless `dir` is missing or an empty folder.
fn check_empty(dir: &Path) -> Result<(), Failure> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => match entries.next() {
            None => Ok(()),
            Some(_) => Err(invalid(format!(
                "{} is not empty: pick a new folder with --dir, or another name",
                dir.display()
            ))),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(_) if dir.exists() => Err(invalid(format!(
            "{} exists and is not a folder: pick another with --dir",
            dir.display()
        ))),
        Err(e) => Err(invalid(format!("cannot read {}: {e}", dir.display()))),
    }
}

/// Writes `text` to the new file `path`, never over an existing one.
fn write_new(path: &Path, text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let cannot = |e: std::io::Error| invalid(format!("cannot write {}: {e}", path.display()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(cannot)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(cannot)?;
    file.write_all(text.as_bytes()).map_err(cannot)
}

/// `sandgraph new NAME [--dir D] [--template basic|agent] [--sdk-path P | --sdk-git URL]`.
pub async fn new(args: NewArgs) -> Result<ExitCode, Failure> {
    check_name(&args.name).map_err(|why| {
        invalid(format!(
            "{} cannot name a graph crate: {why}",
            show::line(&args.name, show::MAX_LINE_BYTES)
        ))
    })?;
    let sdk = SdkSource::from_args(&args)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    check_empty(&dir)?;
    let dependency = sdk.dependency();
    let cli_install = sdk.cli_install();
    // The README's parts first: they hold placeholders of their own.
    let mut values = args.template.readme().to_vec();
    values.extend([
        ("name", args.name.as_str()),
        ("graph", args.name.as_str()),
        ("sdk", dependency.as_str()),
        ("cli_install", cli_install.as_str()),
    ]);
    for (path, template) in COMMON.iter().chain(args.template.files()) {
        write_new(&dir.join(path), &render(template, &values))?;
    }
    outln!(
        "created the graph crate `{}` (template {}) in {}",
        args.name,
        args.template.name(),
        dir.display()
    );
    outln!("  cd {}", dir.display());
    outln!("  cargo test");
    outln!("  sandgraph build . --out {}.wasm", args.name);
    outln!("  sandgraph test {}.wasm", args.name);
    if let SdkSource::Path(p) = &sdk {
        eprintln!(
            "note: the crate depends on the SDK at {}, which CI runners do not have: before \
             pushing, make Cargo.toml name the published crate or a git URL",
            p.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_be_crate_and_graph_names() {
        for ok in ["triage", "ticket-triage", "a_1", "Graph2"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        assert_eq!(check_name(&"a".repeat(MAX_NAME_LEN)), Ok(()));
        for (bad, why) in [
            ("", "empty"),
            ("1graph", "start with an ASCII letter"),
            ("_x", "start with an ASCII letter"),
            ("my graph", "' ' is not allowed"),
            ("café", "'é' is not allowed"),
            ("a/b", "'/' is not allowed"),
            ("test", "reserved"),
            ("serde", "reserved"),
            ("sandgraph-sdk", "reserved"),
            ("fn", "reserved"),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert!(check_name(&long).unwrap_err().contains("longer than 64"));
    }

    /// Every placeholder of every template has a value, so none is left.
    #[test]
    fn every_placeholder_is_filled() {
        let placeholder = |text: &str| -> Option<String> {
            let start = text.find("{{")?;
            let end = text[start..].find("}}")? + start + 2;
            Some(text[start..end].to_owned())
        };
        for template in [Template::Basic, Template::Agent] {
            let mut values = template.readme().to_vec();
            values.extend([
                ("name", "n"),
                ("graph", "g"),
                ("sdk", "s"),
                ("cli_install", "c"),
            ]);
            for (path, text) in COMMON.iter().chain(template.files()) {
                assert_eq!(placeholder(&render(text, &values)), None, "{path}");
            }
        }
    }

    #[test]
    fn dependency_lines_are_toml() {
        let lines = [
            SdkSource::Registry.dependency(),
            SdkSource::Path(PathBuf::from("/a \"b\"\\c")).dependency(),
            SdkSource::Git("https://example.com/sandgraph.git".into()).dependency(),
        ];
        for line in lines {
            let t: toml::Table = toml::from_str(&line).unwrap();
            assert!(t.contains_key(SDK_CRATE), "{line}");
        }
        let path: toml::Table =
            toml::from_str(&SdkSource::Path(PathBuf::from("/a \"b\"\\c")).dependency()).unwrap();
        assert_eq!(path[SDK_CRATE]["path"].as_str(), Some("/a \"b\"\\c"));
    }
}
