//! The scripted server over raw HTTP/1.1, so the checks do not depend on
//! any client library's behaviour.

use std::time::{Duration, Instant};

use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|error| panic!("{error}: {}", self.body))
    }
}

/// Sends one request with `Connection: close` and reads the whole answer.
async fn post(llm: &ScriptedLlm, path: &str, body: &str) -> Answer {
    let address = llm.base_url().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Answer { status, head, body }
}

fn dechunk(mut raw: &str) -> String {
    let mut body = String::new();
    loop {
        let (size, rest) = raw.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return body;
        }
        body.push_str(&rest[..size]);
        raw = &rest[size + 2..];
    }
}

const REQUEST: &str = r#"{"model":"deepseek-chat","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"search","description":"d","parameters":{}}}]}"#;

#[tokio::test]
async fn tool_call_reply_is_a_full_chat_completion() {
    let llm = ScriptedLlm::start([Reply::tool_call("search", r#"{"q":"x"}"#)]).await;
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert_eq!(answer.status, 200);
    assert!(answer.head.contains("content-type: application/json"));
    let body = answer.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "deepseek-chat");
    assert!(body["created"].as_u64().unwrap() > 0);
    assert_eq!(body["choices"][0]["index"], 0);
    assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        body["choices"][0]["message"],
        json!({
            "role": "assistant",
            "content": "",
            "tool_calls": [{
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": "{\"q\":\"x\"}"},
            }],
        })
    );
    assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);

    let recorded = &llm.requests()[0];
    assert_eq!(recorded.path, "/chat/completions");
    assert_eq!(recorded.header("AUTHORIZATION"), Some("Bearer k"));
    assert_eq!(recorded.tool_names(), ["search"]);
    assert_eq!(recorded.messages().len(), 1);
    assert_eq!(recorded.last_content("user"), Some("hi"));
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn ids_count_requests_and_v1_path_is_served() {
    let llm = ScriptedLlm::start([
        Reply::text("first"),
        Reply::tool_calls(&[("a", "{}"), ("b", "{}")]),
    ])
    .await;
    let first = post(&llm, "/v1/chat/completions", REQUEST).await.json();
    assert_eq!(first["choices"][0]["message"]["content"], "first");
    assert_eq!(first["choices"][0]["finish_reason"], "stop");
    let second = post(&llm, "/v1/chat/completions", REQUEST).await.json();
    let calls = &second["choices"][0]["message"]["tool_calls"];
    assert_eq!(calls[0]["id"], "call_2_0");
    assert_eq!(calls[1]["id"], "call_2_1");
    assert_eq!(calls[1]["function"]["name"], "b");
}

#[tokio::test]
async fn exhausted_script_answers_500_naming_the_request() {
    let llm = ScriptedLlm::start([Reply::text("only")]).await;
    post(&llm, "/chat/completions", REQUEST).await;
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert_eq!(answer.status, 500);
    assert_eq!(
        answer.json()["error"]["message"],
        "scripted llm: no reply left for request 2"
    );
    llm.push(Reply::text("pushed"));
    assert_eq!(llm.remaining(), 1);
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert_eq!(answer.json()["choices"][0]["message"]["content"], "pushed");
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn status_headers_delay_and_raw_bodies() {
    let llm = ScriptedLlm::start([
        Reply::status(429, r#"{"error":{"message":"slow down"}}"#)
            .with_header("Retry-After", "3")
            .delay(Duration::from_millis(200)),
        Reply::status(502, "bad gateway"),
        Reply::raw("not json"),
    ])
    .await;
    let started = Instant::now();
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(answer.status, 429);
    assert!(answer.head.contains("retry-after: 3"), "{}", answer.head);
    assert!(answer.head.contains("content-type: application/json"));
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert_eq!((answer.status, answer.body.as_str()), (502, "bad gateway"));
    assert!(answer.head.contains("content-type: text/plain"));
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "not json"));
}

#[tokio::test]
async fn chunked_reply_has_no_content_length() {
    let text = "z".repeat(40_000);
    let llm = ScriptedLlm::start([Reply::text(&text).chunked()]).await;
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert!(
        answer.head.contains("transfer-encoding: chunked"),
        "{}",
        answer.head
    );
    assert!(!answer.head.contains("content-length"), "{}", answer.head);
    assert_eq!(answer.json()["choices"][0]["message"]["content"], text);
}

#[tokio::test]
async fn respond_computes_from_the_request() {
    let llm = ScriptedLlm::start([Reply::respond(|request| {
        Reply::text(&format!(
            "you said {}",
            request.last_content("user").unwrap()
        ))
        .with_header("x-echo", "1")
    })
    .delay(Duration::from_millis(10))])
    .await;
    let answer = post(&llm, "/chat/completions", REQUEST).await;
    assert!(answer.head.contains("x-echo: 1"));
    assert_eq!(
        answer.json()["choices"][0]["message"]["content"],
        "you said hi"
    );
}

#[tokio::test]
async fn other_paths_are_404_and_recorded() {
    let llm = ScriptedLlm::start([Reply::text("kept")]).await;
    let answer = post(&llm, "/completions", "not json").await;
    assert_eq!(answer.status, 404);
    assert_eq!(
        answer.json()["error"]["message"],
        "scripted llm: no route for POST /completions; use POST /chat/completions"
    );
    let recorded = &llm.requests()[0];
    assert_eq!(recorded.path, "/completions");
    assert_eq!(recorded.body, Value::String("not json".into()));
    assert_eq!(llm.remaining(), 1);
}

#[tokio::test]
async fn drop_shuts_the_server_down() {
    let llm = ScriptedLlm::start([]).await;
    let address = llm.base_url().trim_start_matches("http://").to_owned();
    drop(llm);
    // Let the server task see the abort.
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(TcpStream::connect(&address).await.is_err());
}
