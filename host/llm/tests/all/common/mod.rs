//! Shared helpers: the test key's environment variables and configs that
//! point at a scripted server.

#![allow(dead_code)] // `all` and `logging` each use a different subset

use std::sync::Once;
use std::time::Duration;

use sandgraph_llm::{ClientConfig, OpenAiClient};
use sandgraph_test_llm::ScriptedLlm;

/// Holds [`KEY`] once [`setup`] ran.
pub const KEY_VAR: &str = "SANDGRAPH_TEST_KEY_LLM_7F3A9";
/// The key the tests send; long and unusual so a leak is unambiguous.
pub const KEY: &str = "sk-sandgraph-test-Zq81xKv0-4f6c2b9e";
/// Never set: a client configured with it has no key.
pub const UNSET_VAR: &str = "SANDGRAPH_TEST_KEY_UNSET_C41D2";

/// Sets the test variables. Every test that builds a client calls this
/// first, so no thread reads the environment while it is written.
pub fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: runs once, before any client exists in this process: every
        // test calls `setup` before doing anything else, and the others
        // wait on the `Once` meanwhile.
        unsafe {
            std::env::set_var(KEY_VAR, KEY);
            std::env::remove_var(UNSET_VAR);
        }
    });
}

/// A config for `llm` with the test key, fast backoff and short timeouts.
pub fn config(llm: &ScriptedLlm) -> ClientConfig {
    setup();
    ClientConfig {
        base_url: llm.base_url(),
        model: "test-model".to_owned(),
        api_key_env: KEY_VAR.to_owned(),
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(5),
        max_retries: 2,
        backoff: Duration::from_millis(10),
        ..ClientConfig::default()
    }
}

/// A client for `llm` built from [`config`].
pub fn client(llm: &ScriptedLlm) -> OpenAiClient {
    OpenAiClient::new(config(llm)).expect("the test config is valid")
}

/// A request with one user message.
pub fn ask(text: &str) -> sandgraph_llm::ChatRequest {
    sandgraph_llm::ChatRequest {
        messages: vec![sandgraph_llm::Message::user(text)],
        ..sandgraph_llm::ChatRequest::default()
    }
}
