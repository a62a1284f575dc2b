//! The stderr of a `sandgraph serve` the tests start: every line kept for
//! their assertions and failure messages, and the address the server
//! announces waited for.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// The lines a child wrote to stderr so far.
pub(crate) type Lines = Arc<Mutex<Vec<String>>>;

/// Collects `child`'s stderr (piped) line by line from now on and returns
/// the lines with the rest of the first line that starts with `prefix`
/// (`"sandgraph: serving MCP at "`, say). Panics, with what the child
/// wrote, when no such line comes within `within`.
pub(crate) async fn announced(
    child: &mut Child,
    prefix: &'static str,
    within: Duration,
) -> (Lines, String) {
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let kept: Lines = Arc::default();
    let sink = kept.clone();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Some(rest) = line.strip_prefix(prefix)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(rest.to_owned());
            }
            sink.lock().unwrap().push(line);
        }
    });
    match tokio::time::timeout(within, rx).await {
        Ok(Ok(rest)) => (kept, rest),
        _ => panic!(
            "no {prefix:?} line within {within:?}; the server wrote: {:#?}",
            kept.lock().unwrap()
        ),
    }
}
