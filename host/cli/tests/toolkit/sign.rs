//! Tests of `sandgraph sign` (see ../toolkit.rs).
