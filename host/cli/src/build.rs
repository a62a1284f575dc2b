//! `sandgraph build DIR --out FILE`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::process::{Command, Stdio};

use sha2::Digest;

use sandgraph_runtime::Runtime;

use crate::exit::Failure;

/// The compilation target of graph components.
pub const TARGET: &str = "wasm32-wasip2";

/// Fails with the install command when the wasm32-wasip2 standard library is
/// missing, instead of letting cargo print "can't find crate for `core`".
pub fn check_target() -> Result<(), Failure> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| Failure::build(format!("cannot run rustc: {e}; install Rust with rustup")))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !sysroot
        .join("lib/rustlib")
        .join(TARGET)
        .join("lib")
        .is_dir()
    {
        return Err(Failure::build(format!(
            "the {TARGET} target is not installed: run `rustup target add {TARGET}`"
        )));
    }
    Ok(())
}

/// Builds the crate in `dir` in release mode and returns the component path.
/// Without `debug` the debug info is stripped whatever the crate's own
/// release profile says (the function names stay, for guest backtraces):
/// the echo example is ~4 MB with it, about a tenth of that without.
fn cargo_build(dir: &Path, debug: bool) -> Result<PathBuf, Failure> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(Failure::build(format!(
            "{} has no Cargo.toml: point at a graph crate",
            dir.display()
        )));
    }
    let manifest = manifest
        .canonicalize()
        .map_err(|e| Failure::build(format!("cannot resolve {}: {e}", manifest.display())))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--target",
        TARGET,
        "--message-format=json-render-diagnostics",
    ]);
    if !debug {
        cmd.args([
            "--config",
            "profile.release.debug=false",
            "--config",
            "profile.release.strip=\"debuginfo\"",
        ]);
    }
    let output = cmd
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Failure::build(format!("cannot run cargo: {e}")))?;
    if !output.status.success() {
        return Err(Failure::build(format!(
            "cargo build failed for {}",
            manifest.display()
        )));
    }
    // The last `.wasm` artifact of the crate at `manifest` is the component.
    let mut found = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let same = msg["manifest_path"].as_str().map(Path::new) == Some(manifest.as_path());
        if !same {
            continue;
        }
        for f in msg["filenames"].as_array().into_iter().flatten() {
            if let Some(f) = f.as_str().filter(|f| f.ends_with(".wasm")) {
                found = Some(PathBuf::from(f));
            }
        }
    }
    found.ok_or_else(|| {
        Failure::build(format!(
            "cargo produced no .wasm for {}: a graph crate needs `crate-type = [\"cdylib\"]`",
            manifest.display()
        ))
    })
}

/// `sandgraph build DIR --out FILE`
#[derive(clap::Args)]
pub struct BuildArgs {
    /// Directory of the graph crate (holds its Cargo.toml)
    dir: PathBuf,
    /// Where to write the component
    #[arg(long)]
    out: PathBuf,
    /// Keep the debug info (DWARF) in the component; by default it is stripped (function names stay, for backtraces)
    #[arg(long)]
    debug: bool,
}

pub async fn build(args: BuildArgs) -> Result<ExitCode, Failure> {
    build_to(&args.dir, &args.out, args.debug).await?;
    Ok(ExitCode::SUCCESS)
}

pub async fn build_to(dir: &Path, out: &Path, debug: bool) -> Result<(), Failure> {
    check_target()?;
    let wasm = cargo_build(dir, debug)?;
    let bytes = std::fs::read(&wasm)
        .map_err(|e| Failure::build(format!("cannot read {}: {e}", wasm.display())))?;
    let rt = Runtime::new()?;
    // Loading checks the world, links, and validates the described spec.
    let graph = rt.load(&bytes).await?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Failure::build(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(out, &bytes)
        .map_err(|e| Failure::build(format!("cannot write {}: {e}", out.display())))?;
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    eprintln!(
        "built graph `{}` ({} bytes, sha256 {digest}) -> {}",
        graph.name(),
        bytes.len(),
        out.display()
    );
    Ok(())
}
