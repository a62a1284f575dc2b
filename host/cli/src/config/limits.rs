//! Per-run limit flags: over the runtime's defaults (`run`), or over the
//! operator config's `[limits]` (`call`).

use std::time::Duration;

use sandgraph_registry::LimitOverrides;
use sandgraph_runtime::Limits;

/// Per-run limits; unset ones keep the defaults documented in
/// `host/runtime/src/limits.rs`.
#[derive(clap::Args)]
pub(crate) struct LimitArgs {
    /// Wall-clock budget of the run in milliseconds (default 30000)
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// Fuel budget of the run (default 200000000000)
    #[arg(long, value_name = "N")]
    fuel: Option<u64>,
    /// Memory cap per instance in MiB (default 128)
    #[arg(long, value_name = "N")]
    memory_mb: Option<usize>,
    /// Superstep budget (default 25)
    #[arg(long, value_name = "N")]
    recursion_limit: Option<u32>,
    /// Bytes the host may keep for the run (state, outputs, events, checkpoints) in MiB (default 64)
    #[arg(long, value_name = "N")]
    host_memory_mb: Option<usize>,
    /// Instances the run may hold at once; its parallel tasks queue beyond this (default 8)
    #[arg(long, value_name = "N")]
    instances: Option<u32>,
}

impl LimitArgs {
    /// `l` with the flags over it.
    pub(crate) fn apply(&self, mut l: Limits) -> Limits {
        if let Some(ms) = self.timeout_ms {
            l.timeout = Duration::from_millis(ms);
        }
        if let Some(f) = self.fuel {
            l.fuel = f;
        }
        if let Some(mb) = self.memory_mb {
            l.memory = mb.saturating_mul(1 << 20);
        }
        if let Some(r) = self.recursion_limit {
            l.recursion_limit = r;
        }
        if let Some(mb) = self.host_memory_mb {
            l.host_bytes = mb.saturating_mul(1 << 20);
        }
        if let Some(n) = self.instances {
            l.instances = n;
        }
        l
    }

    /// The flags as overrides of the operator config's `[limits]`.
    pub(crate) fn overrides(&self) -> LimitOverrides {
        LimitOverrides {
            timeout_ms: self.timeout_ms,
            fuel: self.fuel,
            memory_mb: self.memory_mb.map(|m| m as u64),
            recursion_limit: self.recursion_limit,
            host_memory_mb: self.host_memory_mb.map(|m| m as u64),
            instances: self.instances,
        }
    }
}
