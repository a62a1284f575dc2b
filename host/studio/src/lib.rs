//! The studio: the web app `sandgraph serve --http` serves at `/` next to
//! MCP's `/mcp`, to browse the mounted graphs, run them with their steps
//! streamed live, inspect and fork threads, and read the routing journal
//! and the caller's agent graphs.
//!
//! Its static shell (four files embedded in the binary, [`assets`]) carries
//! no data and needs no token; everything else is the JSON API under
//! `/api`, which the HTTP server authenticates like `/mcp`.

#![deny(missing_docs)]

pub mod assets;

pub use assets::asset_routes;
