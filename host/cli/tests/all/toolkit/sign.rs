//! Tests of `sandgraph lock`, `keygen`, `sign` and `verify`, and of the
//! `--locked` / `--trusted-keys` mount flags (see ../toolkit.rs).

use std::process::Output;

use serde_json::{Value, json};

use super::folder;
use crate::common::{Env, stderr, stdout};

/// A folder `graphs/` holding echo and greet, in a fresh working folder.
fn graphs() -> Env {
    let env = folder(&[]);
    std::fs::create_dir(env.path("graphs")).unwrap();
    for (name, component) in [
        ("echo_graph.wasm", sandgraph_tests::ECHO),
        ("greet_graph.wasm", sandgraph_tests::GREET),
    ] {
        std::fs::copy(component, env.path("graphs").join(name)).unwrap();
    }
    env
}

/// The command failed with `exit` and its stderr holds every one of `parts`.
fn refused(o: &Output, exit: i32, parts: &[&str]) {
    assert_eq!(o.status.code(), Some(exit), "stderr: {}", stderr(o));
    let err = stderr(o);
    for part in parts {
        assert!(err.contains(part), "{part:?} not in: {err}");
    }
}

/// `sandgraph keygen --out OUT`, which must succeed: the key id it prints.
fn keygen(env: &Env, out: &str) -> String {
    let o = env.run(&["keygen", "--out", out]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .find_map(|l| l.strip_prefix("key id "))
        .expect("keygen prints the key id")
        .to_owned()
}

fn list_locked(env: &Env) -> Output {
    env.run(&["tools", "list", "--graphs", "graphs", "--locked"])
}

/// Flips one byte in the middle of `path`.
fn tamper(env: &Env, name: &str) {
    let path = env.path(name);
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
}

#[test]
fn lock_pins_the_folder_and_locked_mounting_refuses_changed_missing_and_extra_graphs() {
    let env = graphs();
    refused(
        &list_locked(&env),
        3,
        &[
            "graphs/sandgraph.lock: no lock file",
            "sandgraph lock --graphs graphs",
        ],
    );

    let o = env.run(&["lock", "--graphs", "graphs"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("locked 2 graphs in graphs/sandgraph.lock"),
        "{}",
        stdout(&o)
    );
    let text = std::fs::read_to_string(env.path("graphs/sandgraph.lock")).unwrap();
    let lock: toml::Value = toml::from_str(&text).unwrap();
    assert_eq!(lock["version"].as_integer(), Some(1));
    let pinned = lock["graph"].as_array().unwrap();
    assert_eq!(pinned.len(), 2);
    assert_eq!(pinned[0]["file"].as_str(), Some("echo_graph.wasm"));
    assert_eq!(pinned[0]["name"].as_str(), Some("echo_graph"));
    let echo_digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(
            std::fs::read(sandgraph_tests::ECHO).unwrap(),
        ))
    };
    assert_eq!(pinned[0]["sha256"].as_str(), Some(echo_digest.as_str()));
    assert_eq!(pinned[1]["name"].as_str(), Some("greet_graph"));

    let o = list_locked(&env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("echo_graph"), "{}", stdout(&o));
    assert!(stdout(&o).contains("greet_graph"), "{}", stdout(&o));

    // Extra: a *.wasm the lock does not name.
    std::fs::copy(sandgraph_tests::APPROVAL, env.path("graphs/approval.wasm")).unwrap();
    refused(
        &list_locked(&env),
        3,
        &["graphs/approval.wasm: not in graphs/sandgraph.lock"],
    );
    std::fs::remove_file(env.path("graphs/approval.wasm")).unwrap();

    // Changed: one byte of a pinned graph.
    tamper(&env, "graphs/greet_graph.wasm");
    refused(
        &list_locked(&env),
        3,
        &[
            "graphs/greet_graph.wasm: changed since it was locked",
            "graphs/sandgraph.lock pins",
        ],
    );

    // Missing: a pinned graph gone.
    std::fs::remove_file(env.path("graphs/greet_graph.wasm")).unwrap();
    refused(
        &list_locked(&env),
        3,
        &["graphs/greet_graph.wasm: missing: graphs/sandgraph.lock pins it"],
    );
    // Without --locked the folder mounts as it is.
    let o = env.run(&["tools", "list", "--graphs", "graphs"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn call_and_serve_with_locked_run_the_pinned_graphs_and_refuse_a_changed_one() {
    let env = graphs();
    assert!(env.run(&["lock", "--graphs", "graphs"]).status.success());
    let call = |env: &Env| {
        env.run(&[
            "call",
            "echo_graph",
            "--graphs",
            "graphs",
            "--locked",
            "--args",
            r#"{"input": {"topic": "hi"}}"#,
        ])
    };
    let o = call(&env);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v, json!({"topic": "hi", "log": ["seen:hi"]}));

    tamper(&env, "graphs/echo_graph.wasm");
    refused(
        &call(&env),
        3,
        &["graphs/echo_graph.wasm: changed since it was locked"],
    );
    // serve refuses to start (it would otherwise serve stdio until closed).
    let o = env.run(&["serve", "--graphs", "graphs", "--locked"]);
    refused(
        &o,
        3,
        &["graphs/echo_graph.wasm: changed since it was locked"],
    );
    // route and supervise mount the same way, before any model is asked
    // (the model's address is a closed port: nothing is ever sent).
    let config = env.write(
        "locked.toml",
        "[llm]\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"SANDGRAPH_SIGN_TEST_KEY\"\n",
    );
    let config = config.to_str().unwrap();
    for command in ["route", "supervise"] {
        let o = env
            .command(&[
                command, "--graphs", "graphs", "--locked", "--config", config, "echo hi",
            ])
            .env("SANDGRAPH_SIGN_TEST_KEY", "not-a-key")
            .output()
            .unwrap();
        refused(
            &o,
            3,
            &["graphs/echo_graph.wasm: changed since it was locked"],
        );
    }
}

#[test]
fn keygen_sign_and_verify_and_each_bad_signature_is_refused() {
    let env = graphs();
    let key_id = keygen(&env, "ci.key");
    assert_eq!(key_id.len(), 64);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(env.path("ci.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "the secret key is private");
        // A keys folder that does not exist yet is made, private.
        let o = env.run(&["keygen", "--out", "keys/deep/ci.key"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let mode = std::fs::metadata(env.path("keys/deep"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "the keys folder is private");
        assert!(env.path("keys/deep/ci.key.pub").is_file());
    }
    let public = std::fs::read_to_string(env.path("ci.key.pub")).unwrap();
    assert!(
        public.starts_with("sandgraph-ed25519-public-key\n"),
        "{public}"
    );
    refused(
        &env.run(&["keygen", "--out", "ci.key"]),
        2,
        &["ci.key: already exists"],
    );
    std::fs::create_dir(env.path("trusted")).unwrap();
    std::fs::copy(env.path("ci.key.pub"), env.path("trusted/ci.pub")).unwrap();

    let verify = |env: &Env| {
        env.run(&[
            "verify",
            "graphs/echo_graph.wasm",
            "--trusted-keys",
            "trusted",
        ])
    };
    refused(
        &verify(&env),
        1,
        &["graphs/echo_graph.wasm: not signed", "sandgraph sign"],
    );

    let before = std::fs::read(env.path("graphs/echo_graph.wasm")).unwrap();
    let o = env.run(&["sign", "graphs/echo_graph.wasm", "--key", "ci.key"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(env.path("graphs/echo_graph.wasm")).unwrap(),
        before,
        "signing does not change the component"
    );
    let sidecar: Value =
        serde_json::from_slice(&std::fs::read(env.path("graphs/echo_graph.wasm.sig")).unwrap())
            .unwrap();
    assert_eq!(sidecar["algorithm"], "ed25519");
    assert_eq!(sidecar["key_id"], key_id.as_str());

    let o = verify(&env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&key_id), "{}", stdout(&o));
    // --key names one trusted public key file.
    let o = env.run(&["verify", "graphs/echo_graph.wasm", "--key", "ci.key.pub"]);
    assert!(o.status.success(), "{}", stderr(&o));

    // Another key: not trusted.
    assert!(env.run(&["keygen", "--out", "other.key"]).status.success());
    refused(
        &env.run(&["verify", "graphs/echo_graph.wasm", "--key", "other.key.pub"]),
        1,
        &[&format!("signed by key {key_id}, which is not trusted")],
    );
    // Signed with another key, checked against ours.
    assert!(
        env.run(&["sign", "graphs/echo_graph.wasm", "--key", "other.key"])
            .status
            .success()
    );
    refused(&verify(&env), 1, &["which is not trusted"]);
    assert!(
        env.run(&["sign", "graphs/echo_graph.wasm", "--key", "ci.key"])
            .status
            .success()
    );

    // A malformed sidecar.
    let good = std::fs::read(env.path("graphs/echo_graph.wasm.sig")).unwrap();
    std::fs::write(env.path("graphs/echo_graph.wasm.sig"), "{\"version\": 2}").unwrap();
    refused(&verify(&env), 1, &["graphs/echo_graph.wasm.sig: malformed"]);
    // A sidecar of before signatures covered the name: sign again.
    std::fs::write(env.path("graphs/echo_graph.wasm.sig"), "{\"version\": 1}").unwrap();
    refused(
        &verify(&env),
        1,
        &[
            "graphs/echo_graph.wasm: graphs/echo_graph.wasm.sig is a version 1 signature, which does not \
             cover the graph name; sign it again with `sandgraph sign graphs/echo_graph.wasm --key KEY`",
        ],
    );
    // The signature moved to another name: it does not verify.
    let text = String::from_utf8(good.clone()).unwrap();
    assert!(text.contains("\"name\": \"echo_graph\""), "{text}");
    std::fs::write(
        env.path("graphs/echo_graph.wasm.sig"),
        text.replace("\"name\": \"echo_graph\"", "\"name\": \"research\""),
    )
    .unwrap();
    refused(&verify(&env), 1, &["does not verify with key"]);
    std::fs::write(env.path("graphs/echo_graph.wasm.sig"), &good).unwrap();
    let o = verify(&env);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("verified graphs/echo_graph.wasm (graph \"echo_graph\", sha256:"),
        "{}",
        stdout(&o)
    );

    // One byte of the component changed.
    tamper(&env, "graphs/echo_graph.wasm");
    refused(
        &verify(&env),
        1,
        &["graphs/echo_graph.wasm: changed after it was signed"],
    );
}

#[test]
fn trusted_keys_mount_only_the_signed_graph_and_strict_fails_on_the_unsigned_one() {
    let env = graphs();
    assert!(env.run(&["keygen", "--out", "ci.key"]).status.success());
    std::fs::create_dir(env.path("trusted")).unwrap();
    std::fs::copy(env.path("ci.key.pub"), env.path("trusted/ci.pub")).unwrap();
    assert!(
        env.run(&["sign", "graphs/echo_graph.wasm", "--key", "ci.key"])
            .status
            .success()
    );

    let list = |extra: &[&str]| {
        let mut args = vec![
            "tools",
            "list",
            "--graphs",
            "graphs",
            "--trusted-keys",
            "trusted",
        ];
        args.extend_from_slice(extra);
        env.run(&args)
    };
    let o = list(&["--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let tools: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["echo_graph"]);
    assert!(
        stderr(&o).contains("warning: graphs/greet_graph.wasm: not signed"),
        "{}",
        stderr(&o)
    );
    refused(
        &list(&["--strict"]),
        3,
        &["graphs/greet_graph.wasm: not signed"],
    );

    // Locked and signed together: the lock made before signing still holds.
    assert!(env.run(&["lock", "--graphs", "graphs"]).status.success());
    assert!(
        env.run(&["sign", "graphs/greet_graph.wasm", "--key", "ci.key"])
            .status
            .success()
    );
    let o = list(&["--locked", "--strict"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("greet_graph"), "{}", stdout(&o));

    // An empty trusted keys folder is a mistake, not "trust nothing".
    std::fs::create_dir(env.path("empty")).unwrap();
    refused(
        &env.run(&[
            "tools",
            "list",
            "--graphs",
            "graphs",
            "--trusted-keys",
            "empty",
        ]),
        2,
        &["empty: no trusted keys"],
    );
}

/// The variable the `--key-env` test puts its key in.
const KEY_VAR: &str = "SANDGRAPH_SIGN_TEST_SECRET";

/// `sandgraph sign graphs/echo_graph.wasm ARGS` with [`KEY_VAR`] set to
/// `value` (unset when `None`).
fn sign_with_env(env: &Env, args: &[&str], value: Option<&str>) -> Output {
    let mut full = vec!["sign", "graphs/echo_graph.wasm"];
    full.extend_from_slice(args);
    let mut cmd = env.command(&full);
    match value {
        Some(v) => cmd.env(KEY_VAR, v),
        None => cmd.env_remove(KEY_VAR),
    };
    cmd.output().unwrap()
}

#[test]
fn sign_takes_the_key_from_an_environment_variable_and_refuses_a_key_file_others_may_read() {
    let env = graphs();
    let key_id = keygen(&env, "ci.key");
    let secret = std::fs::read_to_string(env.path("ci.key")).unwrap();

    // The key file's text in a variable (a CI secret) signs, and verifies.
    let o = sign_with_env(&env, &["--key-env", KEY_VAR], Some(&secret));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("with key {key_id}")),
        "{}",
        stdout(&o)
    );
    let o = env.run(&["verify", "graphs/echo_graph.wasm", "--key", "ci.key.pub"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("signed by key {key_id}")),
        "{}",
        stdout(&o)
    );

    // Each bad variable is named, and its value never shown.
    let missing = format!("environment variable {KEY_VAR} is not set");
    refused(
        &sign_with_env(&env, &["--key-env", KEY_VAR], None),
        2,
        &[&missing, "sandgraph keygen"],
    );
    let empty = format!("environment variable {KEY_VAR} is empty");
    refused(
        &sign_with_env(&env, &["--key-env", KEY_VAR], Some(" \n")),
        2,
        &[&empty],
    );
    let marker = "notakeyzz";
    let malformed = format!("sandgraph-ed25519-secret-key\n{marker}\n");
    let o = sign_with_env(&env, &["--key-env", KEY_VAR], Some(&malformed));
    let named = format!("environment variable {KEY_VAR} holds no secret key");
    refused(&o, 2, &[&named, "64 hex digits"]);
    assert!(!stderr(&o).contains(marker), "{}", stderr(&o));
    let public = std::fs::read_to_string(env.path("ci.key.pub")).unwrap();
    let o = sign_with_env(&env, &["--key-env", KEY_VAR], Some(&public));
    refused(&o, 2, &[&named, "it is a public key"]);
    assert!(!stderr(&o).contains(public.trim()), "{}", stderr(&o));
    let huge = format!("{secret}{}", "#".repeat(5000));
    let o = sign_with_env(&env, &["--key-env", KEY_VAR], Some(&huge));
    refused(&o, 2, &[&format!("{KEY_VAR} holds 5"), "4096-byte limit"]);

    // One of --key and --key-env, not both.
    refused(
        &sign_with_env(
            &env,
            &["--key", "ci.key", "--key-env", KEY_VAR],
            Some(&secret),
        ),
        2,
        &["cannot be used with"],
    );
    refused(
        &sign_with_env(&env, &[], Some(&secret)),
        2,
        &["--key <FILE>", "--key-env <VAR>"],
    );

    // A key file its group or others may read or write is refused.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let before = std::fs::read(env.path("graphs/echo_graph.wasm.sig")).unwrap();
        for mode in [0o644, 0o660] {
            std::fs::set_permissions(env.path("ci.key"), std::fs::Permissions::from_mode(mode))
                .unwrap();
            refused(
                &env.run(&["sign", "graphs/echo_graph.wasm", "--key", "ci.key"]),
                2,
                &[
                    &format!("ci.key: the secret key file has mode {mode:04o}"),
                    "`chmod 600 ci.key`",
                ],
            );
        }
        assert_eq!(
            std::fs::read(env.path("graphs/echo_graph.wasm.sig")).unwrap(),
            before,
            "a refused key signs nothing"
        );
        std::fs::set_permissions(env.path("ci.key"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        let o = env.run(&["sign", "graphs/echo_graph.wasm", "--key", "ci.key"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
}
