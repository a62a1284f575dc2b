//! Registry credentials from the docker config file, as `docker login`
//! writes them: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
//!
//! For the registry of a reference, the entry `auths.<registry>` (keys may
//! carry a scheme and path, `https://index.docker.io/v1/` for Docker Hub):
//! `auth` (base64 `user:password`) or `username`/`password` give HTTP basic
//! credentials, which the client also presents to a bearer token service;
//! `registrytoken` is a bearer token sent as it is. No entry: anonymous.
//! Credential helpers (`credsStore`, `credHelpers`) are not run; an
//! `identitytoken` (an OAuth refresh token) is not exchanged: both are
//! reported so the operator knows which credentials are missing.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use crate::Error;

/// Largest docker config read. `docker login` writes a few hundred bytes
/// per registry; the bound stops a wrong path (a disk image, a device)
/// from being read whole.
pub const MAX_DOCKER_CONFIG_BYTES: usize = 1024 * 1024;

/// The docker config file to read: `$DOCKER_CONFIG/config.json`, else
/// `$HOME/.docker/config.json`; `None` without either variable.
pub(crate) fn docker_config_path() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(dir) = env("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    env("HOME").map(|h| PathBuf::from(h).join(".docker/config.json"))
}

/// The credentials for one registry and where they came from.
#[derive(Clone)]
pub struct Credentials {
    pub(crate) auth: RegistryAuth,
    /// `auths."<key>" in <file>` when credentials were found.
    pub source: Option<String>,
    /// Something the operator should know: credentials that exist but
    /// are not used (a credential helper, an identity token).
    pub note: Option<String>,
}

impl Credentials {
    /// No credentials.
    pub fn anonymous() -> Self {
        Credentials {
            auth: RegistryAuth::Anonymous,
            source: None,
            note: None,
        }
    }

    /// Whether any credentials are presented.
    pub(crate) fn is_anonymous(&self) -> bool {
        matches!(self.auth, RegistryAuth::Anonymous)
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // RegistryAuth's own Debug redacts the secret.
        f.debug_struct("Credentials")
            .field("auth", &self.auth)
            .field("source", &self.source)
            .finish()
    }
}

#[derive(Deserialize, Default)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    identitytoken: Option<String>,
    #[serde(default)]
    registrytoken: Option<String>,
}

/// A registry name as the docker config keys it: no scheme, no path,
/// lowercase, Docker Hub's aliases folded into `index.docker.io`.
fn normalize(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "registry-1.docker.io" => "index.docker.io".into(),
        _ => host,
    }
}

/// The credentials for `registry` (`host[:port]`) from the docker config at
/// `path` (or the default one); a missing file is anonymous.
pub(crate) fn credentials_for(registry: &str, path: Option<&Path>) -> Result<Credentials, Error> {
    let Some(path) = path.map(Path::to_path_buf).or_else(docker_config_path) else {
        return Ok(Credentials::anonymous());
    };
    let bytes = match read_bounded(&path)? {
        Some(b) => b,
        None => return Ok(Credentials::anonymous()),
    };
    let config: DockerConfig = serde_json::from_slice(&bytes).map_err(|e| {
        Error::Credentials(format!(
            "{} is not a docker config file ({e}): fix it or point DOCKER_CONFIG at another folder",
            path.display()
        ))
    })?;
    let wanted = normalize(registry);
    let Some((key, entry)) = config.auths.iter().find(|(k, _)| normalize(k) == wanted) else {
        let helper = config
            .cred_helpers
            .iter()
            .find(|(k, _)| normalize(k) == wanted)
            .map(|(_, h)| h.clone())
            .or(config.creds_store.clone());
        return Ok(Credentials {
            note: helper.map(|h| {
                format!(
                    "{} keeps credentials in the helper docker-credential-{h}, which sandgraph \
                     does not run; connecting to {registry} anonymously (add an auths entry to \
                     use credentials)",
                    path.display()
                )
            }),
            ..Credentials::anonymous()
        });
    };
    let source = format!("auths.{key:?} in {}", path.display());
    let bad = |what: &str| {
        Error::Credentials(format!(
            "{source}: {what}; run `docker login {registry}` again or fix the entry"
        ))
    };
    let auth = if let Some(token) = entry.registrytoken.as_deref().filter(|t| !t.is_empty()) {
        RegistryAuth::Bearer(token.to_string())
    } else if let Some(encoded) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map_err(|e| bad(&format!("`auth` is not base64 ({e})")))?;
        let text = String::from_utf8(decoded).map_err(|_| bad("`auth` is not UTF-8"))?;
        let Some((user, pass)) = text.split_once(':') else {
            return Err(bad("`auth` is not base64 of user:password"));
        };
        RegistryAuth::Basic(user.to_string(), pass.to_string())
    } else if let (Some(user), Some(pass)) = (&entry.username, &entry.password) {
        RegistryAuth::Basic(user.clone(), pass.clone())
    } else if entry.identitytoken.is_some() {
        return Err(bad(
            "it holds only an identitytoken (an OAuth refresh token), which sandgraph cannot \
             exchange; log in with a username and password, or set registrytoken",
        ));
    } else {
        return Ok(Credentials {
            note: Some(format!(
                "{source} has no credentials; connecting to {registry} anonymously"
            )),
            ..Credentials::anonymous()
        });
    };
    Ok(Credentials {
        auth,
        source: Some(source),
        note: None,
    })
}

/// Reads `path` under [`MAX_DOCKER_CONFIG_BYTES`]; `None` when it does not
/// exist.
fn read_bounded(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    use std::io::Read;
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::Credentials(format!(
                "cannot read the docker config {}: {e}",
                path.display()
            )));
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_DOCKER_CONFIG_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Error::Credentials(format!(
                "cannot read the docker config {}: {e}",
                path.display()
            ))
        })?;
    if bytes.len() > MAX_DOCKER_CONFIG_BYTES {
        return Err(Error::Credentials(format!(
            "the docker config {} is larger than {MAX_DOCKER_CONFIG_BYTES} bytes: is it the \
             right file?",
            path.display()
        )));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn basic(c: &Credentials) -> (String, String) {
        match &c.auth {
            RegistryAuth::Basic(u, p) => (u.clone(), p.clone()),
            other => panic!("expected basic credentials, got {other:?}"),
        }
    }

    #[test]
    fn the_auth_field_gives_basic_credentials() {
        // base64("alice:pa:ss") — the password may hold colons.
        let (_d, p) = config(r#"{"auths":{"127.0.0.1:5000":{"auth":"YWxpY2U6cGE6c3M="}}}"#);
        let c = credentials_for("127.0.0.1:5000", Some(&p)).unwrap();
        assert_eq!(basic(&c), ("alice".into(), "pa:ss".into()));
        assert!(c.source.unwrap().contains("127.0.0.1:5000"));
        // Another registry is anonymous.
        assert!(
            credentials_for("127.0.0.1:5001", Some(&p))
                .unwrap()
                .is_anonymous()
        );
    }

    #[test]
    fn keys_with_scheme_and_path_match_and_docker_hub_is_folded() {
        let (_d, p) = config(
            r#"{"auths":{"https://index.docker.io/v1/":{"username":"u","password":"p"},
                        "https://Reg.Example.com":{"registrytoken":"tok"}}}"#,
        );
        assert_eq!(
            basic(&credentials_for("index.docker.io", Some(&p)).unwrap()).0,
            "u"
        );
        assert_eq!(
            basic(&credentials_for("docker.io", Some(&p)).unwrap()).0,
            "u"
        );
        match credentials_for("reg.example.com", Some(&p)).unwrap().auth {
            RegistryAuth::Bearer(t) => assert_eq!(t, "tok"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_file_is_anonymous_and_broken_entries_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("config.json");
        assert!(credentials_for("r", Some(&missing)).unwrap().is_anonymous());
        let (_d, p) = config("{not json");
        let e = credentials_for("r", Some(&p)).unwrap_err().to_string();
        assert!(e.contains("not a docker config file"), "{e}");
        let (_d, p) = config(r#"{"auths":{"r":{"auth":"!!!"}}}"#);
        let e = credentials_for("r", Some(&p)).unwrap_err().to_string();
        assert!(
            e.contains("not base64") && e.contains("docker login r"),
            "{e}"
        );
        // base64("nocolon")
        let (_d, p) = config(r#"{"auths":{"r":{"auth":"bm9jb2xvbg=="}}}"#);
        let e = credentials_for("r", Some(&p)).unwrap_err().to_string();
        assert!(e.contains("user:password"), "{e}");
        let (_d, p) = config(r#"{"auths":{"r":{"identitytoken":"x"}}}"#);
        let e = credentials_for("r", Some(&p)).unwrap_err().to_string();
        assert!(e.contains("identitytoken"), "{e}");
    }

    #[test]
    fn a_credential_helper_is_named_not_run() {
        let (_d, p) = config(r#"{"auths":{},"credsStore":"desktop"}"#);
        let c = credentials_for("r", Some(&p)).unwrap();
        assert!(c.is_anonymous());
        assert!(c.note.unwrap().contains("docker-credential-desktop"));
    }

    #[test]
    fn an_oversized_config_is_refused() {
        let (_d, p) = config(&" ".repeat(MAX_DOCKER_CONFIG_BYTES + 1));
        let e = credentials_for("r", Some(&p)).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
    }
}
