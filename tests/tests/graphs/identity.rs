//! The name squatter (`hostile-name-squat`, a graph calling itself
//! `graph_llm`) against a registry granting `graph_llm` the operator's
//! model, with a real client and the loopback scripted model: next to the
//! real `graph_llm.wasm` both are refused; alone, under a file name the
//! operator did not give `graph_llm`, it is refused too, and the model never
//! hears from it.

use std::sync::Arc;

use sandgraph_core::Start;
use sandgraph_factors::llm::LlmBackend;
use sandgraph_registry::{CallOptions, MountErrorKind, OperatorConfig, Registry, RegistryOptions};
use sandgraph_test_llm::{Reply, ScriptedLlm};
use serde_json::json;

const GRANT: &str = "[llm.models]\nfast = \"deepseek-chat\"\n\
                     [graphs.graph_llm.grants]\nllm = { models = [\"fast\"] }\n";

async fn open(dir: &std::path::Path, server: &ScriptedLlm) -> (Registry, Vec<MountErrorKind>) {
    let config = OperatorConfig::parse(GRANT, std::path::Path::new("sandgraph.toml")).unwrap();
    let client = sandgraph_llm::OpenAiClient::new(sandgraph_llm::ClientConfig {
        base_url: server.base_url(),
        model: "default-model".into(),
        api_key_env: "SANDGRAPH_TEST_SQUAT_NO_KEY".into(),
        max_retries: 0,
        ..Default::default()
    })
    .unwrap();
    let options = RegistryOptions {
        dirs: vec![dir.to_path_buf()],
        llm: Some(LlmBackend {
            provider: Arc::new(client),
            models: config.llm_models.clone(),
            default_model: "default-model".into(),
        }),
        config,
        log_warnings: false,
        cache: Some(sandgraph_tests::compile_cache()),
        ..RegistryOptions::default()
    };
    let (registry, report) = Registry::open(sandgraph_tests::runtime().clone(), options)
        .await
        .unwrap();
    (registry, report.warnings.iter().map(|w| w.kind).collect())
}

#[tokio::test]
pub async fn hostile_name_squat() {
    let server = ScriptedLlm::start([Reply::text("the operator's key at work")]).await;
    let dir = sandgraph_tests::graph_folder(&[
        ("aaa.wasm", sandgraph_tests::HOSTILE_NAME_SQUAT),
        ("graph_llm.wasm", sandgraph_tests::GRAPH_LLM),
    ]);
    // Two files claim graph_llm: neither is mounted.
    let (registry, refused) = open(dir.path(), &server).await;
    assert!(registry.get("graph_llm").is_none());
    assert_eq!(
        refused,
        [MountErrorKind::Duplicate, MountErrorKind::Duplicate]
    );
    // Alone, from a file of another name: refused as well.
    std::fs::remove_file(dir.path().join("graph_llm.wasm")).unwrap();
    let (registry, refused) = open(dir.path(), &server).await;
    assert!(registry.get("graph_llm").is_none());
    assert_eq!(refused, [MountErrorKind::Unbound]);
    assert!(server.requests().is_empty());
    // The operator's graph under its own name is mounted and served.
    std::fs::remove_file(dir.path().join("aaa.wasm")).unwrap();
    std::fs::copy(
        sandgraph_tests::GRAPH_LLM,
        dir.path().join("graph_llm.wasm"),
    )
    .unwrap();
    let (registry, refused) = open(dir.path(), &server).await;
    assert!(refused.is_empty(), "{refused:?}");
    let state = registry
        .get("graph_llm")
        .unwrap()
        .run(
            Start::Input(json!({"input": {}})),
            CallOptions::default(),
            &mut |_| {},
        )
        .await
        .unwrap()
        .value;
    assert_eq!(
        state["answers"][0]["content"],
        json!("the operator's key at work"),
        "{state}"
    );
}
