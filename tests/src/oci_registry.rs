//! A CNCF distribution registry (Debian's `docker-registry`) on loopback
//! for the OCI push and pull tests.
