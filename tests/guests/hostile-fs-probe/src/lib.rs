//! A node that tries everything a sandboxed graph must not be able to do
//! and writes what each attempt got into the state, so a host test can
//! assert that all of it was denied.
//!
//! String results are `"ok: <detail>"` or `"err: <error>"`:
//!
//! | key           | probe                                          |
//! |---------------|------------------------------------------------|
//! | `fs_read`     | `std::fs::read("/etc/passwd")`                 |
//! | `read_dir`    | `std::fs::read_dir("/")`                       |
//! | `fs_write`    | `std::fs::write("/tmp/x", ..)`                 |
//! | `current_dir` | `std::env::current_dir()`                      |
//! | `tcp_connect` | `TcpStream::connect("127.0.0.1:80")`           |
//! | `udp_bind`    | `UdpSocket::bind("127.0.0.1:0")`               |
//! | `dns`         | `"localhost:80".to_socket_addrs()`             |
//! | `stdin`       | reading stdin                                  |
//! | `env_count`   | number of `std::env::vars()` (an integer)      |
//! | `env`         | their names (a list)                           |
//! | `args_count`  | number of `std::env::args()` (an integer)      |
//! | `args`        | the arguments (a list)                         |
//!
//! Under a deny-by-default WASI context (no preopens, sockets, env or args;
//! wasmtime's defaults) the file and socket probes and `dns` are `err: ...`
//! and the counts are 0, but two probes succeed harmlessly: `current_dir`
//! is `ok: "/"` (wasi-libc's built-in default, not a real directory) and
//! `stdin` is `ok: 0 bytes` (an empty stream).

use std::fmt::Debug;
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};

use sandgraph_sdk::serde_json::Value;
use sandgraph_sdk::{END, Graph, Reducer, START, Update};

const STRING_PROBES: [&str; 8] = [
    "fs_read",
    "read_dir",
    "fs_write",
    "current_dir",
    "tcp_connect",
    "udp_bind",
    "dns",
    "stdin",
];

fn outcome<T, E: std::fmt::Display>(result: Result<T, E>, ok: impl FnOnce(T) -> String) -> String {
    match result {
        Ok(value) => format!("ok: {}", ok(value)),
        Err(err) => format!("err: {err}"),
    }
}

fn debug<T: Debug>(value: T) -> String {
    format!("{value:?}")
}

fn probe(_: Value) -> Update {
    let env: Vec<String> = std::env::vars_os()
        .map(|(name, _)| name.to_string_lossy().into_owned())
        .collect();
    let args: Vec<String> = std::env::args_os()
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    Update::new()
        .set(
            "fs_read",
            outcome(std::fs::read("/etc/passwd"), |bytes| {
                format!("{} bytes", bytes.len())
            }),
        )
        .set(
            "read_dir",
            outcome(std::fs::read_dir("/"), |entries| {
                format!("{} entries", entries.count())
            }),
        )
        .set(
            "fs_write",
            outcome(std::fs::write("/tmp/x", b"sandgraph"), debug),
        )
        .set("current_dir", outcome(std::env::current_dir(), debug))
        .set(
            "tcp_connect",
            outcome(TcpStream::connect("127.0.0.1:80"), debug),
        )
        .set("udp_bind", outcome(UdpSocket::bind("127.0.0.1:0"), debug))
        .set(
            "dns",
            outcome("localhost:80".to_socket_addrs(), |addrs| {
                debug(addrs.collect::<Vec<_>>())
            }),
        )
        .set(
            "stdin",
            outcome(std::io::stdin().read_to_end(&mut Vec::new()), |n| {
                format!("{n} bytes")
            }),
        )
        .set("env_count", env.len())
        .set("env", env)
        .set("args_count", args.len())
        .set("args", args)
}

fn graph() -> Graph {
    let graph = STRING_PROBES
        .iter()
        .chain(&["env_count", "env", "args_count", "args"])
        .fold(Graph::new("hostile_fs_probe"), |graph, key| {
            graph.channel(*key, Reducer::LastValue)
        });
    graph
        .node("probe", probe)
        .edge(START, "probe")
        .edge("probe", END)
}

sandgraph_sdk::export_graph!(graph);

#[cfg(test)]
mod tests {
    #[test]
    fn graph_is_valid() {
        super::graph().check().unwrap();
    }
}
