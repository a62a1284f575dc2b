//! A graph whose `describe` spins forever in pure computation (no host
//! calls, no allocation): only the load limits (fuel, then the load
//! deadline) end it, so the host must not wait for it at startup.
//!
//! The spin is compiled for wasm only, so the native test below can check
//! the graph it would describe.

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, START, Update};

fn noop(_: Value) -> Update {
    Update::new()
}

#[cfg(target_arch = "wasm32")]
fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

// On wasm the code after the hostile call is unreachable, on purpose.
#[cfg_attr(target_arch = "wasm32", allow(unreachable_code))]
fn graph() -> Graph {
    #[cfg(target_arch = "wasm32")]
    spin();
    Graph::new("hostile_describe_spin")
        .node("noop", noop)
        .edge(START, "noop")
        .edge("noop", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
