//! The owner of one TCP socket, asked of the kernel by its 4-tuple over
//! the socket-diagnostics netlink interface (`NETLINK_SOCK_DIAG`, an
//! `inet_diag_req_v2` without the dump flag): the kernel finds the socket
//! in its connection hash, so the answer costs the same however many
//! sockets the host has, unlike reading `/proc/net/tcp`.
//!
//! Written on `libc` directly: one fixed-size request and one fixed-size
//! reply (the layouts of `linux/inet_diag.h` and `linux/netlink.h`, built
//! and read as bytes, so there is no unsafe cast), in a bounded buffer.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// `SOCK_DIAG_BY_FAMILY` (`linux/sock_diag.h`): the request and its reply.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `struct nlmsghdr`.
const NLMSG_HDR_LEN: usize = 16;
/// `struct inet_diag_sockid`: ports, two 16-byte addresses, interface,
/// cookie.
const SOCKID_LEN: usize = 48;
/// `nlmsghdr` and `struct inet_diag_req_v2` (family, protocol, extensions,
/// pad, states, sockid).
const REQUEST_LEN: usize = NLMSG_HDR_LEN + 8 + SOCKID_LEN;
/// `struct inet_diag_msg`: family, state, timer, retransmits, sockid,
/// expires, rqueue, wqueue, uid, inode.
const DIAG_MSG_LEN: usize = 4 + SOCKID_LEN + 20;
/// Where `idiag_uid` and `idiag_inode` are in a reply.
const UID_AT: usize = NLMSG_HDR_LEN + 4 + SOCKID_LEN + 12;
const INODE_AT: usize = UID_AT + 4;
/// Largest reply read: an exact lookup is answered with one
/// `inet_diag_msg` (72 bytes) and a few small attributes; 8 KiB leaves
/// room for what any kernel adds and is a stack buffer.
const MAX_REPLY_BYTES: usize = 8192;
/// The kernel answers while the request is being sent; this only bounds a
/// kernel that does not.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);
/// Reads retried after an interrupting signal.
const MAX_INTERRUPTED_READS: usize = 3;

/// What the kernel said about one socket.
#[derive(Debug)]
pub(super) enum Lookup {
    /// The socket exists and is held by a process of this uid.
    Found(u32),
    /// No such socket, or one no process holds any more (closed, or in
    /// `TIME_WAIT`, which the kernel reports as uid 0): its owner is not
    /// known.
    NotFound,
    /// This time only (out of descriptors or memory, a signal): the owner
    /// is not known, and the next lookup may work.
    Failed(io::Error),
    /// This kernel or sandbox cannot answer (no netlink, no `inet_diag`,
    /// a reply not as documented).
    Unavailable(String),
}

/// The owner of the TCP socket whose own end is `end` and whose other end
/// is `other`. Both must be of one family (a v4-mapped IPv6 address is
/// looked up as the kernel does).
pub(super) fn owner(end: SocketAddr, other: SocketAddr) -> Lookup {
    let Some(request) = request(end, other) else {
        return Lookup::NotFound;
    };
    let mut reply = [0u8; MAX_REPLY_BYTES];
    match exchange(&request, &mut reply) {
        Ok(n) => parse(&reply[..n], &request),
        Err(e) if transient(&e) => Lookup::Failed(e),
        Err(e) => Lookup::Unavailable(e.to_string()),
    }
}

/// Errors that say nothing about netlink itself.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EINTR)
    )
}

/// The request for the socket `end` -> `other`; `None` for two families.
fn request(end: SocketAddr, other: SocketAddr) -> Option<[u8; REQUEST_LEN]> {
    let family = match (end, other) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => libc::AF_INET,
        (SocketAddr::V6(_), SocketAddr::V6(_)) => libc::AF_INET6,
        _ => return None,
    };
    let mut b = [0u8; REQUEST_LEN];
    b[0..4].copy_from_slice(&(REQUEST_LEN as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    // NLM_F_REQUEST without NLM_F_DUMP: the one socket of the sockid.
    b[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    b[8..12].copy_from_slice(&1u32.to_ne_bytes());
    let r = &mut b[NLMSG_HDR_LEN..];
    r[0] = family as u8;
    r[1] = libc::IPPROTO_TCP as u8;
    // r[2]: no extensions; r[3]: pad. Every state.
    r[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = &mut r[8..8 + SOCKID_LEN];
    id[0..2].copy_from_slice(&end.port().to_be_bytes());
    id[2..4].copy_from_slice(&other.port().to_be_bytes());
    put_addr(&mut id[4..20], end);
    put_addr(&mut id[20..36], other);
    // id[36..40]: any interface. No cookie (INET_DIAG_NOCOOKIE).
    id[40..48].fill(0xff);
    Some(b)
}

fn put_addr(to: &mut [u8], addr: SocketAddr) {
    match addr {
        SocketAddr::V4(a) => to[..4].copy_from_slice(&a.ip().octets()),
        SocketAddr::V6(a) => to.copy_from_slice(&a.ip().octets()),
    }
}

/// Sends `request` to the kernel on a netlink socket of its own and reads
/// the reply into `reply`; the byte count read.
fn exchange(request: &[u8], reply: &mut [u8]) -> io::Result<usize> {
    // SAFETY: socket takes no pointers; a non-negative result is a new
    // descriptor that the OwnedFd then owns and closes.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a descriptor just opened and owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let timeout = libc::timeval {
        tv_sec: REPLY_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: the option value is a valid timeval of the size passed.
    let set = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if set < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: an all-zero sockaddr_nl is valid; nl_pid 0 is the kernel.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: request and kernel are valid for the lengths passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            request.as_ptr().cast(),
            request.len(),
            0,
            (&raw const kernel).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    for _ in 0..MAX_INTERRUPTED_READS {
        // SAFETY: reply is valid for writes of its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINTR))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// The answer in `reply` to `request`.
fn parse(reply: &[u8], request: &[u8; REQUEST_LEN]) -> Lookup {
    let malformed = |what: &str| Lookup::Unavailable(format!("the kernel's reply {what}"));
    let (Some(len), Some(seq)) = (u32_at(reply, 0), u32_at(reply, 8)) else {
        return malformed("is shorter than a netlink header");
    };
    if (len as usize) < NLMSG_HDR_LEN || len as usize > reply.len() {
        return malformed("has a length outside what was read");
    }
    if seq != 1 {
        return malformed("answers another request");
    }
    let kind = u16::from_ne_bytes([reply[4], reply[5]]);
    if kind == libc::NLMSG_ERROR as u16 {
        return match u32_at(reply, NLMSG_HDR_LEN).map(|e| -(e as i32)) {
            Some(libc::ENOENT) => Lookup::NotFound,
            Some(errno) => Lookup::Unavailable(io::Error::from_raw_os_error(errno).to_string()),
            None => malformed("is an error without its code"),
        };
    }
    if kind != SOCK_DIAG_BY_FAMILY || (len as usize) < NLMSG_HDR_LEN + DIAG_MSG_LEN {
        return malformed("is not a socket description");
    }
    // The ports of the socket found are those asked for.
    let ports = NLMSG_HDR_LEN + 4..NLMSG_HDR_LEN + 8;
    if reply[ports] != request[NLMSG_HDR_LEN + 8..NLMSG_HDR_LEN + 12] {
        return malformed("describes another socket");
    }
    match (u32_at(reply, UID_AT), u32_at(reply, INODE_AT)) {
        // No inode: no process holds the socket (closed, or a TIME_WAIT
        // remnant reported as uid 0), so its uid names nobody.
        (Some(_), Some(0)) => Lookup::NotFound,
        (Some(uid), Some(_)) => Lookup::Found(uid),
        _ => malformed("is cut short"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_not_as_documented_are_unavailable_never_an_owner() {
        let local: SocketAddr = "127.0.0.1:8808".parse().unwrap();
        let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let request = request(peer, local).unwrap();
        let mut reply = [0u8; NLMSG_HDR_LEN + DIAG_MSG_LEN];
        let len = reply.len() as u32;
        reply[0..4].copy_from_slice(&len.to_ne_bytes());
        reply[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        reply[8..12].copy_from_slice(&1u32.to_ne_bytes());
        reply[NLMSG_HDR_LEN + 4..NLMSG_HDR_LEN + 8]
            .copy_from_slice(&request[NLMSG_HDR_LEN + 8..NLMSG_HDR_LEN + 12]);
        reply[UID_AT..UID_AT + 4].copy_from_slice(&1000u32.to_ne_bytes());
        reply[INODE_AT..INODE_AT + 4].copy_from_slice(&77u32.to_ne_bytes());
        assert!(matches!(parse(&reply, &request), Lookup::Found(1000)));
        // Held by no process: no owner.
        let mut orphan = reply;
        orphan[INODE_AT..INODE_AT + 4].fill(0);
        assert!(matches!(parse(&orphan, &request), Lookup::NotFound));
        let unavailable = |r: &[u8]| matches!(parse(r, &request), Lookup::Unavailable(_));
        assert!(unavailable(&reply[..10]), "short");
        assert!(unavailable(&reply[..NLMSG_HDR_LEN + 8]), "cut short");
        let mut other = reply;
        other[NLMSG_HDR_LEN + 4] ^= 1;
        assert!(unavailable(&other), "another socket");
        let mut seq = reply;
        seq[8] = 9;
        assert!(unavailable(&seq), "another request");
        // An error reply: ENOENT is "no such socket", others say netlink
        // cannot answer here.
        let mut error = [0u8; NLMSG_HDR_LEN + 4];
        let error_len = error.len() as u32;
        error[0..4].copy_from_slice(&error_len.to_ne_bytes());
        error[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        error[8..12].copy_from_slice(&1u32.to_ne_bytes());
        error[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert!(matches!(parse(&error, &request), Lookup::NotFound));
        error[16..20].copy_from_slice(&(-libc::EINVAL).to_ne_bytes());
        assert!(unavailable(&error));
    }

    #[test]
    fn two_families_are_not_one_socket() {
        let v4: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let v6: SocketAddr = "[::1]:2".parse().unwrap();
        assert!(matches!(owner(v4, v6), Lookup::NotFound));
    }
}
