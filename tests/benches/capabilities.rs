//! What brokering costs: a graph's `llm` call against the same call made
//! directly with `host/llm`'s client, and a `tools` call against running
//! the called graph directly.
//!
//! `cargo bench -p sandgraph-tests --bench capabilities`. Every case runs
//! in the same process, against the same loopback model server (a minimal
//! keep-alive HTTP/1.1 responder with a fixed chat completion), in batches;
//! the figure of a case is the median batch's mean. The overhead of a
//! brokered call is what is left after taking out the direct call and the
//! same run with the call refused (which keeps the instance, the node and
//! the capability call's own checks):
//!
//! | case | one iteration |
//! |---|---|
//! | `llm/direct` | `OpenAiClient::chat` to the loopback server |
//! | `llm/run_refused` | a run of `graph-llm` whose call is denied (no grant) |
//! | `llm/run_brokered` | a run of `graph-llm` whose call goes through the host to the server |
//! | `llm/run_no_network` | the same run, its model answering at once in process (the broker alone) |
//! | `tools/direct` | a run of `echo` |
//! | `tools/run_refused` | a run of `graph-tools` whose call is denied |
//! | `tools/run_brokered` | a run of `graph-tools` calling `echo_graph` as a sub-run |

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use sandgraph_factors::llm::{LlmAccess, LlmBackend, LlmGrant};
use sandgraph_factors::tools::{
    SubRun, ToolCallError, ToolDescription, ToolsAccess, ToolsBackend, ToolsGrant,
};
use sandgraph_llm::{ChatRequest, ClientConfig, Message, OpenAiClient, Provider};
use sandgraph_runtime::caps::Capabilities;
use sandgraph_runtime::{Graph, RunOptions, RunOutcome};
use sandgraph_tests::{load, runtime};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

/// Batches per case; the median batch is reported.
const BATCHES: usize = 7;
/// Time one batch should take, roughly.
const BATCH_TIME: Duration = Duration::from_millis(400);

const COMPLETION: &str = r#"{"id":"c","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;

/// A keep-alive HTTP/1.1 server answering every request with
/// [`COMPLETION`]; its base URL.
async fn model_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(async move {
                let (read, mut write) = tcp.into_split();
                let mut read = BufReader::new(read);
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        let line = line.trim_end();
                        if line.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0u8; length];
                    if read.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                         {}\r\n\r\n{COMPLETION}",
                        COMPLETION.len()
                    );
                    if write.write_all(response.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}/v1")
}

/// A model that answers at once, without a network: what the broker
/// costs on its own.
struct Instant0;

impl Provider for Instant0 {
    fn chat<'a>(
        &'a self,
        _: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<sandgraph_llm::ChatResponse, sandgraph_llm::LlmError>> {
        futures::future::ready(Ok(sandgraph_llm::ChatResponse {
            content: Some("ok".into()),
            finish_reason: Some("stop".into()),
            usage: Some(sandgraph_llm::Usage {
                prompt_tokens: 3,
                completion_tokens: 1,
            }),
            ..sandgraph_llm::ChatResponse::default()
        }))
        .boxed()
    }
}

/// Runs graphs held here as sub-runs of their caller.
struct Tools(Arc<Graph>);

impl ToolsBackend for Tools {
    fn describe(&self, name: &str) -> Option<ToolDescription> {
        Some(ToolDescription {
            name: name.to_owned(),
            description: None,
            parameters: json!({"type": "object"}),
        })
    }

    fn call(
        &self,
        _: &str,
        args: Value,
        caller: SubRun,
    ) -> BoxFuture<'static, Result<Value, ToolCallError>> {
        let graph = self.0.clone();
        async move {
            let opts = RunOptions {
                sub_run_of: Some(caller),
                ..RunOptions::default()
            };
            match runtime().run(&graph, args, opts).await {
                Ok(RunOutcome::Completed(state)) => Ok(Value::Object(state)),
                Ok(_) => Err(ToolCallError::Interrupted),
                Err(e) => Err(ToolCallError::Run(e)),
            }
        }
        .boxed()
    }
}

/// The median, over [`BATCHES`], of the mean time of one `f()`.
async fn measure<F, Fut>(mut f: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    // Warm up, and size the batches.
    let started = Instant::now();
    let mut warm = 0u32;
    while started.elapsed() < BATCH_TIME / 2 || warm < 20 {
        f().await;
        warm += 1;
    }
    let per = started.elapsed() / warm;
    let n =
        u32::try_from((BATCH_TIME.as_nanos() / per.as_nanos().max(1)).max(20)).unwrap_or(u32::MAX);
    let mut means = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let t = Instant::now();
        for _ in 0..n {
            f().await;
        }
        means.push(t.elapsed() / n);
    }
    means.sort();
    means[BATCHES / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    // SAFETY: first statement of `main`, before any thread exists.
    unsafe { std::env::remove_var("RUST_BACKTRACE") };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let base_url = model_server().await;
    let client: Arc<dyn Provider> = Arc::new(
        OpenAiClient::new(ClientConfig {
            base_url,
            model: "m".into(),
            api_key_env: "SANDGRAPH_BENCH_NO_KEY".into(),
            ..ClientConfig::default()
        })
        .unwrap(),
    );
    let request = ChatRequest {
        model: "m".into(),
        messages: vec![Message::system("Answer briefly."), Message::user("hello?")],
        ..ChatRequest::default()
    };
    let llm_graph = load(sandgraph_tests::GRAPH_LLM).await;
    let tools_graph = load(sandgraph_tests::GRAPH_TOOLS).await;
    let echo = load(sandgraph_tests::ECHO).await;
    let granted_llm = Capabilities::default().with(LlmAccess {
        grant: LlmGrant {
            models: vec!["fast".into()],
            max_calls: None,
            max_tokens: None,
        },
        backend: Some(LlmBackend {
            provider: client.clone(),
            models: [("fast".to_owned(), "m".to_owned())].into(),
            default_model: "m".into(),
        }),
    });
    let mut granted_instant = granted_llm.clone();
    if let Some(mut access) = granted_llm.get::<LlmAccess>().cloned()
        && let Some(backend) = &mut access.backend
    {
        backend.provider = Arc::new(Instant0);
        granted_instant.set(Some(access));
    }
    let granted_tools = Capabilities::default().with(ToolsAccess {
        grant: ToolsGrant {
            allow: vec!["echo_graph".into()],
            max_calls: None,
        },
        backend: Arc::new(Tools(echo.clone())),
    });
    let ask = json!({"question": "hello?", "model": "fast"});
    let call = json!({"tool": "echo_graph", "args": {"topic": "hi"}});
    let run = |graph: Arc<Graph>, input: Value, caps: Capabilities, expect: &'static str| {
        let (input, caps) = (input.clone(), caps.clone());
        async move {
            let opts = RunOptions {
                capabilities: caps,
                ..RunOptions::default()
            };
            match runtime().run(&graph, input, opts).await {
                Ok(RunOutcome::Completed(state)) => {
                    let got = serde_json::to_string(&state).unwrap();
                    assert!(got.contains(expect), "{got}");
                }
                other => panic!("{other:?}"),
            }
        }
    };

    let llm_direct = measure(|| {
        let (client, request) = (client.clone(), &request);
        async move {
            let r = client.chat(request).await.unwrap();
            assert_eq!(r.content.as_deref(), Some("ok"));
        }
    })
    .await;
    let llm_refused = measure(|| {
        run(
            llm_graph.clone(),
            ask.clone(),
            Capabilities::default(),
            "denied",
        )
    })
    .await;
    let llm_brokered = measure(|| {
        run(
            llm_graph.clone(),
            ask.clone(),
            granted_llm.clone(),
            "\"content\":\"ok\"",
        )
    })
    .await;
    let llm_no_network = measure(|| {
        run(
            llm_graph.clone(),
            ask.clone(),
            granted_instant.clone(),
            "\"content\":\"ok\"",
        )
    })
    .await;
    let tools_direct = measure(|| {
        run(
            echo.clone(),
            json!({"topic": "hi"}),
            Capabilities::default(),
            "seen:hi",
        )
    })
    .await;
    let tools_refused = measure(|| {
        run(
            tools_graph.clone(),
            call.clone(),
            Capabilities::default(),
            "denied",
        )
    })
    .await;
    let tools_brokered = measure(|| {
        run(
            tools_graph.clone(),
            call.clone(),
            granted_tools.clone(),
            "seen:hi",
        )
    })
    .await;

    println!("| case | µs per iteration |");
    println!("|---|---|");
    for (name, d) in [
        ("llm/direct", llm_direct),
        ("llm/run_refused", llm_refused),
        ("llm/run_brokered", llm_brokered),
        ("llm/run_no_network", llm_no_network),
        ("tools/direct", tools_direct),
        ("tools/run_refused", tools_refused),
        ("tools/run_brokered", tools_brokered),
    ] {
        println!("| {name} | {:.1} |", us(d));
    }
    let llm_overhead = us(llm_brokered) - us(llm_refused) - us(llm_direct);
    let tools_overhead = us(tools_brokered) - us(tools_refused) - us(tools_direct);
    println!();
    println!(
        "llm: brokering adds {llm_overhead:.1} µs to a direct call of {:.1} µs ({:.2}x the direct call)",
        us(llm_direct),
        (us(llm_direct) + llm_overhead) / us(llm_direct)
    );
    println!(
        "llm without the network: a brokered call answered at once adds {:.1} µs to the refused run",
        us(llm_no_network) - us(llm_refused)
    );
    println!(
        "tools: brokering adds {tools_overhead:.1} µs to a direct run of {:.1} µs ({:.2}x the direct run)",
        us(tools_direct),
        (us(tools_direct) + tools_overhead) / us(tools_direct)
    );
}
