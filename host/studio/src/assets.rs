//! The static shell of the studio: `index.html`, `app.js`, `graph.js` and
//! `app.css`, embedded in the binary (no internet and no build step at run
//! time) and served at `/` and `/assets/<file>` with a strict
//! Content-Security-Policy and a strong ETag (the SHA-256 of the bytes).

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

/// The Content-Security-Policy of every studio response: scripts, styles
/// and connections only from the server itself, nothing inline, no frames.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// Entity tags compared from one `If-None-Match` header: a browser sends
/// one; the bound keeps a hostile header from costing more than a few
/// comparisons.
const MAX_IF_NONE_MATCH_TAGS: usize = 16;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// The embedded files; `index.html` is also served at `/`.
const ASSETS: [Asset; 4] = [
    Asset {
        name: "index.html",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../assets/index.html"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/app.js"),
    },
    Asset {
        name: "graph.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../assets/graph.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../assets/app.css"),
    },
];

/// The strong ETag of each of [`ASSETS`] (same order), computed once.
fn etags() -> &'static [HeaderValue; 4] {
    static ETAGS: OnceLock<[HeaderValue; 4]> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS.each_ref().map(|a| {
            let tag = format!("\"{}\"", hex::encode(Sha256::digest(a.bytes)));
            HeaderValue::try_from(tag).expect("a hex digest in quotes is a header value")
        })
    })
}

/// The routes of the static shell: `GET /` and `GET /assets/{file}`. They
/// need no authentication: the files carry no data.
pub(crate) fn asset_routes() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/assets/{file}", get(asset))
}

async fn index(headers: HeaderMap) -> Response {
    serve(0, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().position(|a| a.name == file) {
        Some(i) => serve(i, &headers),
        None => {
            let mut resp = (StatusCode::NOT_FOUND, "no such studio asset").into_response();
            security_headers(resp.headers_mut());
            resp
        }
    }
}

/// The headers every studio response carries.
pub(crate) fn security_headers(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

/// Asset `i`, or `304 Not Modified` when the request already has it.
fn serve(i: usize, headers: &HeaderMap) -> Response {
    let asset = &ASSETS[i];
    let etag = &etags()[i];
    let mut resp = if matches(headers, etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut resp = asset.bytes.into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        resp
    };
    let h = resp.headers_mut();
    h.insert(header::ETAG, etag.clone());
    // Always revalidate: a new binary serves new bytes under new tags.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    security_headers(h);
    resp
}

/// Whether `If-None-Match` names `etag` (or is `*`). The comparison is
/// the weak one RFC 9110 prescribes for this header: a `W/` prefix is
/// ignored.
fn matches(headers: &HeaderMap, etag: &HeaderValue) -> bool {
    let Some(value) = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let etag = etag.as_bytes();
    value
        .split(',')
        .take(MAX_IF_NONE_MATCH_TAGS)
        .map(str::trim)
        .any(|t| t == "*" || t.strip_prefix("W/").unwrap_or(t).as_bytes() == etag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn if_none_match_names_the_tag_among_others() {
        let tag = etags()[1].to_str().unwrap().to_owned();
        assert!(matches(&with(&tag), &etags()[1]));
        assert!(matches(&with(&format!("\"x\", W/{tag}")), &etags()[1]));
        assert!(matches(&with("*"), &etags()[1]));
        assert!(!matches(&with("\"x\""), &etags()[1]));
        assert!(!matches(&HeaderMap::new(), &etags()[1]));
    }

    #[test]
    fn every_asset_has_a_sha256_tag() {
        for (a, tag) in ASSETS.iter().zip(etags()) {
            let hex = hex::encode(Sha256::digest(a.bytes));
            assert_eq!(tag.to_str().unwrap(), format!("\"{hex}\""), "{}", a.name);
        }
    }
}
