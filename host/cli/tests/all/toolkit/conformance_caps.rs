//! The capability examples in every language: `fetch-summarize` (async
//! nodes over `http` and `llm`) and `research` (the `messages` channel, a
//! tool node and the model's tool calls), built from their Rust, Python and
//! JavaScript sources with `sandgraph build`, run by `sandgraph call`
//! against the same loopback page server (its origin granted with
//! `private = true`) and scripted model. Every build must end in the same
//! state, send the model the same requests, leave the same capability
//! journal rows, and replay a run it recorded (`--record`, `--replay`)
//! offline to the same state.

use std::io::{BufRead, BufReader, Read, Write};

use serde_json::{Value, json};

use super::conformance::{Lang, built, run_cached};
use super::new::assert_ok;
use crate::common::{Env, stdout};
use sandgraph_test_llm::{Reply, ScriptedLlm};

const LANGS: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];

/// Bytes of the article before its tail: past the 4 KiB the example sends
/// the model.
const ARTICLE_HEAD_BYTES: usize = 6 * 1024;
/// Ends the article; never sent to the model.
const TAIL: &str = "TAIL-NOT-FOR-THE-MODEL";

/// The article the page server serves at `/article`: ASCII, so the cut at
/// 4 KiB is the same in every language.
fn article() -> String {
    let sentence = "Sandgraph runs agent graphs as sandboxed WebAssembly components. ";
    let mut text = sentence.repeat(ARTICLE_HEAD_BYTES / sentence.len() + 1);
    text.truncate(ARTICLE_HEAD_BYTES);
    text.push_str(TAIL);
    text
}

/// A loopback HTTP server: `GET /article` is [`article`] as text/html,
/// anything else 404. Serves until the test process ends.
fn page_server() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_owned();
            let mut length = 0usize;
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = header.split_once(':')
                    && name.trim().eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let _ = reader.read_exact(&mut vec![0; length]);
            let (status, body) = match path.as_str() {
                "/article" => ("200 OK", article()),
                _ => ("404 Not Found", "no such page".to_owned()),
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\ncontent-type: text/html; charset=utf-8\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    url
}

/// What one language's run of an example left.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The final state `sandgraph call` printed.
    state: Value,
    /// The bodies of the requests the model was sent.
    requests: Vec<Value>,
    /// The capability journal's rows, without their time.
    journal: Vec<String>,
}

/// The example's operator config: the scripted model as alias `fast`, and
/// `grants` for the graph `tool`.
fn config(llm: &ScriptedLlm, tool: &str, grants: &str) -> String {
    format!(
        "[llm]\nbase_url = \"{}\"\napi_key_env = \"SANDGRAPH_CLI_TEST_LLM_KEY\"\n\
         [llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.{tool}.grants]\nllm = {{ models = [\"fast\"] }}\n{grants}",
        llm.base_url()
    )
}

/// A journal row without its leading timestamp and its duration (the
/// last item of its bracketed figures, `..., 3 ms]`).
fn journal_row(row: &str) -> String {
    let row = row.split_once(' ').map_or(row, |(_, rest)| rest);
    match row.rfind(", ") {
        Some(i) if row.ends_with(" ms]") => format!("{}]", &row[..i]),
        _ => row.to_owned(),
    }
}

/// Builds `example` in `lang` and calls it as `tool` with `args`, the model
/// answering `replies` (its requests kept), then replays the run from the
/// cassette it recorded and checks the replay ends in the same state.
async fn run(
    lang: Lang,
    example: &str,
    tool: &str,
    (grants, extra): (&str, &[(&str, &str)]),
    args: &Value,
    replies: Vec<Reply>,
) -> Outcome {
    let wasm = tokio::task::block_in_place(|| built(lang, example));
    let llm = ScriptedLlm::start(replies).await;
    let mut graphs = vec![(format!("{tool}.wasm"), wasm.to_string_lossy().into_owned())];
    graphs.extend(
        extra
            .iter()
            .map(|(n, p)| ((*n).to_owned(), (*p).to_owned())),
    );
    let graphs: Vec<(&str, &str)> = graphs.iter().map(|(n, p)| (&**n, &**p)).collect();
    let env = Env::new(&graphs)
        .with_db("threads.redb")
        .with_var("SANDGRAPH_CLI_TEST_LLM_KEY", "test-key");
    std::fs::write(env.path("ops.toml"), config(&llm, tool, grants)).unwrap();
    let args = args.to_string();
    let call = |mode: &str| {
        let cassette = env.path("cassette.jsonl");
        let mut argv = vec!["call", tool, "--graphs", "graphs", "--config", "ops.toml"];
        argv.extend(["--args", &args, mode, cassette.to_str().unwrap()]);
        let argv: Vec<String> = argv.into_iter().map(str::to_owned).collect();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let o = run_cached(&env, &argv);
        assert_ok(&format!("sandgraph call {tool} {mode} ({lang:?})"), &o);
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    let state = tokio::task::block_in_place(|| call("--record"));
    let o = env.run(&["journal", "--capabilities", "--graph", tool]);
    assert_ok("sandgraph journal --capabilities", &o);
    let journal = stdout(&o).lines().map(journal_row).collect();
    let requests: Vec<Value> = llm.requests().into_iter().map(|r| r.body).collect();
    let replayed = tokio::task::block_in_place(|| call("--replay"));
    assert_eq!(
        replayed, state,
        "{lang:?} {example}: the replay ends elsewhere"
    );
    assert_eq!(
        llm.requests().len(),
        requests.len(),
        "the replay asked the model"
    );
    Outcome {
        state,
        requests,
        journal,
    }
}

/// Runs every language's build of one case and asserts each ends like
/// Rust's; returns Rust's outcome for the case's own checks.
async fn agree(
    example: &str,
    tool: &str,
    grants: (&str, &[(&str, &str)]),
    args: Value,
    replies: impl Fn() -> Vec<Reply>,
) -> Outcome {
    let mut outcomes = Vec::new();
    for lang in LANGS {
        outcomes.push((
            lang,
            run(lang, example, tool, grants, &args, replies()).await,
        ));
    }
    let (_, rust) = outcomes.remove(0);
    for (lang, outcome) in outcomes {
        assert_eq!(
            outcome.state, rust.state,
            "{lang:?} {example} {args}: state"
        );
        assert_eq!(
            outcome.requests, rust.requests,
            "{lang:?} {example} {args}: model requests"
        );
        assert_eq!(
            outcome.journal, rust.journal,
            "{lang:?} {example} {args}: journal"
        );
    }
    rust
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_summarize_agrees_across_languages() {
    let url = page_server();
    let grants = format!("http = {{ allow = [\"{url}\"], methods = [\"GET\"], private = true }}\n");
    let summary = || vec![Reply::text("A short summary.")];
    let ok = agree(
        "fetch-summarize",
        "fetch_summarize",
        (&grants, &[]),
        json!({"url": format!("{url}/article")}),
        summary,
    )
    .await;
    assert_eq!(ok.state["status"], 200, "{}", ok.state);
    assert_eq!(ok.state["summary"], "A short summary.", "{}", ok.state);
    let excerpt = ok.state["excerpt"].as_str().unwrap();
    assert_eq!(excerpt.len(), 4096);
    assert!(!ok.requests[0].to_string().contains(TAIL));
    assert_eq!(ok.requests[0]["max_tokens"], 300);
    assert_eq!(ok.journal.len(), 2, "{:?}", ok.journal);

    // A 404 ends the run before the model, the same way everywhere.
    let missing = agree(
        "fetch-summarize",
        "fetch_summarize",
        (&grants, &[]),
        json!({"url": format!("{url}/missing")}),
        Vec::new,
    )
    .await;
    assert_eq!(
        missing.state["error"], "the server answered 404",
        "{}",
        missing.state
    );
    assert!(missing.requests.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn research_agrees_across_languages() {
    let grants = "tools = { allow = [\"greet_graph\"] }\n";
    let replies = || {
        vec![
            Reply::tool_call("greet_graph", r#"{"name":"Ada","style":"formal"}"#),
            Reply::text("Good day, Ada."),
        ]
    };
    let rust = agree(
        "research",
        "research",
        (grants, &[("greet_graph.wasm", sandgraph_tests::GREET)]),
        json!({"question": "Greet Ada formally."}),
        replies,
    )
    .await;
    assert_eq!(rust.state["answer"], "Good day, Ada.", "{}", rust.state);
    assert_eq!(rust.state["steps"], 2, "{}", rust.state);
    let messages = rust.state["messages"].as_array().unwrap();
    let kinds: Vec<&str> = messages
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["system", "human", "ai", "tool", "ai"],
        "{}",
        rust.state
    );
    let result: Value = serde_json::from_str(messages[3]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result["greeting"], "Good day, Ada.", "{}", rust.state);
    // The second request carries the tool's answer back to the model.
    assert_eq!(rust.requests.len(), 2);
    assert_eq!(rust.requests[1]["messages"].as_array().unwrap().len(), 4);
}
