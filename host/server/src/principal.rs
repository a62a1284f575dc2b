//! Who is calling over HTTP: a named principal from the tokens file, the
//! holder of the one shared token, or (no authentication) the connection's
//! peer.
//!
//! The principal is decided by the HTTP guard from what the client proves
//! (a token) or what the kernel says (the peer of the TCP connection),
//! never from a header value another client could send. It rides in the
//! request's extensions to the handlers of every route set, which key run
//! limits, threads and agent-graph ownership on it.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use sha2::{Digest, Sha256};

/// The name the holder of `--token-env`'s one shared token is known by.
pub const SHARED_TOKEN_PRINCIPAL: &str = "token";

/// Largest tokens file read, in bytes: a file of a few thousand clients is
/// far below it; anything larger is not a tokens file.
const MAX_TOKENS_FILE_BYTES: u64 = 1 << 20;

/// Longest principal name: names appear in logs and stored rows.
const MAX_PRINCIPAL_NAME_BYTES: usize = 64;

/// Who sent a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// Authenticated by a token: its name in the tokens file, or
    /// [`SHARED_TOKEN_PRINCIPAL`] for the shared `--token-env` token.
    Named(Arc<str>),
    /// Not authenticated: the peer of the connection, as `uid <n>` for a
    /// loopback peer whose socket owner the kernel reports, else its IP
    /// address.
    Peer(Arc<str>),
}

impl Principal {
    /// The key run limits and session caps count under.
    pub fn key(&self) -> String {
        match self {
            Principal::Named(n) => format!("principal:{n}"),
            Principal::Peer(p) => format!("peer:{p}"),
        }
    }

    /// Who owns the agent graphs created by this principal in `session`
    /// (empty: no session): the principal itself when authenticated, else
    /// the session *and* the peer; empty when there is neither (the call
    /// is then refused as having no agent-bound caller).
    pub fn owner(&self, session: &str) -> String {
        match self {
            Principal::Named(n) => format!("principal:{n}"),
            Principal::Peer(_) if session.is_empty() => String::new(),
            Principal::Peer(p) => format!("{p}/{session}"),
        }
    }
}

impl Principal {
    /// Whether this principal owns agent graphs whose root session is
    /// `root`: authenticated, the graphs it created under its name; not
    /// authenticated, those created by any MCP session of its peer.
    pub fn owns(&self, root: &str) -> bool {
        match self {
            Principal::Named(_) => !root.is_empty() && root == self.owner(""),
            Principal::Peer(p) => root
                .strip_prefix(&**p)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|session| !session.is_empty()),
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key())
    }
}

#[cfg(target_os = "linux")]
mod sock_diag;

/// The sha256 of a token.
pub(crate) fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Equal in constant time (both are fixed-size digests, so neither the
/// content nor the length of a token leaks through timing).
pub(crate) fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The accepted tokens: each a principal name with the sha256 of its
/// token. Never holds a token itself.
#[derive(Clone, Default)]
pub struct Tokens {
    entries: Arc<Vec<(Arc<str>, [u8; 32])>>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(n, _)| n))
            .finish()
    }
}

/// Why a tokens file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The file cannot be read.
    #[error("cannot read tokens file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Group or other users may read or write the file.
    #[error(
        "tokens file {path} is accessible to group or other users (mode {mode:04o}): run chmod 600 \
         on it"
    )]
    Mode {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The content is wrong.
    #[error("tokens file {path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
}

impl Tokens {
    /// One shared token, known as [`SHARED_TOKEN_PRINCIPAL`].
    pub fn shared(token: &str) -> Tokens {
        Tokens {
            entries: Arc::new(vec![(
                Arc::from(SHARED_TOKEN_PRINCIPAL),
                digest(token.as_bytes()),
            )]),
        }
    }

    /// Reads a tokens file: TOML, one `name = "<sha256 of the token, hex>"`
    /// per line (an optional `sha256:` prefix is accepted). The file must
    /// be readable and writable by its owner only.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is group/world accessible, is not such a
    /// table, names a principal twice, repeats a digest, or is empty.
    pub fn load(path: &Path) -> Result<Tokens, TokensError> {
        let read = |source| TokensError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = meta.permissions().mode() & 0o7777;
            if mode & 0o077 != 0 {
                return Err(TokensError::Mode {
                    path: path.to_path_buf(),
                    mode,
                });
            }
        }
        if meta.len() > MAX_TOKENS_FILE_BYTES {
            return Err(TokensError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "{} bytes is larger than the {MAX_TOKENS_FILE_BYTES} a tokens file may be",
                    meta.len()
                ),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Tokens::parse(&text).map_err(|message| TokensError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    fn parse(text: &str) -> Result<Tokens, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            format!("not a TOML table of name = \"sha256 hex\": {}", e.message())
        })?;
        let mut entries = Vec::with_capacity(table.len());
        let mut seen: HashMap<[u8; 32], String> = HashMap::new();
        for (name, value) in table {
            check_name(&name)?;
            let Some(hex) = value.as_str() else {
                return Err(format!(
                    "{name}: expected a string holding the sha256 of the token, found a {}",
                    value.type_str()
                ));
            };
            let hex = hex.strip_prefix("sha256:").unwrap_or(hex);
            let mut sum = [0u8; 32];
            hex::decode_to_slice(hex, &mut sum).map_err(|_| {
                format!(
                    "{name}: expected 64 hex digits (the sha256 of the token, e.g. from \
                     `printf %s \"$TOKEN\" | sha256sum`), never the token itself"
                )
            })?;
            if let Some(other) = seen.insert(sum, name.clone()) {
                return Err(format!("{name} and {other} have the same token"));
            }
            entries.push((Arc::from(name.as_str()), sum));
        }
        if entries.is_empty() {
            return Err("no principals: add a line name = \"<sha256 of its token>\"".to_owned());
        }
        Ok(Tokens {
            entries: Arc::new(entries),
        })
    }

    /// The principal whose token is `presented`, if any. Every entry is
    /// compared, so the time taken does not say which one matched.
    pub(crate) fn principal(&self, presented: &[u8]) -> Option<Principal> {
        let got = digest(presented);
        let mut found = None;
        for (name, sum) in self.entries.iter() {
            if digests_equal(&got, sum) && found.is_none() {
                found = Some(name.clone());
            }
        }
        found.map(Principal::Named)
    }

    /// How many principals there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_PRINCIPAL_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'@'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "principal name {:?} must be 1 to {MAX_PRINCIPAL_NAME_BYTES} ASCII letters, digits, \
             '-', '_', '.' or '@'",
            name.chars()
                .take(MAX_PRINCIPAL_NAME_BYTES)
                .collect::<String>()
        ))
    }
}

/// The unauthenticated principal of a connection from `peer` to `local`:
/// for a loopback peer, the user owning its socket (so two local users are
/// two principals), else the peer's IP address.
pub(crate) fn peer_principal(peer: SocketAddr, local: SocketAddr) -> Principal {
    let who = if peer.ip().is_loopback() {
        socket_owner(peer, local).map_or_else(|| peer.ip().to_string(), |uid| format!("uid {uid}"))
    } else {
        peer.ip().to_string()
    };
    Principal::Peer(Arc::from(who))
}

/// What the netlink lookup has shown in this process: nothing yet, that
/// it works, or that it is unavailable (then `/proc/net` is read).
static NETLINK: AtomicU8 = AtomicU8::new(NETLINK_UNTRIED);
const NETLINK_UNTRIED: u8 = 0;
const NETLINK_WORKS: u8 = 1;
const NETLINK_UNAVAILABLE: u8 = 2;

/// The uid owning the TCP socket whose local end is `peer` and remote end
/// is `local` (our side): asked of the kernel for that one socket
/// ([`sock_diag`]), whatever the number of sockets on the host. Where
/// netlink cannot answer (said once in the log), from `/proc/net/tcp{,6}`,
/// whose cost grows with them. `None` when the socket is not found or no
/// process holds it any more.
#[cfg(target_os = "linux")]
fn socket_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    if NETLINK.load(Ordering::Relaxed) == NETLINK_UNAVAILABLE {
        return proc_socket_owner(peer, local);
    }
    match sock_diag::owner(peer, local) {
        sock_diag::Lookup::Found(uid) => {
            NETLINK.store(NETLINK_WORKS, Ordering::Relaxed);
            Some(uid)
        }
        sock_diag::Lookup::NotFound if NETLINK.load(Ordering::Relaxed) == NETLINK_WORKS => None,
        sock_diag::Lookup::NotFound => {
            // Until netlink has found one socket, "no such socket" may be a
            // kernel without the TCP diagnostics: /proc/net settles it.
            let uid = proc_socket_owner(peer, local);
            if uid.is_some() {
                netlink_unavailable("it did not find a socket /proc/net/tcp lists");
            }
            uid
        }
        sock_diag::Lookup::Failed(e) => {
            tracing::debug!(%peer, "cannot find the user of a loopback peer: {e}");
            None
        }
        sock_diag::Lookup::Unavailable(why) => {
            netlink_unavailable(&why);
            proc_socket_owner(peer, local)
        }
    }
}

/// Off Linux the owner of a peer's socket is not known.
#[cfg(not(target_os = "linux"))]
fn socket_owner(_: SocketAddr, _: SocketAddr) -> Option<u32> {
    None
}

/// From now on loopback peers are found in `/proc/net`; logged once.
#[cfg(target_os = "linux")]
fn netlink_unavailable(why: &str) {
    if NETLINK.swap(NETLINK_UNAVAILABLE, Ordering::Relaxed) != NETLINK_UNAVAILABLE {
        tracing::warn!(
            "the kernel's socket diagnostics (netlink) cannot name the users of loopback peers \
             ({why}): reading /proc/net/tcp instead, which costs more the more sockets the host has"
        );
    }
}

/// [`socket_owner`] from `/proc/net/tcp{,6}`. `None` when the socket is
/// not found.
#[cfg(target_os = "linux")]
fn proc_socket_owner(peer: SocketAddr, local: SocketAddr) -> Option<u32> {
    let (file, mine, theirs) = match (peer, local) {
        (SocketAddr::V4(p), SocketAddr::V4(l)) => (
            "/proc/net/tcp",
            proc_addr_v4(p.ip().octets(), p.port()),
            proc_addr_v4(l.ip().octets(), l.port()),
        ),
        (SocketAddr::V6(p), SocketAddr::V6(l)) => (
            "/proc/net/tcp6",
            proc_addr_v6(p.ip().octets(), p.port()),
            proc_addr_v6(l.ip().octets(), l.port()),
        ),
        _ => return None,
    };
    let table = std::fs::read_to_string(file).ok()?;
    owner_in_table(&table, &mine, &theirs)
}

/// `/proc/net/tcp` spells an IPv4 address as its 32-bit value in host
/// (little-endian on the machines we run on) order, in hex.
fn proc_addr_v4(ip: [u8; 4], port: u16) -> String {
    format!("{:08X}:{port:04X}", u32::from_ne_bytes(ip))
}

/// `/proc/net/tcp6`: four 32-bit words, each in host order.
fn proc_addr_v6(ip: [u8; 16], port: u16) -> String {
    let mut s = String::with_capacity(38);
    for w in ip.chunks_exact(4) {
        s.push_str(&format!(
            "{:08X}",
            u32::from_ne_bytes([w[0], w[1], w[2], w[3]])
        ));
    }
    s.push_str(&format!(":{port:04X}"));
    s
}

/// The uid column of the row whose local and remote addresses are
/// `local` and `remote`, when a process holds the socket (its inode is
/// not 0: a closed socket's row, `TIME_WAIT`'s among them, says uid 0).
fn owner_in_table(table: &str, local: &str, remote: &str) -> Option<u32> {
    table.lines().skip(1).find_map(|line| {
        let mut cols = line.split_ascii_whitespace();
        let (_, l, r) = (cols.next()?, cols.next()?, cols.next()?);
        if !(l.eq_ignore_ascii_case(local) && r.eq_ignore_ascii_case(remote)) {
            return None;
        }
        // st, tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout, inode
        let uid = cols.nth(4)?.parse().ok()?;
        let inode: u64 = cols.nth(1)?.parse().ok()?;
        (inode != 0).then_some(uid)
    })
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    use std::os::unix::process::CommandExt;

    use super::*;

    const ALICE: &str = "2bd806c97f0e00af1a1fc3328fa763a9269723c8db8fac4f93af71db186d6e90";

    #[test]
    fn a_principal_owns_the_roots_it_creates() {
        let alice = Principal::Named(Arc::from("alice"));
        assert!(alice.owns("principal:alice"));
        assert!(!alice.owns("principal:alicia"));
        assert!(!alice.owns("alice/s1"));
        let peer = Principal::Peer(Arc::from("uid 7"));
        assert!(peer.owns("uid 7/s1"));
        assert!(!peer.owns("uid 7/"));
        assert!(!peer.owns("uid 70/s1"));
        assert!(!peer.owns("principal:alice"));
    }

    #[test]
    fn tokens_name_principals_by_digest() {
        assert_eq!(hex::encode(digest(b"alice")), ALICE);
        let t = Tokens::parse(&format!(
            "alice = \"{ALICE}\"\nbob = \"sha256:{}\"\n",
            hex::encode(digest(b"bob"))
        ))
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(
            t.principal(b"alice"),
            Some(Principal::Named(Arc::from("alice")))
        );
        assert_eq!(
            t.principal(b"bob"),
            Some(Principal::Named(Arc::from("bob")))
        );
        assert_eq!(t.principal(b"carol"), None);
        assert_eq!(
            t.principal(ALICE.as_bytes()),
            None,
            "the digest is not the token"
        );
    }

    #[test]
    fn bad_tokens_files_say_what_is_wrong() {
        let err = |text: &str| Tokens::parse(text).unwrap_err();
        assert!(
            err("alice = \"s3cret\"").contains("64 hex digits"),
            "{}",
            err("alice = \"s3cret\"")
        );
        assert!(err("alice = 3").contains("found a integer"));
        assert!(err("").starts_with("no principals"));
        assert!(err("= 1").starts_with("not a TOML table"));
        let twice = format!("a = \"{ALICE}\"\nb = \"{ALICE}\"");
        assert_eq!(err(&twice), "b and a have the same token");
        let bad_name = format!("\"a b\" = \"{ALICE}\"");
        assert!(err(&bad_name).starts_with("principal name \"a b\""));
    }

    #[cfg(unix)]
    #[test]
    fn a_tokens_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, format!("alice = \"{ALICE}\"")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Tokens::load(&path).unwrap_err().to_string();
        assert!(e.contains("(mode 0644): run chmod 600"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Tokens::load(&path).unwrap().len(), 1);
    }

    #[test]
    fn owners_bind_to_the_principal_or_to_session_and_peer() {
        let named = Principal::Named(Arc::from("alice"));
        assert_eq!(named.owner("s1"), "principal:alice");
        assert_eq!(named.owner(""), "principal:alice");
        let peer = Principal::Peer(Arc::from("uid 1000"));
        assert_eq!(peer.owner("s1"), "uid 1000/s1");
        assert_eq!(peer.owner(""), "");
    }

    #[test]
    fn proc_net_tcp_rows_give_the_owner() {
        let local = proc_addr_v4([127, 0, 0, 1], 40000);
        let remote = proc_addr_v4([127, 0, 0, 1], 8808);
        if cfg!(target_endian = "little") {
            assert_eq!(local, "0100007F:9C40");
        }
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  \
             timeout inode\n   0: {remote} {local} 01 00000000:00000000 00:00000000 00000000  \
             1001        0 1 1\n   1: {local} {remote} 01 00000000:00000000 00:00000000 00000000  \
             1000        0 2 1\n"
        );
        assert_eq!(owner_in_table(&table, &local, &remote), Some(1000));
        assert_eq!(owner_in_table(&table, &remote, &local), Some(1001));
        assert_eq!(owner_in_table(&table, &local, &local), None);
        // A row no process holds (inode 0: closed, TIME_WAIT) says uid 0
        // and names nobody.
        let closed = format!(
            "  sl  local_address rem_address   st ...\n   0: {local} {remote} 06 \
             00000000:00000000 03:00000F9A 00000000     0        0 0 3\n"
        );
        assert_eq!(owner_in_table(&closed, &local, &remote), None);
    }

    /// A connected pair on `addr`: the server's end, its address, and the
    /// peer's address as the server sees it.
    #[cfg(target_os = "linux")]
    fn pair(addr: &str) -> (std::net::TcpStream, std::net::TcpStream, SocketAddr) {
        let listener = std::net::TcpListener::bind(addr).unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, peer) = listener.accept().unwrap();
        (client, server_side, peer)
    }

    #[cfg(target_os = "linux")]
    fn euid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn netlink_names_the_user_of_a_loopback_peer_v4_and_v6() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = std::net::TcpListener::bind(addr) else {
                continue; // no IPv6 loopback here
            };
            drop(listener);
            let (_client, server_side, peer) = pair(addr);
            let local = server_side.local_addr().unwrap();
            let found = sock_diag::owner(peer, local);
            assert!(
                matches!(found, sock_diag::Lookup::Found(uid) if uid == euid()),
                "{addr}: {found:?}"
            );
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_peer_of_another_user_is_that_user() {
        if euid() != 0 {
            eprintln!("skipped: only root can connect as another user");
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // bash opens the connection as nobody (65534) and holds it.
        let mut child = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port}; read -t 30 -u 3 _"
            ))
            .uid(65534)
            .gid(65534)
            .spawn()
            .unwrap();
        let (server_side, peer) = listener.accept().unwrap();
        let local = server_side.local_addr().unwrap();
        let found = sock_diag::owner(peer, local);
        let p = peer_principal(peer, local);
        drop(server_side);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            matches!(found, sock_diag::Lookup::Found(65534)),
            "{found:?}"
        );
        assert_eq!(p, Principal::Peer(Arc::from("uid 65534")));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_peer_that_closed_is_nobody_not_root() {
        let (client, server_side, peer) = pair("127.0.0.1:0");
        let local = server_side.local_addr().unwrap();
        drop(client);
        // The closed end becomes a TIME_WAIT remnant, which the kernel
        // reports as uid 0, as soon as our side acknowledges its FIN.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut found = sock_diag::owner(peer, local);
        while matches!(found, sock_diag::Lookup::Found(_)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
            found = sock_diag::owner(peer, local);
        }
        assert!(matches!(found, sock_diag::Lookup::NotFound), "{found:?}");
        assert_eq!(proc_socket_owner(peer, local), None);
        assert_eq!(socket_owner(peer, local), None);
        assert_eq!(
            peer_principal(peer, local),
            Principal::Peer(Arc::from("127.0.0.1"))
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_real_loopback_peer_is_its_user() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, peer) = listener.accept().unwrap();
        let local = server_side.local_addr().unwrap();
        assert_eq!(peer, client.local_addr().unwrap());
        let me = std::fs::metadata("/proc/self").map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid()
        });
        let p = peer_principal(peer, local);
        assert_eq!(
            p,
            Principal::Peer(Arc::from(format!("uid {}", me.unwrap())))
        );
    }
}
