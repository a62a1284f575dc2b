//! Headless Chromium driven through WebDriver, for the studio's browser
//! tests (host/cli/tests/all/studio.rs).
//!
//! The browser is Debian's `chromium` with its `chromium-driver`
//! (`/usr/bin/chromium`, `/usr/bin/chromedriver`), installed by `.ci/run`
//! or `.ci/services`, never by a test: without them [`ensure_installed`]
//! fails with one line saying what to install. One `chromedriver` per test binary listens on a free
//! `127.0.0.1` port and is shared by the tests that hold a [`Browser`] (an
//! `Arc`, stopped with the last one, like the PostgreSQL fixture); each
//! [`Browser`] is a session of its own: a headless Chromium with a fresh
//! profile in a temporary folder, through [fantoccini].
//!
//! The flags are the ones that work on a machine without a display or a
//! network: `--headless --no-sandbox --disable-gpu` (root, no GPU), and no
//! background traffic (`--disable-background-networking` and friends), which
//! a closed network would refuse and Chromium would retry.
//!
//! A [`Browser`] dropped while its test panics saves a screenshot (PNG) and
//! the DOM (HTML) of its current page under
//! `target/test-output/<group>/<test name>/<page>.png` and prints the paths;
//! `<page>` is the page's hash route (`#/graphs/greet_graph` is
//! `graphs-greet_graph`). That is done with blocking requests straight to
//! chromedriver, so it works whatever state the test's runtime is in.
//! [`Browser::wait_for`] and [`Browser::wait_for_text`] poll with a timeout
//! and fail saying what they waited for, on which page, and what they saw.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use base64::Engine as _;
use fantoccini::{Client, ClientBuilder};
/// The WebDriver element and locator types the helpers take and return.
pub use fantoccini::{Locator, elements::Element};
use serde_json::{Value, json};

/// Debian's Chromium.
pub const CHROMIUM: &str = "/usr/bin/chromium";
/// Debian's chromedriver (package `chromium-driver`).
pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long the waiting helpers wait by default; a safety net, not a
/// speed claim.
pub const WAIT: Duration = Duration::from_secs(30);
/// How long chromedriver may take to answer `GET /status`.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Ports tried: another process may take the free port between our probe
/// and chromedriver's bind.
const START_ATTEMPTS: usize = 3;
/// The Chromium flags of every session (see the module doc).
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
];
/// The window's size (width, height) in CSS pixels.
pub const WINDOW: (u32, u32) = (1280, 900);

/// Checks that [`CHROMIUM`] and [`CHROMEDRIVER`] exist. A test never
/// installs packages: `.ci/run` (and `.ci/services`, for developers)
/// installs Debian's `chromium` and `chromium-driver`; without them the
/// error is one line saying what to install.
pub fn ensure_installed() -> Result<(), String> {
    match [CHROMIUM, CHROMEDRIVER]
        .into_iter()
        .find(|bin| !Path::new(bin).is_file())
    {
        None => Ok(()),
        Some(bin) => Err(format!(
            "browser fixture: {bin} is missing: install Debian's chromium and chromium-driver \
             (`.ci/services` does)"
        )),
    }
}

/// A running chromedriver; killed on drop.
struct Driver {
    child: Mutex<Child>,
    port: u16,
}

impl Driver {
    /// The chromedriver of this test binary, started when no test holds one.
    fn shared() -> Result<Arc<Driver>, String> {
        static SHARED: Mutex<Weak<Driver>> = Mutex::new(Weak::new());
        let mut slot = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(driver) = slot.upgrade() {
            return Ok(driver);
        }
        ensure_installed()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match Driver::start() {
                Ok(driver) => {
                    let driver = Arc::new(driver);
                    *slot = Arc::downgrade(&driver);
                    return Ok(driver);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start() -> Result<Driver, String> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("browser fixture: no free port: {e}"))?
            .port();
        let mut child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("browser fixture: cannot start {CHROMEDRIVER}: {e}"))?;
        watch(child.id());
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok((200, body)) = http(port, "GET", "/status", None)
                && body["value"]["ready"] == true
            {
                return Ok(Driver {
                    child: Mutex::new(child),
                    port,
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                return Err(format!(
                    "browser fixture: chromedriver on port {port} exited ({status}): {}",
                    err.trim()
                ));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "browser fixture: chromedriver on port {port} not ready after {READY_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|e| e.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A test binary killed before its drops run (a timeout, a signal) would
/// leave chromedriver running: a small shell watches this process and the
/// driver, and ends the driver once this process is gone.
fn watch(driver: u32) {
    let owner = std::process::id();
    let script = "while kill -0 \"$1\" 2>/dev/null && kill -0 \"$2\" 2>/dev/null; do sleep 1; done; kill \"$2\" 2>/dev/null";
    let _ = Command::new("sh")
        .args([
            "-c",
            script,
            "watch",
            &owner.to_string(),
            &driver.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// A blocking HTTP/1.1 request to chromedriver on `port`: the status and
/// the JSON body. Used where no async runtime can be relied on (drops).
fn http(port: u16, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, Value), String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(20))))
        .map_err(|e| e.to_string())?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let (head, body) = read_response(&mut stream)?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a response without a status: {head:.200}"))?;
    let body = String::from_utf8_lossy(&body);
    let json = serde_json::from_str(&body).unwrap_or(Value::Null);
    Ok((status, json))
}

/// Reads one response: its head, then a body of its `Content-Length`
/// (chromedriver keeps the connection open after it, whatever the request
/// said), else up to the connection's end.
fn read_response(stream: &mut TcpStream) -> Result<(String, Vec<u8>), String> {
    let mut data = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before the response's head ended".to_owned());
        }
        data.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut body = data.split_off(head_end + 4);
    let length = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse::<usize>().ok())?
    });
    match length {
        Some(length) => {
            while body.len() < length {
                let n = stream.read(&mut chunk).map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(length);
        }
        None => {
            stream.read_to_end(&mut body).map_err(|e| e.to_string())?;
        }
    }
    Ok((head, body))
}

/// Where a test's files go: `target/test-output/<group>/<test>` (the
/// target folder is `CARGO_TARGET_DIR`, else the one holding the test
/// binary: `target/<profile>/deps/<binary>`).
pub fn output_dir(group: &str, test: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            let exe = std::env::current_exe().ok()?;
            Some(exe.parent()?.parent()?.parent()?.to_path_buf())
        })
        .unwrap_or_else(std::env::temp_dir);
    target
        .join("test-output")
        .join(group)
        .join(test.replace("::", "-"))
}

/// A headless Chromium session (see the module doc). Saves the current
/// page when dropped during a panic; ends its session on drop.
pub struct Browser {
    client: Client,
    session: String,
    output: PathBuf,
    driver: Arc<Driver>,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A new session whose failure screenshots go to
    /// `target/test-output/<group>/<test name>`, the test's name being the
    /// current thread's (libtest names it after the test). Panics saying
    /// why when Chromium is missing or cannot be started.
    pub async fn start(group: &str) -> Browser {
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("unnamed").to_owned();
        Browser::try_start(output_dir(group, &test))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Browser::start`] with its output folder given, as an error
    /// instead of a panic.
    pub async fn try_start(output: PathBuf) -> Result<Browser, String> {
        let driver = tokio::task::spawn_blocking(Driver::shared)
            .await
            .map_err(|e| format!("browser fixture: {e}"))??;
        let profile = tempfile::Builder::new()
            .prefix("sandgraph-chromium-")
            .tempdir()
            .map_err(|e| format!("browser fixture: a profile folder: {e}"))?;
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|f| f.to_string()).collect();
        args.push(format!("--window-size={},{}", WINDOW.0, WINDOW.1));
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(caps) = caps else {
            unreachable!("a JSON object literal")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .map_err(|e| format!("browser fixture: no chromium session: {e}"))?;
        let session = client
            .session_id()
            .await
            .map_err(|e| format!("browser fixture: {e}"))?
            .ok_or("browser fixture: chromedriver gave no session id")?;
        Ok(Browser {
            client,
            session,
            output,
            driver,
            _profile: profile,
        })
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where this browser's failure screenshots go.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// Opens `url`; panics saying which url failed.
    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|e| panic!("opening {url}: {e}"));
    }

    /// The current URL's fragment (`#/graphs`), or "" without one.
    pub async fn fragment(&self) -> String {
        match self.client.current_url().await {
            Ok(url) => url.fragment().map(|f| format!("#{f}")).unwrap_or_default(),
            Err(e) => format!("(no url: {e})"),
        }
    }

    /// The first element matching the CSS `selector` once there is one
    /// (waiting up to [`WAIT`]); panics naming the selector and the page.
    pub async fn wait_for(&self, selector: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(element) = self.client.find(Locator::Css(selector)).await {
                return element;
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {WAIT:?} for an element `{selector}` on page {}",
                    self.fragment().await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (up to [`WAIT`]) until no element matches `selector`.
    pub async fn wait_gone(&self, selector: &str) {
        let deadline = Instant::now() + WAIT;
        while self.count(selector).await > 0 {
            assert!(
                Instant::now() < deadline,
                "waited {WAIT:?} for `{selector}` to go on page {}",
                self.fragment().await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// How many elements match `selector` now.
    pub async fn count(&self, selector: &str) -> usize {
        self.client
            .find_all(Locator::Css(selector))
            .await
            .map(|all| all.len())
            .unwrap_or(0)
    }

    /// The text of the first element matching `selector` once it contains
    /// `needle` (waiting up to [`WAIT`]); panics with the last text seen.
    pub async fn wait_for_text(&self, selector: &str, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        let mut seen = None;
        loop {
            if let Ok(element) = self.client.find(Locator::Css(selector)).await
                && let Ok(text) = element.text().await
            {
                if text.contains(needle) {
                    return text;
                }
                seen = Some(text);
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {WAIT:?} for `{selector}` to contain {needle:?} on page {}; it {}",
                    self.fragment().await,
                    match seen {
                        Some(text) => format!("said {text:?}"),
                        None => "was not there".to_owned(),
                    }
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The text of the first element matching `selector` (waiting for it).
    pub async fn text(&self, selector: &str) -> String {
        let element = self.wait_for(selector).await;
        element
            .text()
            .await
            .unwrap_or_else(|e| panic!("reading the text of `{selector}`: {e}"))
    }

    /// The `textContent` of the first element matching `selector` (waiting
    /// for it): its text even where hidden (a closed `<details>`, an SVG
    /// `<title>`), unlike [`Browser::text`].
    pub async fn text_content(&self, selector: &str) -> String {
        self.property(selector, "textContent").await
    }

    /// The attribute `name` of the first element matching `selector`
    /// (waiting for it); "" when it has none.
    pub async fn attr(&self, selector: &str, name: &str) -> String {
        let element = self.wait_for(selector).await;
        element
            .attr(name)
            .await
            .unwrap_or_else(|e| panic!("reading {name} of `{selector}`: {e}"))
            .unwrap_or_default()
    }

    async fn property(&self, selector: &str, name: &str) -> String {
        let element = self.wait_for(selector).await;
        element
            .prop(name)
            .await
            .unwrap_or_else(|e| panic!("reading {name} of `{selector}`: {e}"))
            .unwrap_or_default()
    }

    /// Clicks the first element matching `selector` (waiting for it).
    pub async fn click(&self, selector: &str) {
        let element = self.wait_for(selector).await;
        element
            .click()
            .await
            .unwrap_or_else(|e| panic!("clicking `{selector}`: {e}"));
    }

    /// Clicks the button whose text is `label` inside the first element
    /// matching `scope` (waiting for both).
    pub async fn click_button(&self, scope: &str, label: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(scope_el) = self.client.find(Locator::Css(scope)).await
                && let Ok(buttons) = scope_el.find_all(Locator::Css("button")).await
            {
                for button in buttons {
                    if button.text().await.is_ok_and(|t| t.trim() == label) {
                        button
                            .click()
                            .await
                            .unwrap_or_else(|e| panic!("clicking {label:?} in `{scope}`: {e}"));
                        return;
                    }
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "waited {WAIT:?} for a button {label:?} in `{scope}` on page {}",
                    self.fragment().await
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Replaces the value of the input or textarea matching `selector`
    /// with `text` (typed, as a user would).
    pub async fn fill(&self, selector: &str, text: &str) {
        let element = self.wait_for(selector).await;
        element
            .clear()
            .await
            .unwrap_or_else(|e| panic!("clearing `{selector}`: {e}"));
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|e| panic!("typing into `{selector}`: {e}"));
    }

    /// Chooses the option whose value is `value` in the select `selector`.
    pub async fn select(&self, selector: &str, value: &str) {
        let element = self.wait_for(selector).await;
        element
            .select_by_value(value)
            .await
            .unwrap_or_else(|e| panic!("choosing {value:?} in `{selector}`: {e}"));
    }

    /// The console's errors since the last call: failed loads, uncaught
    /// exceptions, Content-Security-Policy refusals (chromedriver's log
    /// endpoint, `SEVERE` entries).
    pub async fn console_errors(&self) -> Vec<String> {
        let port = self.driver.port;
        let path = format!("/session/{}/se/log", self.session);
        let answer = tokio::task::spawn_blocking(move || {
            http(port, "POST", &path, Some(&json!({"type": "browser"})))
        })
        .await
        .unwrap_or_else(|e| panic!("reading the console: {e}"));
        let entries = match answer {
            Ok((200, v)) => v["value"].as_array().cloned().unwrap_or_default(),
            other => panic!("reading the console: {other:?}"),
        };
        entries
            .iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Saves a PNG screenshot of the page to `path` (folders made).
    pub async fn screenshot(&self, path: &Path) {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|e| panic!("taking a screenshot: {e}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// Saves a PNG of the whole page, up to `max_height` pixels tall, to
    /// `path`: the window grows to the page's height for the shot, then
    /// returns to its size.
    pub async fn full_page_screenshot(&self, path: &Path, max_height: u32) {
        let height = self
            .client
            .execute("return document.documentElement.scrollHeight", vec![])
            .await
            .ok()
            .and_then(|v| v.as_u64())
            .map_or(WINDOW.1, |h| (h as u32).clamp(WINDOW.1, max_height));
        let _ = self.client.set_window_size(WINDOW.0, height).await;
        let _ = self.client.execute("window.scrollTo(0, 0)", vec![]).await;
        // The layout settles before the shot.
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.screenshot(path).await;
        let _ = self.client.set_window_size(WINDOW.0, WINDOW.1).await;
    }

    /// Saves the current page's screenshot and DOM under the output folder
    /// (blocking requests to chromedriver) and prints their paths.
    fn save_failure(&self) {
        let port = self.driver.port;
        let base = format!("/session/{}", self.session);
        let page = match http(port, "GET", &format!("{base}/url"), None) {
            Ok((200, v)) => page_name(v["value"].as_str().unwrap_or("")),
            _ => "page".to_owned(),
        };
        if let Err(e) = std::fs::create_dir_all(&self.output) {
            eprintln!("browser fixture: creating {}: {e}", self.output.display());
            return;
        }
        match http(port, "GET", &format!("{base}/screenshot"), None) {
            Ok((200, v)) => {
                let png = base64::engine::general_purpose::STANDARD
                    .decode(v["value"].as_str().unwrap_or(""))
                    .unwrap_or_default();
                let path = self.output.join(format!("{page}.png"));
                match std::fs::write(&path, png) {
                    Ok(()) => eprintln!("browser fixture: screenshot at {}", path.display()),
                    Err(e) => eprintln!("browser fixture: writing {}: {e}", path.display()),
                }
            }
            other => eprintln!("browser fixture: no screenshot: {other:?}"),
        }
        let script = json!({"script": "return document.documentElement.outerHTML", "args": []});
        if let Ok((200, v)) = http(port, "POST", &format!("{base}/execute/sync"), Some(&script)) {
            let path = self.output.join(format!("{page}.html"));
            if std::fs::write(&path, v["value"].as_str().unwrap_or("")).is_ok() {
                eprintln!("browser fixture: page source at {}", path.display());
            }
        }
    }
}

/// A file name for the page at `url`: its hash route with `/` as `-`
/// (`http://h/#/graphs/a` is `graphs-a`), `index` without one.
fn page_name(url: &str) -> String {
    let route = url
        .split_once('#')
        .map(|(_, f)| f.trim_start_matches('/'))
        .unwrap_or("");
    let name: String = route
        .chars()
        .take(80)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    if name.is_empty() {
        "index".to_owned()
    } else {
        name
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.save_failure();
        }
        // Ends Chromium now: fantoccini's own close would need the test's
        // runtime, which may be shutting down.
        let _ = http(
            self.driver.port,
            "DELETE",
            &format!("/session/{}", self.session),
            None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_names_come_from_the_hash_route() {
        assert_eq!(page_name("http://127.0.0.1:1/#/graphs"), "graphs");
        assert_eq!(
            page_name("http://127.0.0.1:1/#/threads/approval_graph/t1"),
            "threads-approval_graph-t1"
        );
        assert_eq!(page_name("http://127.0.0.1:1/"), "index");
        assert_eq!(page_name("http://h/#/x/../../etc"), "x-------etc");
    }

    #[test]
    fn output_dirs_are_under_test_output() {
        let dir = output_dir("studio", "studio::runs_greet");
        assert!(
            dir.ends_with("test-output/studio/studio-runs_greet"),
            "{dir:?}"
        );
    }
}
