//! The front door with no protocol behind it: a trivial route set on a
//! real listener on 127.0.0.1, to check what every route set gets from the
//! server: the bind refusals and the connection limits (header-read
//! timeout, connection cap with eviction, `503` when every connection is
//! busy).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use sandgraph_server::{
    Admission, AdmissionOptions, ConnLimits, DEFAULT_HEADER_READ_TIMEOUT, Door, HttpOptions,
    HttpServer, RouteSet,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// How long anything that should happen at once may take on a loaded
/// machine.
const SOON: Duration = Duration::from_secs(10);

fn localhost() -> HttpOptions {
    HttpOptions::new("127.0.0.1:0".parse().unwrap())
}

fn admission() -> Admission {
    Admission::new(AdmissionOptions::default())
}

/// `GET /ping` answers `pong`; `GET /hold` counts itself in `held` and
/// answers `released` once `release` is notified.
fn routes(release: Arc<Notify>, held: Arc<AtomicUsize>) -> Box<dyn RouteSet> {
    Box::new(move |_: &Door| {
        Router::new()
            .route("/ping", get(|| async { "pong" }))
            .route(
                "/hold",
                get(move || async move {
                    held.fetch_add(1, Ordering::SeqCst);
                    release.notified().await;
                    "released"
                }),
            )
    })
}

async fn serve(options: HttpOptions) -> (HttpServer, Arc<Notify>, Arc<AtomicUsize>) {
    let (release, held) = (Arc::new(Notify::new()), Arc::new(AtomicUsize::new(0)));
    let routes = routes(release.clone(), held.clone());
    let http = HttpServer::bind(admission(), vec![routes], options)
        .await
        .unwrap();
    (http, release, held)
}

/// `GET /ping` from a fresh client: its status and body.
async fn ping(http: &HttpServer) -> (u16, String) {
    let r = reqwest::Client::new()
        .get(http.url("/ping"))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// Raises this process's open-file soft limit to `want` (or the hard
/// limit), for tests that hold thousands of sockets.
fn raise_fd_limit(want: u64) {
    // SAFETY: getrlimit/setrlimit write and read the plain struct given.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

/// Whether the server closed `tcp` (end of stream or reset), after
/// waiting at most `within`.
async fn closed_by_server(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 512];
    loop {
        match tokio::time::timeout(within, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            // A 408 or 503 before the close.
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test]
async fn non_loopback_addresses_need_allow_remote() {
    let options = HttpOptions::new("0.0.0.0:0".parse().unwrap());
    let err = HttpServer::bind(admission(), Vec::new(), options)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("refusing to listen on non-loopback address 0.0.0.0:0"),
        "{err}"
    );
    let options = HttpOptions {
        token: Some(String::new()),
        ..localhost()
    };
    let err = HttpServer::bind(admission(), Vec::new(), options)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "the bearer token is empty");
}

#[tokio::test]
async fn a_slow_loris_client_is_cut_off_and_others_are_served() {
    let options = HttpOptions {
        conn: ConnLimits {
            header_read_timeout: Duration::from_millis(400),
            ..ConnLimits::default()
        },
        ..localhost()
    };
    let (http, _, _) = serve(options).await;
    let addr = http.local_addr();
    // Headers trickled a byte every 100 ms never finish in time.
    let mut loris = tokio::net::TcpStream::connect(addr).await.unwrap();
    let trickle = async {
        for b in b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaa" {
            if loris.write_all(&[*b]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    // Stopped (the write failed) well before the 6 s of trickling end.
    assert!(
        tokio::time::timeout(SOON, trickle).await.unwrap(),
        "the server waited for the whole trickle"
    );
    // A client that connects and sends nothing is closed too.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    assert!(closed_by_server(&mut silent, SOON).await);
    // Meanwhile a normal client is served.
    assert_eq!(ping(&http).await, (200, "pong".to_owned()));
}

#[tokio::test]
async fn two_thousand_idle_connections_do_not_lock_out_a_client() {
    raise_fd_limit(8192);
    let cap = 200;
    let options = HttpOptions {
        conn: ConnLimits {
            max_connections: cap,
            ..ConnLimits::default()
        },
        ..localhost()
    };
    let (http, _, _) = serve(options).await;
    let addr = http.local_addr();
    let mut idle = Vec::with_capacity(2000);
    for _ in 0..2000 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // A normal client connects past them and is served at once (far
    // before the 10 s header timeout would have freed anything).
    let started = std::time::Instant::now();
    assert_eq!(ping(&http).await, (200, "pong".to_owned()));
    assert!(started.elapsed() < DEFAULT_HEADER_READ_TIMEOUT);
    // The server holds at most its cap: the rest were closed.
    let mut closed = 0;
    for tcp in &mut idle {
        if closed_by_server(tcp, Duration::from_millis(1)).await {
            closed += 1;
        }
    }
    assert!(
        closed >= 2000 - cap,
        "only {closed} of 2000 idle connections were closed"
    );
}

#[tokio::test]
async fn when_every_connection_is_busy_a_new_one_gets_503() {
    let options = HttpOptions {
        conn: ConnLimits {
            max_connections: 1,
            ..ConnLimits::default()
        },
        ..localhost()
    };
    let (http, release, held) = serve(options).await;
    // The one connection is busy with a request.
    let holder = reqwest::Client::new();
    let hold = tokio::spawn(holder.get(http.url("/hold")).send());
    let deadline = tokio::time::Instant::now() + SOON;
    while held.load(Ordering::SeqCst) == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the hold never came"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = reqwest::Client::new()
        .get(http.url("/ping"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    assert_eq!(
        r.text().await.unwrap(),
        "too many open connections; retry later\n"
    );
    release.notify_one();
    let r = hold.await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "released");
    // With the request over, its connection is idle and gives way.
    assert_eq!(ping(&http).await, (200, "pong".to_owned()));
}
