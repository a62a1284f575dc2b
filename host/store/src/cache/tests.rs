use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{CompileCache, LoadFailure, MAX_LOAD_FAILURE_MESSAGE_BYTES};

fn failure(message: &str) -> LoadFailure {
    LoadFailure {
        code: "load".into(),
        message: message.into(),
        at_ms: 1,
        timeout_ms: 500,
        fuel: 1,
        memory_bytes: 1,
    }
}

fn spec_file(dir: &Path, digest: &str) -> PathBuf {
    dir.join("v1/specs").join(digest)
}

fn artifact_file(dir: &Path, digest: &str, engine: &str) -> PathBuf {
    dir.join("v1/artifacts").join(engine).join(digest)
}

/// Replaces `from` by `to` in the body of the entry file `path`, keeping
/// its HMAC and fixing its length, as an editor of the file would.
fn edit(path: &Path, from: &str, to: &str) {
    let bytes = std::fs::read(path).unwrap();
    let (header, body) = bytes.split_at(super::HEADER_BYTES);
    let body = std::str::from_utf8(body).unwrap();
    assert!(body.contains(from), "{from:?} is not in {body}");
    let body = body.replace(from, to);
    let mut edited = header[..8].to_vec();
    edited.extend_from_slice(&(body.len() as u64).to_le_bytes());
    edited.extend_from_slice(&header[16..]);
    edited.extend_from_slice(body.as_bytes());
    std::fs::write(path, edited).unwrap();
}

#[test]
fn entries_are_files_under_the_folder_and_round_trip_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    assert!(cache.artifact("w", "e").unwrap().is_none());
    cache.put_artifact("w", "e", b"compiled bytes").unwrap();
    cache.put_spec("w", r#"{"name":"x"}"#).unwrap();
    assert!(artifact_file(dir.path(), "w", "e").is_file());
    assert!(spec_file(dir.path(), "w").is_file());
    drop(cache);
    let cache = CompileCache::open(dir.path()).unwrap();
    assert_eq!(
        cache.artifact("w", "e").unwrap().unwrap().bytes,
        b"compiled bytes"
    );
    assert_eq!(cache.spec("w").unwrap().as_deref(), Some(r#"{"name":"x"}"#));
    // Another engine fingerprint is another entry.
    assert!(cache.artifact("w", "other").unwrap().is_none());
    assert_eq!(cache.artifact_count().unwrap(), 1);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join("v1")), 0o700);
        assert_eq!(mode(&dir.path().join("key")), 0o600);
        assert_eq!(mode(&artifact_file(dir.path(), "w", "e")), 0o600);
    }
    // A name that is not a digest never becomes a path.
    let err = cache.put_spec("../key", "{}").unwrap_err().to_string();
    assert!(err.contains("wasm digest \"../key\""), "{err}");
    assert!(cache.artifact("w", "a/b").is_err());
}

#[test]
fn artifacts_need_the_key_in_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    cache.put_artifact("w", "e", b"compiled bytes").unwrap();
    drop(cache);
    // Another key (the old one lost, or the entries copied elsewhere): the
    // artifact does not authenticate and is removed.
    std::fs::remove_file(dir.path().join("key")).unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    assert!(cache.artifact("w", "e").unwrap().is_none());
    assert_eq!(cache.artifact_count().unwrap(), 0);
    drop(cache);
    // A key others can read is not trusted: nothing is stored or used.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = dir.path().join("key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let cache = CompileCache::open(dir.path()).unwrap();
        cache.put_artifact("w", "e", b"compiled bytes").unwrap();
        assert!(cache.artifact("w", "e").unwrap().is_none());
        cache.put_spec("w", "{}").unwrap();
        assert!(cache.spec("w").unwrap().is_none());
        assert_eq!(cache.total_bytes(), 0, "nothing written");
        let err = cache.check_key().unwrap_err().to_string();
        assert!(err.contains(&key.display().to_string()), "{err}");
        assert!(err.contains("has mode 0644"), "{err}");
    }
}

/// A spec entry edited in the file (a squatter renaming itself to the name
/// another graph's grants are written for), moved to another digest or
/// kind, written under another key, or truncated, is not believed: it
/// reads as missing, and is gone.
#[test]
fn a_spec_entry_that_does_not_authenticate_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    let file = spec_file(dir.path(), "w");
    cache.put_spec("w", r#"{"name":"squatter"}"#).unwrap();
    assert_eq!(
        cache.spec("w").unwrap().as_deref(),
        Some(r#"{"name":"squatter"}"#)
    );
    let sealed = std::fs::read(&file).unwrap();
    assert!(sealed.starts_with(b"sgcache1"));
    // Edited: renamed, the HMAC kept.
    edit(&file, "squatter", "research");
    assert_eq!(cache.spec("w").unwrap(), None);
    assert!(!file.exists(), "the bad entry is gone");
    // Moved: a good entry under another digest, or made a load failure.
    std::fs::write(spec_file(dir.path(), "x"), &sealed).unwrap();
    assert_eq!(cache.spec("x").unwrap(), None);
    let failures = dir.path().join("v1/failures/e");
    std::fs::create_dir_all(&failures).unwrap();
    std::fs::write(failures.join("w"), &sealed).unwrap();
    assert_eq!(cache.load_failure("w", "e").unwrap(), None);
    // Truncated: the header's length or the HMAC no longer holds.
    for cut in [sealed.len() - 1, 20, 3, 0] {
        std::fs::write(&file, &sealed[..cut]).unwrap();
        assert_eq!(cache.spec("w").unwrap(), None, "cut to {cut} bytes");
    }
    // Written under another key (a cache folder from elsewhere).
    let other = tempfile::tempdir().unwrap();
    CompileCache::open(other.path())
        .unwrap()
        .put_spec("w", r#"{"name":"research"}"#)
        .unwrap();
    std::fs::copy(spec_file(other.path(), "w"), &file).unwrap();
    assert_eq!(cache.spec("w").unwrap(), None);
    // Recomputed and written again, it is used.
    cache.put_spec("w", r#"{"name":"squatter"}"#).unwrap();
    assert_eq!(
        cache.spec("w").unwrap().as_deref(),
        Some(r#"{"name":"squatter"}"#)
    );
}

#[test]
fn a_load_failure_entry_that_does_not_authenticate_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    let failure = failure("describe trapped");
    cache.put_load_failure("w", "e", &failure).unwrap();
    assert_eq!(cache.load_failure("w", "e").unwrap(), Some(failure));
    edit(
        &dir.path().join("v1/failures/e/w"),
        "describe trapped",
        "describe trapped!",
    );
    assert_eq!(cache.load_failure("w", "e").unwrap(), None);
    assert_eq!(cache.load_failure_count().unwrap(), 0, "and it is gone");
}

/// The key file is opened without following a symbolic link, and must be
/// this user's own: anything else is refused with an error naming the
/// file, and then no entry is stored or trusted.
#[cfg(unix)]
#[test]
fn a_key_file_this_user_does_not_alone_control_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let refused = |why: &str| {
        let cache = CompileCache::open(dir.path()).unwrap();
        let err = cache.check_key().unwrap_err().to_string();
        assert!(
            err.contains(&format!("compile cache key {}", key.display())),
            "{err}"
        );
        assert!(err.contains(why), "{err}");
        assert!(err.ends_with("refused"), "{err}");
        cache.put_artifact("w", "e", b"compiled bytes").unwrap();
        cache.put_spec("w", "{}").unwrap();
        assert!(cache.artifact("w", "e").unwrap().is_none());
        assert!(cache.spec("w").unwrap().is_none());
    };
    // A symbolic link to a good key (0600, 32 bytes, ours).
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("planted.key");
    std::fs::write(&target, [7u8; 32]).unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&target, &key).unwrap();
    refused("is a symbolic link");
    // A dangling one is not followed to make a key there either.
    std::fs::remove_file(&target).unwrap();
    refused("is a symbolic link");
    assert!(!target.exists(), "no key made through the link");
    std::fs::remove_file(&key).unwrap();
    // Not a regular file.
    std::fs::create_dir(&key).unwrap();
    refused("is not a regular file");
    std::fs::remove_dir(&key).unwrap();
    // Not 32 bytes.
    std::fs::write(&key, b"short").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    refused("is 5 bytes, not 32");
    // Writable by the group.
    std::fs::write(&key, [7u8; 32]).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o620)).unwrap();
    refused("has mode 0620");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Owned by another user: only root can make one.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        let c = std::ffi::CString::new(key.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
        refused("is owned by uid 65534, not by this user (uid 0)");
        // SAFETY: as above.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 0, 0) }, 0);
    }
    // Ours, 0600, 32 bytes: used.
    CompileCache::open(dir.path()).unwrap().check_key().unwrap();
}

#[test]
fn a_corrupt_or_truncated_artifact_is_ignored_and_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    let file = artifact_file(dir.path(), "w", "e");
    cache.put_artifact("w", "e", b"compiled bytes").unwrap();
    let good = std::fs::read(&file).unwrap();
    let mut flipped = good.clone();
    *flipped.last_mut().unwrap() ^= 0xff;
    for bad in [flipped.as_slice(), &good[..good.len() - 4], &good[..10]] {
        std::fs::write(&file, bad).unwrap();
        assert!(
            cache.artifact("w", "e").unwrap().is_none(),
            "corrupt bytes are never handed out"
        );
        assert_eq!(cache.artifact_count().unwrap(), 0, "the bad entry is gone");
        cache.put_artifact("w", "e", b"compiled bytes").unwrap();
        assert_eq!(
            cache.artifact("w", "e").unwrap().unwrap().bytes,
            b"compiled bytes"
        );
    }
    // A symbolic link planted as an entry is not followed.
    #[cfg(unix)]
    {
        let planted = dir.path().join("planted");
        std::fs::write(&planted, &good).unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&planted, &file).unwrap();
        assert!(cache.artifact("w", "e").unwrap().is_none());
    }
}

#[test]
fn load_failures_round_trip_per_engine_and_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let failure = LoadFailure {
        message: format!("describe failed: {}", "é".repeat(10_000)),
        at_ms: 1_700_000_000_000,
        fuel: 5_000_000_000,
        memory_bytes: 64 << 20,
        ..failure("")
    };
    {
        let cache = CompileCache::open(dir.path()).unwrap();
        assert!(cache.load_failure("w", "e").unwrap().is_none());
        cache.put_load_failure("w", "e", &failure).unwrap();
    }
    let cache = CompileCache::open(dir.path()).unwrap();
    let read = cache.load_failure("w", "e").unwrap().unwrap();
    assert!(read.message.len() <= MAX_LOAD_FAILURE_MESSAGE_BYTES);
    assert!(read.message.starts_with("describe failed: é"));
    assert!(
        read.message.ends_with(" [cut]"),
        "{}",
        &read.message[4000..]
    );
    assert_eq!((read.code.as_str(), read.at_ms), ("load", failure.at_ms));
    assert_eq!(
        (read.timeout_ms, read.fuel, read.memory_bytes),
        (500, 5_000_000_000, 64 << 20)
    );
    // Another engine, or another digest, is another entry.
    assert!(cache.load_failure("w", "other").unwrap().is_none());
    assert!(cache.load_failure("x", "e").unwrap().is_none());
    assert_eq!(cache.load_failure_count().unwrap(), 1);
    assert!(cache.remove_load_failure("w", "e").unwrap());
    assert!(!cache.remove_load_failure("w", "e").unwrap());
    assert!(cache.load_failure("w", "e").unwrap().is_none());
}

/// Threads with caches of their own on one empty folder (as separate
/// processes would have) make the key and write the same entry at once:
/// every write succeeds, they agree on the key, and the entry authenticates
/// afterwards. No temporary file is left.
#[test]
fn concurrent_writers_of_one_entry_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let artifact: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let start = std::sync::Barrier::new(8);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let cache = CompileCache::open(dir.path()).unwrap();
                start.wait();
                for _ in 0..5 {
                    cache.put_artifact("w", "e", &artifact).unwrap();
                    cache.put_spec("w", r#"{"name":"x"}"#).unwrap();
                    // Whatever it reads is a whole entry.
                    if let Some(read) = cache.artifact("w", "e").unwrap() {
                        assert!(read.bytes == artifact);
                    }
                }
            });
        }
    });
    let cache = CompileCache::open(dir.path()).unwrap();
    assert!(cache.artifact("w", "e").unwrap().unwrap().bytes == artifact);
    assert_eq!(cache.spec("w").unwrap().as_deref(), Some(r#"{"name":"x"}"#));
    let names: Vec<_> = std::fs::read_dir(dir.path().join("v1/artifacts/e"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["w"], "no temporary file left");
}

/// Sets the last use of `path` to `secs` seconds after the epoch.
fn used_at(path: &Path, secs: u64) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs))
        .unwrap();
}

/// Past its bound, the least recently used entries go first (a hit counts
/// as a use), until the folder fits; stale temporary files of killed
/// writers go too.
#[test]
fn eviction_keeps_the_folder_under_its_bound() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path())
        .unwrap()
        .with_max_bytes(3 * 1100);
    let body = vec![7u8; 1000];
    for (i, digest) in ["a", "b", "c"].iter().enumerate() {
        cache.put_artifact(digest, "e", &body).unwrap();
        used_at(&artifact_file(dir.path(), digest, "e"), i as u64);
    }
    assert_eq!(cache.artifact_count().unwrap(), 3);
    // `a` is the oldest, but used now: `b` becomes the least recently used.
    assert!(cache.artifact("a", "e").unwrap().is_some());
    let leftover = dir.path().join("v1/artifacts/e/.tmp-w-1-0-0");
    std::fs::write(&leftover, b"half").unwrap();
    used_at(&leftover, 0);
    cache.put_artifact("d", "e", &body).unwrap();
    assert!(cache.total_bytes() <= 3 * 1100, "{}", cache.total_bytes());
    assert!(!artifact_file(dir.path(), "b", "e").exists(), "b evicted");
    for kept in ["a", "c", "d"] {
        assert!(cache.artifact(kept, "e").unwrap().is_some(), "{kept} kept");
    }
    assert!(!leftover.exists(), "a stale temporary file is removed");
    // Entries another process removed meanwhile are no error.
    std::fs::remove_dir_all(dir.path().join("v1/artifacts")).unwrap();
    cache.put_spec("w", "{}").unwrap();
    assert_eq!(cache.spec("w").unwrap().as_deref(), Some("{}"));
}

#[test]
fn an_oversized_entry_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CompileCache::open(dir.path()).unwrap();
    cache.put_spec("w", "{}").unwrap();
    let file = spec_file(dir.path(), "w");
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(super::MAX_SPEC_BYTES + 100)
        .unwrap();
    assert_eq!(cache.spec("w").unwrap(), None);
    assert!(!file.exists());
    let too_big = "x".repeat(super::MAX_SPEC_BYTES as usize + 1);
    let err = cache.put_spec("w", &too_big).unwrap_err().to_string();
    assert!(err.contains("more than"), "{err}");
}
