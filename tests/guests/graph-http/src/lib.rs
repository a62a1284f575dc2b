//! Sends `method` (default GET) to `url` with a body of `body_size` bytes
//! (default none) through the SDK's `http` module, and writes what
//! happened into the state: `status`, `body` (text) and `body_len`, or
//! `error` (`{"kind", "message"}`). With `follow` set, a 3xx is recorded
//! in `redirected` (`{"status", "location"}`) and its `location` is
//! requested next, as a new request. A failed request is handled by the
//! node, so the run itself completes.

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Update, http};

fn fetch(state: Value) -> Update {
    let method = state["method"].as_str().unwrap_or("GET");
    let url = state["url"].as_str().unwrap_or_default();
    let size = state["body_size"].as_u64().unwrap_or(0);
    let body = vec![b'x'; usize::try_from(size).unwrap_or(usize::MAX)];
    let mut update = Update::new();
    let mut outcome = http::Request::new(method, url).body(body).send();
    if state["follow"].as_bool() == Some(true)
        && let Ok(r) = &outcome
        && (300..400).contains(&r.status)
    {
        let location = r.header("location").unwrap_or_default().to_owned();
        update = update.set(
            "redirected",
            json!({"status": r.status, "location": location}),
        );
        outcome = http::get(&location);
    }
    match outcome {
        Ok(r) => update
            .set("status", r.status)
            .set("body_len", r.body.len())
            .set(
                "body",
                String::from_utf8_lossy(&r.body[..r.body.len().min(256)]).into_owned(),
            ),
        Err(e) => update.set("error", json!({"kind": e.kind(), "message": e.to_string()})),
    }
}

fn graph() -> Graph {
    Graph::new("graph_http")
        .description("Send the HTTP request described in the input.")
        .channel("url", Reducer::LastValue)
        .channel("method", Reducer::LastValue)
        .channel("body_size", Reducer::LastValue)
        .channel("follow", Reducer::LastValue)
        .channel("redirected", Reducer::LastValue)
        .channel("status", Reducer::LastValue)
        .channel("body", Reducer::LastValue)
        .channel("body_len", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node("fetch", fetch)
        .edge(START, "fetch")
        .edge("fetch", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
