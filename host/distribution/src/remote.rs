//! One registry repository: connect (reference, credentials, scheme), push
//! an [`Artifact`], pull and verify one.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use futures::StreamExt as _;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use crate::auth::{self, Credentials};
use crate::layout::{
    self, Artifact, Descriptor, INDEX_MEDIA_TYPE, MANIFEST_MEDIA_TYPE, MAX_MANIFEST_BYTES,
    WasmConfig, sha256_digest,
};
use crate::{Error, excerpt};

/// How long to wait for a TCP (and TLS) connection to the registry.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one read may stall before the transfer is abandoned.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How to reach the registry.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// Allow plain HTTP to a registry that is not on loopback. Loopback
    /// registries (`localhost`, `127.0.0.0/8`, `::1`) always use HTTP.
    pub insecure: bool,
    /// The docker config file to read credentials from, instead of
    /// `auth::docker_config_path`.
    pub docker_config: Option<PathBuf>,
}

/// Whether `registry` (`host[:port]`) is on this machine: `localhost` or a
/// loopback address.
pub fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        rest.split(']').next().unwrap_or(rest)
    } else {
        match registry.rsplit_once(':') {
            // `host:port`, but not a bare IPv6 address.
            Some((h, _)) if !h.contains(':') => h,
            _ => registry,
        }
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A repository at a registry, with the credentials to use there.
pub struct Remote {
    client: Client,
    http: reqwest::Client,
    reference: Reference,
    credentials: Credentials,
    scheme: &'static str,
}

/// What a push stored.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// `registry/repository:tag`.
    pub reference: String,
    /// The manifest's digest: `reference@manifest_digest` pins this push.
    pub manifest_digest: String,
    /// The component's digest (the layer).
    pub layer_digest: String,
    /// Whether the component was already in the registry (not uploaded).
    pub layer_existed: bool,
}

impl Pushed {
    /// `registry/repository:tag@sha256:...`.
    pub fn pinned(&self) -> String {
        format!("{}@{}", self.reference, self.manifest_digest)
    }
}

/// A pulled and verified artifact.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component's bytes; they hash to `layer_digest`.
    pub component: Vec<u8>,
    /// The signature sidecar's bytes, when the manifest carried one.
    pub signature: Option<Vec<u8>>,
    /// The manifest's digest (computed from the bytes received).
    pub manifest_digest: String,
    /// The component's digest.
    pub layer_digest: String,
    /// The config, checked against the manifest.
    pub config: WasmConfig,
}

fn oci_error_kind(code: &OciErrorCode) -> u8 {
    match code {
        OciErrorCode::Unauthorized | OciErrorCode::Denied => 1,
        OciErrorCode::NameUnknown
        | OciErrorCode::ManifestUnknown
        | OciErrorCode::NotFound
        | OciErrorCode::BlobUnknown => 2,
        _ => 0,
    }
}

impl Remote {
    /// Parses `reference` (`registry/repository[:tag][@sha256:...]`), finds
    /// the registry's credentials and picks the scheme. Nothing is sent yet.
    pub fn connect(reference: &str, options: &ConnectOptions) -> Result<Self, Error> {
        let parsed = Reference::try_from(reference).map_err(|e| {
            Error::Reference(format!(
                "{:?} is not an OCI reference ({e}): write registry/repository:tag or \
                 registry/repository@sha256:<hex>, e.g. localhost:5000/graphs/echo:1.0",
                excerpt(reference)
            ))
        })?;
        if let Some(d) = parsed.digest() {
            layout::check_digest(d, "the reference's")
                .map_err(|e| Error::Reference(e.to_string()))?;
        }
        let registry = parsed.resolve_registry().to_string();
        let credentials = auth::credentials_for(&registry, options.docker_config.as_deref())?;
        let plain = is_loopback(&registry) || options.insecure;
        let protocol = if plain {
            ClientProtocol::HttpsExcept(vec![registry.clone()])
        } else {
            ClientProtocol::Https
        };
        let client = Client::try_from(ClientConfig {
            protocol,
            connect_timeout: Some(CONNECT_TIMEOUT),
            read_timeout: Some(READ_TIMEOUT),
            // A wasm artifact is one manifest: an index is refused, not
            // resolved to a platform.
            platform_resolver: None,
            user_agent: concat!("sandgraph/", env!("CARGO_PKG_VERSION")),
            ..Default::default()
        })
        .map_err(|e| Error::Transport(format!("cannot set up the registry client: {e}")))?;
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .user_agent(concat!("sandgraph/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Transport(format!("cannot set up the registry client: {e}")))?;
        Ok(Remote {
            client,
            http,
            reference: parsed,
            credentials,
            scheme: if plain { "http" } else { "https" },
        })
    }

    /// The credentials in use.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// Whether the registry is spoken to over plain HTTP.
    pub fn plain_http(&self) -> bool {
        self.scheme == "http"
    }

    /// `registry/repository`.
    pub fn repository(&self) -> String {
        format!(
            "{}/{}",
            self.reference.registry(),
            self.reference.repository()
        )
    }

    /// The last segment of the repository (`graphs/echo` → `echo`), a safe
    /// file name by the reference grammar.
    pub fn name(&self) -> &str {
        let repo = self.reference.repository();
        repo.rsplit('/').next().unwrap_or(repo)
    }

    /// The reference as given, normalized.
    pub fn reference(&self) -> String {
        self.reference.whole()
    }

    fn registry(&self) -> &str {
        self.reference.resolve_registry()
    }

    /// Turns a client error into one that says what to do.
    fn explain(&self, what: &str, e: OciDistributionError) -> Error {
        let registry = self.registry();
        match e {
            OciDistributionError::UnauthorizedError { .. } => {
                self.refused(what, "401 unauthorized")
            }
            OciDistributionError::AuthenticationFailure(reason) => self.refused(
                what,
                &format!("the token service said: {}", excerpt(&reason)),
            ),
            OciDistributionError::RegistryError { envelope, .. } => {
                let detail = envelope
                    .errors
                    .iter()
                    .take(3)
                    .map(|e| format!("{:?}: {}", e.code, excerpt(&e.message)))
                    .collect::<Vec<_>>()
                    .join("; ");
                match envelope
                    .errors
                    .iter()
                    .map(|e| oci_error_kind(&e.code))
                    .max()
                {
                    Some(1) => self.refused(what, &detail),
                    Some(2) => Error::NotFound(format!(
                        "{what}: {registry} has no {}: {detail}",
                        self.reference()
                    )),
                    _ => Error::Transport(format!("{what}: {registry} failed: {detail}")),
                }
            }
            OciDistributionError::ServerError { code, message, .. } => match code {
                401 | 403 => self.refused(what, &format!("HTTP {code}")),
                404 => Error::NotFound(format!("{what}: {registry} has no {}", self.reference())),
                _ => Error::Transport(format!(
                    "{what}: {registry} answered HTTP {code}: {}",
                    excerpt(&message)
                )),
            },
            OciDistributionError::DigestError(d) => {
                Error::Digest(format!("{what}: content does not match its digest: {d}"))
            }
            OciDistributionError::RequestError(e) => self.unreachable(what, &e),
            other => Error::Transport(format!(
                "{what}: {registry}: {}",
                excerpt(&other.to_string())
            )),
        }
    }

    fn refused(&self, what: &str, detail: &str) -> Error {
        let registry = self.registry();
        let hint = match &self.credentials.source {
            Some(source) => format!("check the credentials at {source}"),
            None => format!(
                "it wants credentials: run `docker login {registry}` or add auths.\"{registry}\" to {}",
                auth::docker_config_path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "$DOCKER_CONFIG/config.json".into())
            ),
        };
        let who = if self.credentials.is_anonymous() {
            "anonymous access"
        } else {
            "the credentials"
        };
        Error::Auth(format!(
            "{what}: {registry} refused {who} ({detail}): {hint}"
        ))
    }

    fn unreachable(&self, what: &str, e: &reqwest::Error) -> Error {
        let registry = self.registry();
        let mut chain = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        let hint = if self.plain_http() {
            String::new()
        } else {
            "; a registry that speaks only plain HTTP needs --insecure".to_string()
        };
        Error::Transport(format!(
            "{what}: cannot reach {registry} over {}: {}{hint}",
            self.scheme,
            excerpt(&chain)
        ))
    }

    /// Runs the registry's auth handshake for `op` and returns the bearer
    /// token when the registry uses a token service.
    async fn authorize(&self, what: &str, op: RegistryOperation) -> Result<Option<String>, Error> {
        self.client
            .auth(&self.reference, &self.credentials.auth, op)
            .await
            .map_err(|e| self.explain(what, e))
    }

    /// Pushes `artifact` to the reference's tag and returns what was stored.
    pub async fn push(&self, artifact: &Artifact) -> Result<Pushed, Error> {
        if self.reference.digest().is_some() {
            return Err(Error::Reference(format!(
                "cannot push to {}: a push names a tag, not a digest (the digest is the \
                 registry's answer); write {}:TAG",
                self.reference(),
                self.repository()
            )));
        }
        let built = layout::build(artifact)?;
        let what = format!("pushing {}", self.reference());
        self.authorize(&what, RegistryOperation::Push).await?;
        let layer_existed = self
            .client
            .blob_exists(&self.reference, &built.layer_digest)
            .await
            .unwrap_or(false);
        if !layer_existed {
            self.client
                .push_blob(
                    &self.reference,
                    artifact.component.clone(),
                    &built.layer_digest,
                )
                .await
                .map_err(|e| self.explain(&what, e))?;
        }
        self.client
            .push_blob(&self.reference, built.config.clone(), &built.config_digest)
            .await
            .map_err(|e| self.explain(&what, e))?;
        let location = self
            .client
            .push_manifest_raw(
                &self.reference,
                built.manifest.clone(),
                reqwest::header::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
            )
            .await
            .map_err(|e| self.explain(&what, e))?;
        // The registry names what it stored; it must be what was sent.
        if let Some(stored) = location
            .rsplit('/')
            .next()
            .filter(|s| s.starts_with("sha256:"))
            && stored != built.manifest_digest
        {
            return Err(Error::Digest(format!(
                "{what}: the registry stored the manifest as {} but it hashes to {}",
                excerpt(stored),
                built.manifest_digest
            )));
        }
        Ok(Pushed {
            reference: self.reference(),
            manifest_digest: built.manifest_digest,
            layer_digest: built.layer_digest,
            layer_existed,
        })
    }

    /// Pulls the reference's artifact and verifies it (see the crate docs).
    pub async fn pull(&self) -> Result<Pulled, Error> {
        let what = format!("pulling {}", self.reference());
        let token = self.authorize(&what, RegistryOperation::Pull).await?;
        let (manifest, manifest_digest) = self.fetch_manifest(&what, token.as_deref()).await?;
        let reference = self.reference();
        let checked = layout::check_manifest(&manifest, &reference)?;
        let config = self.fetch_blob(&what, "config", &checked.config).await?;
        let config = layout::check_config(&config, &checked.layer, &reference)?;
        let component = self.fetch_blob(&what, "component", &checked.layer).await?;
        Ok(Pulled {
            component,
            signature: checked.signature,
            manifest_digest,
            layer_digest: checked.layer.digest,
            config,
        })
    }

    /// GETs the manifest under [`MAX_MANIFEST_BYTES`] and returns it with its
    /// digest, checked against the pinned digest and the registry's
    /// `Docker-Content-Digest`.
    async fn fetch_manifest(
        &self,
        what: &str,
        token: Option<&str>,
    ) -> Result<(Vec<u8>, String), Error> {
        let target = self
            .reference
            .digest()
            .or(self.reference.tag())
            .unwrap_or("latest");
        let url = format!(
            "{}://{}/v2/{}/manifests/{target}",
            self.scheme,
            self.registry(),
            self.reference.repository()
        );
        let mut request = self.http.get(&url).header(
            reqwest::header::ACCEPT,
            format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}"),
        );
        request = match (token, &self.credentials.auth) {
            (Some(t), _) => request.bearer_auth(t),
            (None, RegistryAuth::Basic(u, p)) => request.basic_auth(u, Some(p)),
            (None, _) => request,
        };
        let response = request
            .send()
            .await
            .map_err(|e| self.unreachable(what, &e))?;
        if !response.status().is_success() {
            return Err(self.error_status(what, url, response).await);
        }
        let header = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = self.read_manifest(what, response).await?;
        let digest = sha256_digest(&body);
        if let Some(pinned) = self.reference.digest()
            && pinned != digest
        {
            return Err(Error::Digest(format!(
                "{what}: the registry answered with a manifest whose digest is {digest}, not the \
                 pinned {pinned}: refusing it"
            )));
        }
        if let Some(h) = header.filter(|h| h.starts_with("sha256:"))
            && h != digest
        {
            return Err(Error::Digest(format!(
                "{what}: the registry says the manifest is {}, but what it sent hashes to \
                 {digest}: refusing it",
                excerpt(&h)
            )));
        }
        Ok((body, digest))
    }

    /// The error of a manifest GET of `url` answered with an error status,
    /// quoting the start of its body.
    async fn error_status(
        &self,
        what: &str,
        url: String,
        mut response: reqwest::Response,
    ) -> Error {
        let status = response.status();
        let mut body = Vec::new();
        // An error body is quoted, never read whole.
        while body.len() < 4096
            && let Ok(Some(chunk)) = response.chunk().await
        {
            body.extend_from_slice(&chunk);
        }
        let message = String::from_utf8_lossy(&body).into_owned();
        self.explain(
            what,
            match serde_json::from_slice(&body) {
                Ok(envelope) if status.is_client_error() => {
                    OciDistributionError::RegistryError { envelope, url }
                }
                _ => OciDistributionError::ServerError {
                    code: status.as_u16(),
                    url,
                    message,
                },
            },
        )
    }

    /// Reads a manifest response's body, refusing one over
    /// [`MAX_MANIFEST_BYTES`].
    async fn read_manifest(
        &self,
        what: &str,
        mut response: reqwest::Response,
    ) -> Result<Vec<u8>, Error> {
        if let Some(len) = response.content_length()
            && len > MAX_MANIFEST_BYTES as u64
        {
            return Err(Error::TooLarge(format!(
                "{what}: the manifest is {len} bytes, more than {MAX_MANIFEST_BYTES}: it is not \
                 a graph component's"
            )));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.unreachable(what, &e))?
        {
            if body.len() + chunk.len() > MAX_MANIFEST_BYTES {
                return Err(Error::TooLarge(format!(
                    "{what}: the manifest is more than {MAX_MANIFEST_BYTES} bytes: it is not a \
                     graph component's"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Downloads the blob `desc` names, reading at most its declared size
    /// (already bounded by [`layout::check_manifest`]) and checking its
    /// digest.
    async fn fetch_blob(
        &self,
        what: &str,
        kind: &str,
        desc: &Descriptor,
    ) -> Result<Vec<u8>, Error> {
        let mismatch = |detail: String| {
            Error::Digest(format!(
                "{what}: the {kind} blob {} {detail}: the registry's copy is damaged or was \
                 tampered with; refusing it",
                desc.digest
            ))
        };
        let mut stream = self
            .client
            .pull_blob_stream(&self.reference, desc.digest.as_str())
            .await
            .map_err(|e| self.explain(what, e))?;
        if let Some(len) = stream.content_length
            && len != desc.size
        {
            return Err(mismatch(format!(
                "is {len} bytes at the registry, but the manifest says {}",
                desc.size
            )));
        }
        // Bounded: the size was checked against its MAX_* before this call.
        let mut bytes = Vec::with_capacity(desc.size as usize);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                match e.get_ref().and_then(|i| i.downcast_ref::<DigestError>()) {
                    Some(DigestError::VerificationError { actual, .. }) => {
                        mismatch(format!("arrived as content hashing to {actual}"))
                    }
                    _ => Error::Transport(format!(
                        "{what}: reading the {kind} blob {}: {}",
                        desc.digest,
                        excerpt(&e.to_string())
                    )),
                }
            })?;
            if bytes.len() as u64 + chunk.len() as u64 > desc.size {
                return Err(mismatch(format!(
                    "is longer than the {} bytes the manifest says",
                    desc.size
                )));
            }
            bytes.extend_from_slice(&chunk);
        }
        if bytes.len() as u64 != desc.size {
            return Err(mismatch(format!(
                "is {} bytes, but the manifest says {}",
                bytes.len(),
                desc.size
            )));
        }
        let actual = sha256_digest(&bytes);
        if actual != desc.digest {
            return Err(mismatch(format!("arrived as content hashing to {actual}")));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_recognized() {
        for r in [
            "localhost",
            "localhost:5000",
            "LOCALHOST:1",
            "127.0.0.1:5000",
            "127.1.2.3",
            "::1",
            "[::1]:5000",
        ] {
            assert!(is_loopback(r), "{r}");
        }
        for r in [
            "ghcr.io",
            "10.0.0.1:5000",
            "localhost.example.com:5000",
            "0.0.0.0:5000",
        ] {
            assert!(!is_loopback(r), "{r}");
        }
    }

    fn anon() -> ConnectOptions {
        let dir = std::env::temp_dir().join("sandgraph-distribution-no-config/config.json");
        ConnectOptions {
            insecure: false,
            docker_config: Some(dir),
        }
    }

    #[test]
    fn the_scheme_is_https_unless_loopback_or_insecure() {
        assert!(
            Remote::connect("127.0.0.1:5000/graphs/echo:1", &anon())
                .unwrap()
                .plain_http()
        );
        assert!(
            Remote::connect("localhost:5000/echo", &anon())
                .unwrap()
                .plain_http()
        );
        assert!(
            !Remote::connect("ghcr.io/acme/echo:1", &anon())
                .unwrap()
                .plain_http()
        );
        let insecure = ConnectOptions {
            insecure: true,
            ..anon()
        };
        assert!(
            Remote::connect("registry.lan:5000/echo:1", &insecure)
                .unwrap()
                .plain_http()
        );
    }

    #[test]
    fn references_are_parsed_and_named() {
        let r = Remote::connect("127.0.0.1:5000/graphs/echo:1.0", &anon()).unwrap();
        assert_eq!(r.name(), "echo");
        assert_eq!(r.repository(), "127.0.0.1:5000/graphs/echo");
        let e = Remote::connect("Not A Ref", &anon()).err().unwrap();
        assert_eq!(e.code(), "invalid_reference");
        assert!(e.to_string().contains("registry/repository:tag"), "{e}");
        let md5 = format!("localhost:5000/echo@md5:{}", "0".repeat(32));
        assert_eq!(
            Remote::connect(&md5, &anon()).err().unwrap().code(),
            "invalid_reference"
        );
    }

    #[tokio::test]
    async fn push_refuses_a_digest_reference() {
        let pinned = format!("127.0.0.1:9/echo@sha256:{}", "0".repeat(64));
        let r = Remote::connect(&pinned, &anon()).unwrap();
        let e = r.push(&Artifact::default()).await.unwrap_err();
        assert_eq!(e.code(), "invalid_reference");
        assert!(e.to_string().contains("names a tag"), "{e}");
    }
}
