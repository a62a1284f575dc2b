//! `fetch_summarize`: `fetch` GETs `url` through the `http` capability and
//! keeps the start of the body (`excerpt`, at most 4 KiB); `summarize` asks
//! the model (alias `fast`) to summarize it.
//!
//! `{"url": "https://example.com/"}`, with that origin and the model
//! granted, ends with `source` (the URL), `status: 200` and `summary`. Any
//! failure (an origin not granted, an address the graph may not reach, a
//! body over the host's cap, a timeout, a status other than 2xx, the
//! model's error) ends the run with `error` saying why.

use sandgraph_sdk::llm::ChatRequest;
use sandgraph_sdk::serde_json::json;
use sandgraph_sdk::{Context, END, Graph, Reducer, START, Update, http};
use serde::Deserialize;

/// The most bytes of the body the model is sent.
const EXCERPT_BYTES: usize = 4 * 1024;

#[derive(Deserialize)]
struct State {
    #[serde(default)]
    url: String,
    #[serde(default)]
    excerpt: String,
    error: Option<String>,
}

fn fetch(s: State) -> Update {
    let update = Update::new().set("source", &s.url);
    match http::get(&s.url) {
        Ok(r) if r.is_success() => {
            let head = &r.body[..r.body.len().min(EXCERPT_BYTES)];
            let excerpt = String::from_utf8_lossy(head);
            update.set("status", r.status).set("excerpt", excerpt)
        }
        Ok(r) => (update.set("status", r.status))
            .set("error", format!("the server answered {}", r.status)),
        Err(e) => update.set("error", e.to_string()),
    }
}

fn summarize(s: State, ctx: &Context) -> Update {
    let request = ChatRequest::new()
        .model("fast")
        .system("Summarize the document in two or three sentences. It may be cut short.")
        .user(format!("Document fetched from {}:\n\n{}", s.url, s.excerpt))
        .max_tokens(300);
    match ctx.llm().chat(&request) {
        Ok(answer) => Update::new().set("summary", answer.content),
        Err(e) => Update::new().set("error", e.to_string()),
    }
}

fn graph() -> Graph {
    Graph::new("fetch_summarize")
        .description("Fetch a web page from a granted origin and summarize it.")
        .as_tool(true)
        .parameters(json!({
            "url": {"type": "string", "required": true, "description": "The page to summarize."}
        }))
        .channel("url", Reducer::LastValue)
        .channel("source", Reducer::LastValue)
        .channel("status", Reducer::LastValue)
        .channel("excerpt", Reducer::LastValue)
        .channel("summary", Reducer::LastValue)
        .channel("error", Reducer::LastValue)
        .node("fetch", fetch)
        .node_with_context("summarize", summarize)
        .edge(START, "fetch")
        .conditional_edges(
            "fetch",
            "fetched",
            |s: State| if s.error.is_some() { "failed" } else { "ok" },
            [("ok", "summarize"), ("failed", END)],
        )
        .edge("summarize", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
