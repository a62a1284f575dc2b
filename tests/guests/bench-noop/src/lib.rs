//! `bench-noop`: a plain std component of world `bench:noop/noop` exporting
//! one function that does nothing. Not a sandgraph graph.
//!
//! The runtime benchmark calls it through raw wasmtime on a fresh instance
//! to measure the floor every sandgraph figure is compared with; the
//! integration tests check that the sandgraph loader rejects it as a
//! component of another world.

wit_bindgen::generate!({
    inline: "
        package bench:noop;

        world noop {
            export noop: func();
        }
    ",
});

struct Component;

impl Guest for Component {
    fn noop() {}
}

export!(Component);
