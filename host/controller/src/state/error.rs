//! The error of the agent-graph control store: a stable code (the seed's
//! `GraphControlErrorCode` spelling) and a lowercase message.

use std::fmt;

use sandgraph_store::StoreError;
use sandgraph_store::tables::TableError;

/// What went wrong, as a stable machine code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ControlErrorCode {
    /// A compare-and-set saw another schedule revision than expected.
    ScheduleRevisionConflict,
    /// The graph is finished: no new update, claim or operator.
    ScheduleClosed,
    /// A schedule update contradicts a committed one (or itself).
    ScheduleUpdateConflict,
    /// An intent or activation identity is already claimed differently.
    IntentClaimConflict,
    /// No claim of that intent.
    IntentNotFound,
    /// An operator provision contradicts a stored one.
    ProvisionConflict,
    /// No such provision.
    ProvisionNotFound,
    /// No such supervisor wake.
    WakeNotFound,
    /// No such attempt of the wake.
    WakeAttemptNotFound,
    /// The wake was already delivered by another attempt.
    WakeAlreadyDelivered,
    /// The wake is in a status that refuses the transition.
    WakeConflict,
    /// A record id is reused with different content.
    RecordConflict,
    /// The claim's lease is held by another holder now (this one's expired
    /// and was taken over): its outcome is not recorded.
    ClaimLeaseLost,
    /// A stored row does not decode, or an argument is out of range.
    MalformedState,
    /// The database failed.
    Storage,
}

impl ControlErrorCode {
    /// The kebab-case code: `schedule-revision-conflict`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            ControlErrorCode::ScheduleRevisionConflict => "schedule-revision-conflict",
            ControlErrorCode::ScheduleClosed => "schedule-closed",
            ControlErrorCode::ScheduleUpdateConflict => "schedule-update-conflict",
            ControlErrorCode::IntentClaimConflict => "intent-claim-conflict",
            ControlErrorCode::IntentNotFound => "intent-not-found",
            ControlErrorCode::ProvisionConflict => "provision-conflict",
            ControlErrorCode::ProvisionNotFound => "provision-not-found",
            ControlErrorCode::WakeNotFound => "wake-not-found",
            ControlErrorCode::WakeAttemptNotFound => "wake-attempt-not-found",
            ControlErrorCode::WakeAlreadyDelivered => "wake-already-delivered",
            ControlErrorCode::WakeConflict => "wake-conflict",
            ControlErrorCode::RecordConflict => "record-conflict",
            ControlErrorCode::ClaimLeaseLost => "claim-lease-lost",
            ControlErrorCode::MalformedState => "malformed-state",
            ControlErrorCode::Storage => "storage",
        }
    }
}

impl fmt::Display for ControlErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused or failed operation of the agent-graph store. Displays as its
/// message; the code is in [`ControlError::code`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlError {
    /// The stable code.
    pub code: ControlErrorCode,
    /// Lowercase, names the graph and the ids at fault.
    pub message: String,
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ControlError {}

impl ControlError {
    /// An error with `code` and `message`.
    pub fn new(code: ControlErrorCode, message: impl Into<String>) -> Self {
        ControlError {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn storage(e: impl fmt::Display) -> Self {
        ControlError::new(ControlErrorCode::Storage, format!("database error: {e}"))
    }

    pub(crate) fn revision(graph: &str, expected: u64, current: u64) -> Self {
        ControlError::new(
            ControlErrorCode::ScheduleRevisionConflict,
            format!("agent graph schedule {graph} revision changed from {expected} to {current}"),
        )
    }
}

impl From<TableError> for ControlError {
    fn from(e: TableError) -> Self {
        let code = match e {
            TableError::Db(_) => ControlErrorCode::Storage,
            TableError::Malformed { .. } => ControlErrorCode::MalformedState,
        };
        ControlError::new(code, e.to_string())
    }
}

impl From<StoreError> for ControlError {
    fn from(e: StoreError) -> Self {
        ControlError::storage(e)
    }
}
