//! A CNCF distribution registry (Debian's `docker-registry`) on loopback
//! for the OCI push and pull tests.
//!
//! [`OciRegistry::start`] runs `docker-registry serve CONFIG.yml` on a free
//! `127.0.0.1` port with filesystem storage in a temporary folder (and,
//! with [`OciRegistry::start_with_basic_auth`], an htpasswd file of one
//! bcrypt-hashed user), waits until `GET /v2/` answers, and kills the
//! process on drop. Where the binary is missing or cannot start, the error
//! says why; [`start_or_skip`] prints it as `skipping: ...` for the one skip
//! these tests allow (`.ci/run` installs the package, so CI never skips).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian installs the registry; `SANDGRAPH_DOCKER_REGISTRY`
/// overrides it.
pub const DEFAULT_BINARY: &str = "/usr/bin/docker-registry";
/// How long the registry may take to answer `GET /v2/` after its start.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Ports tried: another process may take the free port between our probe
/// and the registry's bind.
const START_ATTEMPTS: usize = 3;

/// A running registry; killed and its storage deleted on drop.
pub struct OciRegistry {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

/// Starts a registry (`auth`: one htpasswd user) or prints why it cannot
/// and returns `None`: the caller returns, the test passes as skipped.
pub fn start_or_skip(test: &str, auth: Option<(&str, &str)>) -> Option<OciRegistry> {
    let started = match auth {
        Some((user, password)) => OciRegistry::start_with_basic_auth(user, password),
        None => OciRegistry::start(),
    };
    match started {
        Ok(r) => Some(r),
        Err(why) => {
            eprintln!("skipping: {test}: no OCI registry to test against: {why}");
            None
        }
    }
}

fn binary() -> PathBuf {
    std::env::var_os("SANDGRAPH_DOCKER_REGISTRY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY))
}

impl OciRegistry {
    /// An open registry: anyone may push and pull.
    pub fn start() -> Result<Self, String> {
        Self::start_inner(None)
    }

    /// A registry that wants HTTP basic credentials: `user`/`password`,
    /// checked against a bcrypt htpasswd file.
    pub fn start_with_basic_auth(user: &str, password: &str) -> Result<Self, String> {
        Self::start_inner(Some((user, password)))
    }

    fn start_inner(auth: Option<(&str, &str)>) -> Result<Self, String> {
        let bin = binary();
        if !bin.is_file() {
            return Err(format!(
                "{} is not installed (apt-get install docker-registry)",
                bin.display()
            ));
        }
        let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let htpasswd = match auth {
            None => None,
            Some((user, password)) => {
                // Cost 4, the least bcrypt allows: the registry checks the
                // hash on every request and the tests make many.
                let hash = bcrypt::hash_with_result(password, 4)
                    .map_err(|e| format!("cannot hash the password: {e}"))?
                    .format_for_version(bcrypt::Version::TwoA);
                let path = dir.path().join("htpasswd");
                std::fs::write(&path, format!("{user}:{hash}\n"))
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                Some(path)
            }
        };
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::spawn(&bin, dir.path(), htpasswd.as_deref()) {
                Ok((child, addr)) => return Ok(OciRegistry { child, addr, dir }),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn spawn(bin: &Path, dir: &Path, htpasswd: Option<&Path>) -> Result<(Child, String), String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let storage = dir.join("storage");
        let auth = match htpasswd {
            Some(p) => format!(
                "auth:\n  htpasswd:\n    realm: sandgraph-test\n    path: {}\n",
                p.display()
            ),
            None => String::new(),
        };
        let config = format!(
            "version: 0.1\n\
             log:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n  \
             maintenance:\n    uploadpurging:\n      enabled: false\n\
             http:\n  addr: {addr}\n  secret: sandgraph-test-only\n\
             {auth}",
            storage.display()
        );
        let config_path = dir.join("config.yml");
        std::fs::write(&config_path, config)
            .map_err(|e| format!("cannot write {}: {e}", config_path.display()))?;
        let log_path = dir.join(format!("registry-{port}.log"));
        let log = std::fs::File::create(&log_path)
            .map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot write {}: {e}", log_path.display()))?;
        let mut child = Command::new(bin)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                let tail: String = log.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
                return Err(format!("{} exited ({status}): {tail}", bin.display()));
            }
            if answers(&addr) {
                return Ok((child, addr));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer GET /v2/ on {addr} within {READY_TIMEOUT:?}",
                    bin.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:PORT`, the registry part of a reference.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The storage root (`rootdirectory`).
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// Where the registry keeps the bytes of the blob `sha256:<hex>` (the
    /// filesystem driver's layout), e.g. to damage it in a test.
    pub fn blob_data(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(hex.get(..2).unwrap_or(hex))
            .join(hex)
            .join("data")
    }
}

/// Whether an HTTP server answers `GET /v2/` at `addr` (any status: 401
/// counts, the registry is up).
fn answers(addr: &str) -> bool {
    let Ok(sock) = addr.parse() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&sock, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(format!("GET /v2/ HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
