//! Tests of `sandgraph check` (see ../toolkit.rs).
