//! The brokered capabilities a graph may import, as [`Factor`]s: each
//! capability (`llm`, `tools`, `http`, ...) is a unit outside the runtime
//! that owns its linking, grant, per-store state, usage meter, journal rows
//! and backend trait. The runtime keeps what they share: the run's
//! [`Capabilities`] (its grants, by type), the chain's account (the call
//! cap, the usage meters, the counted refusals) and the journal queue
//! ([`RunControl::record`]).
//!
//! Deny by default: a run gets what its [`Capabilities`] grant and nothing
//! else. An ungranted call is the capability's typed `denied` error, which
//! the graph's node may handle; nothing leaves the host.

use std::any::Any;
use std::sync::Arc;

use sandgraph_core::audit::{CapabilityCall, CapabilityLog};
use sandgraph_core::text::guest_text;

pub use crate::sandbox::{Charged, RunControl};
pub use crate::sandbox::{StoreData, SubRun};
pub use account::CallCapReached;
pub use factor::{Factor, lending_slot, without_fuel};

pub(crate) mod account;
pub(crate) mod factor;

/// The types `bindgen!` generates for the capability interfaces of the
/// `sandgraph:graph@0.2` world, for the factors that implement them.
pub mod wit {
    pub use crate::bindings::{llm, tools};
}

/// A capability's grant: what one run may do with it (and where its calls
/// go), as [`Capabilities`] carries it.
pub trait Grant: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The capability's name (`llm`, `tools`, `http`): what
    /// [`Capabilities::names`] and [`Graph::capabilities`] say.
    ///
    /// [`Graph::capabilities`]: crate::Graph::capabilities
    const CAPABILITY: &'static str;
}

/// A grant, its type erased.
trait AnyGrant: Any + Send + Sync + std::fmt::Debug {
    fn capability(&self) -> &'static str;
}

impl<G: Grant> AnyGrant for G {
    fn capability(&self) -> &'static str {
        G::CAPABILITY
    }
}

/// What one run may use, and where granted calls go: one grant per
/// capability, by its type. The default grants nothing.
#[derive(Clone, Default)]
pub struct Capabilities {
    /// The grants, in the order they were set.
    grants: Vec<Arc<dyn AnyGrant>>,
    /// Where every capability call of the run, allowed or refused, is
    /// reported (the capability journal); `None`: not journaled.
    pub log: Option<Arc<dyn CapabilityLog>>,
}

impl Capabilities {
    /// These capabilities with `grant` (replacing a grant of its type).
    #[must_use]
    pub fn with<G: Grant>(mut self, grant: G) -> Self {
        self.set(Some(grant));
        self
    }

    /// These capabilities with calls reported to `log` (`None`: not
    /// journaled).
    #[must_use]
    pub fn with_log(mut self, log: Option<Arc<dyn CapabilityLog>>) -> Self {
        self.log = log;
        self
    }

    /// Sets the grant of type `G` (`None`: removes it).
    pub fn set<G: Grant>(&mut self, grant: Option<G>) {
        let at = self.grants.iter().position(|g| is::<G>(&**g));
        match (at, grant) {
            (Some(i), Some(g)) => self.grants[i] = Arc::new(g),
            (Some(i), None) => {
                self.grants.remove(i);
            }
            (None, Some(g)) => self.grants.push(Arc::new(g)),
            (None, None) => {}
        }
    }

    /// The grant of type `G`, if any.
    pub fn get<G: Grant>(&self) -> Option<&G> {
        self.grants
            .iter()
            .find_map(|g| (&**g as &dyn Any).downcast_ref::<G>())
    }

    /// The names of the granted capabilities, in the order they were set.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.grants.iter().map(|g| g.capability())
    }
}

fn is<G: Grant>(g: &dyn AnyGrant) -> bool {
    (g as &dyn Any).is::<G>()
}

impl std::fmt::Debug for Capabilities {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Capabilities");
        for g in &self.grants {
            d.field(g.capability(), g);
        }
        d.field("log", &self.log.is_some()).finish()
    }
}

/// [`RunControl::record`]: a refusal is counted in the
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

/// What a capability reports about one call ([`RunControl::record`]): one
/// journal row, or a count of refusals of its kind.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The capability (`llm`, `tools`, `http`).
    pub capability: &'static str,
    /// What was called: a model alias, a tool, `METHOD scheme://host:port`.
    pub target: &'a str,
    /// `allowed`, or how the call was refused or failed: `denied`,
    /// `quota`, `recursion` and `invalid` are refusals (counted per kind),
    /// anything else (`timeout`, `failed`) is a row of its own.
    pub decision: &'static str,
    /// Why it was refused or failed, as the guest was told.
    pub reason: Option<&'a str>,
    /// Bytes the guest sent.
    pub request_bytes: u64,
    /// Bytes the guest got back.
    pub response_bytes: u64,
    /// Model tokens spent, for `llm`.
    pub tokens: Option<u64>,
    /// When the call started.
    pub started: std::time::Instant,
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
