//! The Rust SDK ships its wit-bindgen bindings checked in
//! (`guest-sdk/src/component/bindings.rs`), so graph crates do not build
//! wit-bindgen's macro; this is what keeps them what wit-bindgen generates
//! from the SDK's WIT copy (tests/build.rs generates them).

use std::path::Path;

/// What wit-bindgen generates today, with the checked-in file's header.
const GENERATED: &str = include_str!(concat!(env!("OUT_DIR"), "/sdk-bindings.rs"));

#[test]
fn the_sdk_bindings_are_current() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/src/component/bindings.rs");
    if std::env::var_os("SANDGRAPH_BLESS").is_some() {
        std::fs::write(&path, GENERATED).unwrap();
        return;
    }
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        shipped == GENERATED,
        "{} is not what wit-bindgen generates from guest-sdk/wit: run \
         `SANDGRAPH_BLESS=1 cargo test -p sandgraph-tests --test graphs sdk_bindings` and commit the result",
        path.display()
    );
}
