//! The brokered capabilities a graph may import (`sandgraph:graph@0.2.0`):
//! `llm` (models, through the host's provider and key) and `tools` (other
//! mounted graph tools, as sub-runs of the current run).
//!
//! Deny by default: a run gets what its [`Capabilities`] grant and nothing
//! else. An ungranted call is the capability's typed `denied` error, which
//! the graph's node may handle; nothing leaves the host. Each capability is
//! one module with its grant, its per-store context (the generated `Host`
//! trait's implementation) and its backend trait, so tests inject a fake.

use std::sync::Arc;

use sandgraph_core::audit::{CapabilityCall, CapabilityLog};
use sandgraph_core::text::guest_text;

use crate::sandbox::RunControl;

pub(crate) mod account;
pub mod http;
pub mod llm;
pub mod tools;

/// What one run may use, and where granted calls go. The default grants
/// nothing.
#[derive(Clone, Default)]
pub struct Capabilities {
    /// The `llm` grant and the backend that serves it.
    pub llm: Option<llm::LlmAccess>,
    /// The `tools` grant and the backend that serves it.
    pub tools: Option<tools::ToolsAccess>,
    /// The `http` grant (outgoing `wasi:http` requests).
    pub http: Option<http::HttpGrant>,
    /// Where every capability call of the run, allowed or refused, is
    /// reported (the capability journal); `None`: not journaled.
    pub log: Option<Arc<dyn CapabilityLog>>,
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capabilities")
            .field("llm", &self.llm.as_ref().map(|a| &a.grant))
            .field("tools", &self.tools.as_ref().map(|a| &a.grant))
            .field("http", &self.http)
            .field("log", &self.log.is_some())
            .finish()
    }
}

/// The capabilities of one store: the run's grants and control (deadline,
/// cancellation, fuel, byte budget), shared by the run's instances.
pub(crate) struct CapsCtx {
    pub(crate) caps: Arc<Capabilities>,
    pub(crate) control: Arc<RunControl>,
}

impl CapsCtx {
    pub(crate) fn new(control: Arc<RunControl>) -> Self {
        CapsCtx {
            caps: control.caps.clone(),
            control,
        }
    }

    /// Reports one call to the run's capability log, if it has one. The
    /// graph is the run's own; `reason` is escaped and bounded here, since
    /// it may quote the graph.
    pub(crate) async fn record(&self, call: Call<'_>) {
        record(&self.control, call).await;
    }

    /// Counts a capability call against the run's cap
    /// ([`MAX_CAPABILITY_CALLS_PER_RUN`](crate::limits::MAX_CAPABILITY_CALLS_PER_RUN));
    /// past it, the `quota` refusal's text.
    pub(crate) fn enter(&self) -> Result<(), String> {
        self.control.account.enter()
    }
}

/// [`CapsCtx::record`] for a run's control. A refusal is counted in the
/// run's account (one row per kind when the outermost run ends); any other
/// row is queued for the log at once, its bytes charged to the run's byte
/// budget until it is written. While the log's queue is full the call
/// waits, up to the run's hard deadline; a row that still finds no room
/// then is given up, with a warning.
pub(crate) async fn record(control: &Arc<RunControl>, call: Call<'_>) {
    let Some(log) = &control.caps.log else {
        return;
    };
    let chain = if control.chain.len() > 1 {
        control.chain.iter().map(|g| g.to_string()).collect()
    } else {
        Vec::new()
    };
    let row = CapabilityCall {
        graph: control
            .chain
            .last()
            .map(|g| g.to_string())
            .unwrap_or_default(),
        chain,
        capability: call.capability.to_owned(),
        target: guest_text(call.target, MAX_RECORDED_TARGET_BYTES),
        decision: call.decision.to_owned(),
        reason: call
            .reason
            .map(|r| guest_text(r, MAX_RECORDED_REASON_BYTES)),
        request_bytes: call.request_bytes,
        response_bytes: call.response_bytes,
        tokens: call.tokens,
        latency_ms: u64::try_from(call.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        ..CapabilityCall::default()
    };
    if account::is_refusal(call.decision) {
        control.account.tally(row, log);
        return;
    }
    queue(control, log, row).await;
}

/// Host bytes a queued row is charged for besides its strings.
const ROW_OVERHEAD_BYTES: usize = 256;

/// Queues `row` for `log`, its bytes held in the chain's journal
/// allowance and in the run's host byte budget until it is written.
async fn queue(control: &Arc<RunControl>, log: &Arc<dyn CapabilityLog>, row: CapabilityCall) {
    let cost = ROW_OVERHEAD_BYTES
        + row.graph.len()
        + row.chain.iter().map(String::len).sum::<usize>()
        + row.target.len()
        + row.reason.as_ref().map_or(0, String::len);
    let deadline = tokio::time::Instant::from_std(control.hard_deadline());
    let queued = async {
        let allowance = control.account.hold_row_bytes(cost).await;
        let budget = RowInBudget::hold(control, cost).await;
        log.record(row, Box::new((allowance, budget))).await;
    };
    tokio::select! {
        () = queued => {}
        () = tokio::time::sleep_until(deadline) => {
            tracing::warn!(
                graph = control.chain.last().map_or("", |g| &**g),
                "the capability journal could not take a row before the run's deadline: row dropped"
            );
        }
    }
}

/// A queued row's bytes in its run's host byte budget, given back when the
/// journal has written the row (and drops this). The run is held weakly:
/// the journal's writer holds queued rows, and a strong hold would keep
/// the run, its capabilities and so the journal itself alive until the
/// row is written, so a process ending would not wait for the writer.
/// A run that ended first gave its whole budget back when it was dropped.
struct RowInBudget {
    control: std::sync::Weak<RunControl>,
    bytes: usize,
}

impl RowInBudget {
    /// Holds `bytes` in the budget of `control`, waiting while it is full
    /// for rows the chain has queued to be written (the caller bounds the
    /// wait by the run's deadline).
    async fn hold(control: &Arc<RunControl>, bytes: usize) -> RowInBudget {
        loop {
            let written = control.account.row_written();
            if control.bytes().hold(bytes) {
                return RowInBudget {
                    control: Arc::downgrade(control),
                    bytes,
                };
            }
            written.await;
        }
    }
}

impl Drop for RowInBudget {
    fn drop(&mut self) {
        if let Some(control) = self.control.upgrade() {
            control.bytes().unhold(self.bytes);
            control.account.notify_row_written();
        }
    }
}

/// Writes the refusals the outermost run of `control` counted, one row per
/// kind: called when that run ends.
pub(crate) async fn write_refusals(control: &RunControl) {
    for (row, log) in control.account.take_refusals() {
        log.record(row, Box::new(())).await;
    }
}

/// Longest target kept in a journal row (a URL can be long; the scheme,
/// host and port are what matter).
const MAX_RECORDED_TARGET_BYTES: usize = 512;
/// Longest refusal or failure text kept in a journal row.
const MAX_RECORDED_REASON_BYTES: usize = 1024;

/// What a capability reports about one call ([`CapsCtx::record`]).
pub(crate) struct Call<'a> {
    pub(crate) capability: &'static str,
    pub(crate) target: &'a str,
    pub(crate) decision: &'static str,
    pub(crate) reason: Option<&'a str>,
    pub(crate) request_bytes: u64,
    pub(crate) response_bytes: u64,
    pub(crate) tokens: Option<u64>,
    pub(crate) started: std::time::Instant,
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_core::audit::Written;
    use std::pin::Pin;
    use std::sync::Mutex;

    /// A journal that keeps every row's `written` token: nothing it was
    /// given is written until the test clears it.
    #[derive(Default)]
    struct Stalled(Mutex<Vec<Written>>);

    impl CapabilityLog for Stalled {
        fn record(
            &self,
            _: CapabilityCall,
            written: Written,
        ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
            self.0.lock().unwrap().push(written);
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn queued_rows_are_charged_to_the_run_byte_budget_until_written() {
        let log = Arc::new(Stalled::default());
        let caps = Capabilities {
            log: Some(log.clone()),
            ..Capabilities::default()
        };
        let control = RunControl::build(
            crate::Limits::default(),
            tokio_util::sync::CancellationToken::new(),
            None,
            Arc::new(caps),
            None,
            Arc::from("g"),
        );
        let target = "GET http://127.0.0.1:1";
        for _ in 0..3 {
            let call = Call {
                capability: "http",
                target,
                decision: "allowed",
                reason: None,
                request_bytes: 0,
                response_bytes: 0,
                tokens: None,
                started: std::time::Instant::now(),
            };
            record(&control, call).await;
        }
        let row = ROW_OVERHEAD_BYTES + "g".len() + target.len();
        assert_eq!(control.bytes().used(), 3 * row);
        // A barrier settles the step's transient bytes, not queued rows.
        control.bytes().settle(0, &String::new).unwrap();
        assert_eq!(control.bytes().used(), 3 * row);
        // Written: given back.
        log.0.lock().unwrap().clear();
        assert_eq!(control.bytes().used(), 0);
    }
}
