//! `sandgraph new NAME` and `sandgraph sdk update`: their flags and
//! output; the work is `sandgraph_toolkit::new`'s and `::sdk`'s.

use std::path::PathBuf;
use std::process::ExitCode;

use sandgraph_toolkit::new::{NewOptions, Template};
use sandgraph_toolkit::sdk::{self, Lang, SDK_VERSION, SDK_WORLD};

use crate::exit::Failure;

/// A graph project's language (`--lang`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LangArg {
    /// A Rust crate (Cargo.toml, src/lib.rs)
    Rust,
    /// A Python graph (pyproject.toml, graph.py), built with componentize-py
    Python,
    /// A JavaScript graph (package.json, graph.js), built with jco
    Js,
}

impl From<LangArg> for Lang {
    fn from(lang: LangArg) -> Lang {
        match lang {
            LangArg::Rust => Lang::Rust,
            LangArg::Python => Lang::Python,
            LangArg::Js => Lang::Js,
        }
    }
}

/// What the new graph does (`--template`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TemplateArg {
    /// Two nodes over a text: count its words, log the count
    Basic,
    /// One node that asks a model through the host; its golden case replays a recorded exchange
    Agent,
}

impl From<TemplateArg> for Template {
    fn from(template: TemplateArg) -> Template {
        match template {
            TemplateArg::Basic => Template::Basic,
            TemplateArg::Agent => Template::Agent,
        }
    }
}

/// `sandgraph new`
#[derive(clap::Args)]
#[command(after_long_help = NEW_HELP)]
pub struct NewArgs {
    /// Name of the project and of the graph: ASCII letters, digits, `-` and `_`, starting with a letter, at most 64
    name: String,
    /// Folder to write the project into; it must not exist or be empty [default: ./NAME]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The language the graph is written in
    #[arg(long, value_enum, default_value_t = LangArg::Rust)]
    lang: LangArg,
    /// What the graph does
    #[arg(long, value_enum, default_value_t = TemplateArg::Basic)]
    template: TemplateArg,
    /// Rust: depend on the SDK in this local folder (written as an absolute path) instead of the vendored copy
    #[arg(long, value_name = "DIR", conflicts_with = "sdk_git")]
    sdk_path: Option<PathBuf>,
    /// Rust: depend on the SDK from this git repository instead of the vendored copy
    #[arg(long, value_name = "URL")]
    sdk_git: Option<String>,
}

const NEW_HELP: &str = "\
Every project has tests/*.json (golden cases for `sandgraph test`), .gitignore, README.md, \
.github/workflows/graph.yml (GitHub Actions: install this sandgraph, native tests, build, \
check, golden cases, sign, push on tags) and, under sdk/, the SDK of this sandgraph with \
sdk/sandgraph-sdk.toml naming its version (`sandgraph build` refuses another version's SDK; \
`sandgraph sdk update` replaces it).

rust: Cargo.toml (a cdylib depending on sdk/rust/sandgraph-sdk, a release profile tuned \
for size, a workspace of its own) and src/lib.rs (a strict graph and its tests: `cargo test`). \
--sdk-path or --sdk-git make it depend on another SDK instead, and nothing is vendored.

python: pyproject.toml, graph.py and test_graph.py \
(`PYTHONPATH=sdk/python python3 -m unittest`); building needs componentize-py.

js: package.json (jco and @sandgraph/sdk from sdk/js), graph.js and graph.test.js \
(`npm install && npm test`).";

/// `sandgraph new NAME [--dir D] [--lang L] [--template T] [--sdk-path P | --sdk-git URL]`.
pub async fn new(args: NewArgs) -> Result<ExitCode, Failure> {
    let (lang, template) = (Lang::from(args.lang), Template::from(args.template));
    let name = args.name.clone();
    let created = sandgraph_toolkit::new::new(&NewOptions {
        name: args.name,
        dir: args.dir,
        lang,
        template,
        sdk_path: args.sdk_path,
        sdk_git: args.sdk_git,
        commit: env!("SANDGRAPH_COMMIT").to_owned(),
    })?;
    let dir = created.dir.display();
    outln!(
        "created the {} graph project `{name}` (template {}) in {dir}",
        lang.name(),
        template.name(),
    );
    outln!("  cd {dir}");
    match lang {
        Lang::Rust => outln!("  cargo test"),
        Lang::Python => outln!("  PYTHONPATH=sdk/python python3 -m unittest"),
        Lang::Js => outln!("  npm install && npm test"),
    }
    outln!("  sandgraph build . --out {name}.wasm");
    outln!("  sandgraph test {name}.wasm");
    if let Some(p) = &created.sdk_path {
        eprintln!(
            "note: the crate depends on the SDK at {}, which CI runners do not have: before \
             pushing, run `sandgraph sdk update` and make Cargo.toml depend on \
             {{ path = \"sdk/rust/sandgraph-sdk\" }}",
            p.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandgraph sdk`
#[derive(clap::Args)]
pub struct SdkArgs {
    #[command(subcommand)]
    command: SdkCommand,
}

#[derive(clap::Subcommand)]
enum SdkCommand {
    /// Replace the SDK vendored in a project (sdk/) with this sandgraph's, and its marker
    Update {
        /// The project's folder
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
}

/// `sandgraph sdk update [DIR]`.
pub async fn sdk(args: SdkArgs) -> Result<ExitCode, Failure> {
    match args.command {
        SdkCommand::Update { dir } => {
            let updated = sdk::update(&dir)?;
            let folder = updated.folder.display();
            match updated.previous {
                Some(m) => outln!(
                    "updated {folder} from sandgraph {} ({}) to {SDK_VERSION} ({SDK_WORLD})",
                    m.version,
                    m.world,
                ),
                None => outln!("vendored sandgraph {SDK_VERSION} ({SDK_WORLD}) into {folder}"),
            }
            if updated.lang == Lang::Js {
                outln!("  run `npm install` to link it into node_modules");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
