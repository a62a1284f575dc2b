//! Setup the CLI's tests share: a working folder with a `graphs/` folder
//! of copied guests and a compile cache that starts warm ([`Env`]), the
//! `sandgraph` command run in it, and the folders the tests that build
//! graph crates share ([`cargo`]).

#![allow(dead_code)]

pub(crate) mod announce;
pub(crate) mod cache;
pub(crate) mod cargo;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A temporary working folder (no stray `sandgraph.toml`) with `graphs/`,
/// the shared compile cache (see [`cache`]; or one of its own) and, when
/// set, a data database, for `sandgraph` commands run in it.
pub(crate) struct Env {
    /// The folder; removed when the `Env` is dropped.
    pub(crate) dir: tempfile::TempDir,
    /// The compile cache folder of its commands (`SANDGRAPH_CACHE`).
    cache: PathBuf,
    /// `SANDGRAPH_LOG` of its commands.
    log: &'static str,
    /// The data database's file name in the folder, when the commands are
    /// told it by `SANDGRAPH_DB` (else they are told none).
    db: Option<&'static str>,
    /// More variables its commands get.
    vars: Vec<(&'static str, OsString)>,
}

impl Env {
    /// A working folder whose `graphs/` holds `graphs`, each a (file name,
    /// component path) pair; logs off, no data database.
    pub(crate) fn new(graphs: &[(&str, &str)]) -> Env {
        let env = Env::bare();
        sandgraph_tests::copy_graphs(&env.graphs(), graphs);
        env
    }

    /// A working folder holding `graphs` ((file name, component path)
    /// pairs) at its top, without `graphs/`.
    pub(crate) fn flat(graphs: &[(&str, &str)]) -> Env {
        let env = Env::bare();
        sandgraph_tests::copy_graphs(env.dir.path(), graphs);
        env
    }

    /// A working folder without `graphs/`; what a test needs is copied or
    /// written in by name.
    pub(crate) fn bare() -> Env {
        let dir = tempfile::tempdir().unwrap();
        Env {
            dir,
            cache: cache::shared(),
            log: "off",
            db: None,
            vars: Vec::new(),
        }
    }

    /// This folder with a compile cache of its own, empty (`cache/`, not
    /// made yet): for tests of the cache.
    pub(crate) fn cold(mut self) -> Env {
        self.cache = self.path(cache::CACHE);
        self
    }

    /// Its commands log with the `SANDGRAPH_LOG` filter `filter`.
    pub(crate) fn with_log(mut self, filter: &'static str) -> Env {
        self.log = filter;
        self
    }

    /// Its commands keep their data (threads, journals) in the file `name`
    /// of the folder (`SANDGRAPH_DB`).
    pub(crate) fn with_db(mut self, name: &'static str) -> Env {
        self.db = Some(name);
        self
    }

    /// Its commands get the environment variable `key` set to `value`.
    pub(crate) fn with_var(mut self, key: &'static str, value: impl Into<OsString>) -> Env {
        self.vars.push((key, value.into()));
        self
    }

    /// `name` in the folder.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `graphs/` folder.
    pub(crate) fn graphs(&self) -> PathBuf {
        self.path("graphs")
    }

    /// The data database: the file [`Env::with_db`] named, else
    /// `data.redb` (which a test then passes by flag, `--db`).
    pub(crate) fn db(&self) -> PathBuf {
        self.path(self.db.unwrap_or("data.redb"))
    }

    /// Writes `text` to `name` in the folder (making its parents).
    pub(crate) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `sandgraph ARGS` in the folder with its cache, log filter and data
    /// database; a model key, database or `RUSTC_BOOTSTRAP` (which makes
    /// cargo rebuild every dependency) from the test's own environment never
    /// reaches it. A crate it builds goes to the target folder the other
    /// tests' builds of the examples share ([`cargo::shared_target`]).
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandgraph"));
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("SANDGRAPH_LOG", self.log)
            .env("SANDGRAPH_CACHE", &self.cache)
            .env("CARGO_TARGET_DIR", cargo::shared_target())
            .env_remove("DEEPSEEK_API_KEY")
            .env_remove("RUSTC_BOOTSTRAP");
        match self.db {
            Some(name) => cmd.env("SANDGRAPH_DB", self.path(name)),
            None => cmd.env_remove("SANDGRAPH_DB"),
        };
        cmd.envs(self.vars.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs `sandgraph ARGS` to its end.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .expect("the sandgraph binary runs")
    }

    /// `sandgraph serve --graphs graphs EXTRA` as a child the async tests
    /// drive; it is killed when dropped.
    pub(crate) fn serve(&self, extra: &[&str]) -> tokio::process::Command {
        let mut args = vec!["serve", "--graphs", "graphs"];
        args.extend_from_slice(extra);
        let mut cmd = tokio::process::Command::from(self.command(&args));
        cmd.kill_on_drop(true);
        cmd
    }
}

/// Runs `cmd` to its end off the async runtime, so servers the test runs
/// on it (a scripted model) keep serving meanwhile.
pub(crate) async fn output_off_runtime(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("the sandgraph binary runs"))
        .await
        .unwrap()
}

/// A command's stdout as text.
pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A command's stderr as text.
pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The lowercase hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}
