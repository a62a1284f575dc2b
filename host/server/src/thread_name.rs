//! The names of durable threads: every front door stores a caller's thread
//! `name` of a graph under the caller's principal, so one principal sees
//! the same threads over MCP and in the studio, and never another's.

use crate::principal::Principal;

/// Longest thread name a client may give: with the principal key and the
/// graph's name it must fit the store's 256-byte thread ids.
pub const MAX_THREAD_NAME_BYTES: usize = 100;

/// A thread name a client may not give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a thread name must be 1 to {MAX_THREAD_NAME_BYTES} bytes without control characters")]
pub struct ThreadNameError;

/// The prefix of every stored thread of `principal` (`None`: the stdio
/// caller): its key, or `stdio`, then `/`.
pub fn thread_owner(principal: Option<&Principal>) -> String {
    let owner = principal.map_or_else(|| "stdio".to_owned(), Principal::key);
    format!("{owner}/")
}

/// The stored thread id of the thread `name` of `tool` for `principal`
/// (`None`: the stdio caller): `<principal key>/<name>/<tool>`, so every
/// front door of one principal sees the same threads.
///
/// # Errors
///
/// An empty, too long or control-character name.
pub fn thread_key(
    principal: Option<&Principal>,
    name: &str,
    tool: &str,
) -> Result<String, ThreadNameError> {
    if name.is_empty() || name.len() > MAX_THREAD_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(ThreadNameError);
    }
    Ok(format!("{}{name}/{tool}", thread_owner(principal)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn thread_keys_put_the_principal_first() {
        let alice = Principal::Named(Arc::from("alice"));
        assert_eq!(
            thread_key(Some(&alice), "t/1", "greet").unwrap(),
            "principal:alice/t/1/greet"
        );
        assert_eq!(thread_key(None, "t", "greet").unwrap(), "stdio/t/greet");
        assert_eq!(thread_owner(Some(&alice)), "principal:alice/");
        for bad in ["", "a\nb", &"x".repeat(MAX_THREAD_NAME_BYTES + 1)] {
            assert!(thread_key(Some(&alice), bad, "greet").is_err(), "{bad:?}");
        }
    }
}
