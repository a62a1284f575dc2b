//! The compile cache of the CLI's tests. Most tests serve or run the same
//! few guests, each in a fresh working folder: with an empty cache every
//! `sandgraph` process they start would compile those guests with
//! Cranelift again (seconds each on a busy machine). Instead every test,
//! every `sandgraph` process they start and every other test binary share
//! one cache folder, [`sandgraph_tests::COMPILE_CACHE`] (any number of
//! processes use a cache folder at once), so a guest compiles once until
//! it changes. Tests of the cache itself use a folder of their own
//! ([`super::Env::cold`]).

use std::path::PathBuf;

/// The folder name of a working folder's own compile cache
/// ([`super::Env::cold`]).
pub(crate) const CACHE: &str = "cache";

/// The shared cache folder: [`sandgraph_tests::compile_cache`]'s, trimmed
/// to its bound when this test process first uses it.
pub(crate) fn shared() -> PathBuf {
    sandgraph_tests::compile_cache().dir().to_path_buf()
}
