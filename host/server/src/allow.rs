//! The Host and Origin allow-lists of a server (DNS rebinding,
//! cross-site requests): the loopback names on the bound port, the bound
//! address, and what the operator adds. rmcp checks `/mcp` against them
//! itself; other route sets check with [`Allowed::check`].

use std::net::SocketAddr;

use axum::http::uri::Authority;
use axum::http::{HeaderMap, header};

/// Why [`Allowed::check`] refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The `Host` header is not an authority.
    #[error("the Host header is malformed")]
    MalformedHost,
    /// Neither a `Host` header nor an authority in the URI.
    #[error("the request has no Host header")]
    NoHost,
    /// The `Host` is not on the list.
    #[error("the Host header is not allowed")]
    Host,
    /// The `Origin` header is not an origin.
    #[error("the Origin header is malformed")]
    MalformedOrigin,
    /// The `Origin` is not on the list.
    #[error("the Origin header is not allowed")]
    Origin,
}

/// The `Host` and `Origin` values a server accepts.
#[derive(Debug, Clone)]
pub struct Allowed {
    /// `Host` values: `name` for any port, `name:port` for one.
    pub hosts: Vec<String>,
    /// `Origin` values: `scheme://host:port`, or `:*` for any port.
    pub origins: Vec<String>,
}

const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

impl Allowed {
    /// The lists of a server bound to `addr`: the loopback names on its
    /// port (and `addr` itself when it is neither loopback nor
    /// unspecified), then `hosts` and `origins`.
    pub(crate) fn on(addr: SocketAddr, hosts: &[String], origins: &[String]) -> Allowed {
        let port = addr.port();
        let mut allowed_hosts: Vec<String> =
            LOOPBACK.iter().map(|h| format!("{h}:{port}")).collect();
        if !addr.ip().is_unspecified() && !addr.ip().is_loopback() {
            allowed_hosts.push(SocketAddr::new(addr.ip(), port).to_string());
        }
        allowed_hosts.extend(hosts.iter().cloned());
        let mut allowed_origins: Vec<String> = LOOPBACK
            .iter()
            .map(|h| format!("http://{h}:{port}"))
            .collect();
        allowed_origins.extend(origins.iter().cloned());
        Allowed {
            hosts: allowed_hosts,
            origins: allowed_origins,
        }
    }

    /// Why `headers` are refused, if they are: a `Host` not allowed or
    /// malformed, or an `Origin`, when present, not allowed or malformed.
    ///
    /// # Errors
    ///
    /// The refusal's reason.
    pub fn check(&self, headers: &HeaderMap, uri: &axum::http::Uri) -> Result<(), Refused> {
        let host = match headers.get(header::HOST) {
            Some(h) => h
                .to_str()
                .ok()
                .and_then(|h| Authority::try_from(h).ok())
                .ok_or(Refused::MalformedHost)?,
            None => uri.authority().cloned().ok_or(Refused::NoHost)?,
        };
        let host = (normalize_host(host.host()), host.port_u16());
        if !self.hosts.iter().any(|a| host_matches(a, &host)) {
            return Err(Refused::Host);
        }
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let origin = origin
            .to_str()
            .ok()
            .and_then(parse_origin)
            .ok_or(Refused::MalformedOrigin)?;
        if !self.origins.iter().any(|a| origin_matches(a, &origin)) {
            return Err(Refused::Origin);
        }
        Ok(())
    }
}

fn normalize_host(host: &str) -> String {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether the allow-list entry `allowed` (`name` for any port, or
/// `name:port`) accepts `host`.
fn host_matches(allowed: &str, host: &(String, Option<u16>)) -> bool {
    let allowed = allowed.trim();
    let (name, port) = match Authority::try_from(allowed) {
        Ok(a) => (normalize_host(a.host()), a.port_u16()),
        Err(_) => (normalize_host(allowed), None),
    };
    name == host.0 && port.is_none_or(|p| host.1 == Some(p))
}

/// An origin: scheme, host and port (`None`: the scheme's default).
type Origin = (String, String, Option<u16>);

fn parse_origin(value: &str) -> Option<Origin> {
    let uri = axum::http::Uri::try_from(value.trim()).ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let authority = uri.authority()?;
    Some((
        scheme,
        normalize_host(authority.host()),
        authority.port_u16(),
    ))
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// Whether the allow-list entry `allowed` (`scheme://host:port`,
/// `scheme://host:*` for any port, or without a port: any port, as rmcp
/// still accepts) accepts `origin`.
fn origin_matches(allowed: &str, origin: &Origin) -> bool {
    let allowed = allowed.trim();
    let (base, any_port) = match allowed.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (allowed, false),
    };
    let Some((scheme, host, port)) = parse_origin(base) else {
        return false;
    };
    if any_port && port.is_some() {
        return false;
    }
    let port_ok = match port {
        None => true,
        Some(p) => origin.2.or_else(|| default_port(&origin.0)) == Some(p),
    };
    scheme == origin.0 && host == origin.1 && port_ok
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn allowed() -> Allowed {
        Allowed {
            hosts: vec![
                "localhost:8808".into(),
                "127.0.0.1:8808".into(),
                "[::1]:8808".into(),
                "studio.internal".into(),
            ],
            origins: vec![
                "http://localhost:8808".into(),
                "https://app.example:*".into(),
            ],
        }
    }

    fn check(host: &str, origin: Option<&str>) -> Result<(), Refused> {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        if let Some(o) = origin {
            h.insert(header::ORIGIN, HeaderValue::from_str(o).unwrap());
        }
        allowed().check(&h, &axum::http::Uri::from_static("/"))
    }

    #[test]
    fn hosts_match_on_name_and_port() {
        assert!(check("localhost:8808", None).is_ok());
        assert!(check("[::1]:8808", None).is_ok());
        assert!(check("LOCALHOST:8808", None).is_ok());
        assert!(check("studio.internal:1", None).is_ok());
        assert!(check("localhost:8809", None).is_err());
        assert!(check("evil.example:8808", None).is_err());
    }

    #[test]
    fn origins_match_on_scheme_host_and_port() {
        assert!(check("localhost:8808", Some("http://localhost:8808")).is_ok());
        assert!(check("localhost:8808", Some("https://app.example:9")).is_ok());
        assert!(check("localhost:8808", Some("https://app.example")).is_ok());
        assert!(check("localhost:8808", Some("http://localhost:8809")).is_err());
        assert!(check("localhost:8808", Some("https://evil.example")).is_err());
        assert!(check("localhost:8808", Some("null")).is_err());
    }
}
