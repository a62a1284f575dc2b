//! Tests of `sandgraph oci` (see ../toolkit.rs).
