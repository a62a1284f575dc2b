//! Supervisor wakes and their delivery attempts.

use std::collections::BTreeSet;

use super::tables;
use super::{
    AgentGraphStore, AttemptOutcome, AttemptStatus, ControlError, ControlErrorCode, SupervisorWake,
    WakeAttempt, WakeClaimOutcome, WakeStatus, decode, encode, malformed, successor,
};
use sandgraph_store::tables::{Table, Tx};

type WakeKey = (&'static str, &'static str);
type AttemptKey = (&'static str, &'static str, &'static str);

/// The most UTF-16 units an exhaustion reason may have.
const MAX_EXHAUST_REASON: usize = 4000;

fn read_wake(
    wakes: &Table<'_, WakeKey, &'static str>,
    graph: &str,
    wake_id: &str,
) -> Result<Option<SupervisorWake>, ControlError> {
    let Some(value) = wakes.get((graph, wake_id))? else {
        return Ok(None);
    };
    decode_wake(&(graph, wake_id), &value).map(Some)
}

fn decode_wake(key: &(&str, &str), text: &str) -> Result<SupervisorWake, ControlError> {
    let wake: SupervisorWake = decode(tables::AG_WAKES.name(), key, text)?;
    if wake.graph_id != key.0 || wake.wake_id != key.1 {
        return Err(malformed(
            tables::AG_WAKES.name(),
            key,
            format!(
                "it holds wake {} of agent graph {}",
                wake.wake_id, wake.graph_id
            ),
        ));
    }
    Ok(wake)
}

fn read_attempt(
    attempts: &Table<'_, AttemptKey, &'static str>,
    graph: &str,
    wake_id: &str,
    attempt_id: &str,
) -> Result<Option<WakeAttempt>, ControlError> {
    let Some(value) = attempts.get((graph, wake_id, attempt_id))? else {
        return Ok(None);
    };
    decode_attempt(&(graph, wake_id, attempt_id), &value).map(Some)
}

fn decode_attempt(key: &(&str, &str, &str), text: &str) -> Result<WakeAttempt, ControlError> {
    let attempt: WakeAttempt = decode(tables::AG_WAKE_ATTEMPTS.name(), key, text)?;
    if attempt.graph_id != key.0 || attempt.wake_id != key.1 || attempt.attempt_id != key.2 {
        return Err(malformed(
            tables::AG_WAKE_ATTEMPTS.name(),
            key,
            format!(
                "it holds attempt {} of wake {} of agent graph {}",
                attempt.attempt_id, attempt.wake_id, attempt.graph_id
            ),
        ));
    }
    Ok(attempt)
}

fn wake_not_found(graph: &str, wake_id: &str) -> ControlError {
    ControlError::new(
        ControlErrorCode::WakeNotFound,
        format!("agent graph {graph}: wake {wake_id} not found"),
    )
}

fn wake_status(status: AttemptStatus) -> WakeStatus {
    match status {
        AttemptStatus::Running => WakeStatus::Running,
        AttemptStatus::WaitingPermission => WakeStatus::WaitingPermission,
        AttemptStatus::Delivered => WakeStatus::Delivered,
        AttemptStatus::Superseded => WakeStatus::Superseded,
        AttemptStatus::RetryableFailed => WakeStatus::RetryableFailed,
    }
}

fn attempt_status_str(status: AttemptStatus) -> &'static str {
    match status {
        AttemptStatus::Running => "running",
        AttemptStatus::WaitingPermission => "waiting_permission",
        AttemptStatus::Delivered => "delivered",
        AttemptStatus::Superseded => "superseded",
        AttemptStatus::RetryableFailed => "retryable_failed",
    }
}

fn wake_status_str(status: WakeStatus) -> &'static str {
    match status {
        WakeStatus::Pending => "pending",
        WakeStatus::Running => "running",
        WakeStatus::WaitingPermission => "waiting_permission",
        WakeStatus::Delivered => "delivered",
        WakeStatus::Superseded => "superseded",
        WakeStatus::RetryableFailed => "retryable_failed",
        WakeStatus::Exhausted => "exhausted",
    }
}

/// Pending, running, waiting for a permission, or failed and retryable.
fn is_unsettled(status: WakeStatus) -> bool {
    matches!(
        status,
        WakeStatus::Pending
            | WakeStatus::Running
            | WakeStatus::WaitingPermission
            | WakeStatus::RetryableFailed
    )
}

/// Whether an attempt with this status is over.
fn is_settled(status: AttemptStatus) -> bool {
    matches!(
        status,
        AttemptStatus::Delivered | AttemptStatus::Superseded | AttemptStatus::RetryableFailed
    )
}

/// Why [`supersede_due_in`] superseded a wake.
pub(super) const FINISHED_REASON: &str = "graph finished";

/// Inside `tx`: the wakes of `graph` still due for delivery (`pending`, or
/// `retryable_failed` and waiting for a retry) become `superseded` with
/// `reason`, at `now`. A wake under delivery (`running`,
/// `waiting_permission`) is left to its attempt, which settles it.
/// Returns how many changed.
pub(super) fn supersede_due_in(
    tx: &Tx<'_>,
    graph: &str,
    reason: &str,
    now: u64,
) -> Result<usize, ControlError> {
    let mut wakes = tx.open_table(tables::AG_WAKES)?;
    let end = successor(graph);
    let mut due = Vec::new();
    for ((g, w), value) in wakes.between((graph, ""), (end.as_str(), ""))? {
        let wake = decode_wake(&(g.as_str(), w.as_str()), &value)?;
        if matches!(
            wake.status,
            WakeStatus::Pending | WakeStatus::RetryableFailed
        ) {
            due.push(wake);
        }
    }
    for wake in &mut due {
        wake.status = WakeStatus::Superseded;
        wake.superseded_reason = Some(reason.to_owned());
        wake.updated_at = now;
        let text = encode(tables::AG_WAKES.name(), &*wake)?;
        wakes.insert((graph, wake.wake_id.as_str()), text.as_str())?;
    }
    Ok(due.len())
}

fn wake_order(w: &SupervisorWake) -> (u64, &str, &str) {
    (w.created_at, &w.graph_id, &w.wake_id)
}

impl AgentGraphStore {
    /// Claims a wake exactly once: a new wake is `pending` with no attempt;
    /// an existing one is returned unchanged, whatever its status
    /// (`created: false`).
    pub fn claim_supervisor_wake(
        &self,
        graph_id: &str,
        wake_id: &str,
        snapshot_version: &str,
        root_session_id: &str,
    ) -> Result<WakeClaimOutcome, ControlError> {
        self.write(|tx| {
            let mut wakes = tx.open_table(tables::AG_WAKES)?;
            if let Some(wake) = read_wake(&wakes, graph_id, wake_id)? {
                return Ok((
                    WakeClaimOutcome {
                        wake,
                        created: false,
                    },
                    false,
                ));
            }
            let now = self.now();
            let wake = SupervisorWake {
                wake_id: wake_id.to_owned(),
                graph_id: graph_id.to_owned(),
                snapshot_version: snapshot_version.to_owned(),
                root_session_id: root_session_id.to_owned(),
                status: WakeStatus::Pending,
                attempt_count: 0,
                current_attempt_id: None,
                current_turn_id: None,
                created_at: now,
                updated_at: now,
                superseded_reason: None,
                failure_reason: None,
            };
            let text = encode(tables::AG_WAKES.name(), &wake)?;
            wakes.insert((graph_id, wake_id), text.as_str())?;
            Ok((
                WakeClaimOutcome {
                    wake,
                    created: true,
                },
                true,
            ))
        })
    }

    /// Begins a delivery attempt.
    ///
    /// `max_attempts: Some(0)` → `malformed-state`; an unknown wake →
    /// `wake-not-found`. Not acquired (nothing written): an attempt of that
    /// id exists (it is returned), the wake is terminal, or it has begun
    /// `max_attempts` attempts already. Otherwise the attempt is `running`,
    /// and so is the wake, with `attemptCount + 1` and this attempt and turn
    /// as current.
    pub fn begin_supervisor_wake_attempt(
        &self,
        graph_id: &str,
        wake_id: &str,
        attempt_id: &str,
        turn_id: &str,
        max_attempts: Option<u32>,
    ) -> Result<AttemptOutcome, ControlError> {
        if max_attempts == Some(0) {
            return Err(ControlError::new(
                ControlErrorCode::MalformedState,
                format!("agent graph {graph_id}: wake {wake_id} max attempts must be at least 1"),
            ));
        }
        self.write(|tx| {
            let mut wakes = tx.open_table(tables::AG_WAKES)?;
            let Some(mut wake) = read_wake(&wakes, graph_id, wake_id)? else {
                return Err(wake_not_found(graph_id, wake_id));
            };
            let mut attempts = tx.open_table(tables::AG_WAKE_ATTEMPTS)?;
            if let Some(attempt) = read_attempt(&attempts, graph_id, wake_id, attempt_id)? {
                let existing = AttemptOutcome {
                    attempt: Some(attempt),
                    wake,
                    acquired: false,
                };
                return Ok((existing, false));
            }
            let at_ceiling = max_attempts.is_some_and(|max| wake.attempt_count >= max);
            if wake.status.is_terminal() || at_ceiling {
                let refused = AttemptOutcome {
                    attempt: None,
                    wake,
                    acquired: false,
                };
                return Ok((refused, false));
            }
            let now = self.now();
            let attempt = WakeAttempt {
                attempt_id: attempt_id.to_owned(),
                wake_id: wake_id.to_owned(),
                graph_id: graph_id.to_owned(),
                turn_id: turn_id.to_owned(),
                status: AttemptStatus::Running,
                started_at: now,
                completed_at: None,
                failure_reason: None,
            };
            wake.status = WakeStatus::Running;
            wake.attempt_count += 1;
            wake.current_attempt_id = Some(attempt_id.to_owned());
            wake.current_turn_id = Some(turn_id.to_owned());
            wake.updated_at = now;
            let attempt_text = encode(tables::AG_WAKE_ATTEMPTS.name(), &attempt)?;
            let wake_text = encode(tables::AG_WAKES.name(), &wake)?;
            attempts.insert((graph_id, wake_id, attempt_id), attempt_text.as_str())?;
            wakes.insert((graph_id, wake_id), wake_text.as_str())?;
            Ok((
                AttemptOutcome {
                    attempt: Some(attempt),
                    wake,
                    acquired: true,
                },
                true,
            ))
        })
    }

    /// Completes (or moves on) an attempt: it takes `status`, and so does the
    /// wake when this is its current attempt. Returns the wake.
    ///
    /// Unknown wake → `wake-not-found`; unknown attempt →
    /// `wake-attempt-not-found`. An attempt that already has `status` is
    /// left as it is (a retried call; the wake is returned unchanged). A
    /// wake delivered already → `wake-already-delivered`. A superseded or
    /// exhausted wake stays so: only the attempt row is settled. The wake's
    /// `failureReason` is set for `retryable_failed` and `superseded` (when
    /// given) and cleared otherwise; the attempt gets `completedAt` for the
    /// settled statuses (delivered, superseded, retryable_failed).
    pub fn complete_supervisor_wake_attempt(
        &self,
        graph_id: &str,
        wake_id: &str,
        attempt_id: &str,
        status: AttemptStatus,
        failure_reason: Option<&str>,
    ) -> Result<SupervisorWake, ControlError> {
        self.write(|tx| {
            let mut wakes = tx.open_table(tables::AG_WAKES)?;
            let Some(mut wake) = read_wake(&wakes, graph_id, wake_id)? else {
                return Err(wake_not_found(graph_id, wake_id));
            };
            let mut attempts = tx.open_table(tables::AG_WAKE_ATTEMPTS)?;
            let Some(mut attempt) = read_attempt(&attempts, graph_id, wake_id, attempt_id)? else {
                return Err(ControlError::new(
                    ControlErrorCode::WakeAttemptNotFound,
                    format!(
                        "agent graph {graph_id}: attempt {attempt_id} of wake {wake_id} not found"
                    ),
                ));
            };
            if attempt.status == status {
                return Ok((wake, false));
            }
            if wake.status == WakeStatus::Delivered {
                return Err(ControlError::new(
                    ControlErrorCode::WakeAlreadyDelivered,
                    format!(
                        "agent graph {graph_id}: wake {wake_id} is already delivered; attempt {attempt_id} cannot become {}",
                        attempt_status_str(status)
                    ),
                ));
            }
            let now = self.now();
            attempt.status = status;
            attempt.completed_at = is_settled(status).then_some(now);
            if let Some(reason) = failure_reason {
                attempt.failure_reason = Some(reason.to_owned());
            }
            let attempt_text = encode(tables::AG_WAKE_ATTEMPTS.name(), &attempt)?;
            attempts.insert((graph_id, wake_id, attempt_id), attempt_text.as_str())?;
            let current = wake.current_attempt_id.as_deref() == Some(attempt_id);
            if current && !wake.status.is_terminal() {
                wake.status = wake_status(status);
                wake.failure_reason = match status {
                    AttemptStatus::RetryableFailed | AttemptStatus::Superseded => {
                        failure_reason.map(str::to_owned)
                    }
                    _ => None,
                };
                wake.updated_at = now;
                let wake_text = encode(tables::AG_WAKES.name(), &wake)?;
                wakes.insert((graph_id, wake_id), wake_text.as_str())?;
            }
            Ok((wake, true))
        })
    }

    /// Supersedes every non-terminal wake of the given root sessions (and,
    /// when `graph_ids` is given, of those graphs only) with `reason`.
    /// Returns how many wakes changed; terminal wakes are not counted.
    pub fn supersede_supervisor_wakes(
        &self,
        root_session_ids: &[&str],
        graph_ids: Option<&[&str]>,
        reason: &str,
    ) -> Result<usize, ControlError> {
        let roots: BTreeSet<&str> = root_session_ids.iter().copied().collect();
        self.write(|tx| {
            let mut wakes = tx.open_table(tables::AG_WAKES)?;
            let mut changed = Vec::new();
            {
                let mut consider = |key: (&str, &str), text: &str| -> Result<(), ControlError> {
                    let wake = decode_wake(&key, text)?;
                    if roots.contains(wake.root_session_id.as_str()) && !wake.status.is_terminal() {
                        changed.push(wake);
                    }
                    Ok(())
                };
                match graph_ids {
                    Some(graphs) => {
                        let graphs: BTreeSet<&str> = graphs.iter().copied().collect();
                        for graph in graphs {
                            let end = successor(graph);
                            for ((g, w), value) in wakes.between((graph, ""), (end.as_str(), ""))? {
                                consider((g.as_str(), w.as_str()), &value)?;
                            }
                        }
                    }
                    None => {
                        for ((g, w), value) in wakes.all()? {
                            consider((g.as_str(), w.as_str()), &value)?;
                        }
                    }
                }
            }
            let now = self.now();
            for wake in &mut changed {
                wake.status = WakeStatus::Superseded;
                wake.superseded_reason = Some(reason.to_owned());
                wake.updated_at = now;
                let text = encode(tables::AG_WAKES.name(), &*wake)?;
                wakes.insert(
                    (wake.graph_id.as_str(), wake.wake_id.as_str()),
                    text.as_str(),
                )?;
            }
            Ok((changed.len(), !changed.is_empty()))
        })
    }

    /// Marks a `retryable_failed` wake `exhausted` (terminal) with `reason`
    /// as its failure reason. Idempotent once exhausted (the first reason
    /// stays); any other status → `wake-conflict`. `reason` must be
    /// non-blank and at most 4000 UTF-16 units (`malformed-state`).
    pub fn exhaust_supervisor_wake(
        &self,
        graph_id: &str,
        wake_id: &str,
        reason: &str,
    ) -> Result<SupervisorWake, ControlError> {
        if reason.trim().is_empty() || reason.encode_utf16().count() > MAX_EXHAUST_REASON {
            return Err(ControlError::new(
                ControlErrorCode::MalformedState,
                format!(
                    "agent graph {graph_id}: wake {wake_id} exhaustion reason must be non-empty and at most {MAX_EXHAUST_REASON} characters"
                ),
            ));
        }
        self.write(|tx| {
            let mut wakes = tx.open_table(tables::AG_WAKES)?;
            let Some(mut wake) = read_wake(&wakes, graph_id, wake_id)? else {
                return Err(wake_not_found(graph_id, wake_id));
            };
            match wake.status {
                WakeStatus::Exhausted => Ok((wake, false)),
                WakeStatus::RetryableFailed => {
                    wake.status = WakeStatus::Exhausted;
                    wake.failure_reason = Some(reason.to_owned());
                    wake.updated_at = self.now();
                    let text = encode(tables::AG_WAKES.name(), &wake)?;
                    wakes.insert((graph_id, wake_id), text.as_str())?;
                    Ok((wake, true))
                }
                other => Err(ControlError::new(
                    ControlErrorCode::WakeConflict,
                    format!(
                        "agent graph {graph_id}: wake {wake_id} is {}, not retryable_failed; cannot exhaust",
                        wake_status_str(other)
                    ),
                )),
            }
        })
    }

    /// One wake of the graph; `None` when there is none of that id.
    pub fn read_supervisor_wake(
        &self,
        graph_id: &str,
        wake_id: &str,
    ) -> Result<Option<SupervisorWake>, ControlError> {
        self.read(|tx| read_wake(&tx.open_table(tables::AG_WAKES)?, graph_id, wake_id))
    }

    /// The graph's wakes, by `createdAt` then wake id.
    pub fn list_supervisor_wakes(
        &self,
        graph_id: &str,
    ) -> Result<Vec<SupervisorWake>, ControlError> {
        self.wakes_where(Some(graph_id), |_| true)
    }

    /// The wakes still to be settled (pending, running, waiting for a
    /// permission, retryable_failed) of one graph or of all, by `createdAt`,
    /// graph id, then wake id.
    pub fn list_unsettled_supervisor_wakes(
        &self,
        graph_id: Option<&str>,
    ) -> Result<Vec<SupervisorWake>, ControlError> {
        self.wakes_where(graph_id, |w| is_unsettled(w.status))
    }

    fn wakes_where(
        &self,
        graph_id: Option<&str>,
        keep: impl Fn(&SupervisorWake) -> bool,
    ) -> Result<Vec<SupervisorWake>, ControlError> {
        let rows = self.read(|tx| {
            let wakes = tx.open_table(tables::AG_WAKES)?;
            match graph_id {
                Some(graph) => {
                    let end = successor(graph);
                    Ok(wakes.between((graph, ""), (end.as_str(), ""))?)
                }
                None => Ok(wakes.all()?),
            }
        })?;
        let mut out = Vec::new();
        for ((g, w), value) in rows {
            let wake = decode_wake(&(g.as_str(), w.as_str()), &value)?;
            if keep(&wake) {
                out.push(wake);
            }
        }
        out.sort_by(|a, b| wake_order(a).cmp(&wake_order(b)));
        Ok(out)
    }

    /// The attempts of a wake, by `startedAt` then attempt id.
    pub fn list_supervisor_wake_attempts(
        &self,
        graph_id: &str,
        wake_id: &str,
    ) -> Result<Vec<WakeAttempt>, ControlError> {
        let end = successor(wake_id);
        let rows = self.read(|tx| {
            let attempts = tx.open_table(tables::AG_WAKE_ATTEMPTS)?;
            Ok(attempts.between((graph_id, wake_id, ""), (graph_id, end.as_str(), ""))?)
        })?;
        let mut out = Vec::new();
        for ((g, w, a), value) in rows {
            out.push(decode_attempt(
                &(g.as_str(), w.as_str(), a.as_str()),
                &value,
            )?);
        }
        out.sort_by(|a, b| (a.started_at, &a.attempt_id).cmp(&(b.started_at, &b.attempt_id)));
        Ok(out)
    }
}
