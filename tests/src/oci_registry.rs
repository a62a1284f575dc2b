//! A CNCF distribution registry (Debian's `docker-registry`) on loopback
//! for the OCI push and pull tests.
//!
//! [`OciRegistry::start`] runs `docker-registry serve CONFIG.yml` on a free
//! `127.0.0.1` port with filesystem storage in a temporary folder (and,
//! with `OciRegistry::start_with_basic_auth`, an htpasswd file of one
//! bcrypt-hashed user, or, with `OciRegistry::start_with_token_auth`, a
//! bearer token service of its own that checks the user's basic credentials
//! and signs ES256 JWTs the registry verifies against a fresh self-signed
//! certificate), waits until `GET /v2/` answers, and kills the process on
//! drop. Where the binary is missing or the registry does not start, the
//! test fails saying why (the install command when the package is missing,
//! as the PostgreSQL fixture does): a registry test never passes without
//! a registry. `.ci/run` installs the package.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;

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
    token_service: Option<TokenService>,
}

/// Who may use the registry.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    /// Anyone may push and pull.
    Open,
    /// HTTP basic credentials, checked against an htpasswd file.
    Basic(&'a str, &'a str),
    /// Bearer tokens from a token service that takes these basic
    /// credentials (the Docker token authentication flow).
    Token(&'a str, &'a str),
}

fn binary() -> PathBuf {
    std::env::var_os("SANDGRAPH_DOCKER_REGISTRY")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_BINARY))
}

impl OciRegistry {
    /// A registry that admits `auth`. Panics, saying why, when it cannot
    /// run: the binary is missing (naming the package to install), it does
    /// not start, or it does not answer.
    pub fn start(auth: Auth<'_>) -> Self {
        Self::start_inner(auth)
            .unwrap_or_else(|why| panic!("no OCI registry to test against: {why}"))
    }

    /// `Err` when the registry cannot run (missing binary, no start, no
    /// answer). The fixture's own setup (a temp dir, the htpasswd, the
    /// token service's key) failing is a bug and panics.
    fn start_inner(auth: Auth<'_>) -> Result<Self, String> {
        let bin = binary();
        if !bin.is_file() {
            return Err(format!(
                "{} is not installed (apt-get install docker-registry)",
                bin.display()
            ));
        }
        let dir = tempfile::tempdir().expect("oci registry fixture: a temp dir");
        let (auth_config, token_service) = Self::prepare_auth(auth, dir.path())
            .unwrap_or_else(|e| panic!("oci registry fixture: {e}"));
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Self::spawn(&bin, dir.path(), &auth_config) {
                Ok((child, addr)) => {
                    return Ok(OciRegistry {
                        child,
                        addr,
                        dir,
                        token_service,
                    });
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The registry config's `auth` section, and the token service it
    /// names.
    fn prepare_auth(auth: Auth<'_>, dir: &Path) -> Result<(String, Option<TokenService>), String> {
        match auth {
            Auth::Open => Ok((String::new(), None)),
            Auth::Token(user, password) => {
                let service = TokenService::start(user, password, dir)?;
                Ok((service.registry_config(), Some(service)))
            }
            Auth::Basic(user, password) => {
                // Cost 4, the least bcrypt allows: the registry checks the
                // hash on every request and the tests make many.
                let hash = bcrypt::hash_with_result(password, 4)
                    .map_err(|e| format!("cannot hash the password: {e}"))?
                    .format_for_version(bcrypt::Version::TwoA);
                let path = dir.join("htpasswd");
                std::fs::write(&path, format!("{user}:{hash}\n"))
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                let config = format!(
                    "auth:\n  htpasswd:\n    realm: sandgraph-test\n    path: {}\n",
                    path.display()
                );
                Ok((config, None))
            }
        }
    }

    fn spawn(bin: &Path, dir: &Path, auth: &str) -> Result<(Child, String), String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free loopback port: {e}"))?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let storage = dir.join("storage");
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
        if let Some(service) = self.token_service.take() {
            service.stop();
        }
    }
}

/// The token service's `service` and the JWT audience the registry checks.
const TOKEN_SERVICE: &str = "sandgraph-test-registry";
/// The JWT issuer the registry trusts.
const TOKEN_ISSUER: &str = "sandgraph-test-token-service";
/// Largest request head the token service reads.
const MAX_TOKEN_REQUEST_BYTES: usize = 16 * 1024;

/// A Docker token service on loopback: `GET /token?scope=...&service=...`
/// with the right basic credentials answers `{"token": JWT}`, a JWT signed
/// (ES256) by a key whose self-signed certificate the registry trusts,
/// granting the requested repository actions; other credentials get 401.
struct TokenService {
    addr: String,
    cert_path: PathBuf,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TokenService {
    fn start(user: &str, password: &str, dir: &Path) -> Result<Self, String> {
        let key = rcgen::KeyPair::generate().map_err(|e| format!("cannot make a key: {e}"))?;
        let cert = rcgen::CertificateParams::new(vec![TOKEN_ISSUER.to_string()])
            .and_then(|p| p.self_signed(&key))
            .map_err(|e| format!("cannot make a certificate: {e}"))?;
        let cert_path = dir.join("token-cert.pem");
        std::fs::write(&cert_path, cert.pem())
            .map_err(|e| format!("cannot write {}: {e}", cert_path.display()))?;
        let signer = aws_lc_rs::signature::EcdsaKeyPair::from_pkcs8(
            &aws_lc_rs::signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &key.serialize_der(),
        )
        .map_err(|e| format!("cannot load the signing key: {e}"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| format!("no free loopback port for the token service: {e}"))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("token service: {e}"))?;
        let addr = listener
            .local_addr()
            .map_err(|e| format!("token service: {e}"))?
            .to_string();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let issuer = Issuer {
            basic: format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            ),
            x5c: base64::engine::general_purpose::STANDARD.encode(cert.der()),
            signer,
            user: user.to_string(),
        };
        let stop_flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stop_flag.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => issuer.answer(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Ok(TokenService {
            addr,
            cert_path,
            stop,
            thread: Some(thread),
        })
    }

    /// The registry's `auth.token` section.
    fn registry_config(&self) -> String {
        format!(
            "auth:\n  token:\n    realm: http://{}/token\n    service: {TOKEN_SERVICE}\n    \
             issuer: {TOKEN_ISSUER}\n    rootcertbundle: {}\n",
            self.addr,
            self.cert_path.display()
        )
    }

    fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Issuer {
    basic: String,
    x5c: String,
    signer: aws_lc_rs::signature::EcdsaKeyPair,
    user: String,
}

impl Issuer {
    fn answer(&self, mut conn: TcpStream) {
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_TOKEN_REQUEST_BYTES {
            match conn.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let head = String::from_utf8_lossy(&head);
        let authorized = head.lines().any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("authorization") && v.trim() == self.basic
            })
        });
        let (status, body) = if authorized {
            let target = head.split_whitespace().nth(1).unwrap_or("");
            let scope = target
                .split_once('?')
                .map(|(_, q)| q)
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("scope="))
                .map(percent_decode)
                .unwrap_or_default();
            let token = self.token(&scope);
            (
                "200 OK",
                format!("{{\"token\":\"{token}\",\"expires_in\":300}}"),
            )
        } else {
            (
                "401 Unauthorized",
                "{\"details\":\"incorrect username or password\"}".to_string(),
            )
        };
        let _ = conn.write_all(
            format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        );
    }

    /// A JWT granting `scope` (`repository:NAME:ACTIONS`).
    fn token(&self, scope: &str) -> String {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let access: Vec<serde_json::Value> = scope
            .split(' ')
            .filter_map(|s| {
                let mut parts = s.splitn(3, ':');
                let (kind, name, actions) = (parts.next()?, parts.next()?, parts.next()?);
                Some(serde_json::json!({
                    "type": kind, "name": name,
                    "actions": actions.split(',').collect::<Vec<_>>(),
                }))
            })
            .collect();
        let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [self.x5c]});
        let claims = serde_json::json!({
            "iss": TOKEN_ISSUER, "sub": self.user, "aud": TOKEN_SERVICE,
            "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": format!("{now}-{}", access.len()), "access": access,
        });
        let signing_input = format!(
            "{}.{}",
            b64.encode(header.to_string()),
            b64.encode(claims.to_string())
        );
        let signature = self
            .signer
            .sign(
                &aws_lc_rs::rand::SystemRandom::new(),
                signing_input.as_bytes(),
            )
            .map(|s| b64.encode(s.as_ref()))
            .unwrap_or_default();
        format!("{signing_input}.{signature}")
    }
}

/// Decodes `%XX` escapes and `+` of a query value.
fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(value.get(i + 1..i + 3).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
