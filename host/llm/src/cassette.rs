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
    /// The file exists and group or others may read or write it: a
    /// cassette holds every prompt and answer, so one others can read is
    /// not written to, and one others can write is not trusted.
    #[error(
        "cassette {path}: mode {mode:04o} lets group or others read or write it; \
         refusing to record into it (`chmod 600` it or remove it)"
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
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
    /// Creates the cassette at `path` with mode 0600, or truncates it when
    /// it exists and only its owner may read or write it.
    ///
    /// # Errors
    ///
    /// The file cannot be created, or [`CassetteError::Exposed`]: it exists
    /// with permission bits for group or others (it is left as it was).
    pub fn create(path: &Path) -> Result<Arc<CassetteWriter>, CassetteError> {
        let io = |source| CassetteError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut options = std::fs::OpenOptions::new();
        // Not truncated at open: an existing file is checked first.
        options.write(true).create(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(CassetteError::Exposed {
                    path: path.to_path_buf(),
                    mode,
                });
            }
        }
        if meta.is_file() {
            file.set_len(0).map_err(io)?;
        }
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
    /// truncated (see [`CassetteWriter::create`]).
    ///
    /// # Errors
    ///
    /// The file cannot be created, or exists readable or writable by group
    /// or others.
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

    #[cfg(unix)]
    #[test]
    fn a_cassette_is_created_0600_and_one_others_may_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        // New: 0600, whatever the umask lets through.
        let new = dir.path().join("new.jsonl");
        CassetteWriter::create(&new).unwrap();
        assert_eq!(mode(&new), 0o600);
        // Existing and private: truncated, kept 0600.
        std::fs::write(&new, "old line\n").unwrap();
        CassetteWriter::create(&new).unwrap();
        assert_eq!(std::fs::read(&new).unwrap(), b"");
        // Existing and readable by others: refused, left as it was.
        for loose in [0o644, 0o640, 0o602] {
            let path = dir.path().join(format!("loose-{loose:o}.jsonl"));
            std::fs::write(&path, "kept\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(loose)).unwrap();
            let e = CassetteWriter::create(&path).err().unwrap();
            assert!(
                matches!(e, CassetteError::Exposed { mode, .. } if mode == loose),
                "{e}"
            );
            let text = e.to_string();
            assert!(text.contains(&format!("loose-{loose:o}.jsonl")), "{text}");
            assert!(text.contains(&format!("mode {loose:04o}")), "{text}");
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept\n");
            assert_eq!(mode(&path), loose);
        }
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
