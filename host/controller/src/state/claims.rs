//! Intent claims (exactly once per intent) and their admission status.

use sandgraph_store::tables::{Table, Tx};

use super::schedule::graph_head;
use super::tables;
use super::{
    AdmissionChange, AdmissionStatus, AgentGraphStore, ClaimOutcome, ControlError,
    ControlErrorCode, IntentClaim, IntentClaimRequest, decode, encode, malformed,
};

type ClaimKey = (&'static str, &'static str);

pub(super) fn read_claim(
    claims: &Table<'_, ClaimKey, &'static str>,
    graph: &str,
    intent: &str,
) -> Result<Option<IntentClaim>, ControlError> {
    let Some(value) = claims.get((graph, intent))? else {
        return Ok(None);
    };
    let key = (graph, intent);
    let claim: IntentClaim = decode(tables::AG_CLAIMS.name(), &key, &value)?;
    check_claim_key(&key, &claim)?;
    Ok(Some(claim))
}

fn check_claim_key(key: &(&str, &str), claim: &IntentClaim) -> Result<(), ControlError> {
    if claim.request.graph_id != key.0 || claim.request.intent_id != key.1 {
        return Err(malformed(
            tables::AG_CLAIMS.name(),
            key,
            format!(
                "it holds intent {} of agent graph {}",
                claim.request.intent_id, claim.request.graph_id
            ),
        ));
    }
    Ok(())
}

pub(super) fn not_found(graph: &str, intent: &str) -> ControlError {
    ControlError::new(
        ControlErrorCode::IntentNotFound,
        format!("agent graph {graph}: intent {intent} has no durable claim"),
    )
}

fn claim_conflict(message: String) -> ControlError {
    ControlError::new(ControlErrorCode::IntentClaimConflict, message)
}

/// Whether a stored claim is the same activation as a request: the seed's
/// comparison (claim id, both fingerprints, target session and run).
fn same_activation(stored: &IntentClaimRequest, req: &IntentClaimRequest) -> bool {
    stored.claim_id == req.claim_id
        && stored.intent_fingerprint == req.intent_fingerprint
        && stored.readiness_context_fingerprint == req.readiness_context_fingerprint
        && stored.target_session_id == req.target_session_id
        && stored.target_run_id == req.target_run_id
}

impl AgentGraphStore {
    /// Claims an intent if the graph is still at `expected_revision`.
    ///
    /// In order: another current revision → `schedule-revision-conflict`;
    /// a claim of the same intent is returned (`created: false`) when it is
    /// the same activation (claim id, fingerprints, target session and run)
    /// and refused otherwise; a finished graph → `schedule-closed`; an
    /// activation identity (target session + turn, or target session + run)
    /// already held by another claim → `intent-claim-conflict`. Otherwise the
    /// claim is stored as `claimed`. A refused call writes nothing.
    pub fn claim_intent_at_revision(
        &self,
        req: IntentClaimRequest,
        expected_revision: u64,
    ) -> Result<ClaimOutcome, ControlError> {
        self.write(|tx| self.claim_in(tx, req.clone(), Some(expected_revision)))
    }

    /// [`Self::claim_intent_at_revision`] at the graph's current revision
    /// (read in the same transaction).
    pub fn claim_intent(&self, req: IntentClaimRequest) -> Result<ClaimOutcome, ControlError> {
        self.write(|tx| self.claim_in(tx, req.clone(), None))
    }

    fn claim_in(
        &self,
        tx: &Tx<'_>,
        req: IntentClaimRequest,
        expected_revision: Option<u64>,
    ) -> Result<(ClaimOutcome, bool), ControlError> {
        let graph = req.graph_id.as_str();
        let intent = req.intent_id.as_str();
        let head = graph_head(&tx.open_table(tables::AG_SCHEDULE)?, graph)?;
        if let Some(expected) = expected_revision
            && expected != head.revision
        {
            return Err(ControlError::revision(graph, expected, head.revision));
        }
        let mut claims = tx.open_table(tables::AG_CLAIMS)?;
        if let Some(existing) = read_claim(&claims, graph, intent)? {
            if !same_activation(&existing.request, &req) {
                return Err(claim_conflict(format!(
                    "agent graph {graph}: intent {intent} already claimed by a different activation (claim {})",
                    existing.request.claim_id
                )));
            }
            return Ok((
                ClaimOutcome {
                    claim: existing,
                    created: false,
                },
                false,
            ));
        }
        if head.closed {
            return Err(ControlError::new(
                ControlErrorCode::ScheduleClosed,
                format!("agent graph {graph} is finished; intent {intent} was not claimed"),
            ));
        }
        let session = req.target_session_id.as_str();
        let mut turns = tx.open_table(tables::AG_CLAIM_TURNS)?;
        let mut runs = tx.open_table(tables::AG_CLAIM_RUNS)?;
        let held = [
            (
                "turn",
                req.target_turn_id.as_str(),
                turns.get((session, req.target_turn_id.as_str()))?,
            ),
            (
                "run",
                req.target_run_id.as_str(),
                runs.get((session, req.target_run_id.as_str()))?,
            ),
        ];
        for (what, id, holder) in held {
            if let Some(holder) = holder {
                let (hg, hi) = holder;
                return Err(claim_conflict(format!(
                    "agent graph {graph}: claim {} of intent {intent} reuses {what} {id} of session {session}, held by intent {hi} of agent graph {hg}",
                    req.claim_id
                )));
            }
        }
        let claim = IntentClaim {
            claimed_at: self.now(),
            admission_status: AdmissionStatus::Claimed,
            cancellation_reason: None,
            lease: None,
            request: req.clone(),
        };
        let text = encode(tables::AG_CLAIMS.name(), &claim)?;
        claims.insert((graph, intent), text.as_str())?;
        turns.insert((session, req.target_turn_id.as_str()), (graph, intent))?;
        runs.insert((session, req.target_run_id.as_str()), (graph, intent))?;
        Ok((
            ClaimOutcome {
                claim,
                created: true,
            },
            true,
        ))
    }

    /// The claim of an intent; `None` when it has none.
    pub fn read_claim(
        &self,
        graph_id: &str,
        intent_id: &str,
    ) -> Result<Option<IntentClaim>, ControlError> {
        self.read(|tx| read_claim(&tx.open_table(tables::AG_CLAIMS)?, graph_id, intent_id))
    }

    /// The graph's claims, by intent id (byte order).
    pub fn list_claims(&self, graph_id: &str) -> Result<Vec<IntentClaim>, ControlError> {
        self.graph_rows(tables::AG_CLAIMS, graph_id, check_claim_key)
    }

    /// `claimed → executing` if the graph is still at `expected_revision`
    /// (else `schedule-revision-conflict`). An executing or cancelled claim
    /// is left as it is (`changed: false`); no claim → `intent-not-found`.
    pub fn begin_intent_execution_at_revision(
        &self,
        graph_id: &str,
        intent_id: &str,
        expected_revision: u64,
    ) -> Result<AdmissionChange, ControlError> {
        self.write(|tx| {
            let head = graph_head(&tx.open_table(tables::AG_SCHEDULE)?, graph_id)?;
            if head.revision != expected_revision {
                return Err(ControlError::revision(
                    graph_id,
                    expected_revision,
                    head.revision,
                ));
            }
            transition(tx, graph_id, intent_id, |status| {
                (status == AdmissionStatus::Claimed).then_some((AdmissionStatus::Executing, None))
            })
        })
    }

    /// [`Self::begin_intent_execution_at_revision`] at the current revision.
    pub fn begin_intent_execution(
        &self,
        graph_id: &str,
        intent_id: &str,
    ) -> Result<AdmissionChange, ControlError> {
        self.write(|tx| {
            transition(tx, graph_id, intent_id, |status| {
                (status == AdmissionStatus::Claimed).then_some((AdmissionStatus::Executing, None))
            })
        })
    }

    /// Any status → `cancelled` with `reason`. Idempotent: a cancelled claim
    /// keeps its first reason (`changed: false`). No claim →
    /// `intent-not-found`. Allowed on a finished graph.
    pub fn cancel_intent_execution(
        &self,
        graph_id: &str,
        intent_id: &str,
        reason: &str,
    ) -> Result<AdmissionChange, ControlError> {
        self.write(|tx| {
            transition(tx, graph_id, intent_id, |status| {
                (status != AdmissionStatus::Cancelled)
                    .then(|| (AdmissionStatus::Cancelled, Some(reason.to_owned())))
            })
        })
    }

    /// `executing → claimed`, so the work is dispatched again (a replay the
    /// supervisor consented to). A claimed claim stays claimed and a
    /// cancelled one is never re-armed (`changed: false`). No claim →
    /// `intent-not-found`.
    pub fn rearm_intent_for_replay(
        &self,
        graph_id: &str,
        intent_id: &str,
    ) -> Result<AdmissionChange, ControlError> {
        self.write(|tx| {
            transition(tx, graph_id, intent_id, |status| {
                (status == AdmissionStatus::Executing).then_some((AdmissionStatus::Claimed, None))
            })
        })
    }
}

/// Inside `tx`: a `claimed` or `executing` claim of `intent` becomes
/// `cancelled` with `reason`; no claim, or one already cancelled, is left
/// as it is. Returns whether it changed.
pub(super) fn cancel_in(
    tx: &Tx<'_>,
    graph: &str,
    intent: &str,
    reason: &str,
) -> Result<bool, ControlError> {
    if read_claim(&tx.open_table(tables::AG_CLAIMS)?, graph, intent)?.is_none() {
        return Ok(false);
    }
    let (change, _) = transition(tx, graph, intent, |status| {
        (status != AdmissionStatus::Cancelled)
            .then(|| (AdmissionStatus::Cancelled, Some(reason.to_owned())))
    })?;
    Ok(change.changed)
}

/// Moves a claim to the status `next` gives for its current one (with a
/// cancellation reason), or leaves it when `next` gives `None`.
fn transition(
    tx: &Tx<'_>,
    graph: &str,
    intent: &str,
    next: impl FnOnce(AdmissionStatus) -> Option<(AdmissionStatus, Option<String>)>,
) -> Result<(AdmissionChange, bool), ControlError> {
    let mut claims = tx.open_table(tables::AG_CLAIMS)?;
    let Some(mut claim) = read_claim(&claims, graph, intent)? else {
        return Err(not_found(graph, intent));
    };
    let previous = claim.admission_status;
    let Some((state, reason)) = next(previous) else {
        let unchanged = AdmissionChange {
            state: previous,
            previous_state: previous,
            changed: false,
        };
        return Ok((unchanged, false));
    };
    claim.admission_status = state;
    if reason.is_some() {
        claim.cancellation_reason = reason;
    }
    let text = encode(tables::AG_CLAIMS.name(), &claim)?;
    claims.insert((graph, intent), text.as_str())?;
    let change = AdmissionChange {
        state,
        previous_state: previous,
        changed: true,
    };
    Ok((change, true))
}
