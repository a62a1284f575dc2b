//! JavaScript graphs: `sandgraph build` with componentize-js/jco, run by the host (issue 15).
