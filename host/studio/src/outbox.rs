//! The lines of a run's stream waiting for its client: a queue bounded in
//! bytes between the run, which never waits for the client, and the
//! response body, which sends as fast as the client reads. A client that
//! falls [`MAX_STREAM_BUFFER_BYTES`] behind is cut off: its queued lines
//! are dropped, it gets one last `slow_reader` line and the stream ends;
//! the run goes on to its end (a run on a thread saves its result there).
//! A client that closes the connection while the stream is open cancels
//! the run.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::body::Bytes;
use futures::Stream;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Most bytes of lines one run stream holds for a client that has not
/// taken them yet (the response body's writer and the kernel's socket
/// buffers hold a bounded few more). A client that keeps up holds about
/// one line; the largest line is a step of a wide fan-out (each update is
/// cut at 1 MiB of text, `bound::MAX_VALUE_BYTES`), and 16 MiB carries a
/// 16-task step whole. Without it a client that stops reading would make
/// the server keep every event of the run.
pub(crate) const MAX_STREAM_BUFFER_BYTES: usize = 16 << 20;

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The run is sending lines.
    Open,
    /// The run sent its last line: the client gets the rest, then the end.
    Finished,
    /// The client fell too far behind: it gets the `slow_reader` line next.
    Overrun,
    /// The stream ended (the `slow_reader` line was sent).
    Ended,
    /// The client went away.
    Gone,
}

struct Queue {
    lines: VecDeque<Bytes>,
    /// Bytes in `lines`.
    bytes: usize,
    state: State,
}

/// A run stream's queue of lines; shared by the run (the producer) and
/// the response body (the one consumer).
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Woken at every change (one waiter: the body).
    changed: Notify,
    /// The bound, [`MAX_STREAM_BUFFER_BYTES`] outside tests.
    max_bytes: usize,
}

impl Outbox {
    /// An open, empty queue.
    pub(crate) fn new() -> Arc<Outbox> {
        Outbox::with_bound(MAX_STREAM_BUFFER_BYTES)
    }

    fn with_bound(max_bytes: usize) -> Arc<Outbox> {
        Arc::new(Outbox {
            queue: Mutex::new(Queue {
                lines: VecDeque::new(),
                bytes: 0,
                state: State::Open,
            }),
            changed: Notify::new(),
            max_bytes,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `line` (one JSON line with its newline). Never waits: past
    /// the bound the queue is emptied and the stream cut instead; after
    /// that, or when the client is gone, the line is dropped.
    pub(crate) fn push(&self, line: String) {
        let mut q = self.lock();
        if q.state != State::Open {
            return;
        }
        if q.bytes.saturating_add(line.len()) > self.max_bytes {
            q.lines.clear();
            q.bytes = 0;
            q.state = State::Overrun;
        } else {
            q.bytes += line.len();
            q.lines.push_back(Bytes::from(line));
        }
        drop(q);
        self.changed.notify_one();
    }

    /// The run sent its last line.
    pub(crate) fn finish(&self) {
        let mut q = self.lock();
        if q.state == State::Open {
            q.state = State::Finished;
        }
        drop(q);
        self.changed.notify_one();
    }

    /// Bytes queued now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.lock().bytes
    }

    /// The next piece of the body: a queued line, the `slow_reader` line,
    /// or `None` at the end.
    async fn next(&self) -> Option<Bytes> {
        loop {
            {
                let mut q = self.lock();
                if let Some(line) = q.lines.pop_front() {
                    q.bytes -= line.len();
                    return Some(line);
                }
                match q.state {
                    State::Open => {}
                    State::Overrun => {
                        q.state = State::Ended;
                        return Some(Bytes::from(self.overrun_line()));
                    }
                    State::Finished | State::Ended | State::Gone => return None,
                }
            }
            // A change since the check left a permit: no wake-up is lost.
            self.changed.notified().await;
        }
    }

    fn overrun_line(&self) -> String {
        let message = format!(
            "the client fell more than {} bytes behind the run's stream: it was cut off; the \
             run goes on (a run on a thread saves its result there)",
            self.max_bytes
        );
        format!(
            "{}\n",
            json!({"type": "error", "code": "slow_reader", "message": message})
        )
    }

    /// The client went away; whether the run should be cancelled (the
    /// stream was still open: the client closed it, it was not cut off).
    fn reader_gone(&self) -> bool {
        let mut q = self.lock();
        let open = q.state == State::Open;
        q.state = State::Gone;
        q.lines.clear();
        q.bytes = 0;
        open
    }

    /// The response body: the lines as they come; dropped before the
    /// end while the stream is open (the client closed the connection), it
    /// cancels `run`.
    pub(crate) fn body(
        self: &Arc<Self>,
        run: CancellationToken,
    ) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
        let reader = Reader {
            outbox: self.clone(),
            run,
        };
        futures::stream::unfold(reader, |reader| async move {
            let line = reader.outbox.next().await?;
            Some((Ok(line), reader))
        })
    }
}

/// The body's hold on the outbox: when the body is dropped, the client
/// is gone.
struct Reader {
    outbox: Arc<Outbox>,
    run: CancellationToken,
}

impl Drop for Reader {
    fn drop(&mut self) {
        if self.outbox.reader_gone() {
            self.run.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;

    use super::*;

    fn line(n: usize) -> String {
        format!("{}\n", "x".repeat(n - 1))
    }

    #[tokio::test]
    async fn a_reader_that_keeps_up_gets_every_line_then_the_end() {
        let outbox = Outbox::with_bound(100);
        let run = CancellationToken::new();
        let mut body = Box::pin(outbox.body(run.clone()));
        for _ in 0..10 {
            outbox.push(line(60));
            assert_eq!(body.next().await.unwrap().unwrap().len(), 60);
        }
        outbox.push(line(40));
        outbox.finish();
        assert_eq!(body.next().await.unwrap().unwrap().len(), 40);
        assert!(body.next().await.is_none());
        drop(body);
        assert!(!run.is_cancelled(), "a finished stream cancels nothing");
    }

    #[tokio::test]
    async fn a_reader_past_the_bound_is_cut_off_and_the_run_goes_on() {
        let outbox = Outbox::with_bound(100);
        let run = CancellationToken::new();
        let mut body = Box::pin(outbox.body(run.clone()));
        outbox.push(line(60));
        assert_eq!(outbox.held(), 60);
        outbox.push(line(30));
        assert_eq!(outbox.held(), 90);
        // One more line would pass the bound: nothing is held any more,
        // and what the run sends next is dropped.
        outbox.push(line(20));
        assert_eq!(outbox.held(), 0);
        for _ in 0..1000 {
            outbox.push(line(10));
        }
        assert_eq!(outbox.held(), 0);
        outbox.finish();
        let last = body.next().await.unwrap().unwrap();
        let last: serde_json::Value = serde_json::from_slice(&last).unwrap();
        assert_eq!(last["type"], "error");
        assert_eq!(last["code"], "slow_reader");
        assert!(body.next().await.is_none());
        drop(body);
        assert!(
            !run.is_cancelled(),
            "a cut-off client does not stop the run"
        );
    }

    #[tokio::test]
    async fn a_cut_off_reader_dropped_unread_does_not_cancel_the_run() {
        let outbox = Outbox::with_bound(100);
        let run = CancellationToken::new();
        let body = outbox.body(run.clone());
        outbox.push(line(101));
        drop(body);
        assert!(!run.is_cancelled());
    }

    #[tokio::test]
    async fn a_reader_that_goes_away_cancels_the_run_and_frees_its_lines() {
        let outbox = Outbox::with_bound(100);
        let run = CancellationToken::new();
        let body = outbox.body(run.clone());
        outbox.push(line(50));
        drop(body);
        assert!(run.is_cancelled());
        assert_eq!(outbox.held(), 0);
        outbox.push(line(10));
        assert_eq!(
            outbox.held(),
            0,
            "nothing is kept for a reader that is gone"
        );
    }
}
