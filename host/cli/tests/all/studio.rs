//! The studio in a real browser: `sandgraph serve --http` (the real binary)
//! with a data store, a controller and a token, and headless Chromium
//! driven through WebDriver (`sandgraph_tests::browser`): the graphs page,
//! a run of `greet_graph` through the generated form, a run of `approval`
//! on a thread answered from the thread page, a fork from an earlier
//! checkpoint, a state update, Cancel of a graph that spins, an agent
//! graph's page refreshing, and a wrong token that gets no data. The tests
//! share one chromedriver; each has its own Chromium session and server. A
//! failing test leaves a screenshot and the DOM of its page under
//! `target/test-output/studio/<test>/`.
//!
//! With `SANDGRAPH_STUDIO_SCREENSHOTS=1` the tests also save the README's
//! screenshots to `host/studio/screenshots/`: the graphs (`graphs.png`),
//! greet after a run (`graph-run.png`), approval stopped at its interrupt
//! (`graph-interrupted.png`), its thread waiting for the answer, with its
//! history (`thread.png`), and an agent graph (`agent-graph.png`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use sandgraph_tests::browser::Browser;
use tokio::process::Child;

use crate::common::Env;

/// Safety net for the server's start; never a speed claim.
const SOON: Duration = Duration::from_secs(60);
/// The token the test servers require.
const TOKEN: &str = "studio-browser-token";
/// The failure output's group: `target/test-output/studio/<test>`.
const GROUP: &str = "studio";
/// WebDriver's Enter key.
const ENTER: &str = "\u{E007}";

/// A `sandgraph serve --http` with a data store, a controller and
/// [`TOKEN`]; killed on drop (its log is printed when a test fails).
struct Server {
    _env: Env,
    _child: Child,
    /// `http://127.0.0.1:<port>`, no trailing slash.
    base: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    /// The server over greet and approval.
    async fn start() -> Server {
        Server::start_with(&[
            ("greet_graph.wasm", sandgraph_tests::GREET),
            ("approval_graph.wasm", sandgraph_tests::APPROVAL),
        ])
        .await
    }

    /// The server over `graphs`, (file name, component) pairs.
    async fn start_with(graphs: &[(&str, &str)]) -> Server {
        let env = Env::new(graphs)
            .with_var("SANDGRAPH_TEST_TOKEN", TOKEN)
            .with_log("info");
        let db = env.db();
        // The browser's caller is a studio operator: approval and spin are
        // not offered to MCP (their `as_tool` is false).
        env.write(
            "sandgraph.toml",
            "[studio]\noperators = [\"principal:token\"]\n",
        );
        let mut child = env
            .serve(&[
                "--http",
                "127.0.0.1:0",
                "--token-env",
                "SANDGRAPH_TEST_TOKEN",
                "--config",
                "sandgraph.toml",
            ])
            .arg("--store")
            .arg(&db)
            .arg("--controller")
            .env_remove("SANDGRAPH_STORE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sandgraph serve starts");
        let (stderr, url) =
            crate::common::announce::announced(&mut child, "sandgraph: studio at ", SOON).await;
        let base = url.trim_end_matches('/').to_owned();
        Server {
            _env: env,
            _child: child,
            base,
            stderr,
        }
    }

    /// The studio's page at `route` (e.g. `#/graphs`).
    fn page(&self, route: &str) -> String {
        format!("{}/{route}", self.base)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("server log: {:#?}", self.stderr.lock().unwrap());
        }
    }
}

/// Saves a README screenshot `host/studio/screenshots/<name>.png` of the
/// whole page when `SANDGRAPH_STUDIO_SCREENSHOTS=1`.
async fn readme_screenshot(browser: &Browser, name: &str) {
    if std::env::var("SANDGRAPH_STUDIO_SCREENSHOTS").as_deref() != Ok("1") {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../studio/screenshots");
    let path = dir.join(format!("{name}.png"));
    browser.full_page_screenshot(&path, 1800).await;
    eprintln!("readme screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_studio_runs_graphs_answers_an_interrupt_and_forks_in_a_browser() {
    let server = Server::start().await;
    let browser = Browser::start(GROUP).await;

    graphs_are_listed(&server, &browser).await;
    greet_runs_through_the_form(&browser).await;
    let thread = approval_is_answered_from_the_thread_page(&server, &browser).await;
    a_fork_from_an_earlier_checkpoint_becomes_the_head(&browser).await;
    the_state_is_updated_from_the_form(&browser).await;
    the_thread_is_listed(&browser, &thread).await;
    journal_and_agent_graphs_pages_render(&browser).await;
    // Nothing was refused by the CSP, failed to load or threw.
    assert_eq!(browser.console_errors().await, Vec::<String>::new());
}

/// The page takes the token from the fragment, drops it from the address
/// bar and lists the mounted graphs.
async fn graphs_are_listed(server: &Server, browser: &Browser) {
    browser.goto(&server.page(&format!("#token={TOKEN}"))).await;
    browser.wait_for("[data-graph='greet_graph']").await;
    browser.wait_for("[data-graph='approval_graph']").await;
    let url = browser.client().current_url().await.unwrap();
    assert!(
        !url.as_str().contains(TOKEN),
        "the token stays in the address bar: {url}"
    );
    assert_eq!(browser.fragment().await, "#/graphs");
    let nav = browser.text("nav[aria-label='Studio']").await;
    for link in ["Graphs", "Threads", "Journal", "Agent graphs"] {
        assert!(nav.contains(link), "the navigation lacks {link}: {nav:?}");
    }
    readme_screenshot(browser, "graphs").await;
}

/// greet's page describes and draws it; its form, submitted with Enter,
/// streams the step onto the drawing and shows the final state, and an
/// input greet's check refuses shows the typed error.
async fn greet_runs_through_the_form(browser: &Browser) {
    browser.click("[data-graph='greet_graph'] a").await;
    let svg = "svg[role='img'][aria-label='graph greet_graph']";
    browser
        .wait_for(&format!("{svg} g[data-node='greet']"))
        .await;
    browser
        .wait_for_text("main", "Greet someone, formally or casually.")
        .await;
    let schema = browser.text("section[aria-label='Parameters'] table").await;
    assert!(
        schema.contains("one of formal, casual") && schema.contains("The name to greet."),
        "the parameters table: {schema:?}"
    );
    browser.select("#param-style", "formal").await;
    browser.fill("#param-times", "2").await;
    browser.fill("#param-name", &format!("Ada{ENTER}")).await;
    let result = browser
        .wait_for_text("#result", "Good day, Ada. Good day, Ada.")
        .await;
    assert!(result.contains("\"greeting\""), "{result}");
    let steps = browser.text("#steps").await;
    assert!(steps.contains("greet"), "the step log: {steps:?}");
    browser
        .wait_for(&format!("{svg} g[data-node='greet'].done"))
        .await;
    let title = browser
        .text_content(&format!("{svg} g[data-node='greet'] > title"))
        .await;
    assert!(
        title.contains("Builds the greeting.") && title.contains("done"),
        "the node's title: {title:?}"
    );
    readme_screenshot(browser, "graph-run").await;

    browser.fill("#param-times", "11").await;
    browser
        .click_button("form[aria-label='run greet_graph']", "Run")
        .await;
    browser
        .wait_for_text("#run-error", "times must be at most 10")
        .await;
    assert_eq!(browser.count("#result").await, 0);
}

/// approval on a thread stops at its interrupt; the thread page shows the
/// payload, takes the answer and shows the published state. Returns the
/// thread's name.
async fn approval_is_answered_from_the_thread_page(server: &Server, browser: &Browser) -> String {
    let thread = "browser-t1".to_owned();
    browser.goto(&server.page("#/graphs/approval_graph")).await;
    browser
        .wait_for("form[aria-label='run approval_graph'] #param-input")
        .await;
    browser.fill("#param-input", r#"{"topic": "wasm"}"#).await;
    browser.fill("#run-thread", &thread).await;
    browser
        .click_button("form[aria-label='run approval_graph']", "Run")
        .await;
    browser.wait_for_text("#run-interrupted", &thread).await;
    browser.wait_for("svg g[data-node='review'].running").await;
    readme_screenshot(browser, "graph-interrupted").await;
    browser
        .click("#run-interrupted a[href*='#/threads/']")
        .await;
    let payload = browser
        .wait_for_text("#interrupt", "publish this draft?")
        .await;
    assert!(payload.contains("A short note about wasm."), "{payload}");
    readme_screenshot(browser, "thread").await;
    browser.fill("#resume-value", "\"yes\"").await;
    browser
        .click_button("form[aria-label='resume']", "Resume")
        .await;
    browser
        .wait_for_text("#thread-state", "\"published\": true")
        .await;
    browser.wait_gone("#interrupt").await;
    thread
}

/// Forking the checkpoint before the head makes a head with that
/// checkpoint's state: the approval is undone.
async fn a_fork_from_an_earlier_checkpoint_becomes_the_head(browser: &Browser) {
    let old_head = browser.text("#thread-head").await;
    let earlier = "#history > li:nth-child(2)";
    let id = browser.attr(earlier, "data-checkpoint").await;
    let state = browser
        .text_content(&format!("{earlier} details pre"))
        .await;
    assert!(!state.contains("\"published\": true"), "{state}");
    browser.click_button(earlier, "Fork").await;
    browser
        .wait_for_text("#notice", &format!("Forked from {id}"))
        .await;
    let head = browser.text("#thread-head").await;
    assert_ne!(head, old_head, "the head did not move");
    let new_id = browser.attr("#history > li.head", "data-checkpoint").await;
    let parent = browser.attr("#history > li.head", "data-parent").await;
    assert!(
        head.contains(&new_id) && (new_id == id || parent == id),
        "the head {head:?} ({new_id}, parent {parent}) is not the fork of {id}"
    );
    let now = browser.text_content("#thread-state").await;
    assert_eq!(now, state, "the forked head's state is the checkpoint's");
}

/// The Update state form writes values as a new head.
async fn the_state_is_updated_from_the_form(browser: &Browser) {
    let head = browser.text("#thread-head").await;
    browser
        .fill("#update-values", r#"{"topic": "components"}"#)
        .await;
    browser
        .click_button("form[aria-label='update state']", "Update")
        .await;
    browser.wait_for_text("#notice", "Updated").await;
    browser
        .wait_for_text("#thread-state", "\"topic\": \"components\"")
        .await;
    assert_ne!(browser.text("#thread-head").await, head);
}

async fn the_thread_is_listed(browser: &Browser, thread: &str) {
    browser
        .click("nav[aria-label='Studio'] a[href='#/threads']")
        .await;
    let row = format!("a[data-thread='{thread}']");
    browser.wait_for(&row).await;
    let table = browser.text("main table").await;
    assert!(table.contains("approval_graph"), "{table}");
}

async fn journal_and_agent_graphs_pages_render(browser: &Browser) {
    browser
        .click("nav[aria-label='Studio'] a[href='#/journal']")
        .await;
    browser.wait_for_text("main h1", "Journal").await;
    browser
        .click("nav[aria-label='Studio'] a[href='#/agent-graphs']")
        .await;
    browser.wait_for_text("main h1", "Agent graphs").await;
    browser.wait_for("#agent-graphs").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_the_unauthorized_alert_and_no_data() {
    let server = Server::start().await;
    let browser = Browser::start(GROUP).await;
    browser.goto(&server.page("#token=not-the-token")).await;
    let alert = browser
        .wait_for_text("[role='alert']", "unauthorized")
        .await;
    assert!(alert.starts_with("unauthorized: "), "{alert:?}");
    assert_eq!(browser.count("[data-graph]").await, 0);
    let page = browser.client().source().await.unwrap();
    assert!(
        !page.contains("greet_graph") && !page.contains("approval_graph"),
        "graph names reached a page without the token"
    );
    // The labelled token form connects with the right one.
    browser.fill("#token", &format!("{TOKEN}{ENTER}")).await;
    browser.wait_for("[data-graph='greet_graph']").await;
    assert_eq!(browser.count("[role='alert']").await, 0);
}

/// Cancel stops a graph that would spin until it runs out of fuel: the
/// run ends with the `cancelled` error and the buttons are back to Run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_graph() {
    let server = Server::start_with(&[(
        "hostile_infinite_loop.wasm",
        sandgraph_tests::HOSTILE_INFINITE_LOOP,
    )])
    .await;
    let browser = Browser::start(GROUP).await;
    let form = "form[aria-label='run hostile_infinite_loop']";
    browser
        .goto(&server.page(&format!("#token={TOKEN}&/graphs/hostile_infinite_loop")))
        .await;
    browser.wait_for(form).await;
    browser.click_button(form, "Run").await;
    browser.wait_for_text("#run-status", "Running").await;
    browser.click_button(form, "Cancel").await;
    let error = browser.wait_for_text("#run-error", "cancelled").await;
    assert!(error.starts_with("cancelled: "), "{error:?}");
    browser
        .wait_for(&format!("{form} button[type='submit']:enabled"))
        .await;
    browser
        .wait_for(&format!("{form} button[type='button']:disabled"))
        .await;
}

/// An agent graph the token's MCP client made is listed; its page shows
/// its work and takes in new work on its own (it refreshes every 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_graph_page_shows_work_and_refreshes() {
    let server = Server::start_with(&[("greet_graph.wasm", sandgraph_tests::GREET)]).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", server.base))
            .auth_header(TOKEN),
    );
    let client = ().serve(transport).await.expect("an MCP session");
    let add_work = |work: &str, instruction: &str| {
        let mut call = CallToolRequestParams::new("update_agent_graph");
        call.arguments = serde_json::json!({
            "graphId": "g-studio",
            "operation": "add_work",
            "addWork": [{"workId": work, "subagentId": "preset-a", "instruction": instruction}],
            "idempotencyKey": work,
        })
        .as_object()
        .cloned();
        call
    };
    let r = client
        .call_tool(add_work("w1", "Port the tools"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");

    let browser = Browser::start(GROUP).await;
    browser
        .goto(&server.page(&format!("#token={TOKEN}&/agent-graphs")))
        .await;
    browser.click("a[data-agent-graph='g-studio']").await;
    let work = browser
        .wait_for_text("#agent-graph", "Port the tools")
        .await;
    assert!(work.contains("w1"), "{work}");

    let r = client
        .call_tool(add_work("w2", "Write the docs"))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    browser
        .wait_for_text("#agent-graph", "Write the docs")
        .await;
    assert_eq!(browser.fragment().await, "#/agent-graphs/g-studio");
    readme_screenshot(&browser, "agent-graph").await;
    client.cancel().await.unwrap();
}
