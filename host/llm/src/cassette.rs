//! Record and replay of model exchanges: a cassette is a file of JSON
//! lines, one exchange each,
//! `{"kind": "llm", "request": {...}, "response": {...}}`.
//!
//! [`Recording`] wraps a provider and appends every successful exchange;
//! [`Replay`] answers from a cassette alone, offline, and fails clearly on
//! a request it has no answer for. Requests and responses never hold the
//! API key (the client adds it on the wire), so a cassette never does.
//! Lines of another `kind` (the `http` capability's exchanges) are kept
//! for their own reader and skipped here.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use futures::future::BoxFuture;
use serde_json::{Value, json};

use crate::{ChatRequest, ChatResponse, LlmError, Provider};

/// Largest cassette [`Replay::open`] reads: recorded test conversations
/// are kilobytes; a file past this is not a cassette.
pub const MAX_CASSETTE_BYTES: u64 = 64 << 20;

/// The `kind` of model exchanges in a cassette.
const KIND: &str = "llm";

/// Why a cassette cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CassetteError {
    /// The file cannot be read or written.
    #[error("cassette {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line is not an exchange.
    #[error("cassette {path}, line {line}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The request as a cassette keeps it: everything the provider is asked.
fn request_json(r: &ChatRequest) -> Value {
    json!({
        "model": r.model,
        "messages": r.messages,
        "tools": r.tools,
        "temperature": r.temperature,
        "max_tokens": r.max_tokens,
    })
}

/// A cassette being written: one JSON line per exchange, whatever its
/// kind, from every recorder sharing it.
pub struct CassetteWriter {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl CassetteWriter {
    /// Creates (mode 0600) or truncates the cassette at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be created.
    pub fn create(path: &Path) -> Result<Arc<CassetteWriter>, CassetteError> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path).map_err(|source| CassetteError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Arc::new(CassetteWriter {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        }))
    }

    /// Appends one exchange; a failed write is logged (recording must not
    /// fail the call).
    pub fn append(&self, line: &Value) {
        let mut file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = writeln!(file, "{line}") {
            tracing::warn!("cannot record to cassette {}: {e}", self.path.display());
        }
    }
}

/// The exchanges of `kind` in the cassette at `path`, as JSON values with
/// their 1-based line numbers.
///
/// # Errors
///
/// The file cannot be read, is larger than [`MAX_CASSETTE_BYTES`], or a
/// line is not JSON.
pub fn read_kind(path: &Path, kind: &str) -> Result<Vec<(usize, Value)>, CassetteError> {
    let io = |source| CassetteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_CASSETTE_BYTES {
        return Err(CassetteError::Invalid {
            path: path.to_path_buf(),
            line: 0,
            message: format!("{len} bytes is larger than a cassette may be ({MAX_CASSETTE_BYTES})"),
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| CassetteError::Invalid {
            path: path.to_path_buf(),
            line: i + 1,
            message: format!("not JSON: {e}"),
        })?;
        if v["kind"] == kind {
            out.push((i + 1, v));
        }
    }
    Ok(out)
}

/// A provider that appends every successful exchange of `inner` to a
/// cassette.
pub struct Recording {
    inner: Arc<dyn Provider>,
    writer: Arc<CassetteWriter>,
}

impl Recording {
    /// Records `inner`'s exchanges into `path`, created (mode 0600) or
    /// truncated.
    ///
    /// # Errors
    ///
    /// The file cannot be created.
    pub fn create(inner: Arc<dyn Provider>, path: &Path) -> Result<Recording, CassetteError> {
        Ok(Recording::to(inner, CassetteWriter::create(path)?))
    }

    /// Records `inner`'s exchanges into a cassette shared with other
    /// recorders (the `http` capability's).
    pub fn to(inner: Arc<dyn Provider>, writer: Arc<CassetteWriter>) -> Recording {
        Recording { inner, writer }
    }

    fn append(&self, request: &ChatRequest, response: &ChatResponse) {
        self.writer
            .append(&json!({"kind": KIND, "request": request_json(request), "response": response}));
    }
}

impl Provider for Recording {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        async move {
            let response = self.inner.chat(request).await?;
            self.append(request, &response);
            Ok(response)
        }
        .boxed()
    }
}

/// A provider that answers from a cassette: each recorded answer once, in
/// the order recorded, to a request equal to the one recorded.
pub struct Replay {
    path: PathBuf,
    answers: Mutex<HashMap<String, VecDeque<ChatResponse>>>,
}

impl Replay {
    /// Reads the model exchanges of the cassette at `path`.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is larger than [`MAX_CASSETTE_BYTES`], or
    /// has a line that is not an exchange.
    pub fn open(path: &Path) -> Result<Replay, CassetteError> {
        let mut answers: HashMap<String, VecDeque<ChatResponse>> = HashMap::new();
        for (line, v) in read_kind(path, KIND)? {
            let invalid = |message: String| CassetteError::Invalid {
                path: path.to_path_buf(),
                line,
                message,
            };
            let response: ChatResponse = serde_json::from_value(v["response"].clone())
                .map_err(|e| invalid(format!("response: {e}")))?;
            if !v["request"].is_object() {
                return Err(invalid("request: expected an object".to_owned()));
            }
            answers
                .entry(v["request"].to_string())
                .or_default()
                .push_back(response);
        }
        Ok(Replay {
            path: path.to_path_buf(),
            answers: Mutex::new(answers),
        })
    }

    /// Recorded answers not used yet.
    pub fn remaining(&self) -> usize {
        self.answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(VecDeque::len)
            .sum()
    }
}

impl Provider for Replay {
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        let key = request_json(request).to_string();
        let answer = self
            .answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(&key)
            .and_then(VecDeque::pop_front);
        let out = answer.ok_or_else(|| LlmError::Config {
            message: format!(
                "replay: cassette {} has no (more) recorded answers for this request (model {:?}, \
                 {} messages, last: {}); record it again with --record",
                self.path.display(),
                request.model,
                request.messages.len(),
                request
                    .messages
                    .last()
                    .and_then(|m| serde_json::to_string(m).ok())
                    .map(|t| t.chars().take(200).collect::<String>())
                    .unwrap_or_default(),
            ),
        });
        futures::future::ready(out).boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    struct Fixed(&'static str);

    impl Provider for Fixed {
        fn chat<'a>(&'a self, _: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
            futures::future::ready(Ok(ChatResponse {
                content: Some(self.0.to_owned()),
                finish_reason: Some("stop".into()),
                ..ChatResponse::default()
            }))
            .boxed()
        }
    }

    fn ask(text: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user(text)],
            ..ChatRequest::default()
        }
    }

    #[tokio::test]
    async fn a_recorded_conversation_replays_offline_and_refuses_what_it_never_saw() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        let rec = Recording::create(Arc::new(Fixed("hi")), &path).unwrap();
        assert_eq!(
            rec.chat(&ask("a")).await.unwrap().content.as_deref(),
            Some("hi")
        );
        rec.chat(&ask("a")).await.unwrap();
        // Another kind's line is left alone.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writeln!(
            f,
            r#"{{"kind": "http", "request": {{}}, "response": {{}}}}"#
        )
        .unwrap();
        drop(f);

        let replay = Replay::open(&path).unwrap();
        assert_eq!(replay.remaining(), 2);
        for _ in 0..2 {
            let r = replay.chat(&ask("a")).await.unwrap();
            assert_eq!(r.content.as_deref(), Some("hi"));
        }
        let e = replay.chat(&ask("a")).await.unwrap_err().to_string();
        assert!(e.contains("has no (more) recorded answers"), "{e}");
        let e = replay.chat(&ask("b")).await.unwrap_err().to_string();
        assert!(e.contains(r#"last: {"role":"user","content":"b"}"#), "{e}");
    }

    #[test]
    fn a_broken_cassette_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jsonl");
        std::fs::write(
            &path,
            "\n{\"kind\": \"llm\", \"request\": {}, \"response\": 3}\n",
        )
        .unwrap();
        let e = Replay::open(&path).err().unwrap().to_string();
        assert!(e.contains("c.jsonl, line 2: response:"), "{e}");
    }
}
