//! Graph-reported failures, chosen by the input's `mode`. A START router
//! sends `decode` to the node `typed` and everything else to `work`; after
//! `work`, the router `next` (path map `{"ok": END}`) picks the way out.
//!
//! | mode            | outcome                                                        |
//! |-----------------|----------------------------------------------------------------|
//! | `ok`            | succeeds with `done: true`                                     |
//! | `fail`          | `work` fails: `failed("deliberate failure")`                   |
//! | `decode`        | `typed` wants `{"count": <u32>}`; with `"count": "x"` it is `invalid-state` naming `count` |
//! | `route_fail`    | the router `next` fails: `failed("router failed")`             |
//! | `route_unknown` | `next` answers `nowhere`, not a path-map key                   |
//! | `goto_unknown`  | `work` returns a command with `goto: ["ghost"]`                |
//! | `send_unknown`  | `work` returns a command sending to `ghost`                    |

use sandgraph_sdk::{Command, END, Graph, NodeError, Reducer, START, Update};
use serde::Deserialize;

#[derive(Deserialize)]
struct Mode {
    #[serde(default)]
    mode: String,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Typed {
    count: u32,
}

fn work(input: Mode) -> Result<Command, NodeError> {
    let done = Update::new().set("done", true);
    match input.mode.as_str() {
        "fail" => Err(NodeError::msg("deliberate failure")),
        "goto_unknown" => Ok(Command::new().update(done).goto("ghost")),
        "send_unknown" => Ok(Command::new().update(done).send("ghost", 1)),
        _ => Ok(Command::new().update(done)),
    }
}

fn next(input: Mode) -> Result<&'static str, String> {
    match input.mode.as_str() {
        "route_fail" => Err("router failed".into()),
        "route_unknown" => Ok("nowhere"),
        _ => Ok("ok"),
    }
}

fn graph() -> Graph {
    Graph::new("graph_errors")
        .channel("mode", Reducer::LastValue)
        .channel("count", Reducer::LastValue)
        .channel("done", Reducer::LastValue)
        .conditional_edges(
            START,
            "dispatch",
            |input: Mode| {
                if input.mode == "decode" {
                    "typed"
                } else {
                    "work"
                }
            },
            None,
        )
        .node("work", work)
        .node("typed", |_: Typed| Update::new().set("done", true))
        .conditional_edges("work", "next", next, [("ok", END)])
        .edge("typed", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
