//! Retry logging. Alone in its own test binary: tracing caches per-callsite
//! interest process-wide, and a test on another thread hitting the same
//! callsite without a subscriber can race with `set_default`.

// Shares `all/common` with the `all` binary.
#[path = "all/common/mod.rs"]
mod common;

use common::{ask, client};
use sandgraph_llm::Provider;
use sandgraph_test_llm::{Reply, ScriptedLlm};

/// Collects formatted log lines.
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

#[tokio::test]
async fn retries_are_logged_without_the_key() {
    common::setup();
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    // current_thread runtime: everything below runs on this thread.
    let _guard = tracing::subscriber::set_default(subscriber);
    let echo = format!(
        r#"{{"error":{{"message":"overloaded for key {}"}}}}"#,
        common::KEY
    );
    let llm = ScriptedLlm::start([Reply::status(503, &echo), Reply::text("ok")]).await;
    client(&llm).chat(&ask("hi")).await.unwrap();
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    assert!(text.contains("llm request failed, retrying"), "{text}");
    assert!(text.contains("status=503"), "{text}");
    assert!(text.contains("attempt=1"), "{text}");
    assert!(text.contains("wait_ms=10"), "{text}");
    assert!(text.contains("overloaded for key [redacted]"), "{text}");
    assert!(!text.contains(common::KEY), "{text}");
}
