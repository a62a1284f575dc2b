//! The toolkit as a library: each operation's typed result or error,
//! without the command line and without building or loading a real graph
//! (those are driven end to end by the CLI's tests/all/toolkit).

use std::path::Path;

use sandgraph_runtime::{ErrorCode, RunError};
use sandgraph_toolkit::cache::CacheChoice;
use sandgraph_toolkit::new::{NewOptions, Template};
use sandgraph_toolkit::sdk::{self, Lang, MARKER, SDK_VERSION, SDK_WORLD};
use sandgraph_toolkit::{Error, build, check, golden, oci, sign};

/// No compile cache: the tests leave nothing behind.
fn no_cache() -> CacheChoice {
    CacheChoice {
        dir: None,
        disabled: true,
    }
}

fn options(dir: &Path, lang: Lang) -> NewOptions {
    NewOptions {
        name: "hello".into(),
        dir: Some(dir.to_path_buf()),
        lang,
        template: Template::Basic,
        sdk_path: None,
        sdk_git: None,
        commit: "unknown".into(),
    }
}

fn code(e: &Error) -> Option<ErrorCode> {
    match e {
        Error::Run(RunError { code, .. }) => Some(*code),
        _ => None,
    }
}

#[test]
fn new_writes_a_project_and_sdk_update_revendors_it() {
    let tmp = tempfile::tempdir().unwrap();
    for lang in [Lang::Rust, Lang::Python, Lang::Js] {
        let dir = tmp.path().join(lang.name());
        let created = sandgraph_toolkit::new::new(&options(&dir, lang)).unwrap();
        assert_eq!(created.dir, dir);
        assert!(created.sdk_path.is_none());
        let marker = std::fs::read_to_string(dir.join(MARKER)).unwrap();
        assert!(marker.contains(SDK_VERSION) && marker.contains(SDK_WORLD));
        assert!(dir.join(lang.folder()).is_dir());
        assert!(dir.join(".github/workflows/graph.yml").is_file());

        let updated = sdk::update(&dir).unwrap();
        assert_eq!(updated.lang, lang);
        assert_eq!(updated.folder, dir.join(lang.folder()));
        let previous = updated.previous.expect("new wrote a marker");
        assert_eq!(
            (previous.version.as_str(), previous.language),
            (SDK_VERSION, lang)
        );
    }
}

#[test]
fn new_refuses_a_bad_name_and_a_used_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let mut bad = options(&tmp.path().join("x"), Lang::Rust);
    bad.name = "1st".into();
    let e = sandgraph_toolkit::new::new(&bad).err().unwrap();
    assert_eq!(code(&e), Some(ErrorCode::InvalidInput), "{e}");

    std::fs::write(tmp.path().join("file"), "x").unwrap();
    let e = sandgraph_toolkit::new::new(&options(tmp.path(), Lang::Rust))
        .err()
        .unwrap();
    assert!(e.to_string().contains("is not empty"), "{e}");
}

#[test]
fn sdk_update_refuses_a_folder_that_is_no_project() {
    let tmp = tempfile::tempdir().unwrap();
    let e = sdk::update(tmp.path()).err().unwrap();
    assert_eq!(code(&e), Some(ErrorCode::InvalidInput), "{e}");
    assert!(e.to_string().contains("is not a sandgraph project"), "{e}");
}

#[tokio::test]
async fn build_refuses_a_folder_without_a_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let options = build::BuildOptions {
        dir: tmp.path(),
        out: None,
        debug: false,
        cache: None,
    };
    match build::build(&options).await {
        Err(Error::Build(message)) => assert!(message.contains("holds no graph"), "{message}"),
        other => panic!("expected a build error, got {:?}", other.map(|b| b.path)),
    }
}

#[tokio::test]
async fn check_reports_a_file_that_does_not_load() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("junk.wasm"), b"not wasm").unwrap();
    let reports = check::check(tmp.path(), &no_cache()).await.unwrap();
    assert_eq!(reports.len(), 1);
    let text = check::render(&reports[0]);
    assert!(
        text.contains("junk.wasm: failed to load: error[load]"),
        "{text}"
    );
    assert_eq!(
        check::summary(&reports),
        "checked 1 graph(s): 0 loaded, 1 failed to load, 0 warning(s)"
    );
    let json: serde_json::Value = serde_json::from_str(&check::to_json(&reports).unwrap()).unwrap();
    assert_eq!(json["graphs"][0]["ok"], false);
    let e = check::verdict(&reports, false).err().unwrap();
    assert_eq!(code(&e), Some(ErrorCode::Load), "{e}");

    let empty = tempfile::tempdir().unwrap();
    let e = check::check(empty.path(), &no_cache()).await.err().unwrap();
    assert_eq!(code(&e), Some(ErrorCode::InvalidInput), "{e}");
}

#[tokio::test]
async fn golden_refuses_a_missing_target() {
    let tmp = tempfile::tempdir().unwrap();
    let options = golden::TestOptions {
        target: tmp.path().join("missing.wasm"),
        cases: None,
        filter: None,
        config: Default::default(),
        default_model: String::new(),
        graphs: Vec::new(),
        jobs: None,
        cache: no_cache(),
    };
    let e = golden::prepare(options).await.err().unwrap();
    assert_eq!(code(&e), Some(ErrorCode::InvalidInput), "{e}");
    assert!(
        e.to_string().contains("is neither a graph crate folder"),
        "{e}"
    );
}

#[tokio::test]
async fn keys_sign_and_verify_refuse_what_is_not_a_signed_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("keys/signer");
    let pair = sign::keygen(&key).unwrap();
    assert_eq!(pair.public, tmp.path().join("keys/signer.pub"));
    assert!(!pair.key_id.to_string().is_empty());
    // A second keygen over the same files is refused.
    assert!(sign::keygen(&key).is_err());

    let graph = tmp.path().join("junk.wasm");
    std::fs::write(&graph, b"not wasm").unwrap();
    let from_file = sign::KeySource::File(key.clone());
    let e = sign::sign(&graph, &from_file, &no_cache())
        .await
        .err()
        .unwrap();
    assert_eq!(code(&e), Some(ErrorCode::Load), "{e}");

    let keys = sign::trusted_keys(&[tmp.path().join("keys")], &[]).unwrap();
    match sign::verify(&graph, &keys, &no_cache()).await {
        Err(Error::Check { code, .. }) => assert_eq!(code, "signature"),
        Err(e) => panic!("expected a signature check failure, got {e}"),
        Ok(_) => panic!("an unsigned file verified"),
    }
}

#[tokio::test]
async fn oci_refuses_a_malformed_reference_before_any_request() {
    let tmp = tempfile::tempdir().unwrap();
    let options = oci::PullOptions {
        reference: "not a reference".into(),
        out: tmp.path().to_path_buf(),
        insecure: false,
    };
    match oci::pull(options).await {
        Err(Error::Oci(e)) => assert_eq!(e.code(), "invalid_reference"),
        Err(e) => panic!("expected a reference error, got {e}"),
        Ok(path) => panic!("pulled {}", path.display()),
    }
}
