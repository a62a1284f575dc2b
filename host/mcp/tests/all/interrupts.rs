//! Interrupted graph tool calls: answered by elicitation within the call
//! when the client can, else resumed on a later call through `_meta`
//! `sandgraph/resume`; and `_meta` `sandgraph/configurable`.

use crate::common::*;
use sandgraph_mcp::{CONFIGURABLE_META_KEY, RESUME_META_KEY, ServerOptions, THREAD_META_KEY};
use sandgraph_tests::{APPROVAL, GRAPH_CONTEXT};
use serde_json::{Value, json};

fn folder() -> Folder {
    Folder::new(
        &[
            ("approval_graph.wasm", APPROVAL),
            ("graph_context.wasm", GRAPH_CONTEXT),
        ],
        "[graphs.graph_context]\nas_tool = true\n\n[graphs.approval_graph]\nas_tool = true\n",
    )
}

fn threads() -> (tempfile::TempDir, ServerOptions) {
    let dir = tempfile::tempdir().unwrap();
    let store = sandgraph_store::Store::open(&dir.path().join("data.redb")).unwrap();
    let options = ServerOptions {
        threads: Some(store.threads()),
        ..ServerOptions::default()
    };
    (dir, options)
}

fn structured(r: &rmcp::model::CallToolResult) -> &Value {
    assert_eq!(r.is_error, Some(false), "{r:?}");
    r.structured_content.as_ref().unwrap()
}

#[tokio::test]
async fn an_interrupt_is_returned_then_resumed_by_a_later_call() {
    let f = folder();
    let (_dir, options) = threads();
    let (_server, client) = connect(f.registry().await, options).await;
    let on_thread = |meta: &[(&str, Value)]| {
        let mut all = vec![(THREAD_META_KEY, json!("t1"))];
        all.extend(meta.iter().cloned());
        params_with_meta("approval_graph", json!({"input": {"topic": "wasm"}}), &all)
    };
    let r = client.call_tool(on_thread(&[])).await.unwrap();
    let report = structured(&r);
    assert_eq!(report["status"], "interrupted", "{report}");
    assert_eq!(report["thread_id"], "stdio/t1/approval_graph");
    assert_eq!(
        report["interrupts"][0]["value"]["question"],
        "publish this draft?"
    );
    // "no" revises and asks again; "yes" publishes.
    let r = client
        .call_tool(on_thread(&[(RESUME_META_KEY, json!("no"))]))
        .await
        .unwrap();
    assert_eq!(structured(&r)["status"], "interrupted");
    let r = client
        .call_tool(on_thread(&[(RESUME_META_KEY, json!("yes"))]))
        .await
        .unwrap();
    let state = structured(&r);
    assert_eq!(state["published"], true, "{state}");
    assert_eq!(state["revisions"], 1, "{state}");
    // Nothing is pending any more.
    let r = client
        .call_tool(on_thread(&[(RESUME_META_KEY, json!("yes"))]))
        .await
        .unwrap();
    assert_tool_error(&r, "[invalid_input] ");
    assert!(text(&r).contains("no pending interrupt"), "{}", text(&r));
    // A resume needs a thread.
    let r = client
        .call_tool(params_with_meta(
            "approval_graph",
            json!({}),
            &[(RESUME_META_KEY, json!("yes"))],
        ))
        .await
        .unwrap();
    assert_tool_error(
        &r,
        "[invalid_input] _meta \"sandgraph/resume\" answers the interrupt of a durable thread",
    );
}

#[tokio::test]
async fn a_client_with_elicitation_answers_the_interrupt_within_the_call() {
    let f = folder();
    let (_dir, options) = threads();
    let (_server, client) =
        connect_answering(f.registry().await, options, &[Some("no"), Some("\"yes\"")]).await;
    let r = client
        .call_tool(params_with_meta(
            "approval_graph",
            json!({"input": {"topic": "wasm"}}),
            &[(THREAD_META_KEY, json!("t2"))],
        ))
        .await
        .unwrap();
    let state = structured(&r);
    assert_eq!(state["published"], true, "{state}");
    assert_eq!(state["revisions"], 1, "{state}");
    let asked = client.service().elicited.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(asked[0].contains("approval_graph"), "{}", asked[0]);
    assert!(
        asked[0].contains("A short note about wasm."),
        "{}",
        asked[0]
    );
    assert!(asked[1].contains("(revision 1)"), "{}", asked[1]);
}

#[tokio::test]
async fn a_declined_elicitation_returns_the_interrupt_which_stays_resumable() {
    let f = folder();
    let (_dir, options) = threads();
    let (_server, client) = connect_answering(f.registry().await, options, &[None]).await;
    let call = |meta: &[(&str, Value)]| {
        let mut all = vec![(THREAD_META_KEY, json!("t3"))];
        all.extend(meta.iter().cloned());
        params_with_meta("approval_graph", json!({"input": {"topic": "x"}}), &all)
    };
    let r = client.call_tool(call(&[])).await.unwrap();
    assert_eq!(structured(&r)["status"], "interrupted");
    assert_eq!(client.service().elicited.lock().unwrap().len(), 1);
    let r = client
        .call_tool(call(&[(RESUME_META_KEY, json!("yes"))]))
        .await
        .unwrap();
    assert_eq!(structured(&r)["published"], true);
}

#[tokio::test]
async fn without_a_thread_no_elicitation_is_sent() {
    let f = folder();
    let (_server, client) =
        connect_answering(f.registry().await, ServerOptions::default(), &[Some("yes")]).await;
    let r = client
        .call_tool(params("approval_graph", json!({"input": {"topic": "x"}})))
        .await
        .unwrap();
    // The answer could not be kept anywhere: the interrupt is returned.
    assert_eq!(structured(&r)["status"], "interrupted");
    assert!(client.service().elicited.lock().unwrap().is_empty());
}

#[tokio::test]
async fn configurable_keys_reach_every_node_but_never_the_thread_id() {
    let f = folder();
    let (_server, client) = connect(f.registry().await, ServerOptions::default()).await;
    let r = client
        .call_tool(params_with_meta(
            "graph_context",
            json!({"input": {}}),
            &[(
                CONFIGURABLE_META_KEY,
                json!({"tenant": "acme", "thread_id": "forged"}),
            )],
        ))
        .await
        .unwrap();
    let context = &structured(&r)["context"];
    assert_eq!(
        context["configurable"],
        json!({"tenant": "acme"}),
        "{context}"
    );
    assert_eq!(context["thread_id"], Value::Null);
    let r = client
        .call_tool(params_with_meta(
            "graph_context",
            json!({"input": {}}),
            &[(CONFIGURABLE_META_KEY, json!(["not", "an", "object"]))],
        ))
        .await
        .unwrap();
    assert_tool_error(
        &r,
        "[invalid_input] _meta \"sandgraph/configurable\" must be an object",
    );
}
