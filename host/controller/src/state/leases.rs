//! Claim leases: which host runs a claimed work item, so that work is run
//! by one host at a time and its outcome recorded once, and the work of a
//! host that died is taken over when its lease expires.
//!
//! A lease is part of the claim row (`lease`: holder, fencing token,
//! expiry) and changes only in write transactions that read the claim, so
//! on PostgreSQL (serializable) two hosts cannot both take it. The record
//! is written by [`AgentGraphStore::append_record_leased`], in the
//! transaction that checks the caller still holds the lease: a host that
//! was paused past its lease and lost it writes nothing.

use super::claims::{not_found, read_claim};
use super::records::{append_in, read_record};
use super::tables;
use super::{
    AdmissionStatus, AgentGraphStore, ClaimLease, ControlError, ControlErrorCode, GraphRecord,
    IntentClaim, LeaseOutcome, encode,
};
use sandgraph_store::tables::Tx;

impl AgentGraphStore {
    /// Takes the lease of an intent's claim for this store's
    /// [`holder`](Self::holder), for [`lease_ttl`](Self::lease_ttl).
    ///
    /// In order: no claim → `intent-not-found`; the record `record_id` of
    /// the graph exists → [`LeaseOutcome::Recorded`]; a cancelled claim →
    /// [`LeaseOutcome::Cancelled`]; another holder's lease that has not
    /// expired → [`LeaseOutcome::Held`] (on redb, whose file one process
    /// opens at a time, another holder is a process that is gone, and its
    /// lease is taken at once). Otherwise the lease is the caller's, with
    /// the next fencing token (1 for the first). The same holder leasing
    /// again also gets a new token, fencing off its own earlier run: one
    /// holder (one `Store`) must run a work item once at a time, as the
    /// coordinator's one-wave-at-a-time lock does.
    pub fn lease_intent(
        &self,
        graph_id: &str,
        intent_id: &str,
        record_id: &str,
    ) -> Result<LeaseOutcome, ControlError> {
        self.write(|tx| {
            let mut claim = self.claim(tx, graph_id, intent_id)?;
            let records = tx.open_table(tables::AG_RECORDS)?;
            if read_record(&records, graph_id, record_id)?.is_some() {
                return Ok((LeaseOutcome::Recorded, false));
            }
            if claim.admission_status == AdmissionStatus::Cancelled {
                return Ok((LeaseOutcome::Cancelled, false));
            }
            if self.held_elsewhere(&claim)
                && let Some(lease) = &claim.lease
            {
                return Ok((LeaseOutcome::Held(lease.clone()), false));
            }
            let now = self.now();
            let lease = ClaimLease {
                holder: self.holder.to_string(),
                token: claim.lease.as_ref().map_or(1, |l| l.token + 1),
                expires_at: now.saturating_add(self.ttl_ms()),
            };
            claim.lease = Some(lease.clone());
            self.put_claim(tx, &claim)?;
            Ok((LeaseOutcome::Acquired(lease), true))
        })
    }

    /// Extends this holder's lease of the claim by [`lease_ttl`](Self::lease_ttl)
    /// from now. `false` when the lease is not this holder's with `token`
    /// any more (it expired and another holder took it): stop and record
    /// nothing. A lease that expired but that nobody took is still this
    /// holder's, and renewing it succeeds.
    pub fn renew_intent_lease(
        &self,
        graph_id: &str,
        intent_id: &str,
        token: u64,
    ) -> Result<bool, ControlError> {
        self.write(|tx| {
            let mut claim = self.claim(tx, graph_id, intent_id)?;
            if !self.holds(&claim, token) {
                return Ok((false, false));
            }
            if let Some(lease) = &mut claim.lease {
                lease.expires_at = self.now().saturating_add(self.ttl_ms());
            }
            self.put_claim(tx, &claim)?;
            Ok((true, true))
        })
    }

    /// [`append_record`](Self::append_record) by the holder of the lease
    /// `token` of the claim of `intent_id`, in the transaction that checks
    /// it: when another holder took the lease over, the very same record
    /// already there is `Ok(false)` and anything else is
    /// `claim-lease-lost` (nothing written). The lease may have expired:
    /// nobody took it, so the outcome is still this holder's to record.
    pub fn append_record_leased(
        &self,
        record: GraphRecord,
        intent_id: &str,
        token: u64,
    ) -> Result<bool, ControlError> {
        self.write(|tx| {
            let claim = self.claim(tx, &record.graph_id, intent_id)?;
            if !self.holds(&claim, token) {
                let records = tx.open_table(tables::AG_RECORDS)?;
                let existing = read_record(&records, &record.graph_id, &record.record_id)?;
                if existing.as_ref() == Some(&record) {
                    return Ok((false, false));
                }
                let holder = claim.lease.map(|l| format!("{} (token {})", l.holder, l.token));
                return Err(ControlError::new(
                    ControlErrorCode::ClaimLeaseLost,
                    format!(
                        "agent graph {}: intent {intent_id} is leased to {}, not to {} with token {token}; record {} not written",
                        record.graph_id,
                        holder.as_deref().unwrap_or("nobody"),
                        self.holder,
                        record.record_id
                    ),
                ));
            }
            append_in(tx, &record).map(|created| (created, created))
        })
    }

    /// Whether `claim`'s work is another holder's to run now: its lease is
    /// another holder's and live (never on redb, where another holder is a
    /// process that is gone). The same test [`Self::lease_intent`] makes,
    /// for callers that pick work from a snapshot.
    pub fn held_elsewhere(&self, claim: &IntentClaim) -> bool {
        claim.lease.as_ref().is_some_and(|lease| {
            *lease.holder != *self.holder
                && lease.expires_at > self.now()
                && !self.holders_are_exclusive()
        })
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn holds(&self, claim: &IntentClaim, token: u64) -> bool {
        claim
            .lease
            .as_ref()
            .is_some_and(|l| *l.holder == *self.holder && l.token == token)
    }

    fn claim(&self, tx: &Tx<'_>, graph: &str, intent: &str) -> Result<IntentClaim, ControlError> {
        let claims = tx.open_table(tables::AG_CLAIMS)?;
        read_claim(&claims, graph, intent)?.ok_or_else(|| not_found(graph, intent))
    }

    fn put_claim(&self, tx: &Tx<'_>, claim: &IntentClaim) -> Result<(), ControlError> {
        let (graph, intent) = (&claim.request.graph_id, &claim.request.intent_id);
        let text = encode(tables::AG_CLAIMS.name(), claim)?;
        tx.open_table(tables::AG_CLAIMS)?
            .insert((graph.as_str(), intent.as_str()), text.as_str())?;
        Ok(())
    }
}
