//! Tests of `sandgraph push` and `sandgraph pull` (see ../toolkit.rs)
//! against a real CNCF distribution registry on loopback
//! (`sandgraph_tests::oci_registry`). Where the registry cannot start, each
//! test fails saying why.

use std::path::{Path, PathBuf};

use sandgraph_tests::oci_registry::{Auth, OciRegistry};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::common::Env;

/// A working folder with an empty docker config of its own (never the
/// user's, `DOCKER_CONFIG`), and its own compile cache.
fn folder() -> Env {
    let env = Env::bare();
    let docker = env.path("docker");
    std::fs::create_dir(&docker).unwrap();
    env.with_var("DOCKER_CONFIG", docker)
}

/// Copies the echo graph into `env` as `name`.
fn echo(env: &Env, name: &str) -> PathBuf {
    let path = env.path(name);
    std::fs::copy(sandgraph_tests::ECHO, &path).unwrap();
    path
}

/// Writes `$DOCKER_CONFIG/config.json` in `env` with basic credentials
/// for `registry`.
fn login(env: &Env, registry: &str, user: &str, password: &str) {
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = json!({"auths": {registry: {"auth": auth}}});
    std::fs::write(env.path("docker/config.json"), config.to_string()).unwrap();
}

/// Runs `args` in `env`, which must succeed; returns stdout.
fn ok(env: &Env, args: &[&str]) -> String {
    let out = env.run(args);
    assert!(
        out.status.success(),
        "sandgraph {args:?} failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `args` in `env`, which must fail with `exit`; returns stderr.
fn fails(env: &Env, args: &[&str], exit: i32) -> String {
    let out = env.run(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(exit), "sandgraph {args:?}: {err}");
    err
}

/// The exit code of a registry failure (host/cli/src/exit.rs `REGISTRY`).
const REGISTRY_EXIT: i32 = 22;

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

fn echo_bytes() -> Vec<u8> {
    std::fs::read(sandgraph_tests::ECHO).unwrap()
}

/// Pushes the echo graph to `repo:tag` and returns the pinned reference
/// `push` printed.
fn push_echo(env: &Env, reg: &OciRegistry, repo_tag: &str) -> String {
    let graph = echo(env, "echo.wasm");
    let reference = format!("{}/{repo_tag}", reg.addr());
    let out = ok(env, &["push", graph.to_str().unwrap(), &reference]);
    let pinned = out.trim().to_string();
    let (named, digest) = pinned.split_once('@').expect("push prints REF@DIGEST");
    assert_eq!(named, reference);
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{pinned}"
    );
    pinned
}

/// The raw manifest the registry holds for `repo/reference`.
async fn manifest(reg: &OciRegistry, repo: &str, reference: &str) -> (Vec<u8>, Value) {
    let url = format!("http://{}/v2/{repo}/manifests/{reference}", reg.addr());
    let res = reqwest::Client::new()
        .get(url)
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap();
    assert!(res.status().is_success(), "{}", res.status());
    let bytes = res.bytes().await.unwrap().to_vec();
    let value = serde_json::from_slice(&bytes).unwrap();
    (bytes, value)
}

/// Uploads `bytes` as a blob of `repo` by hand (monolithic upload).
async fn put_blob(reg: &OciRegistry, repo: &str, bytes: &[u8]) -> String {
    let http = reqwest::Client::new();
    let res = http
        .post(format!("http://{}/v2/{repo}/blobs/uploads/", reg.addr()))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    let location = res.headers()["location"].to_str().unwrap().to_string();
    let location = if location.starts_with('/') {
        format!("http://{}{location}", reg.addr())
    } else {
        location
    };
    let digest = sha256(bytes);
    let sep = if location.contains('?') { '&' } else { '?' };
    let res = http
        .put(format!("{location}{sep}digest={digest}"))
        .header("Content-Type", "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    digest
}

/// Stores `manifest` at `repo:tag` by hand.
async fn put_manifest(reg: &OciRegistry, repo: &str, tag: &str, manifest: &Value) {
    let res = reqwest::Client::new()
        .put(format!("http://{}/v2/{repo}/manifests/{tag}", reg.addr()))
        .header("Content-Type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
}

/// Flips one byte of the file, keeping its length.
fn damage(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

#[tokio::test]
async fn push_then_pull_gives_the_same_bytes_in_the_wasm_layout() {
    let reg = OciRegistry::start(Auth::Open);
    let env = folder().cold();
    let pinned = push_echo(&env, &reg, "graphs/echo:1.0");
    let digest = pinned.split_once('@').unwrap().1;
    // The load check went through the shared compile cache.
    assert!(env.path("cache/key").exists());

    // The manifest is the CNCF wasm layout, and its digest is the one printed.
    let (bytes, m) = manifest(&reg, "graphs/echo", "1.0").await;
    assert_eq!(sha256(&bytes), digest);
    assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    let layers = m["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], "application/wasm");
    assert_eq!(layers[0]["digest"], sha256(&echo_bytes()).as_str());
    assert_eq!(layers[0]["size"], echo_bytes().len());
    let config_digest = m["config"]["digest"].as_str().unwrap();
    let config: Value =
        serde_json::from_slice(&std::fs::read(reg.blob_data(config_digest)).unwrap()).unwrap();
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"], json!([sha256(&echo_bytes())]));
    assert!(config["created"].as_str().unwrap().ends_with('Z'));
    let exports = config["component"]["exports"].as_array().unwrap();
    assert!(
        exports
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("sandgraph:graph/graph@")),
        "{config}"
    );

    // Pull into a file.
    let reference = format!("{}/graphs/echo:1.0", reg.addr());
    let out = ok(&env, &["pull", &reference, "--out", "copy.wasm"]);
    assert_eq!(out.trim(), "copy.wasm");
    assert_eq!(std::fs::read(env.path("copy.wasm")).unwrap(), echo_bytes());
    assert!(!env.path("copy.wasm.sig").exists());

    // Pull into a folder: named after the repository.
    std::fs::create_dir(env.path("graphs")).unwrap();
    ok(&env, &["pull", &reference, "--out", "graphs"]);
    assert_eq!(
        std::fs::read(env.path("graphs/echo.wasm")).unwrap(),
        echo_bytes()
    );
    // A folder that does not exist yet, written with a trailing slash.
    ok(&env, &["pull", &reference, "--out", "fresh/"]);
    assert_eq!(
        std::fs::read(env.path("fresh/echo.wasm")).unwrap(),
        echo_bytes()
    );
    // Nothing but the component is left in the folder (no temp files).
    let names: Vec<_> = std::fs::read_dir(env.path("graphs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["echo.wasm"]);

    // Pull by digest.
    ok(&env, &["pull", &pinned, "--out", "pinned.wasm"]);
    assert_eq!(
        std::fs::read(env.path("pinned.wasm")).unwrap(),
        echo_bytes()
    );

    // A digest the registry does not have, and a tag it does not have.
    let zeros = format!("{}/graphs/echo@sha256:{}", reg.addr(), "0".repeat(64));
    let err = fails(&env, &["pull", &zeros, "--out", "none.wasm"], REGISTRY_EXIT);
    assert!(err.contains("error[not_found]"), "{err}");
    let err = fails(
        &env,
        &["pull", &format!("{}/graphs/echo:9.9", reg.addr())],
        REGISTRY_EXIT,
    );
    assert!(
        err.contains("error[not_found]") && err.contains("echo:9.9"),
        "{err}"
    );
    assert!(!env.path("none.wasm").exists());
}

#[tokio::test]
async fn a_tampered_blob_or_manifest_is_refused_and_nothing_is_written() {
    let reg = OciRegistry::start(Auth::Open);
    let env = folder();
    let pinned = push_echo(&env, &reg, "graphs/echo:1.0");
    let manifest_digest = pinned.split_once('@').unwrap().1.to_string();
    let reference = format!("{}/graphs/echo:1.0", reg.addr());
    // What was there before a failed pull stays as it was.
    std::fs::write(env.path("out.wasm"), b"before").unwrap();

    // The component's bytes damaged in the registry's storage.
    let layer = reg.blob_data(&sha256(&echo_bytes()));
    damage(&layer, 1000);
    let err = fails(
        &env,
        &["pull", &reference, "--out", "out.wasm"],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[digest_mismatch]"), "{err}");
    assert!(
        err.contains("component blob") && err.contains("tampered"),
        "{err}"
    );
    assert_eq!(std::fs::read(env.path("out.wasm")).unwrap(), b"before");
    damage(&layer, 1000);
    ok(&env, &["pull", &reference, "--out", "out.wasm"]);
    assert_eq!(std::fs::read(env.path("out.wasm")).unwrap(), echo_bytes());

    // The manifest damaged: by tag the registry's digest header and the
    // bytes disagree; by digest the bytes are not the pinned ones.
    let stored = reg.blob_data(&manifest_digest);
    let text = std::fs::read_to_string(&stored).unwrap();
    std::fs::write(&stored, text.replace("\"echo", "\"acho")).unwrap();
    let err = fails(
        &env,
        &["pull", &reference, "--out", "m.wasm"],
        REGISTRY_EXIT,
    );
    assert!(
        err.contains("error[digest_mismatch]") && err.contains("hashes to"),
        "{err}"
    );
    let err = fails(&env, &["pull", &pinned, "--out", "m.wasm"], REGISTRY_EXIT);
    assert!(
        err.contains("error[digest_mismatch]") && err.contains("pinned"),
        "{err}"
    );
    assert!(!env.path("m.wasm").exists());
}

#[tokio::test]
async fn a_manifest_that_is_not_the_wasm_layout_is_refused() {
    let reg = OciRegistry::start(Auth::Open);
    let env = folder();
    let echo = echo_bytes();
    let layer = put_blob(&reg, "other/app", &echo).await;
    let descriptor = |media: &str, digest: &str, size: usize| json!({"mediaType": media, "digest": digest, "size": size});
    let wasm_config = |digests: Value| {
        json!({"created": "2026-01-01T00:00:00Z", "architecture": "wasm", "os": "wasip2",
               "layerDigests": digests})
        .to_string()
    };

    // A container image: another config type, a tar layer.
    let image_config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let c = put_blob(&reg, "other/app", image_config).await;
    put_manifest(&reg, "other/app", "image", &json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &c, image_config.len()),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer, echo.len())],
    }))
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:image", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[not_a_wasm_artifact]"), "{err}");
    assert!(
        err.contains("config media type") && err.contains("sandgraph push"),
        "{err}"
    );

    // The wasm config, but the layer declared as something else.
    let config = wasm_config(json!([layer]));
    let c = put_blob(&reg, "other/app", config.as_bytes()).await;
    put_manifest(
        &reg,
        "other/app",
        "tar",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/octet-stream", &layer, echo.len())],
        }),
    )
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:tar", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(err.contains("application/octet-stream"), "{err}");

    // The layout, but the config names another layer than the manifest's.
    let config = wasm_config(json!([sha256(b"another component")]));
    let c = put_blob(&reg, "other/app", config.as_bytes()).await;
    put_manifest(
        &reg,
        "other/app",
        "mismatch",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/wasm", &layer, echo.len())],
        }),
    )
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:mismatch", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(err.contains("layerDigests"), "{err}");

    // The layout, but a layer size that is not the blob's.
    let config = wasm_config(json!([layer]));
    let c = put_blob(&reg, "other/app", config.as_bytes()).await;
    put_manifest(
        &reg,
        "other/app",
        "size",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/wasm", &layer, echo.len() - 1)],
        }),
    )
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:size", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(
        err.contains("error[digest_mismatch]") && err.contains("bytes"),
        "{err}"
    );
    assert!(!env.path("x.wasm").exists());

    // A layer declared larger than a component may be: refused from the
    // manifest, before a byte of it is fetched.
    put_manifest(
        &reg,
        "other/app",
        "huge",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/wasm", &layer, 1 << 30)],
        }),
    )
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:huge", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(
        err.contains("error[too_large]") && err.contains("1073741824"),
        "{err}"
    );

    // A manifest larger than MAX_MANIFEST_BYTES (256 KiB) is not read whole.
    put_manifest(
        &reg,
        "other/app",
        "bloated",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/wasm", &layer, echo.len())],
            "annotations": {"padding": "x".repeat(300 * 1024)},
        }),
    )
    .await;
    let err = fails(
        &env,
        &[
            "pull",
            &format!("{}/other/app:bloated", reg.addr()),
            "--out",
            "x.wasm",
        ],
        REGISTRY_EXIT,
    );
    assert!(
        err.contains("error[too_large]") && err.contains("manifest"),
        "{err}"
    );
    assert!(!env.path("x.wasm").exists());

    // The same manifest with the right size is pulled: the refusals above
    // were for what was wrong, not for being pushed by hand.
    put_manifest(
        &reg,
        "other/app",
        "good",
        &json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.wasm.config.v0+json", &c, config.len()),
            "layers": [descriptor("application/wasm", &layer, echo.len())],
        }),
    )
    .await;
    ok(
        &env,
        &[
            "pull",
            &format!("{}/other/app:good", reg.addr()),
            "--out",
            "x.wasm",
        ],
    );
    assert_eq!(std::fs::read(env.path("x.wasm")).unwrap(), echo);
}

#[tokio::test]
async fn the_signature_sidecar_travels_with_the_component() {
    let reg = OciRegistry::start(Auth::Open);
    let env = folder();
    let graph = echo(&env, "echo.wasm");
    // Opaque bytes: push and pull carry them, they do not read them.
    let signature = b"{\"sig\":\"not checked here\"}\n\x00\xff".to_vec();
    std::fs::write(env.path("echo.wasm.sig"), &signature).unwrap();
    let signed = format!("{}/graphs/echo:signed", reg.addr());
    ok(&env, &["push", graph.to_str().unwrap(), &signed]);

    std::fs::create_dir(env.path("pulled")).unwrap();
    ok(&env, &["pull", &signed, "--out", "pulled"]);
    assert_eq!(
        std::fs::read(env.path("pulled/echo.wasm")).unwrap(),
        echo_bytes()
    );
    assert_eq!(
        std::fs::read(env.path("pulled/echo.wasm.sig")).unwrap(),
        signature
    );
    let (_, m) = manifest(&reg, "graphs/echo", "signed").await;
    assert!(
        m["annotations"]["dev.sandgraph.signature"].is_string(),
        "{m}"
    );

    // An unsigned push pulled over it: the old sidecar would not sign the
    // new file, so it goes.
    std::fs::remove_file(env.path("echo.wasm.sig")).unwrap();
    let unsigned = format!("{}/graphs/echo:unsigned", reg.addr());
    ok(&env, &["push", graph.to_str().unwrap(), &unsigned]);
    ok(&env, &["pull", &unsigned, "--out", "pulled"]);
    assert!(env.path("pulled/echo.wasm").exists());
    assert!(!env.path("pulled/echo.wasm.sig").exists());

    // A sidecar larger than a signature may be is refused before any push.
    std::fs::write(env.path("echo.wasm.sig"), vec![b'x'; 1 << 20]).unwrap();
    let err = fails(&env, &["push", graph.to_str().unwrap(), &signed], 2);
    assert!(
        err.contains("echo.wasm.sig") && err.contains("larger than"),
        "{err}"
    );
}

#[tokio::test]
async fn basic_auth_uses_the_docker_config() {
    let reg = OciRegistry::start(Auth::Basic("alice", "s3cret:pw"));
    let env = folder();
    let graph = echo(&env, "echo.wasm");
    let reference = format!("{}/private/echo:1", reg.addr());

    // No credentials: refused, with how to log in.
    let err = fails(
        &env,
        &["push", graph.to_str().unwrap(), &reference],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[registry_auth]"), "{err}");
    assert!(
        err.contains("refused anonymous access") && err.contains("docker login"),
        "{err}"
    );

    // A wrong password: refused, naming where the credentials came from.
    login(&env, reg.addr(), "alice", "wrong");
    let err = fails(
        &env,
        &["push", graph.to_str().unwrap(), &reference],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[registry_auth]"), "{err}");
    assert!(
        err.contains("refused the credentials") && err.contains("config.json"),
        "{err}"
    );
    let err = fails(
        &env,
        &["pull", &reference, "--out", "x.wasm"],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[registry_auth]"), "{err}");

    // The right one: push and pull work.
    login(&env, reg.addr(), "alice", "s3cret:pw");
    ok(&env, &["push", graph.to_str().unwrap(), &reference]);
    ok(&env, &["pull", &reference, "--out", "x.wasm"]);
    assert_eq!(std::fs::read(env.path("x.wasm")).unwrap(), echo_bytes());
}

#[tokio::test]
async fn bearer_auth_through_a_token_service() {
    let reg = OciRegistry::start(Auth::Token("bob", "t0ken-pw"));
    let env = folder();
    let graph = echo(&env, "echo.wasm");
    let graph = graph.to_str().unwrap();
    let reference = format!("{}/team/echo:1", reg.addr());

    // No credentials: the token service gives no token.
    let err = fails(&env, &["push", graph, &reference], REGISTRY_EXIT);
    assert!(err.contains("error[registry_auth]"), "{err}");
    assert!(
        err.contains("refused anonymous access") && err.contains("token service"),
        "{err}"
    );

    // A wrong password: the token service refuses it.
    login(&env, reg.addr(), "bob", "wrong");
    let err = fails(&env, &["push", graph, &reference], REGISTRY_EXIT);
    assert!(
        err.contains("refused the credentials") && err.contains("config.json"),
        "{err}"
    );
    let err = fails(
        &env,
        &["pull", &reference, "--out", "x.wasm"],
        REGISTRY_EXIT,
    );
    assert!(err.contains("error[registry_auth]"), "{err}");

    // The right one: tokens for push and for pull (the manifest request
    // carries the token too), by tag and by digest.
    login(&env, reg.addr(), "bob", "t0ken-pw");
    let pinned = ok(&env, &["push", graph, &reference]).trim().to_string();
    ok(&env, &["pull", &reference, "--out", "x.wasm"]);
    assert_eq!(std::fs::read(env.path("x.wasm")).unwrap(), echo_bytes());
    ok(&env, &["pull", &pinned, "--out", "y.wasm"]);
    assert_eq!(std::fs::read(env.path("y.wasm")).unwrap(), echo_bytes());
}

#[test]
fn only_a_graph_component_is_pushed() {
    // Refused before anything is sent: the port is never contacted.
    let env = folder();
    std::fs::write(env.path("notes.wasm"), b"not wasm at all").unwrap();
    let out = env.run(&["push", "notes.wasm", "127.0.0.1:9/graphs/notes:1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("notes.wasm") && err.contains("only a graph component"),
        "{err}"
    );

    let err = fails(&env, &["push", "notes.wasm", "Not A Reference"], 2);
    assert!(err.contains("error[invalid_reference]"), "{err}");
    let pinned = format!("127.0.0.1:9/graphs/echo@sha256:{}", "0".repeat(64));
    let graph = echo(&env, "echo.wasm");
    let err = fails(&env, &["push", graph.to_str().unwrap(), &pinned], 2);
    assert!(err.contains("names a tag"), "{err}");
    let err = fails(
        &env,
        &["pull", "127.0.0.1:9/x:1", "--out", "missing/dir/x.wasm"],
        2,
    );
    assert!(err.contains("does not exist"), "{err}");
}

#[tokio::test]
async fn pull_names_the_file_after_the_reference_never_after_the_publishers_graph() {
    let reg = OciRegistry::start(Auth::Open);
    let env = folder();
    // The publisher's graph calls itself graph_llm, and was pushed from a
    // file of that name; the operator pulls it as `notes`.
    let squat = env.path("graph_llm.wasm");
    std::fs::copy(sandgraph_tests::HOSTILE_NAME_SQUAT, &squat).unwrap();
    let reference = format!("{}/tools/notes:1", reg.addr());
    ok(&env, &["push", squat.to_str().unwrap(), &reference]);
    std::fs::remove_file(&squat).unwrap();
    std::fs::create_dir(env.path("graphs")).unwrap();
    let out = ok(&env, &["pull", &reference, "--out", "graphs"]);
    assert_eq!(out.trim(), "graphs/notes.wasm");
    let names: Vec<_> = std::fs::read_dir(env.path("graphs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["notes.wasm"]);
    // It is not mounted under the name it claims, and the operator is
    // told.
    env.write(
        "ops.toml",
        "[llm.models]\nfast = \"deepseek-chat\"\n\
         [graphs.graph_llm.grants]\nllm = { models = [\"fast\"] }\n",
    );
    let o = env.run(&[
        "tools", "list", "--graphs", "graphs", "--config", "ops.toml",
    ]);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(
            "warning: graphs/notes.wasm: the component calls itself \"graph_llm\" but the file \
             is notes.wasm, not graph_llm.wasm"
        ),
        "{err}"
    );
    // `--out FILE` is the operator's name too.
    ok(&env, &["pull", &reference, "--out", "mine.wasm"]);
    assert_eq!(
        std::fs::read(env.path("mine.wasm")).unwrap(),
        std::fs::read(sandgraph_tests::HOSTILE_NAME_SQUAT).unwrap()
    );
}
