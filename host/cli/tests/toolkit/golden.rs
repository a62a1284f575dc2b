//! Tests of `sandgraph golden` (see ../toolkit.rs).
