//! Release builds of `sandgraph` on glibc pack their relative relocations.
//!
//! The binary is position-independent, so every pointer in its read-only
//! data (vtables, string tables, dispatch tables) needs a load-time
//! relocation: 46,000 of them, 24 bytes each in `.rela.dyn` (1.1 MB of the
//! 42.7 MB binary). `-z pack-relative-relocs` stores them as DT_RELR bitmaps
//! instead, a few kilobytes, with the same addresses and the same ASLR.
//!
//! The loader must understand DT_RELR (glibc 2.36 and later); an older one
//! would run the binary with its pointers unrelocated. The flag is therefore
//! only passed when building for the machine the build runs on, against a
//! glibc that supports it, and only for release builds (the dev binary is
//! linked on every test run; its size does not matter).
//!
//! It also records the commit the binary is built from, for `--version` and
//! for the CI workflow `sandgraph new` writes, which installs this exact
//! commit: `SANDGRAPH_COMMIT`, `unknown` outside a git checkout (the
//! SDKs `sandgraph new` vendors are embedded by host/toolkit/build.rs).

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-env=SANDGRAPH_COMMIT={}", commit());
    let var = |k: &str| env::var(k).unwrap_or_default();
    let native_glibc = var("CARGO_CFG_TARGET_OS") == "linux"
        && var("CARGO_CFG_TARGET_ENV") == "gnu"
        && var("HOST") == var("TARGET");
    if var("PROFILE") == "release" && native_glibc && glibc_supports_relr() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// The full hash of the commit checked out, or `unknown`; the build
/// reruns when `HEAD` or the branch it names moves.
fn commit() -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| text.trim().to_owned())
    };
    let Some(hash) = git(&["rev-parse", "HEAD"]).filter(|h| h.len() == 40) else {
        return "unknown".to_owned();
    };
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    hash
}

/// Whether the glibc this build script runs on (the target's, checked above)
/// is 2.36 or newer.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn glibc_supports_relr() -> bool {
    unsafe extern "C" {
        // glibc's own version string, e.g. "2.36"; static storage.
        fn gnu_get_libc_version() -> *const std::ffi::c_char;
    }
    // SAFETY: the function takes no arguments and returns a pointer to a
    // static NUL-terminated string that lives for the whole process.
    let version = unsafe { std::ffi::CStr::from_ptr(gnu_get_libc_version()) };
    let mut parts = version
        .to_str()
        .unwrap_or("")
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (2, 36)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn glibc_supports_relr() -> bool {
    false
}
