//! PostgreSQL as the store shared by several hosts: the connection layer
//! every PostgreSQL backend of the store's roles uses.
//!
//! # The interface
//!
//! ```text
//! #[derive(Clone)] pub(crate) struct Pg { .. }          // cheap to clone
//! Pg::connect(url: &str) -> Result<Pg, StoreError>
//! Pg::server(&self) -> &str                              // "host:port/db", never a secret
//! async Pg::transaction<T>(&self, what: &str, synchronous_commit: bool, f: impl TxBody<T>)
//!     -> Result<T, StoreError>
//! Pg::transaction_blocking<T>(&self, what: &str, synchronous_commit: bool, f: impl TxBody<T>)
//!     -> Result<T, StoreError>                           // block_on(transaction(..))
//!   where TxBody<T>: for<'t> FnMut(&'t tokio_postgres::Transaction<'t>)
//!               -> BoxFuture<'t, Result<T, PgTxError>> + Send + 'static,
//!         T: Send + 'static
//! pub(crate) enum PgTxError { Db(tokio_postgres::Error), Store(StoreError) }
//! ```
//!
//! The future `f` returns may borrow the transaction only: whatever else it
//! needs it owns (clone it inside the closure, which runs again on every
//! retry), e.g.
//!
//! ```text
//! let text = encode(row)?;
//! pg.transaction("append to the journal", true, move |tx| {
//!     let text = text.clone();
//!     async move { Ok(tx.execute("insert ...", &[&text]).await?) }.boxed()
//! }).await?
//! ```
//!
//! # How it runs
//!
//! A `Pg` owns a small tokio runtime of its own (one worker thread named
//! `sandgraph-pg`). Every connection is opened on it and its connection
//! task (the socket) lives there, and pool waits and retry back-off sleep
//! there. A transaction is written once, as the async `transaction`, and
//! runs as a task on that runtime, so it works from any executor and any
//! tokio runtime (even one that is later dropped). `transaction_blocking`
//! is that future waited for through the store's one blocking bridge
//! (`crate::bridge::block_on`): it neither panics inside a runtime's worker
//! or blocking-pool thread nor deadlocks there, since what it waits for
//! runs on the `Pg`'s own runtime. (Blocking a runtime worker still stalls
//! that worker's other tasks: async code should use `transaction`.) The
//! declared tables' transactions (`rows.rs`) are the exception that runs on
//! the caller's thread, because their bodies are synchronous: each of
//! their statements goes through the same bridge.
//!
//! Transactions run at `SERIALIZABLE` isolation, PostgreSQL's equivalent of
//! redb's serial write transactions: every check a backend reads inside its
//! transaction holds when it commits. A transaction that loses a conflict
//! (SQLSTATE 40001) or a deadlock (40P01) is rolled back and run again, from
//! the start, after a jittered back-off, up to [`MAX_ATTEMPTS`] times.
//! Nothing else is retried: an error on `COMMIT` after a lost connection
//! may or may not have committed, and only the caller knows whether running
//! it again is safe.

pub(crate) mod rows;
pub(crate) mod schema;
pub(crate) mod threads;

use std::hash::{BuildHasher, Hasher};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use futures::future::BoxFuture;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Config, IsolationLevel, NoTls};

use crate::StoreError;

/// Connections a `Pg` keeps open at most.
pub(crate) const MAX_CONNECTIONS: usize = 16;
/// How long opening a connection may take, unless the URL says
/// (`connect_timeout=`).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a transaction waits for a free connection of the pool.
pub(crate) const POOL_WAIT_TIMEOUT: Duration = Duration::from_secs(30);
/// The statement timeout unless the URL sets one
/// (`options=-c statement_timeout=...`).
pub(crate) const STATEMENT_TIMEOUT: &str = "30s";
/// A session idle inside a transaction this long is ended by the server, so
/// a host that hangs mid-transaction does not hold its locks forever,
/// unless the URL sets `idle_in_transaction_session_timeout`.
pub(crate) const IDLE_IN_TRANSACTION_TIMEOUT: &str = "60s";
/// TCP keepalive idle time: a dead server or host is noticed.
pub(crate) const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// Runs of one transaction at most (the first and the retries).
pub(crate) const MAX_ATTEMPTS: u32 = 12;
/// Back-off before the first retry; doubled each time, up to
/// [`MAX_BACKOFF`], and jittered to 50-100 % of that.
const FIRST_BACKOFF: Duration = Duration::from_millis(2);
const MAX_BACKOFF: Duration = Duration::from_millis(250);

/// An error inside a transaction closure: a database error (maybe
/// retryable) or a store rule that refused the operation (returned as is,
/// no retry).
#[derive(Debug)]
pub(crate) enum PgTxError {
    Db(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for PgTxError {
    fn from(e: tokio_postgres::Error) -> Self {
        PgTxError::Db(e)
    }
}

impl From<StoreError> for PgTxError {
    fn from(e: StoreError) -> Self {
        PgTxError::Store(e)
    }
}

/// The body of a transaction, called with the open transaction (again on
/// every retry). The future it returns may borrow the transaction only.
pub(crate) trait TxBody<T>:
    for<'t> FnMut(&'t tokio_postgres::Transaction<'t>) -> BoxFuture<'t, Result<T, PgTxError>>
    + Send
    + 'static
{
}

impl<T, F> TxBody<T> for F where
    F: for<'t> FnMut(&'t tokio_postgres::Transaction<'t>) -> BoxFuture<'t, Result<T, PgTxError>>
        + Send
        + 'static
{
}

/// A PostgreSQL database shared by several hosts. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Pg {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    server: String,
    /// The password of the URL, to scrub from any message (the driver does
    /// not put it in its errors; this makes sure).
    password: Option<String>,
    /// Owned so that it lives as long as the last clone; `None` only while
    /// dropping.
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside another runtime's
        // worker; shutting it down in the background does not.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pg")
            .field("server", &self.inner.server)
            .finish_non_exhaustive()
    }
}

/// Whether `location` is a PostgreSQL URL (`postgres://` or
/// `postgresql://`) rather than a file path.
pub(crate) fn is_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// `location` as it may be printed: a PostgreSQL URL with its password
/// replaced by `***`, both the one in the user info
/// (`postgres://user:***@host/db`) and a `password=` parameter; anything
/// else as it is. Every message, warning and log line that names a store
/// location goes through this.
///
/// It errs on the side of hiding: the user info ends at the last `@` of
/// the URL (a password with an unencoded `@` or `/` is hidden whole), so a
/// URL whose parameters hold an `@` may show less than it could.
pub fn redact_url(location: &str) -> String {
    if !is_url(location) {
        return location.to_owned();
    }
    let Some(start) = location.find("://").map(|i| i + 3) else {
        return location.to_owned();
    };
    let (scheme, rest) = location.split_at(start);
    let mut out = String::with_capacity(location.len());
    out.push_str(scheme);
    let after = match rest.rfind('@') {
        Some(at) => {
            let user_info = &rest[..at];
            match user_info.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(user_info),
            }
            &rest[at..]
        }
        None => rest,
    };
    let Some((path, query)) = after.split_once('?') else {
        out.push_str(after);
        return out;
    };
    out.push_str(path);
    out.push('?');
    for (i, param) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match param.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                out.push_str(name);
                out.push_str("=***");
            }
            _ => out.push_str(param),
        }
    }
    out
}

/// `host:port/dbname` (or `socket-dir:port/dbname`) of a parsed URL.
fn server_name(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) if h.contains(':') => format!("[{h}]"),
        Some(Host::Tcp(h)) => h.clone(),
        #[cfg(unix)]
        Some(Host::Unix(dir)) => dir.display().to_string(),
        None => "localhost".to_owned(),
    };
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

/// Adds `-c name=value` to the session options unless the URL sets `name`.
fn default_option(config: &mut Config, name: &str, value: &str) {
    let current = config.get_options().unwrap_or("").to_owned();
    if current.contains(name) {
        return;
    }
    let joined = if current.trim().is_empty() {
        format!("-c {name}={value}")
    } else {
        format!("{current} -c {name}={value}")
    };
    config.options(&joined);
}

impl Pg {
    /// Connects (pool of up to [`MAX_CONNECTIONS`], connect timeout,
    /// statement timeout, TCP keepalive), applies migrations, refuses a
    /// database whose schema is newer than this binary's.
    pub(crate) fn connect(url: &str) -> Result<Pg, StoreError> {
        let pg = Pg::open(url)?;
        crate::bridge::block_on(schema::migrate(&pg))?;
        Ok(pg)
    }

    /// The pool and runtime, without touching the server.
    fn open(url: &str) -> Result<Pg, StoreError> {
        if !is_url(url) {
            return Err(StoreError::InvalidArgument(
                "a postgres store is named by a postgres:// or postgresql:// url".to_owned(),
            ));
        }
        // The driver's parse errors name the option, never its value.
        let mut config = Config::from_str(url).map_err(|e| StoreError::Postgres {
            server: "(url)".to_owned(),
            message: format!("invalid postgres url: {e}"),
        })?;
        let server = server_name(&config);
        match config.get_ssl_mode() {
            tokio_postgres::config::SslMode::Disable | tokio_postgres::config::SslMode::Prefer => {}
            _ => {
                return Err(StoreError::Postgres {
                    server,
                    message: "sslmode=require is not supported: sandgraph has no TLS for \
                              postgres yet; connect over loopback, a unix socket or an ssh tunnel"
                        .to_owned(),
                });
            }
        }
        // `prefer` falls back to plaintext; say so by not trying at all.
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.keepalives(true);
        config.keepalives_idle(KEEPALIVE_IDLE);
        if config.get_application_name().is_none() {
            config.application_name("sandgraph");
        }
        default_option(&mut config, "statement_timeout", STATEMENT_TIMEOUT);
        default_option(
            &mut config,
            "idle_in_transaction_session_timeout",
            IDLE_IN_TRANSACTION_TIMEOUT,
        );
        let password = config
            .get_password()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .filter(|p| !p.is_empty());
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(MAX_CONNECTIONS)
            .build()
            .map_err(|e| StoreError::Postgres {
                server: server.clone(),
                message: format!("cannot make the connection pool: {e}"),
            })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sandgraph-pg")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Postgres {
                server: server.clone(),
                message: format!("cannot start the connection thread: {e}"),
            })?;
        let handle = runtime.handle().clone();
        Ok(Pg {
            inner: Arc::new(Inner {
                pool,
                server,
                password,
                runtime: Some(runtime),
                handle,
            }),
        })
    }

    /// `host:port/dbname` (or the socket dir) for messages: never the
    /// password or user secrets.
    pub(crate) fn server(&self) -> &str {
        &self.inner.server
    }

    /// A connection of the pool, opened (and its socket served) on the
    /// `Pg`'s runtime.
    async fn connection(&self, what: &str) -> Result<deadpool_postgres::Object, StoreError> {
        let pool = self.inner.pool.clone();
        let got = self
            .inner
            .handle
            .spawn(async move { tokio::time::timeout(POOL_WAIT_TIMEOUT, pool.get()).await })
            .await;
        match got {
            Ok(Ok(Ok(conn))) => Ok(conn),
            Ok(Ok(Err(e))) => Err(self.pool_error(what, e)),
            Ok(Err(_elapsed)) => Err(self.error(
                what,
                format!(
                    "no free connection within {}s ({MAX_CONNECTIONS} in use)",
                    POOL_WAIT_TIMEOUT.as_secs()
                ),
            )),
            Err(e) => Err(self.error(what, format!("the connection thread failed: {e}"))),
        }
    }

    /// Sleeps on the `Pg`'s runtime (the caller may have no timer).
    async fn sleep(&self, d: Duration) {
        // Made inside the task: a timer is bound to the runtime it is
        // created on.
        let _ = self
            .inner
            .handle
            .spawn(async move { tokio::time::sleep(d).await })
            .await;
    }

    /// Runs `f` in one transaction and returns its result; retries the
    /// whole transaction (calling `f` again) on serialization failure
    /// (SQLSTATE 40001) and deadlock (40P01), up to [`MAX_ATTEMPTS`] runs
    /// with jittered exponential back-off. When `synchronous_commit` is
    /// false the transaction runs with `SET LOCAL synchronous_commit = off`
    /// (its commit returns before its WAL is flushed). Usable from async
    /// code without blocking a runtime worker.
    ///
    /// The transaction runs as a task on the `Pg`'s own runtime, never on
    /// the caller's: a transaction that holds a pooled connection must not
    /// depend on the caller's workers to finish, or callers blocked in
    /// [`Pg::transaction_blocking`] on every worker of a runtime, waiting
    /// for a connection, would starve the transactions that hold them (a
    /// deadlock seen with 20 concurrent durable runs on one host). If the
    /// caller stops waiting, the transaction still finishes.
    pub(crate) async fn transaction<T: Send + 'static>(
        &self,
        what: &str,
        synchronous_commit: bool,
        f: impl TxBody<T>,
    ) -> Result<T, StoreError> {
        let this = self.clone();
        let op = what.to_owned();
        let task = self
            .inner
            .handle
            .spawn(async move { this.transaction_here(&op, synchronous_commit, f).await });
        match task.await {
            Ok(out) => out,
            Err(e) => Err(self.error(what, format!("the connection thread failed: {e}"))),
        }
    }

    /// [`Pg::transaction`] on the current task (the `Pg`'s runtime).
    async fn transaction_here<T: Send + 'static>(
        &self,
        what: &str,
        synchronous_commit: bool,
        mut f: impl TxBody<T>,
    ) -> Result<T, StoreError> {
        let mut retries = Retries::default();
        loop {
            let mut conn = self.connection(what).await?;
            let run = async {
                let client: &mut tokio_postgres::Client = &mut conn;
                let tx = client
                    .build_transaction()
                    .isolation_level(IsolationLevel::Serializable)
                    .start()
                    .await?;
                if !synchronous_commit {
                    tx.batch_execute("SET LOCAL synchronous_commit = off")
                        .await?;
                }
                let out = f(&tx).await?;
                tx.commit().await?;
                Ok::<T, PgTxError>(out)
            };
            match run.await {
                Ok(out) => return Ok(out),
                Err(PgTxError::Store(e)) => return Err(e),
                Err(PgTxError::Db(e)) if retryable(&e) => {
                    let pause = retries.after_conflict(self, what, Some(&e))?;
                    drop(conn);
                    self.sleep(pause).await;
                }
                Err(PgTxError::Db(e)) => return Err(self.db_error(what, &e)),
            }
        }
    }

    /// [`Pg::transaction`], blocking the calling thread through the store's
    /// one bridge ([`crate::bridge::block_on`]): works with and without a
    /// current tokio runtime, also from inside a runtime's worker or
    /// blocking-pool thread (it does not panic there, but it does stall
    /// that worker: async code should await `transaction`).
    pub(crate) fn transaction_blocking<T: Send + 'static>(
        &self,
        what: &str,
        synchronous_commit: bool,
        f: impl TxBody<T>,
    ) -> Result<T, StoreError> {
        crate::bridge::block_on(self.transaction(what, synchronous_commit, f))
    }

    /// A plain error about `what` on this server.
    pub(crate) fn error(&self, what: &str, message: String) -> StoreError {
        StoreError::Postgres {
            server: self.inner.server.clone(),
            message: self.scrub(format!("{what}: {message}")),
        }
    }

    /// A database error of `what`, in words, never with the password.
    pub(crate) fn db_error(&self, what: &str, e: &tokio_postgres::Error) -> StoreError {
        self.error(what, self.describe(e))
    }

    fn pool_error(&self, what: &str, e: deadpool_postgres::PoolError) -> StoreError {
        use deadpool_postgres::PoolError;
        match e {
            PoolError::Backend(e) => self.db_error(what, &e),
            e => self.error(what, format!("no connection: {e}")),
        }
    }

    /// What went wrong, by SQLSTATE where one says more than the driver.
    fn describe(&self, e: &tokio_postgres::Error) -> String {
        let text = match e.as_db_error() {
            Some(db) => {
                let code = db.code();
                let hint = if *code == SqlState::INVALID_PASSWORD
                    || *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION
                {
                    "authentication failed (check the user and password of the url)"
                } else if *code == SqlState::INVALID_CATALOG_NAME {
                    "the database does not exist (create it first)"
                } else if *code == SqlState::QUERY_CANCELED {
                    "a statement ran into the statement timeout (set one with \
                     options=-c statement_timeout=...)"
                } else if *code == SqlState::TOO_MANY_CONNECTIONS {
                    "the server has no free connection slot"
                } else if *code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT {
                    "the session stayed idle in a transaction too long"
                } else if code.code().starts_with("08") || code.code().starts_with("57P") {
                    "the connection was lost"
                } else {
                    ""
                };
                let detail = format!(
                    "{} ({}, sqlstate {})",
                    db.message(),
                    db.severity(),
                    code.code()
                );
                if hint.is_empty() {
                    detail
                } else {
                    format!("{hint}: {detail}")
                }
            }
            None if e.is_closed() => format!("the connection was lost: {e}"),
            None => {
                // Connection failures: the driver's text plus its cause
                // (refused, timed out, name not resolved).
                let mut text = e.to_string();
                let mut source = std::error::Error::source(e);
                while let Some(s) = source {
                    let more = s.to_string();
                    if !text.contains(&more) {
                        text = format!("{text}: {more}");
                    }
                    source = s.source();
                }
                text
            }
        };
        self.scrub(text)
    }

    /// `text` with the URL's password replaced by `***`.
    fn scrub(&self, text: String) -> String {
        match &self.inner.password {
            Some(p) if text.contains(p.as_str()) => text.replace(p.as_str(), "***"),
            _ => text,
        }
    }
}

/// Where a transaction is in its runs: every transaction of a `Pg` that
/// loses a conflict runs again, up to [`MAX_ATTEMPTS`] runs, after a
/// jittered back-off that doubles from [`FIRST_BACKOFF`] up to
/// [`MAX_BACKOFF`].
struct Retries {
    /// The run under way, from 1.
    attempt: u32,
    backoff: Duration,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            attempt: 1,
            backoff: FIRST_BACKOFF,
        }
    }
}

impl Retries {
    /// After the run under way lost a conflict (`cause`, when the
    /// statement's error is at hand): the pause before the next run, or
    /// the error that gives up when that run was the last allowed.
    fn after_conflict(
        &mut self,
        pg: &Pg,
        what: &str,
        cause: Option<&tokio_postgres::Error>,
    ) -> Result<Duration, StoreError> {
        let attempt = self.attempt;
        if attempt >= MAX_ATTEMPTS {
            let cause = cause.map_or_else(String::new, |e| format!(": {}", pg.describe(e)));
            return Err(pg.error(
                what,
                format!(
                    "gave up after {attempt} attempts that each lost a conflict with \
                     another transaction{cause}"
                ),
            ));
        }
        let cause = cause.map_or_else(String::new, |e| format!(" ({e})"));
        tracing::debug!(
            server = %pg.server(),
            "{what}: attempt {attempt} lost a conflict{cause}; retrying"
        );
        let pause = jitter(self.backoff);
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.attempt += 1;
        Ok(pause)
    }
}

/// Whether a transaction that failed with `e` may simply run again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// 50-100 % of `d`, at random: hosts that lost the same conflict do not
/// retry in lockstep.
fn jitter(d: Duration) -> Duration {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos()),
    );
    let frac = (h.finish() % 1000) as f64 / 1000.0;
    d.mul_f64(0.5 + 0.5 * frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_host_port_and_database_but_no_secret() {
        let c = Config::from_str("postgres://alice:s3cret@db.example:6543/sg").unwrap();
        assert_eq!(server_name(&c), "db.example:6543/sg");
        let c = Config::from_str("postgresql://bob@127.0.0.1/").unwrap();
        assert_eq!(server_name(&c), "127.0.0.1:5432/bob");
    }

    #[test]
    fn printed_urls_never_hold_the_password() {
        for (url, shown) in [
            (
                "postgres://alice:s3cret@db.example:6543/sg",
                "postgres://alice:***@db.example:6543/sg",
            ),
            (
                "postgresql://alice:s3cret@h/db?password=s3cret&application_name=x",
                "postgresql://alice:***@h/db?password=***&application_name=x",
            ),
            (
                "postgres://h/db?user=alice&password=s3cret",
                "postgres://h/db?user=alice&password=***",
            ),
            // Unencoded `@`, `/`, `?` and `:` in the password: hidden whole.
            (
                "postgres://alice:s3:c/r?e@t@h:5432/db",
                "postgres://alice:***@h:5432/db",
            ),
            ("postgres://alice:@h/db", "postgres://alice:***@h/db"),
            // Nothing to hide.
            ("postgres://alice@h:5432/db", "postgres://alice@h:5432/db"),
            ("postgres://h:5432/db", "postgres://h:5432/db"),
            (
                "/var/lib/sandgraph/threads.redb",
                "/var/lib/sandgraph/threads.redb",
            ),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn tls_is_refused_clearly() {
        let err = Pg::connect("postgres://u:pw@127.0.0.1:1/db?sslmode=require").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("sslmode=require is not supported"), "{text}");
        assert!(
            text.contains("127.0.0.1:1/db") && !text.contains("pw"),
            "{text}"
        );
    }

    #[test]
    fn options_keep_what_the_url_sets() {
        let mut c =
            Config::from_str("postgres://u@h/d?options=-c%20statement_timeout%3D5s").unwrap();
        default_option(&mut c, "statement_timeout", STATEMENT_TIMEOUT);
        default_option(&mut c, "idle_in_transaction_session_timeout", "60s");
        assert_eq!(
            c.get_options(),
            Some("-c statement_timeout=5s -c idle_in_transaction_session_timeout=60s")
        );
    }

    #[test]
    fn jitter_stays_between_half_and_all() {
        for _ in 0..100 {
            let d = jitter(Duration::from_millis(100));
            assert!(d >= Duration::from_millis(50) && d <= Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod live_tests;
