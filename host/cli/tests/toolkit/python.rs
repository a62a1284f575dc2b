//! Python graphs: `sandgraph build` with componentize-py, run by the host (issue 15).
