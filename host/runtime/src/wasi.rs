//! Deny-by-default WASI: no preopened directories, no environment, no
//! arguments, no sockets or name lookups, empty stdin. Clocks and random are
//! allowed. Guest stdout and stderr are captured in bounded buffers that end
//! up in the host log, never on the host's stdout.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};

use crate::limits::MAX_GUEST_OUTPUT_BYTES;

/// A guest output stream that keeps the first [`MAX_GUEST_OUTPUT_BYTES`] and
/// silently drops the rest, so a chatty guest neither traps nor grows the
/// host's memory.
#[derive(Clone, Default)]
pub(crate) struct GuestOutput {
    inner: Arc<Mutex<OutputBuf>>,
}

#[derive(Default)]
struct OutputBuf {
    bytes: Vec<u8>,
    dropped: usize,
}

impl GuestOutput {
    fn push(&self, data: &[u8]) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let room = MAX_GUEST_OUTPUT_BYTES.saturating_sub(buf.bytes.len());
        let take = room.min(data.len());
        buf.bytes.extend_from_slice(&data[..take]);
        buf.dropped += data.len() - take;
    }

    /// The captured text (lossy UTF-8) and how many bytes were dropped.
    pub(crate) fn take(&self) -> (String, usize) {
        let mut buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let text = String::from_utf8_lossy(&buf.bytes).into_owned();
        let dropped = buf.dropped;
        buf.bytes.clear();
        buf.dropped = 0;
        (text, dropped)
    }

    /// The last `max` bytes captured, for error messages (a panic message).
    pub(crate) fn tail(&self, max: usize) -> String {
        let buf = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let start = buf.bytes.len().saturating_sub(max);
        String::from_utf8_lossy(&buf.bytes[start..])
            .trim()
            .to_string()
    }
}

impl IsTerminal for GuestOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestOutput {
    async fn ready(&mut self) {}
}

impl OutputStream for GuestOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        // Always accept: excess is dropped in `push`.
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for GuestOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A WASI context that grants nothing but clocks, random and the two
/// captured output streams.
pub(crate) fn deny_by_default(stdout: GuestOutput, stderr: GuestOutput) -> WasiCtx {
    let mut b = WasiCtxBuilder::new();
    // The builder starts with no preopens, no env, no args and empty stdin;
    // say the network part explicitly so a future default cannot widen it.
    b.socket_addr_check(|_, _| Box::pin(async { false }))
        .allow_ip_name_lookup(false)
        .allow_tcp(false)
        .allow_udp(false)
        .stdout(stdout)
        .stderr(stderr);
    b.build()
}
