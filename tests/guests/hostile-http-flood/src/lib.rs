//! One node that starts `count` (default 10,000) requests to `url` through
//! the raw `wasi:http` outgoing handler, each with a body of `body_size`
//! bytes (default none), before it awaits any of them; then awaits each and
//! counts the outcomes in `outcomes` (`status_200`, or the `wasi:http`
//! error code's name, e.g. `HttpRequestDenied`). A flood of requests held
//! open by a slow server must not take more than the run's share of
//! connections, memory or resolver threads.

use std::collections::BTreeMap;

use sandgraph_sdk::serde_json::{Value, json};
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

/// Most requests one input may ask for (the flood is 10,000).
const MAX_COUNT: u64 = 100_000;

fn flood(state: Value) -> Update {
    let url = state["url"].as_str().unwrap_or_default();
    let count = state["count"].as_u64().unwrap_or(10_000).min(MAX_COUNT);
    let body_size = state["body_size"].as_u64().unwrap_or(0).min(1 << 20);
    let outcomes = fire(url, count as usize, body_size as usize);
    Update::new()
        .set("sent", count)
        .set("outcomes", json!(outcomes))
}

#[cfg(not(target_arch = "wasm32"))]
fn fire(_: &str, _: usize, _: usize) -> BTreeMap<String, u64> {
    BTreeMap::new()
}

#[cfg(target_arch = "wasm32")]
fn fire(url: &str, count: usize, body_size: usize) -> BTreeMap<String, u64> {
    use wasip2::http::outgoing_handler;

    let rest = url.strip_prefix("http://").unwrap_or(url);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let body = vec![b'x'; body_size];
    let mut outcomes = BTreeMap::new();
    let mut pending = Vec::with_capacity(count);
    for _ in 0..count {
        let (request, out_body) = request(authority, path, body_size);
        match outgoing_handler::handle(request, None) {
            Ok(future) => {
                if let Some(b) = out_body {
                    write(b, &body);
                }
                pending.push(future);
            }
            Err(code) => *outcomes.entry(code_name(&code)).or_default() += 1,
        }
    }
    for future in pending {
        let outcome = loop {
            match future.get() {
                Some(Ok(Ok(response))) => break format!("status_{}", response.status()),
                Some(Ok(Err(code))) => break code_name(&code),
                Some(Err(())) => break "taken".to_owned(),
                None => future.subscribe().block(),
            }
        };
        *outcomes.entry(outcome).or_default() += 1;
    }
    outcomes
}

#[cfg(target_arch = "wasm32")]
fn request(
    authority: &str,
    path: &str,
    body_size: usize,
) -> (
    wasip2::http::types::OutgoingRequest,
    Option<wasip2::http::types::OutgoingBody>,
) {
    use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};
    let headers = if body_size > 0 {
        let length = body_size.to_string().into_bytes();
        Fields::from_list(&[("content-length".to_owned(), length)]).expect("a valid header")
    } else {
        Fields::new()
    };
    let request = OutgoingRequest::new(headers);
    let method = if body_size > 0 {
        Method::Post
    } else {
        Method::Get
    };
    let _ = request.set_method(&method);
    let _ = request.set_scheme(Some(&Scheme::Http));
    let _ = request.set_authority(Some(authority));
    let _ = request.set_path_with_query(Some(path));
    let body = if body_size > 0 {
        request.body().ok()
    } else {
        None
    };
    (request, body)
}

/// Writes what the body stream takes now, without waiting (a hostile
/// guest does not wait for a request the host holds back).
#[cfg(target_arch = "wasm32")]
fn write(body: wasip2::http::types::OutgoingBody, bytes: &[u8]) {
    use wasip2::http::types::OutgoingBody;
    if let Ok(stream) = body.write() {
        let mut rest = bytes;
        while let Ok(n) = stream.check_write()
            && n > 0
            && !rest.is_empty()
        {
            let n = usize::try_from(n).unwrap_or(usize::MAX).min(rest.len());
            if stream.write(&rest[..n]).is_err() {
                break;
            }
            rest = &rest[n..];
        }
        drop(stream);
    }
    let _ = OutgoingBody::finish(body, None);
}

/// `HttpRequestDenied` for `ErrorCode::HttpRequestDenied`, without the
/// payload of variants that carry one.
#[cfg(target_arch = "wasm32")]
fn code_name(code: &wasip2::http::types::ErrorCode) -> String {
    let debug = format!("{code:?}");
    debug
        .trim_start_matches("ErrorCode::")
        .split(['(', ' ', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn graph() -> Graph {
    Graph::new("hostile_http_flood")
        .channel("url", Reducer::LastValue)
        .channel("count", Reducer::LastValue)
        .channel("body_size", Reducer::LastValue)
        .channel("sent", Reducer::LastValue)
        .channel("outcomes", Reducer::LastValue)
        .node("flood", flood)
        .edge(START, "flood")
        .edge("flood", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
