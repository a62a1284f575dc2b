//! A throwaway PostgreSQL cluster on loopback for the PostgreSQL store
//! tests, from Debian's `postgresql` package.
//!
//! [`TestPostgres::shared`] hands every test of a binary the same cluster
//! (an `Arc`); [`TestPostgres::fresh_db`] gives each test a database of its
//! own, so tests sharing the cluster never see each other's rows. The
//! cluster is started on first use: `initdb -A trust -U sandgraph` into a
//! temporary folder, then `pg_ctl start -w` on a free `127.0.0.1` port with
//! its unix socket in that folder and `fsync=on`. When the last `Arc` of it
//! is dropped (the last test that holds it ends) it is stopped
//! (`pg_ctl stop -m immediate`) and its folder deleted; a later test starts
//! a new one. A static would never be dropped, and a cluster left running
//! after the test binary exits is a leak; so that even a killed test binary
//! leaks nothing for long, each cluster folder records its owner's pid and
//! the next start stops and deletes the clusters of owners that are gone.
//!
//! `initdb` refuses to run as root, and CI runs as root: then the folder is
//! given to the `postgres` user and `initdb`/`pg_ctl` run as that user
//! (`runuser -u postgres --`). The binaries are looked up in `PATH`, then
//! in `/usr/lib/postgresql/*/bin` (newest version first).
//!
//! Not a dependency of `sandgraph-store` (this crate pulls in the wasm
//! runtime): the store's tests include this file with `#[path]`. It uses
//! only `std` and `tempfile`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// What a test says when the server binaries are missing.
pub const NOT_INSTALLED: &str = "PostgreSQL is not installed: apt-get install postgresql (needed by the PostgreSQL store tests)";
/// The superuser the cluster is made with (trust authentication).
pub const USER: &str = "sandgraph";
/// Folder names of the clusters in the temp dir.
const PREFIX: &str = "sandgraph-pg-";
/// Ports tried: another process may take the free port between our probe
/// and the server's bind.
const START_ATTEMPTS: usize = 3;

/// A running cluster; stopped and deleted on drop.
pub struct TestPostgres {
    bin: PathBuf,
    dir: Option<tempfile::TempDir>,
    port: u16,
    /// Run the server binaries as `postgres` (we are root).
    as_postgres: bool,
    password: Option<String>,
}

/// The directory holding `initdb` and `pg_ctl`.
pub fn bin_dir() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("initdb").is_file() && dir.join("pg_ctl").is_file() {
                // Where the links of PATH lead (Debian's bin dir also has
                // psql, which it does not link into PATH).
                return Ok(std::fs::canonicalize(dir.join("initdb"))
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .unwrap_or(dir));
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("pg_ctl").is_file()).then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| NOT_INSTALLED.to_owned())
}

fn is_root() -> bool {
    // No libc: the effective uid is in /proc/self/status ("Uid: r e s f").
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn describe(out: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let tail: Vec<&str> = text.lines().rev().take(8).collect();
    format!(
        "{}: {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    )
}

impl TestPostgres {
    /// The cluster of this test binary, started when no test holds one.
    /// Panics with [`NOT_INSTALLED`] when PostgreSQL is missing, and with
    /// the reason when it does not start.
    pub fn shared() -> Arc<TestPostgres> {
        static SHARED: Mutex<Weak<TestPostgres>> = Mutex::new(Weak::new());
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(pg) = slot.upgrade() {
            return pg;
        }
        let pg = Arc::new(TestPostgres::start().unwrap_or_else(|e| panic!("{e}")));
        *slot = Arc::downgrade(&pg);
        pg
    }

    /// A cluster of its own with trust authentication.
    pub fn start() -> Result<TestPostgres, String> {
        Self::start_inner(None)
    }

    /// A cluster of its own whose user [`USER`] must give `password`
    /// (scram-sha-256, also on loopback).
    pub fn start_with_password(password: &str) -> Result<TestPostgres, String> {
        Self::start_inner(Some(password))
    }

    fn start_inner(password: Option<&str>) -> Result<TestPostgres, String> {
        let bin = bin_dir()?;
        reap_orphans(&bin);
        let as_postgres = is_root();
        let dir = tempfile::Builder::new()
            .prefix(PREFIX)
            .tempdir()
            .map_err(|e| format!("postgres fixture: a temp dir: {e}"))?;
        std::fs::write(dir.path().join("owner.pid"), std::process::id().to_string())
            .map_err(|e| format!("postgres fixture: {e}"))?;
        let mut pg = TestPostgres {
            bin,
            dir: Some(dir),
            port: 0,
            as_postgres,
            password: password.map(str::to_owned),
        };
        pg.init_cluster(password)?;
        pg.start_server()?;
        Ok(pg)
    }

    /// Makes the socket folder and the cluster (`initdb`), owned by the
    /// `postgres` user when running as root; `password` switches trust
    /// authentication to scram-sha-256.
    fn init_cluster(&self, password: Option<&str>) -> Result<(), String> {
        let dir = self.dir().to_path_buf();
        std::fs::create_dir(dir.join("sock")).map_err(|e| format!("postgres fixture: {e}"))?;
        if self.as_postgres {
            let out = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .output()
                .map_err(|e| format!("postgres fixture: chown: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "postgres fixture: chown postgres {}: {}",
                    dir.display(),
                    describe(&out)
                ));
            }
        }
        let mut initdb = self.server_command("initdb");
        initdb.arg("-D").arg(dir.join("data")).args([
            "-U",
            USER,
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        match password {
            None => {
                initdb.args(["-A", "trust"]);
            }
            Some(pw) => {
                let file = dir.join("pwfile");
                std::fs::write(&file, format!("{pw}\n"))
                    .map_err(|e| format!("postgres fixture: {e}"))?;
                if self.as_postgres {
                    let _ = Command::new("chown")
                        .args(["postgres:postgres"])
                        .arg(&file)
                        .status();
                }
                initdb.args(["-A", "scram-sha-256", "--pwfile"]).arg(&file);
            }
        }
        let out = initdb
            .output()
            .map_err(|e| format!("cannot run initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", describe(&out)));
        }
        Ok(())
    }

    /// Starts the server on a free loopback port (`START_ATTEMPTS` tries: the
    /// port can be taken between finding it and binding it) and records it.
    fn start_server(&mut self) -> Result<(), String> {
        let dir = self.dir().to_path_buf();
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("no free loopback port: {e}"))?
                .port();
            let out = self
                .server_command("pg_ctl")
                .arg("start")
                .args(["-w", "-t", "60", "-D"])
                .arg(dir.join("data"))
                .arg("-l")
                .arg(dir.join("server.log"))
                .arg("-o")
                .arg(format!(
                    "-k {} -p {port} -c listen_addresses=127.0.0.1 -c fsync=on \
                     -c max_connections=300 -c shared_buffers=16MB",
                    dir.join("sock").display()
                ))
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
            if out.status.success() {
                self.port = port;
                return Ok(());
            }
            let log = std::fs::read_to_string(dir.join("server.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            last = format!(
                "pg_ctl start failed: {} | {}",
                describe(&out),
                tail.join(" | ")
            );
        }
        Err(last)
    }

    fn dir(&self) -> &Path {
        self.dir.as_ref().expect("only None while dropping").path()
    }

    /// `bin/<name>`, as the `postgres` user when we are root.
    fn server_command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` for [`USER`] (with the password of a
    /// password cluster).
    pub fn url_of(&self, db: &str) -> String {
        match &self.password {
            Some(pw) => format!("postgres://{USER}:{pw}@127.0.0.1:{}/{db}", self.port),
            None => format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port),
        }
    }

    /// The URL of the `postgres` database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// Creates a new empty database whose name starts with `name` (made
    /// unique in the cluster) and returns its URL.
    pub fn fresh_db(&self, name: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let clean: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let db = format!("{clean}_{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.psql("postgres", &format!("CREATE DATABASE \"{db}\""))
            .unwrap_or_else(|e| panic!("postgres fixture: create database {db}: {e}"));
        self.url_of(&db)
    }

    /// Runs `sql` in database `db` with `psql` (stopping at the first
    /// error) and returns what it printed (unaligned, tuples only).
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let mut cmd = Command::new(self.bin.join("psql"));
        cmd.args([
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args([
            "-p",
            &self.port.to_string(),
            "-U",
            USER,
            "-d",
            db,
            "-c",
            sql,
        ])
        .stdin(Stdio::null());
        if let Some(pw) = &self.password {
            cmd.env("PGPASSWORD", pw);
        }
        let out = cmd.output().map_err(|e| format!("cannot run psql: {e}"))?;
        if !out.status.success() {
            return Err(describe(&out));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn stop(&self, mode: &str) {
        let _ = self
            .server_command("pg_ctl")
            .args(["stop", "-w", "-m", mode, "-D"])
            .arg(self.dir().join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for TestPostgres {
    fn drop(&mut self) {
        if self.port != 0 {
            self.stop("immediate");
        }
        if let Some(dir) = self.dir.take() {
            let _ = dir.close();
        }
    }
}

/// Stops and deletes the clusters in the temp dir whose owning test
/// process is gone (killed before its clusters were dropped).
fn reap_orphans(bin: &Path) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let is_ours = entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(PREFIX));
        if !is_ours {
            continue;
        }
        let Some(owner) = std::fs::read_to_string(path.join("owner.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        let orphan = TestPostgres {
            bin: bin.to_path_buf(),
            dir: None,
            port: 0,
            as_postgres: is_root(),
            password: None,
        };
        let mut stop = orphan.server_command("pg_ctl");
        stop.args(["stop", "-w", "-m", "immediate", "-D"])
            .arg(path.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = stop.status();
        let _ = std::fs::remove_dir_all(&path);
    }
}
