//! The `http` capability: outgoing requests through `wasi:http`'s
//! `outgoing-handler`, checked before anything leaves the host.
//!
//! Factor: [`HttpFactor`] (it links `wasi:http` and holds the host-wide
//! caps). Context: [`HttpCtx`] (per store: `wasi:http`'s state and the
//! [`HttpHooks`] that send every request). Grant: [`HttpGrant`], parsed
//! from `sandgraph.toml` as [`HttpGrantConfig`]. There is no backend
//! trait: the sender is this module's own, so that every check below
//! happens before a connection exists (tests serve on loopback, or answer
//! from a cassette, [`HttpCassette`]).
//!
//! A request goes through, in order: the grant (none: denied), the URI
//! (scheme `http`/`https`, no user info, at most [`MAX_URI_BYTES`]), the
//! allow-list (scheme, host and port of one entry) and the method
//! (denied otherwise), the declared body size, the body itself (read into
//! the host up to the grant's cap, so an oversized body is refused before a
//! connection is opened), the name resolution (done here, not by the
//! system's connect), the address check (loopback, private, link-local,
//! unspecified, multicast, documentation and reserved ranges are refused
//! unless the grant allows them, `is_restricted`), and only then a
//! connection to one of the checked addresses. The guest sees
//! `http-request-denied` or `destination-ip-prohibited` and nothing left
//! the host.
//!
//! The host follows no redirect: the guest sees the 3xx, and each hop it
//! makes is a new request checked again. No proxy is read from the
//! environment. Every wait (resolution, connection, first byte, each
//! further byte) has a timeout the guest's own `request-options` can only
//! lower, and all of them end at the run's soft deadline or at once when
//! the run is cancelled: the wait is async and holds no CPU or fuel.
//!
//! What a request holds is bounded (`inflight`): once its grant, URI and
//! method are checked it takes a slot of its run's and of the host's
//! ([`MAX_HTTP_REQUESTS_PER_RUN`], [`MAX_HTTP_REQUESTS_PER_HOST`]; one
//! connection per request, so these cap the open sockets too), waiting for
//! one within the run's deadline, or is refused at once when
//! [`MAX_HTTP_WAITING_PER_RUN`] requests of the run already wait. It keeps
//! the slot until its connection is closed and its response body dropped.
//! Resolutions take a slot of the run's and the host's too
//! ([`MAX_HTTP_RESOLUTIONS_PER_RUN`], [`MAX_HTTP_RESOLUTIONS_PER_HOST`]),
//! held by the resolver thread until it returns. The bytes the host keeps
//! for a request (its head while it waits, its body, its connection's
//! buffers, the response frame the guest has not read yet) are charged to
//! the run's host byte budget while they are kept; a request that does not
//! fit is refused (`http-request-denied`, or the body size error).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wasmtime::component::Linker;
use wasmtime_wasi_http::io::TokioIo;
use wasmtime_wasi_http::p2::bindings::http as wasi_http;
use wasmtime_wasi_http::{
    Error, RequestOptions, WasiBody, WasiHttp, WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks,
};

use sandgraph_llm::cassette::CassetteWriter;
use sandgraph_runtime::caps::{Call, Factor, Grant, RunControl, StoreData};

mod cassette;
mod config;
mod inflight;

use cassette::cassette_line;
pub use cassette::{HttpCassette, HttpReplay};
pub use config::{HttpGrantConfig, InvalidHttpGrant};
use inflight::HostHttp;
use inflight::{Accounts, Charge, Slot};

/// `http` requests one run may have in flight at once, from the moment
/// it holds a slot (before its body is read) until its connection is
/// closed and its response body dropped. The host opens one connection per
/// request and pools none, so this caps the run's open sockets too.
/// Default 16: twice the run's default instance slots, so a fan-out whose
/// every task sends a request never waits, while one run holds at most
/// 1/16 of the host's connections. Requests past it wait within the run's
/// deadline.
pub const MAX_HTTP_REQUESTS_PER_RUN: usize = 16;

/// `http` requests of all runs in flight at once (and so open
/// connections). 256: a quarter of the common 1024 descriptor soft limit,
/// leaving the rest to the host's own listeners, clients and stores;
/// sixteen runs at their own cap fill it. Requests past it wait within
/// their run's deadline.
pub const MAX_HTTP_REQUESTS_PER_HOST: usize = 256;

/// `http` requests of one run that may wait for a slot; more are refused
/// at once (`http-request-denied`). Each waiting request is a task holding
/// its head (charged to the run's host byte budget); 256 waiting behind 16
/// in flight is more than a run's deadline serves.
pub const MAX_HTTP_WAITING_PER_RUN: usize = 256;

/// Name resolutions of all runs at once. Each runs on a blocking thread
/// (`getaddrinfo`, which cannot be cancelled: an abandoned one keeps its
/// thread until the resolver gives up), so this keeps the blocking pool
/// (512 threads) to the journal, the stores and the rest of the host.
pub const MAX_HTTP_RESOLUTIONS_PER_HOST: usize = 16;

/// Name resolutions of one run at once, so one run's slow names cannot
/// hold every resolution slot of the host.
pub const MAX_HTTP_RESOLUTIONS_PER_RUN: usize = 4;

/// Largest request body a guest may send, in bytes: API calls send small
/// JSON documents; the body is held by the host before it is sent (so an
/// oversized one never leaves), which this bounds. A grant may lower it.
pub const MAX_REQUEST_BODY_BYTES: u64 = 1024 * 1024;
/// Largest response body a guest may read, in bytes: an API answer or a web
/// page; larger is a download the guest would only copy into its own
/// memory (128 MiB by default). A grant may lower it.
pub const MAX_RESPONSE_BODY_BYTES: u64 = 8 * 1024 * 1024;
/// Most bytes of headers of one request or response in the host's
/// representation (`wasi:http`'s fields limit, its default made explicit),
/// and of a response head as read from the server.
pub const MAX_HEADER_BYTES: usize = 64 * 1024;
/// Most headers of one response the host parses.
pub const MAX_RESPONSE_HEADERS: usize = 100;
/// Longest request URI (scheme, authority, path and query), in bytes:
/// servers refuse longer ones (8 KiB is the common limit).
pub const MAX_URI_BYTES: usize = 8 * 1024;
/// Longest wait for name resolution plus connection (all addresses
/// tried), TLS handshake included.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait from sending the request to the response head.
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait between two parts of a response body.
pub const BETWEEN_BYTES_TIMEOUT: Duration = Duration::from_secs(30);
/// Most resolved addresses tried for one request: a name with more is
/// tried on its first ones.
const MAX_ADDRESSES: usize = 8;
/// Most entries in one grant (operator input; a longer list is a mistake).
const MAX_ALLOW_ENTRIES: usize = 1024;
/// Largest write into a request body's stream, in bytes, and so what the
/// host buffers for a body before a request is sent (wasi:http keeps two
/// such chunks per body; its default is 1 MiB each). Guests write in
/// chunks of what `check-write` allows, so this costs them nothing.
pub const MAX_BODY_CHUNK_BYTES: usize = 64 * 1024;
/// What a request costs the run's host byte budget while it waits or is
/// in flight, besides its header and URI bytes and its body: its task, its
/// parsed head and its journal row (an estimate).
const REQUEST_BYTES: usize = 2 * 1024;
/// What an open connection costs the run's host byte budget: hyper's read
/// buffer (bounded by the larger of the header cap and 8 KiB) and write
/// buffer, and the TLS state (an estimate).
const CONNECTION_BYTES: usize = 2 * MAX_HEADER_BYTES;

/// What the operator grants a graph: `[graphs.<name>.grants] http =
/// { allow = [...], methods = [...], private = false }`; see
/// [`HttpGrant::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    allow: Vec<Origin>,
    /// Upper-case method names; `None`: any method.
    methods: Option<Vec<String>>,
    private: bool,
    max_request_bytes: u64,
    max_response_bytes: u64,
    /// Record or replay of the exchanges (`--record` / `--replay`).
    cassette: Option<HttpCassette>,
    /// The in-flight accounts of the run the grant is bound to (`None`
    /// until a run is started with it, [`bind_run`]).
    accounts: Option<Accounts>,
}

impl Grant for HttpGrant {
    const CAPABILITY: &'static str = "http";
}

/// The `http` capability, registered with the runtime: `wasi:http`'s
/// `outgoing-handler` and `types`, every request through [`HttpHooks`].
/// Holds the host-wide caps (requests in flight, resolutions).
pub struct HttpFactor {
    host: Arc<HostHttp>,
}

impl std::fmt::Debug for HttpFactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpFactor").finish_non_exhaustive()
    }
}

impl HttpFactor {
    /// The factor with the host's default caps.
    pub fn new() -> Self {
        HttpFactor {
            host: HostHttp::new(),
        }
    }
}

impl Default for HttpFactor {
    fn default() -> Self {
        Self::new()
    }
}

/// The `http` state of one store: `wasi:http`'s (its fields limit) and the
/// hooks that check and send every outgoing request.
pub struct HttpCtx {
    ctx: WasiHttpCtx,
    hooks: HttpHooks,
}

/// The `wasi:http` view of a store, its table shared with WASI's.
fn view(data: &mut StoreData) -> WasiHttpCtxView<'_> {
    let (http, table) = data.factor_and_table::<HttpFactor>();
    WasiHttpCtxView {
        ctx: &mut http.ctx,
        table,
        hooks: &mut http.hooks,
    }
}

impl Factor for HttpFactor {
    const INTERFACE: &'static str = "wasi:http/outgoing-handler";
    type Grant = HttpGrant;
    type InstanceState = HttpCtx;

    /// Adds `wasi:http`'s `outgoing-handler` and `types` only (the rest of
    /// WASI is the sandbox's).
    fn add_to_linker(&self, linker: &mut Linker<StoreData>) -> wasmtime::Result<()> {
        let options = wasmtime_wasi_http::p2::bindings::LinkOptions::default();
        wasi_http::outgoing_handler::add_to_linker::<_, WasiHttp>(linker, view)?;
        wasi_http::types::add_to_linker::<_, WasiHttp>(linker, &options.into(), view)?;
        Ok(())
    }

    /// The grant bound to the host's in-flight accounts and the run's own.
    /// A sub-run (a `tools` call) draws on its caller's run accounts when
    /// the caller has an `http` grant, so a chain of calls does not open
    /// fresh slots.
    fn bind(&self, grant: &HttpGrant, caller: Option<&HttpGrant>) -> Option<HttpGrant> {
        let callers = caller
            .and_then(|c| c.accounts.as_ref())
            .map(|a| a.run().clone());
        let mut grant = grant.clone();
        grant.accounts = Some(Accounts::new(self.host.clone(), callers));
        Some(grant)
    }

    fn instance_state(&self, run: &Arc<RunControl>) -> HttpCtx {
        HttpCtx {
            ctx: new_ctx(),
            hooks: HttpHooks::new(run.clone()),
        }
    }
}

/// One parsed allow entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    /// The entry as written, for messages.
    text: String,
    https: bool,
    host: HostPattern,
    /// `None`: any port.
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    /// Exactly this (canonical) name.
    Name(String),
    /// Any name strictly below this one (`*.example.com`), not itself.
    Below(String),
    /// Exactly this address, written as an IP literal.
    Ip(IpAddr),
    /// Any host (`*`).
    Any,
}

/// A request's host, canonical: lower case, no trailing dot, no brackets.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Name(String),
    Ip(IpAddr),
}

impl HttpGrant {
    /// Parses a grant: `entries` are origins, `scheme://host[:port]`:
    ///
    /// - the scheme is required, `http` or `https`;
    /// - no port means the scheme's default (80, 443); `:*` any port;
    /// - the host is a name (`api.github.com`), `*.example.com` (any name
    ///   below example.com, not example.com itself), an IP literal
    ///   (`127.0.0.1`, `[::1]`), or `*` (any host);
    /// - no path, query, fragment or user info (a trailing `/` is fine).
    ///
    /// `methods` are the methods allowed on every entry; empty means `GET`
    /// and `HEAD`, `"*"` any method.
    ///
    /// `private`: whether names may resolve to restricted addresses
    /// (loopback, private, link-local, ... see `is_restricted`). Without
    /// it a restricted address is reachable only through an entry naming
    /// that IP literal.
    ///
    /// # Errors
    ///
    /// Which entry (its position and text) and why it is not an origin.
    pub fn parse(
        entries: &[String],
        methods: &[String],
        private: bool,
    ) -> Result<Self, InvalidHttpGrant> {
        Self::parse_text(entries, methods, private).map_err(InvalidHttpGrant)
    }

    /// [`HttpGrant::parse`], its error as text.
    fn parse_text(entries: &[String], methods: &[String], private: bool) -> Result<Self, String> {
        if entries.len() > MAX_ALLOW_ENTRIES {
            return Err(format!(
                "http grant has {} allow entries; at most {MAX_ALLOW_ENTRIES} are accepted",
                entries.len()
            ));
        }
        let allow = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                parse_origin(e).map_err(|why| format!("http allow entry {} ({e:?}): {why}", i + 1))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let methods = if methods.is_empty() {
            Some(vec!["GET".to_owned(), "HEAD".to_owned()])
        } else if methods.iter().any(|m| m == "*") {
            None
        } else {
            let mut out = Vec::new();
            for m in methods {
                if m.is_empty() || m.len() > 32 || !m.bytes().all(is_token_byte) {
                    return Err(format!(
                        "http methods: {m:?} is not a method name (letters, as in \"GET\", or \"*\")"
                    ));
                }
                out.push(m.to_ascii_uppercase());
            }
            Some(out)
        };
        Ok(HttpGrant {
            allow,
            methods,
            private,
            max_request_bytes: MAX_REQUEST_BODY_BYTES,
            max_response_bytes: MAX_RESPONSE_BODY_BYTES,
            cassette: None,
            accounts: None,
        })
    }

    /// Records the exchanges into, or answers them from, `cassette`.
    #[must_use]
    pub fn with_cassette(mut self, cassette: HttpCassette) -> Self {
        self.cassette = Some(cassette);
        self
    }

    /// Lowers the body caps (`None` keeps one).
    ///
    /// # Errors
    ///
    /// A cap above the host's ([`MAX_REQUEST_BODY_BYTES`],
    /// [`MAX_RESPONSE_BODY_BYTES`]): a grant cannot raise them.
    #[cfg(test)]
    pub(crate) fn with_body_limits(
        mut self,
        request: Option<u64>,
        response: Option<u64>,
    ) -> Result<Self, String> {
        if let Some(r) = request {
            if r > MAX_REQUEST_BODY_BYTES {
                return Err(format!(
                    "http max_request_bytes {r} is above the host's {MAX_REQUEST_BODY_BYTES}"
                ));
            }
            self.max_request_bytes = r;
        }
        if let Some(r) = response {
            if r > MAX_RESPONSE_BODY_BYTES {
                return Err(format!(
                    "http max_response_bytes {r} is above the host's {MAX_RESPONSE_BODY_BYTES}"
                ));
            }
            self.max_response_bytes = r;
        }
        Ok(self)
    }

    /// The allow entries as written.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(|o| o.text.as_str())
    }

    /// Whether `method` (upper case) is allowed.
    fn allows_method(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| m == method))
    }

    /// The entries that admit this scheme, host and port.
    fn matching(&self, https: bool, host: &Host, port: u16) -> impl Iterator<Item = &Origin> {
        self.allow.iter().filter(move |o| {
            o.https == https
                && o.port.is_none_or(|p| p == port)
                && match (&o.host, host) {
                    (HostPattern::Any, _) => true,
                    (HostPattern::Name(n), Host::Name(h)) => n == h,
                    (HostPattern::Below(n), Host::Name(h)) => h
                        .strip_suffix(n.as_str())
                        .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
                    (HostPattern::Ip(ip), Host::Ip(h)) => ip == h,
                    _ => false,
                }
        })
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn parse_origin(entry: &str) -> Result<Origin, String> {
    let Some((scheme, rest)) = entry.split_once("://") else {
        return Err("no scheme: write https://host or http://host".to_owned());
    };
    let https = match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => false,
        other => return Err(format!("scheme {other:?} is not http or https")),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#']) {
        return Err("an entry names an origin (scheme://host[:port]), not a path".to_owned());
    }
    if rest.contains('@') {
        return Err("user info is not allowed".to_owned());
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err("an IPv6 address has no closing ]".to_owned());
        };
        let ip: Ipv6Addr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| format!("unexpected {p:?} after the address"))?,
            ),
        };
        (HostPattern::Ip(IpAddr::V6(ip)), port)
    } else {
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if host.contains(':') {
            return Err("IPv6 addresses go in brackets: http://[::1]:8080".to_owned());
        }
        let host = canonical_name(host);
        let pattern = if host == "*" {
            HostPattern::Any
        } else if let Ok(ip) = host.parse::<Ipv4Addr>() {
            HostPattern::Ip(IpAddr::V4(ip))
        } else if let Some(below) = host.strip_prefix("*.") {
            check_name(below)?;
            HostPattern::Below(below.to_owned())
        } else {
            check_name(&host)?;
            HostPattern::Name(host)
        };
        (pattern, port)
    };
    let port = match port {
        None => Some(if https { 443 } else { 80 }),
        Some("*") => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("port {p:?} is not a number from 1 to 65535 or *")),
        },
    };
    Ok(Origin {
        text: entry.to_owned(),
        https,
        host,
        port,
    })
}

/// Lower case, one trailing dot dropped.
fn canonical_name(host: &str) -> String {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// A DNS name: dot-separated labels of letters, digits, `-` and `_`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("the host is empty".to_owned());
    }
    if name.len() > 253 {
        return Err("the host name is longer than 253 bytes".to_owned());
    }
    for label in name.split('.') {
        if label.contains('*') {
            return Err(format!(
                "{name:?}: a wildcard is only allowed as a leading *. or as the whole host"
            ));
        }
        if label.is_empty()
            || label.len() > 63
            || !label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(format!("{name:?} is not a host name"));
        }
    }
    Ok(())
}

/// Why `ip` is a restricted destination (not reachable by name without
/// `private = true`), or `None` for a global unicast address. IPv4-mapped
/// and IPv4-embedding IPv6 forms (NAT64, 6to4) are checked as the IPv4
/// address they carry.
pub(crate) fn is_restricted(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => restricted_v4(v4),
        IpAddr::V6(v6) => restricted_v6(v6),
    }
}

fn restricted_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "private",
        (100, 64..=127, _) => "shared address space (100.64.0.0/10)",
        (127, _, _) => "loopback",
        (169, 254, _) => "link-local",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved or broadcast",
        _ => return None,
    })
}

fn restricted_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return restricted_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    Some(match s[0] {
        // 64:ff9b::/96, NAT64 of an IPv4 address.
        0x64 if s[1] == 0xff9b && s[2..6] == [0; 4] => return restricted_v4(embedded(s[6], s[7])),
        0x64 if s[1] == 0xff9b && s[2] == 1 => "local-use NAT64 (64:ff9b:1::/48)",
        // 6to4 carries an IPv4 address in bits 16..48.
        0x2002 => return restricted_v4(embedded(s[1], s[2])),
        0 if s[1..6] == [0; 5] => "IPv4-compatible (::/96)",
        0x100 if s[1..4] == [0; 3] => "discard-only (100::/64)",
        0x2001 if s[1] == 0xdb8 => "documentation (2001:db8::/32)",
        0x2001 if s[1] == 0 => "Teredo (2001::/32)",
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        x if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        x if x & 0xff00 == 0xff00 => "multicast",
        _ => return None,
    })
}

/// The per-store `wasi:http` state: the fields limit made explicit.
fn new_ctx() -> WasiHttpCtx {
    let mut ctx = WasiHttpCtx::new();
    ctx.set_field_size_limit(MAX_HEADER_BYTES);
    ctx
}

/// The `wasi:http` hooks of one store: every outgoing request goes through
/// [`HttpHooks::send_request`], checked against the run's grant.
pub struct HttpHooks {
    control: Arc<RunControl>,
}

impl HttpHooks {
    fn new(control: Arc<RunControl>) -> Self {
        HttpHooks { control }
    }
}

type IoFuture = Box<dyn Future<Output = Result<(), Error>> + Send>;

impl WasiHttpHooks for HttpHooks {
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        MAX_BODY_CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: IoFuture,
    ) -> Box<dyn Future<Output = Result<(http::Response<WasiBody>, IoFuture), Error>> + Send> {
        let control = self.control.clone();
        let started = std::time::Instant::now();
        let target = format!(
            "{} {}://{}",
            request.method(),
            request.uri().scheme_str().unwrap_or("?"),
            request.uri().authority().map_or("?", |a| a.as_str())
        );
        let request_bytes = wasmtime_wasi_http_content_length(request.headers()).unwrap_or(0);
        Box::new(async move {
            let stop = control.clone();
            let refused = Refusal::default();
            let over_cap = control.enter().err().map(|e| e.to_string());
            let out = match &over_cap {
                // Past the run's cap on capability calls: refused at once.
                Some(_) => Err(Error::HttpRequestDenied),
                // The stop first: a request made or woken after it sends nothing.
                None => tokio::select! {
                    biased;
                    () = stop.soft_stopped() => Err(Error::HttpResponseTimeout),
                    r = send(control.clone(), request, options, &refused) => r,
                },
            };
            let refusal = refused
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (decision, reason) = match (&out, refusal) {
                (Err(_), _) if over_cap.is_some() => ("quota", over_cap),
                (Ok(_), _) => ("allowed", None),
                (Err(_), Some(why)) => ("denied", Some(why)),
                (Err(Error::HttpResponseTimeout | Error::ConnectionTimeout), None) => {
                    ("timeout", Some("no answer before the deadline".to_owned()))
                }
                (Err(e), None) => ("failed", Some(e.to_string())),
            };
            {
                let response_bytes = out.as_ref().ok().map_or(0, |(r, _)| {
                    wasmtime_wasi_http_content_length(r.headers()).unwrap_or(0)
                });
                control
                    .record(Call {
                        capability: "http",
                        target: &target,
                        decision,
                        reason: reason.as_deref(),
                        request_bytes,
                        response_bytes,
                        tokens: None,
                        started,
                    })
                    .await;
            }
            out
        })
    }
}

/// Logs why a request was refused (the guest only sees the error code)
/// and returns `error`.
fn refuse(control: &RunControl, refused: &Refusal, error: Error, why: String) -> Error {
    let graph = control.graph();
    tracing::info!(target: "sandgraph::http", graph, "http request refused: {why}");
    *refused
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why);
    error
}

/// Why the request in progress was refused, for its journal row.
type Refusal = std::sync::Mutex<Option<String>>;

/// The timeout of a wait: the host's, or the guest's when lower.
fn timeout(guest: Option<Duration>, host: Duration) -> Duration {
    guest.map_or(host, |g| g.min(host))
}

/// A request that passed every check that needs no network: grant,
/// URI, allow-list, method and body size.
struct Checked {
    grant: HttpGrant,
    parts: http::request::Parts,
    https: bool,
    host: Host,
    port: u16,
    /// `scheme://host:port`, for messages.
    target: String,
    /// An allow entry names this very IP literal.
    named_ip: bool,
    /// The body, read whole under the grant's cap (empty until
    /// [`read_charged`] has read it).
    body: Bytes,
    /// `METHOD url`: the request as a cassette keys it.
    key: String,
}

/// Checks and sends one request; the response's body is capped and timed.
async fn send(
    control: Arc<RunControl>,
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
    refused: &Refusal,
) -> Result<(http::Response<WasiBody>, IoFuture), Error> {
    let (mut checked, body) = check(&control, request, refused)?;
    // A slot of the run's and the host's (waiting for one), then the body,
    // charged to the run's bytes as it is read.
    let mut held = admit(&control, refused, &checked).await?;
    checked.body = read_charged(&control, refused, &checked, body, &mut held.charge).await?;
    if let Some(HttpCassette::Replay(replay)) = &checked.grant.cassette {
        // Checked like a live request up to here; nothing is sent.
        return replayed(&control, refused, replay, &checked.key);
    }
    let target = &checked.target;
    if let Err(e) = held
        .charge
        .add(CONNECTION_BYTES, &|| format!("a connection to {target}"))
    {
        return Err(refuse(
            &control,
            refused,
            Error::HttpRequestDenied,
            e.message,
        ));
    }
    // Resolution and the address check, before any connection.
    let connect_within = timeout(options.and_then(|o| o.connect_timeout), CONNECT_TIMEOUT);
    let connect_by = tokio::time::Instant::now() + connect_within;
    let addrs = resolve(&control, refused, &checked, connect_by).await?;
    // Connect to a checked address, never to the name.
    let (sender, conn) = open(&checked, &addrs, connect_by).await?;
    exchange(&control, refused, checked, options, (sender, conn), held).await
}

/// What a request in flight holds until its connection is closed and its
/// response body dropped: its slots and the bytes charged for it.
struct Held {
    _slot: Slot,
    charge: Charge,
}

/// The request's slots, waited for (the caller races the run's deadline),
/// and the bytes of its head charged to the run meanwhile; refused at once
/// when the run's queue is full or its byte budget cannot take the head.
async fn admit(control: &Arc<RunControl>, refused: &Refusal, c: &Checked) -> Result<Held, Error> {
    let denied = |why: String| refuse(control, refused, Error::HttpRequestDenied, why);
    let Some(accounts) = &c.grant.accounts else {
        tracing::error!(target: "sandgraph::http", "an http grant was used without a run's accounts");
        return Err(denied("the http grant is not bound to this run".to_owned()));
    };
    let head = REQUEST_BYTES
        + c.key.len()
        + c.parts
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len())
            .sum::<usize>();
    let mut charge = Charge::new(control.clone());
    let target = &c.target;
    charge
        .add(head, &|| format!("an http request to {target}"))
        .map_err(|e| denied(e.message))?;
    let slot = accounts
        .slot()
        .await
        .map_err(|full| denied(format!("request to {target} refused: {full}")))?;
    Ok(Held {
        _slot: slot,
        charge,
    })
}

/// Reads the request body into the host under the grant's cap, charging
/// it to the run's bytes as it arrives.
async fn read_charged(
    control: &RunControl,
    refused: &Refusal,
    c: &Checked,
    body: WasiBody,
    charge: &mut Charge,
) -> Result<Bytes, Error> {
    read_body(body, c.grant.max_request_bytes, charge, &c.target)
        .await
        .map_err(|(e, why)| refuse(control, refused, e, why))
}

/// The checks of a request before any network and before it waits for a
/// slot: grant, URI, allow-list, method, declared body size. The body is
/// handed back unread.
fn check(
    control: &Arc<RunControl>,
    request: http::Request<WasiBody>,
    refused: &Refusal,
) -> Result<(Checked, WasiBody), Error> {
    let control = control.clone();
    let denied = |why: String| refuse(&control, refused, Error::HttpRequestDenied, why);
    let Some(grant) = control.grant::<HttpGrant>().cloned() else {
        return Err(denied(
            "this graph has no http grant ([graphs.<name>.grants] http = { allow = [...] })"
                .to_owned(),
        ));
    };
    let (parts, body) = request.into_parts();
    let uri = &parts.uri;
    let (https, host, port, target) = parse_target(&control, refused, uri)?;
    let mut matching = grant.matching(https, &host, port).peekable();
    if matching.peek().is_none() {
        return Err(denied(format!(
            "{target} is not in this graph's http grant (allowed: {})",
            if grant.allow.is_empty() {
                "none".to_owned()
            } else {
                grant.entries().collect::<Vec<_>>().join(", ")
            }
        )));
    }
    // An entry naming this very IP literal grants it whatever its range.
    let named_ip = matching.any(|o| matches!(o.host, HostPattern::Ip(_)));
    drop(matching);
    let method = parts.method.as_str();
    if !grant.allows_method(method) {
        return Err(denied(format!(
            "method {method} is not granted for {target} (allowed: {})",
            grant.methods.as_deref().unwrap_or_default().join(", ")
        )));
    }
    // The body, bounded, before any connection.
    let cap = grant.max_request_bytes;
    if let Some(len) = wasmtime_wasi_http_content_length(&parts.headers)
        && len > cap
    {
        return Err(refuse(
            &control,
            refused,
            Error::HttpRequestBodySize(Some(len)),
            format!("request body of {len} bytes to {target} is over the cap of {cap}"),
        ));
    }
    let key = format!("{} {uri}", parts.method);
    let checked = Checked {
        grant,
        https,
        host,
        port,
        target,
        named_ip,
        body: Bytes::new(),
        key,
        parts,
    };
    Ok((checked, body))
}

/// The scheme, host, port and `scheme://host:port` of a request's URI,
/// or why it cannot be sent (no user info, bounded length, a valid name or
/// IP literal).
fn parse_target(
    control: &RunControl,
    refused: &Refusal,
    uri: &http::Uri,
) -> Result<(bool, Host, u16, String), Error> {
    let denied = |why: String| refuse(control, refused, Error::HttpRequestDenied, why);
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(denied(format!("scheme {other:?} is not http or https"))),
    };
    let Some(authority) = uri.authority() else {
        return Err(denied("the request names no host".to_owned()));
    };
    if authority.as_str().contains('@') {
        return Err(refuse(
            control,
            refused,
            Error::HttpRequestUriInvalid,
            "user info in the request's authority".to_owned(),
        ));
    }
    let uri_len = authority.as_str().len() + uri.path_and_query().map_or(0, |p| p.as_str().len());
    if uri_len > MAX_URI_BYTES {
        return Err(refuse(
            control,
            refused,
            Error::HttpRequestUriTooLong,
            format!("request URI of {uri_len} bytes is over {MAX_URI_BYTES}"),
        ));
    }
    let raw_host = authority.host();
    let host = match raw_host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => match v6.parse::<Ipv6Addr>() {
            Ok(ip) => Host::Ip(IpAddr::V6(ip)),
            Err(_) => {
                return Err(refuse(
                    control,
                    refused,
                    Error::HttpRequestUriInvalid,
                    format!("{raw_host:?} is not an IPv6 address"),
                ));
            }
        },
        None => {
            let name = canonical_name(raw_host);
            match name.parse::<Ipv4Addr>() {
                Ok(ip) => Host::Ip(IpAddr::V4(ip)),
                Err(_) => {
                    if let Err(why) = check_name(&name) {
                        return Err(refuse(control, refused, Error::HttpRequestUriInvalid, why));
                    }
                    Host::Name(name)
                }
            }
        }
    };
    let port = authority.port_u16().unwrap_or(if https { 443 } else { 80 });
    let target = format!(
        "{}://{}:{port}",
        if https { "https" } else { "http" },
        raw_host
    );
    Ok((https, host, port, target))
}

/// The recorded answer to `key`, or a refusal when the cassette has none.
fn replayed(
    control: &RunControl,
    refused: &Refusal,
    replay: &HttpReplay,
    key: &str,
) -> Result<(http::Response<WasiBody>, IoFuture), Error> {
    let Some(rec) = replay.take(key) else {
        return Err(refuse(
            control,
            refused,
            Error::HttpRequestDenied,
            format!(
                "replay: cassette {} has no (more) recorded answers for {key}",
                replay.path.display()
            ),
        ));
    };
    let mut response = http::Response::new(
        Full::new(rec.body)
            .map_err(|never| match never {})
            .boxed_unsync(),
    );
    *response.status_mut() =
        http::StatusCode::from_u16(rec.status).map_err(|_| Error::HttpProtocolError)?;
    for (k, v) in rec.headers {
        if let (Ok(k), Ok(v)) = (
            http::header::HeaderName::from_bytes(k.as_bytes()),
            http::header::HeaderValue::from_str(&v),
        ) {
            response.headers_mut().append(k, v);
        }
    }
    let io: IoFuture = Box::new(async { Ok(()) });
    Ok((response, io))
}

/// The addresses `c` may be sent to: resolved by the host, restricted
/// ranges dropped unless granted.
async fn resolve(
    control: &RunControl,
    refused: &Refusal,
    c: &Checked,
    connect_by: tokio::time::Instant,
) -> Result<Vec<SocketAddr>, Error> {
    let (host, port, grant, named_ip, target) = (&c.host, c.port, &c.grant, c.named_ip, &c.target);
    let candidates: Vec<SocketAddr> = match host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, port)],
        Host::Name(name) => lookup(c, name, port, connect_by).await?,
    };
    let mut restricted = Vec::new();
    let addrs: Vec<SocketAddr> = candidates
        .into_iter()
        .filter(|a| match is_restricted(a.ip()) {
            Some(range) if !(grant.private || named_ip) => {
                restricted.push(format!("{} ({range})", a.ip()));
                false
            }
            _ => true,
        })
        .take(MAX_ADDRESSES)
        .collect();
    if addrs.is_empty() {
        if restricted.is_empty() {
            return Err(Error::DestinationNotFound);
        }
        return Err(refuse(
            control,
            refused,
            Error::DestinationIpProhibited,
            format!(
                "{target} resolves to restricted addresses only: {} (grant it by IP literal or \
                 with private = true)",
                restricted.join(", ")
            ),
        ));
    }
    Ok(addrs)
}

/// Resolves `name` by `by`, in a resolution slot of the run's and the
/// host's; the resolver thread keeps the slots until it returns, even
/// after the request gave up on it.
async fn lookup(
    c: &Checked,
    name: &str,
    port: u16,
    by: tokio::time::Instant,
) -> Result<Vec<SocketAddr>, Error> {
    use std::net::ToSocketAddrs;
    let Some(accounts) = &c.grant.accounts else {
        return Err(Error::DnsTimeout);
    };
    let permits = tokio::time::timeout_at(by, accounts.resolution())
        .await
        .map_err(|_| Error::DnsTimeout)?;
    let owned = name.to_owned();
    let job = tokio::task::spawn_blocking(move || {
        let _permits = permits;
        (owned.as_str(), port)
            .to_socket_addrs()
            .map(|addrs| addrs.take(64).collect::<Vec<_>>())
    });
    match tokio::time::timeout_at(by, job).await {
        Err(_) => Err(Error::DnsTimeout),
        Ok(Ok(Ok(addrs))) => Ok(addrs),
        Ok(Ok(Err(e))) => {
            tracing::debug!(target: "sandgraph::http", "cannot resolve {name}: {e}");
            Err(Error::DnsError {
                rcode: Some("cannot resolve the host".to_owned()),
                info_code: None,
            })
        }
        Ok(Err(e)) => Err(Error::InternalError(Some(format!("resolver task: {e}")))),
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type Connection = Pin<Box<dyn Future<Output = Result<(), hyper::Error>> + Send>>;

/// A connection to one of `addrs` (TLS for https), HTTP/1.1 handshake
/// done, all by `connect_by`.
async fn open(
    c: &Checked,
    addrs: &[SocketAddr],
    connect_by: tokio::time::Instant,
) -> Result<(Sender, Connection), Error> {
    let (https, host) = (c.https, &c.host);
    let stream = connect(addrs, connect_by).await?;
    let io: Box<dyn Io> = if https {
        let server = match &host {
            Host::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
            Host::Name(n) => rustls::pki_types::ServerName::try_from(n.clone())
                .map_err(|_| Error::HttpRequestUriInvalid)?,
        };
        let connector = tokio_rustls::TlsConnector::from(tls_config()?);
        let tls = tokio::time::timeout_at(connect_by, connector.connect(server, stream))
            .await
            .map_err(|_| Error::ConnectionTimeout)?
            .map_err(Error::Tls)?;
        Box::new(tls)
    } else {
        Box::new(stream)
    };
    let (sender, conn) = tokio::time::timeout_at(
        connect_by,
        hyper::client::conn::http1::Builder::new()
            .max_buf_size(MAX_HEADER_BYTES.max(8192))
            .max_headers(MAX_RESPONSE_HEADERS)
            .handshake::<_, Full<Bytes>>(TokioIo::new(io)),
    )
    .await
    .map_err(|_| Error::ConnectionTimeout)??;
    Ok((sender, Box::pin(conn)))
}

/// Sends the request on `sender` and hands back the response with its
/// body capped, timed and charged (read whole and recorded, with a
/// recording cassette), keeping what the request holds.
async fn exchange(
    control: &Arc<RunControl>,
    refused: &Refusal,
    c: Checked,
    options: Option<RequestOptions>,
    (mut sender, mut conn): (Sender, Connection),
    mut held: Held,
) -> Result<(http::Response<WasiBody>, IoFuture), Error> {
    let Checked {
        grant,
        parts,
        target,
        body,
        key,
        ..
    } = c;
    let out = outgoing(parts, body)?;
    let first_byte = timeout(
        options.and_then(|o| o.first_byte_timeout),
        FIRST_BYTE_TIMEOUT,
    );
    let send = tokio::time::timeout(first_byte, sender.send_request(out));
    let response = driving(&mut conn, send)
        .await?
        .map_err(|_| Error::ConnectionReadTimeout)??;
    let response_cap = grant.max_response_bytes;
    if let Some(len) = wasmtime_wasi_http_content_length(response.headers())
        && len > response_cap
    {
        return Err(refuse(
            control,
            refused,
            Error::HttpResponseBodySize(Some(len)),
            format!("response of {len} bytes from {target} is over the cap of {response_cap}"),
        ));
    }
    let between = timeout(
        options.and_then(|o| o.between_bytes_timeout),
        BETWEEN_BYTES_TIMEOUT,
    );
    let stop = control.clone();
    let response = response.map(|incoming| {
        CappedBody {
            incoming,
            left: response_cap,
            between,
            idle: Box::pin(tokio::time::sleep(between)),
            stop: Some(Box::pin(async move { stop.soft_stopped().await })),
            failed: false,
            unread: Charge::new(control.clone()),
        }
        .boxed_unsync()
    });
    let response = match &grant.cassette {
        Some(HttpCassette::Record(writer)) => {
            record(writer, &key, response, &mut conn, &mut held.charge).await?
        }
        _ => response,
    };
    Ok(keep(control, response, conn, held))
}

/// The response for the guest and the future that drives its connection,
/// both keeping what the request holds (its slots and charged bytes are
/// given back when both are gone). The connection ends at the run's soft
/// stop at the latest, as the response body's reads do.
fn keep(
    control: &Arc<RunControl>,
    response: http::Response<WasiBody>,
    conn: Connection,
    held: Held,
) -> (http::Response<WasiBody>, IoFuture) {
    let held = Arc::new(held);
    let kept = held.clone();
    let response = response.map(|body| Kept { body, _held: kept }.boxed_unsync());
    let stop = control.clone();
    let io: IoFuture = Box::new(async move {
        let _held = held;
        tokio::select! {
            r = conn => r.map_err(Error::from),
            () = stop.soft_stopped() => Ok(()),
        }
    });
    (response, io)
}

/// A response body that keeps what its request holds until it is dropped.
struct Kept {
    body: WasiBody,
    _held: Arc<Held>,
}

impl Body for Kept {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The request to send for the guest's: the request line carries the path
/// only (an absolute URI there would address a proxy); the host header the
/// guest's authority.
fn outgoing(parts: http::request::Parts, body: Bytes) -> Result<http::Request<Full<Bytes>>, Error> {
    let mut out = http::Request::new(Full::new(body));
    *out.method_mut() = parts.method.clone();
    *out.headers_mut() = parts.headers;
    *out.uri_mut() = http::Uri::builder()
        .path_and_query(parts.uri.path_and_query().map_or("/", |p| p.as_str()))
        .build()
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    Ok(out)
}

/// Awaits `work` while driving `conn`, which must run for the exchange to
/// progress; the connection's failure fails the wait, its end does not.
async fn driving<T>(conn: &mut Connection, work: impl Future<Output = T>) -> Result<T, Error> {
    tokio::pin!(work);
    let mut conn_done = false;
    loop {
        tokio::select! {
            r = &mut work => break Ok(r),
            r = &mut *conn, if !conn_done => {
                conn_done = true;
                r?;
            }
        }
    }
}

/// Reads the response body whole (under the cap, as the guest would,
/// charged to `charge` as it arrives), keeps it in the cassette under
/// `key`, and hands it to the guest from memory.
async fn record(
    writer: &CassetteWriter,
    key: &str,
    response: http::Response<WasiBody>,
    conn: &mut Connection,
    charge: &mut Charge,
) -> Result<http::Response<WasiBody>, Error> {
    let (head, mut body) = response.into_parts();
    let collect = async {
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                if let Err(e) = charge.add(data.len(), &|| format!("the response to {key}")) {
                    tracing::info!(target: "sandgraph::http", "http response refused: {}", e.message);
                    return Err(Error::HttpResponseBodySize(None));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(buf.freeze())
    };
    let collected = driving(conn, collect).await??;
    let (method, url) = key.split_once(' ').unwrap_or((key, ""));
    writer.append(&cassette_line(method, url, &head, &collected));
    Ok(http::Response::from_parts(
        head,
        Full::new(collected)
            .map_err(|never| match never {})
            .boxed_unsync(),
    ))
}

/// The declared `content-length`, when there is exactly one valid one.
fn wasmtime_wasi_http_content_length(headers: &http::HeaderMap) -> Option<u64> {
    let mut values = headers.get_all(http::header::CONTENT_LENGTH).iter();
    let v = values.next()?;
    if values.next().is_some() {
        return None;
    }
    v.to_str().ok()?.parse().ok()
}

/// Reads a request body to `target` into the host, refusing it past `cap`
/// bytes or when `charge` cannot take the next part; the error and why.
/// Trailers are dropped (HTTP/1.1 sends them only chunked).
async fn read_body(
    mut body: WasiBody,
    cap: u64,
    charge: &mut Charge,
    target: &str,
) -> Result<Bytes, (Error, String)> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| (e, format!("request body to {target} failed")))?;
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > cap {
                return Err((
                    Error::HttpRequestBodySize(None),
                    format!("request body to {target} is over the cap of {cap} bytes"),
                ));
            }
            charge
                .add(data.len(), &|| format!("the request body to {target}"))
                .map_err(|e| (Error::HttpRequestBodySize(None), e.message))?;
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf.freeze())
}

/// Connects to the first of `addrs` that answers by `by`.
async fn connect(addrs: &[SocketAddr], by: tokio::time::Instant) -> Result<TcpStream, Error> {
    let mut last = None;
    for addr in addrs {
        match tokio::time::timeout_at(by, TcpStream::connect(addr)).await {
            Err(_) => return Err(Error::ConnectionTimeout),
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = Some(e),
        }
    }
    Err(last.map_or(Error::ConnectionRefused, Error::Connect))
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// One TLS client configuration for the process: the platform's roots
/// (as the model client uses), HTTP/1.1 only.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            use rustls_platform_verifier::BuilderVerifierExt;
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .and_then(|b| b.with_platform_verifier())
                .map_err(|e| e.to_string())?
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(|e| {
            tracing::error!(target: "sandgraph::http", "cannot set up TLS: {e}");
            Error::ConfigurationError
        })
}

/// A response body capped at `left` bytes, failing after `between` without
/// data, and at the run's soft stop. The frame handed out last is charged
/// to the run's bytes (`unread`) until the next is asked for: wasi:http
/// asks for it once the guest has read the last.
struct CappedBody {
    incoming: hyper::body::Incoming,
    left: u64,
    between: Duration,
    idle: Pin<Box<tokio::time::Sleep>>,
    stop: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    failed: bool,
    unread: Charge,
}

impl Body for CappedBody {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        let fail = |this: &mut Self, e: Error| {
            this.failed = true;
            Poll::Ready(Some(Err(e)))
        };
        self.unread.clear();
        match Pin::new(&mut self.incoming).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    if n > self.left {
                        return fail(&mut self, Error::HttpResponseBodySize(None));
                    }
                    self.left -= n;
                    if let Err(e) = self.unread.add(data.len(), &|| "an http response".into()) {
                        tracing::info!(target: "sandgraph::http", "http response refused: {}", e.message);
                        return fail(&mut self, Error::HttpResponseBodySize(None));
                    }
                }
                let next = tokio::time::Instant::now() + self.between;
                self.idle.as_mut().reset(next);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) if e.is_timeout() => {
                fail(&mut self, Error::HttpResponseTimeout)
            }
            Poll::Ready(Some(Err(e))) => fail(&mut self, Error::Hyper(e)),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if self.idle.as_mut().poll(cx).is_ready() {
                    return fail(&mut self, Error::ConnectionReadTimeout);
                }
                if let Some(stop) = self.stop.as_mut()
                    && stop.as_mut().poll(cx).is_ready()
                {
                    self.stop = None;
                    return fail(&mut self, Error::HttpResponseTimeout);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.incoming.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.incoming.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(entries: &[&str]) -> HttpGrant {
        let entries: Vec<String> = entries.iter().map(|s| (*s).to_owned()).collect();
        HttpGrant::parse(&entries, &[], false).unwrap()
    }

    fn admits(g: &HttpGrant, https: bool, host: &str, port: u16) -> bool {
        let host = match host.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(host.to_owned()),
        };
        g.matching(https, &host, port).next().is_some()
    }

    #[test]
    fn entries_match_scheme_host_and_port() {
        let g = grant(&[
            "https://api.github.com",
            "http://127.0.0.1:8080/",
            "https://*.Example.com.",
            "http://[::1]:*",
        ]);
        assert!(admits(&g, true, "api.github.com", 443));
        assert!(!admits(&g, false, "api.github.com", 443), "scheme");
        assert!(
            !admits(&g, true, "api.github.com", 8443),
            "default port only"
        );
        assert!(!admits(&g, true, "github.com", 443));
        assert!(admits(&g, false, "127.0.0.1", 8080));
        assert!(!admits(&g, false, "127.0.0.1", 80));
        assert!(admits(&g, true, "a.example.com", 443));
        assert!(admits(&g, true, "a.b.example.com", 443));
        assert!(!admits(&g, true, "example.com", 443), "apex is not below");
        assert!(!admits(&g, true, "badexample.com", 443));
        assert!(admits(&g, false, "::1", 1));
        assert!(
            !admits(&g, false, "localhost", 8080),
            "a name is not its address"
        );
        assert!(g.allows_method("GET") && g.allows_method("HEAD"));
        assert!(!g.allows_method("POST"));
    }

    #[test]
    fn bad_entries_say_which_and_why() {
        let parse =
            |e: &str| HttpGrant::parse(&["https://ok.com".to_owned(), e.to_owned()], &[], false);
        for (entry, why) in [
            ("api.github.com", "no scheme"),
            ("ftp://x.com", "scheme \"ftp\" is not http or https"),
            ("https://x.com/v1", "not a path"),
            ("https://u:p@x.com", "user info"),
            ("https://x.com:0", "port \"0\""),
            ("https://x.com:99999", "port \"99999\""),
            ("https://a.*.com", "wildcard"),
            ("https://::1", "brackets"),
            ("https://[::1", "closing ]"),
            ("https://", "empty"),
            ("https://x y.com", "not a host name"),
        ] {
            let e = parse(entry).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!("http allow entry 2 ({entry:?}): ")),
                "{e}"
            );
            assert!(e.contains(why), "{entry}: {e}");
        }
        let e = HttpGrant::parse(&[], &["GE T".to_owned()], false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"GE T\" is not a method name"), "{e}");
        let g = HttpGrant::parse(&[], &["post".to_owned()], false).unwrap();
        assert!(g.allows_method("POST") && !g.allows_method("GET"));
        let g = HttpGrant::parse(&[], &["*".to_owned()], false).unwrap();
        assert!(g.allows_method("DELETE"));
        assert!(
            grant(&[])
                .with_body_limits(Some(MAX_REQUEST_BODY_BYTES + 1), None)
                .is_err()
        );
        assert!(grant(&[]).with_body_limits(None, Some(1)).is_ok());
    }

    #[test]
    fn restricted_ranges_cover_v4_v6_and_mapped_forms() {
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "192.0.2.1",
            "198.18.0.1",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
            "::7f00:1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(is_restricted(ip).is_some(), "{ip} should be restricted");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(is_restricted(ip), None, "{ip} is global");
        }
    }
}
