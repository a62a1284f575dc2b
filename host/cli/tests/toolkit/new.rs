//! Tests of `sandgraph new` (see ../toolkit.rs).
