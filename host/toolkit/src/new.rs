//! `sandgraph new NAME`: writes a graph project (a Rust crate, a Python or a
//! JavaScript module) that builds with `sandgraph build` and passes its
//! language's own tests and `sandgraph test` at once, with the SDK of this
//! `sandgraph` vendored under `sdk/` (see [`crate::sdk`]).
//!
//! The files are templates under `host/toolkit/templates/`, embedded with
//! `include_str!`; `{{key}}` placeholders are replaced by `render`.

use std::path::{Path, PathBuf};

use crate::Error;
use crate::sdk::{self, Lang};
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Template {
    /// Two nodes over a text: count its words, log the count
    Basic,
    /// One node that asks a model through the host; its golden case replays a recorded exchange
    Agent,
}

/// The project [`new`] writes.
pub struct NewOptions {
    /// Name of the project and of the graph: ASCII letters, digits, `-`
    /// and `_`, starting with a letter, at most [`MAX_NAME_LEN`].
    pub name: String,
    /// Folder to write the project into; it must not exist or be empty
    /// (`None`: `./NAME`).
    pub dir: Option<PathBuf>,
    /// The language the graph is written in.
    pub lang: Lang,
    /// What the graph does.
    pub template: Template,
    /// Rust: depend on the SDK in this local folder (written as an
    /// absolute path) instead of the vendored copy.
    pub sdk_path: Option<PathBuf>,
    /// Rust: depend on the SDK from this git repository instead of the
    /// vendored copy.
    pub sdk_git: Option<String>,
    /// The commit this sandgraph was built from (40 hex digits, or
    /// anything else outside a checkout): the workflow installs it.
    pub commit: String,
}

/// The project [`new`] wrote.
pub struct Created {
    /// Its folder.
    pub dir: PathBuf,
    /// The local SDK folder a Rust crate depends on (`sdk_path`), which
    /// CI runners do not have.
    pub sdk_path: Option<PathBuf>,
}

/// One file of the project: where it goes, and its template.
type File = (&'static str, &'static str);

const BASIC_CASES: [File; 1] = [(
    "tests/basic.json",
    include_str!("../templates/basic/basic.json"),
)];

/// The agent's golden cases: a replayed model answer and a denied call.
const AGENT_CASES: [File; 3] = [
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

const WORKFLOW: File = (
    ".github/workflows/graph.yml",
    include_str!("../templates/graph.yml"),
);

const RUST_COMMON: [File; 4] = [
    ("Cargo.toml", include_str!("../templates/Cargo.toml.in")),
    (".gitignore", include_str!("../templates/gitignore")),
    ("README.md", include_str!("../templates/README.md")),
    WORKFLOW,
];

const PYTHON_COMMON: [File; 4] = [
    (
        "pyproject.toml",
        include_str!("../templates/python/pyproject.toml"),
    ),
    (".gitignore", include_str!("../templates/python/gitignore")),
    ("README.md", include_str!("../templates/python/README.md")),
    WORKFLOW,
];

const JS_COMMON: [File; 4] = [
    ("package.json", include_str!("../templates/js/package.json")),
    (".gitignore", include_str!("../templates/js/gitignore")),
    ("README.md", include_str!("../templates/js/README.md")),
    WORKFLOW,
];

/// The graph's source and its native tests, per language and template.
fn sources(lang: Lang, template: Template) -> &'static [File] {
    const RUST_BASIC: [File; 1] = [("src/lib.rs", include_str!("../templates/basic/lib.rs"))];
    const RUST_AGENT: [File; 1] = [("src/lib.rs", include_str!("../templates/agent/lib.rs"))];
    const PYTHON_BASIC: [File; 2] = [
        (
            "graph.py",
            include_str!("../templates/python/basic/graph.py"),
        ),
        (
            "test_graph.py",
            include_str!("../templates/python/basic/test_graph.py"),
        ),
    ];
    const PYTHON_AGENT: [File; 2] = [
        (
            "graph.py",
            include_str!("../templates/python/agent/graph.py"),
        ),
        (
            "test_graph.py",
            include_str!("../templates/python/agent/test_graph.py"),
        ),
    ];
    const JS_BASIC: [File; 2] = [
        ("graph.js", include_str!("../templates/js/basic/graph.js")),
        (
            "graph.test.js",
            include_str!("../templates/js/basic/graph.test.js"),
        ),
    ];
    const JS_AGENT: [File; 2] = [
        ("graph.js", include_str!("../templates/js/agent/graph.js")),
        (
            "graph.test.js",
            include_str!("../templates/js/agent/graph.test.js"),
        ),
    ];
    match (lang, template) {
        (Lang::Rust, Template::Basic) => &RUST_BASIC,
        (Lang::Rust, Template::Agent) => &RUST_AGENT,
        (Lang::Python, Template::Basic) => &PYTHON_BASIC,
        (Lang::Python, Template::Agent) => &PYTHON_AGENT,
        (Lang::Js, Template::Basic) => &JS_BASIC,
        (Lang::Js, Template::Agent) => &JS_AGENT,
    }
}

/// Every file of a project of `lang` made from `template` (the SDK aside).
fn files(lang: Lang, template: Template) -> Vec<File> {
    let common: &[File] = match lang {
        Lang::Rust => &RUST_COMMON,
        Lang::Python => &PYTHON_COMMON,
        Lang::Js => &JS_COMMON,
    };
    let cases: &[File] = match template {
        Template::Basic => &BASIC_CASES,
        Template::Agent => &AGENT_CASES,
    };
    [common, sources(lang, template), cases].concat()
}

impl Template {
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

    /// The template's name, as `--template` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Template::Basic => "basic",
            Template::Agent => "agent",
        }
    }

    /// The capabilities the graph imports, as the tail of a manifest's
    /// `sandgraph` table (`lang`'s syntax).
    fn capabilities(self, lang: Lang) -> &'static str {
        match (self, lang) {
            (Template::Basic, _) | (Template::Agent, Lang::Rust) => "",
            (Template::Agent, Lang::Python) => "\ncapabilities = [\"llm\"]",
            (Template::Agent, Lang::Js) => ", \"capabilities\": [\"llm\"]",
        }
    }
}

/// The language's parts of the workflow (see templates/graph.yml).
fn workflow_parts(lang: Lang) -> [(&'static str, String); 6] {
    let (rust_why, rust_targets, toolchain, cache_paths, cache_files, native) = match lang {
        Lang::Rust => (
            " and builds the graph",
            "\n        with:\n          targets: wasm32-wasip2",
            String::new(),
            "\n            target",
            "'Cargo.toml', 'Cargo.lock', 'sdk/sandgraph-sdk.toml'",
            "\n      - name: Native tests\n        run: cargo test\n".to_owned(),
        ),
        Lang::Python => (
            "",
            "",
            "\n      - name: Install Python\n        uses: actions/setup-python@v5\n        \
             with:\n          python-version: \"3.12\"\n"
                .to_owned(),
            "\n            ~/.cache/pip",
            "'pyproject.toml', 'sdk/sandgraph-sdk.toml'",
            format!(
                "\n      - name: Install componentize-py\n        run: |\n          \
                 if ! componentize-py --version 2>/dev/null | grep -qF \"{v}\"; then\n            \
                 python3 -m pip install componentize-py=={v}\n          fi\n\n      \
                 # The SDK sdk/python vendors, importable without installing it.\n      \
                 - name: Native tests\n        run: PYTHONPATH=sdk/python python3 -m unittest -v\n",
                v = crate::build_py::COMPONENTIZE_PY_VERSION
            ),
        ),
        Lang::Js => (
            "",
            "",
            "\n      - name: Install Node\n        uses: actions/setup-node@v4\n        \
             with:\n          node-version: \"22\"\n"
                .to_owned(),
            "\n            ~/.npm",
            "'package.json', 'package-lock.json', 'sdk/sandgraph-sdk.toml'",
            "\n      - name: Install jco and the SDK\n        run: |\n          \
             if [ -f package-lock.json ]; then npm ci; else npm install; fi\n\n      \
             - name: Native tests\n        run: npm test\n"
                .to_owned(),
        ),
    };
    [
        ("rust_why", rust_why.to_owned()),
        ("rust_targets", rust_targets.to_owned()),
        ("toolchain", toolchain),
        ("cache_paths", cache_paths.to_owned()),
        ("cache_files", cache_files.to_owned()),
        ("native", native),
    ]
}

/// How the workflow installs this sandgraph: the text `sandgraph --version`
/// prints when it is installed already, and the `cargo install --locked`
/// arguments before the crate name.
fn cli_install(commit: &str) -> (String, String) {
    let repository = env!("CARGO_PKG_REPOSITORY");
    if commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        (
            format!("(commit {commit})"),
            format!("--git {repository} --rev {commit}"),
        )
    } else {
        // Built outside a checkout: the repository's head.
        (
            format!("sandgraph {}", sdk::SDK_VERSION),
            format!("--git {repository}"),
        )
    }
}

/// A package name for npm (lowercase).
fn npm_name(name: &str) -> String {
    name.to_ascii_lowercase()
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid(message)
}

/// `Err` says why `name` cannot name both a project and a graph.
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
    if name.ends_with(['-', '_']) {
        // Python package names end with a letter or digit.
        return Err("it must end with an ASCII letter or digit".to_owned());
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

/// Where a Rust crate gets the SDK.
enum SdkSource {
    /// The copy vendored into the crate (sdk/rust).
    Vendored,
    Path(PathBuf),
    Git(String),
}

impl SdkSource {
    fn from_args(args: &NewOptions) -> Result<SdkSource, Error> {
        if args.lang != Lang::Rust && (args.sdk_path.is_some() || args.sdk_git.is_some()) {
            return Err(invalid(format!(
                "--sdk-path and --sdk-git are for Rust crates: a {} project gets the SDK \
                 vendored under sdk/",
                args.lang.name()
            )));
        }
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
        Ok(SdkSource::Vendored)
    }

    /// The `[dependencies]` line.
    fn dependency(&self) -> String {
        let source = match self {
            SdkSource::Vendored => format!("path = {}", toml_string("sdk/rust/sandgraph-sdk")),
            SdkSource::Path(p) => format!("path = {}", toml_string(&p.to_string_lossy())),
            SdkSource::Git(url) => format!("git = {}", toml_string(url)),
        };
        format!("{SDK_CRATE} = {{ {source} }}")
    }
}

/// The absolute path of the SDK crate at `path`, checked to be the SDK's.
fn sdk_path(path: &Path) -> Result<PathBuf, Error> {
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
fn check_empty(dir: &Path) -> Result<(), Error> {
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
fn write_new(path: &Path, text: &str) -> Result<(), Error> {
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

/// Every placeholder's value for a project named `name`; `dependency` is
/// the Rust crate's SDK line.
fn placeholders(
    lang: Lang,
    template: Template,
    name: &str,
    dependency: &str,
    commit: &str,
) -> Vec<(&'static str, String)> {
    let (installed, install) = cli_install(commit);
    let source = match lang {
        Lang::Rust => "src/lib.rs",
        Lang::Python => "graph.py",
        Lang::Js => "graph.js",
    };
    // The README's parts first: they hold placeholders of their own.
    let mut values: Vec<(&'static str, String)> = template
        .readme()
        .iter()
        .map(|(k, v)| (*k, (*v).to_owned()))
        .collect();
    values.push(("ci", include_str!("../templates/ci.md").to_owned()));
    values.extend(workflow_parts(lang));
    values.extend([
        ("name", name.to_owned()),
        ("graph", name.to_owned()),
        ("npm_name", npm_name(name)),
        ("source", source.to_owned()),
        ("sdk", dependency.to_owned()),
        ("capabilities", template.capabilities(lang).to_owned()),
        ("lang", lang.name().to_owned()),
        ("version", sdk::SDK_VERSION.to_owned()),
        ("commit", commit.to_owned()),
        ("installed", installed),
        ("install", install),
        (
            "componentize_py",
            crate::build_py::COMPONENTIZE_PY_VERSION.to_owned(),
        ),
        ("jco", crate::build_js::JCO_VERSION.to_owned()),
    ]);
    values
}

/// Writes a graph project: its files from the templates, and the SDK
/// vendored under `sdk/` unless a Rust crate depends on another one.
pub fn new(args: &NewOptions) -> Result<Created, Error> {
    check_name(&args.name).map_err(|why| {
        invalid(format!(
            "{} cannot name a graph project: {why}",
            show::line(&args.name, show::MAX_LINE_BYTES)
        ))
    })?;
    let sdk = SdkSource::from_args(args)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    check_empty(&dir)?;
    let values = placeholders(
        args.lang,
        args.template,
        &args.name,
        &sdk.dependency(),
        &args.commit,
    );
    let values: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    for (path, template) in files(args.lang, args.template) {
        write_new(&dir.join(path), &render(template, &values))?;
    }
    if matches!(sdk, SdkSource::Vendored) {
        sdk::vendor(&dir, args.lang)?;
    }
    let sdk_path = match sdk {
        SdkSource::Path(p) => Some(p),
        _ => None,
    };
    Ok(Created { dir, sdk_path })
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
            ("trailing-", "end with an ASCII letter or digit"),
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let long = "a".repeat(MAX_NAME_LEN + 1);
        assert!(check_name(&long).unwrap_err().contains("longer than 64"));
    }

    /// Every placeholder of every template has a value, so none is left,
    /// and the manifests and workflow parse.
    #[test]
    fn every_placeholder_is_filled() {
        let placeholder = |text: &str| -> Option<String> {
            let start = text.find("{{")?;
            let end = text[start..].find("}}")? + start + 2;
            Some(text[start..end].to_owned())
        };
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for template in [Template::Basic, Template::Agent] {
                let values = placeholders(lang, template, "n", "s = 1", "unknown");
                let values: Vec<(&str, &str)> =
                    values.iter().map(|(k, v)| (*k, v.as_str())).collect();
                for (path, text) in files(lang, template) {
                    let text = render(text, &values);
                    // The workflow's own expressions are `${{ ... }}`.
                    let rest = text.replace("${{", "");
                    assert_eq!(placeholder(&rest), None, "{lang:?} {template:?} {path}");
                    if path.ends_with(".toml") {
                        toml::from_str::<toml::Table>(&text)
                            .unwrap_or_else(|e| panic!("{path}: {e}\n{text}"));
                    }
                    if path.ends_with(".json") {
                        serde_json::from_str::<serde_json::Value>(&text)
                            .unwrap_or_else(|e| panic!("{path}: {e}\n{text}"));
                    }
                }
            }
        }
    }

    #[test]
    fn dependency_lines_are_toml() {
        let lines = [
            SdkSource::Vendored.dependency(),
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
