//! Record and replay of `http` exchanges (`--record` / `--replay`): the
//! same cassette file as the `llm` exchanges, `{"kind": "http", ...}`
//! lines.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use sandgraph_llm::cassette::{CassetteError, CassetteWriter, read_kind};

/// Where a run's http exchanges are recorded, or answered from: the same
/// cassette file as the `llm` exchanges (`{"kind": "http", ...}` lines).
/// Requests keep only their method and URL, so no credential header is
/// ever written; replay answers by method and URL, in recorded order, and
/// still checks the grant first (a replayed graph is refused what a live
/// one would be).
#[derive(Clone)]
pub enum HttpCassette {
    /// Each answered exchange is appended (its body read whole, under the
    /// response cap).
    Record(Arc<CassetteWriter>),
    /// Nothing is sent: a request without a recorded answer is refused.
    Replay(Arc<HttpReplay>),
}

impl std::fmt::Debug for HttpCassette {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HttpCassette::Record(_) => "Record",
            HttpCassette::Replay(_) => "Replay",
        })
    }
}

impl PartialEq for HttpCassette {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (HttpCassette::Record(a), HttpCassette::Record(b)) => Arc::ptr_eq(a, b),
            (HttpCassette::Replay(a), HttpCassette::Replay(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for HttpCassette {}

/// The recorded http answers of a cassette.
pub struct HttpReplay {
    pub(super) path: std::path::PathBuf,
    answers: std::sync::Mutex<HashMap<String, VecDeque<Recorded>>>,
}

/// One recorded answer.
pub(super) struct Recorded {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: Bytes,
}

impl HttpReplay {
    /// Reads the `http` exchanges of the cassette at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read, or an `http` line is not an exchange.
    pub fn open(path: &std::path::Path) -> Result<Arc<HttpReplay>, CassetteError> {
        let mut answers: HashMap<String, VecDeque<Recorded>> = HashMap::new();
        for (line, v) in read_kind(path, KIND)? {
            let invalid = |message: &str| CassetteError::Invalid {
                path: path.to_path_buf(),
                line,
                message: message.to_owned(),
            };
            let key = format!(
                "{} {}",
                v["request"]["method"]
                    .as_str()
                    .ok_or_else(|| invalid("request.method: expected a string"))?,
                v["request"]["url"]
                    .as_str()
                    .ok_or_else(|| invalid("request.url: expected a string"))?
            );
            let r = &v["response"];
            let status = r["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .ok_or_else(|| invalid("response.status: expected a status code"))?;
            let headers = r["headers"]
                .as_array()
                .map(|hs| {
                    hs.iter()
                        .filter_map(|h| {
                            Some((h[0].as_str()?.to_owned(), h[1].as_str()?.to_owned()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let body = match (r["body"].as_str(), r["body_hex"].as_str()) {
                (Some(text), _) => Bytes::from(text.to_owned()),
                (None, Some(h)) => {
                    Bytes::from(hex_decode(h).ok_or_else(|| invalid("response.body_hex: not hex"))?)
                }
                (None, None) => Bytes::new(),
            };
            answers.entry(key).or_default().push_back(Recorded {
                status,
                headers,
                body,
            });
        }
        Ok(Arc::new(HttpReplay {
            path: path.to_path_buf(),
            answers: std::sync::Mutex::new(answers),
        }))
    }

    /// The next recorded answer to `key`.
    pub(super) fn take(&self, key: &str) -> Option<Recorded> {
        self.answers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(key)
            .and_then(VecDeque::pop_front)
    }
}

/// The `kind` of http exchanges in a cassette.
const KIND: &str = "http";

fn hex_decode(h: &str) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(h.get(i..i + 2)?, 16).ok())
        .collect()
}

fn hex_encode(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Headers a cassette never keeps.
fn secret_header(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "set-cookie" | "cookie" | "authorization" | "proxy-authorization" | "www-authenticate"
    )
}

/// One answered exchange as a cassette line.
pub(super) fn cassette_line(
    method: &str,
    url: &str,
    parts: &http::response::Parts,
    body: &[u8],
) -> serde_json::Value {
    let headers: Vec<serde_json::Value> = parts
        .headers
        .iter()
        .filter(|(k, _)| !secret_header(k.as_str()))
        .filter_map(|(k, v)| Some(serde_json::json!([k.as_str(), v.to_str().ok()?])))
        .collect();
    let mut response = serde_json::json!({"status": parts.status.as_u16(), "headers": headers});
    match std::str::from_utf8(body) {
        Ok(text) => response["body"] = text.into(),
        Err(_) => response["body_hex"] = hex_encode(body).into(),
    }
    serde_json::json!({"kind": KIND, "request": {"method": method, "url": url}, "response": response})
}
