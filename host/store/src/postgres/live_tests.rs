//! The connection layer against a real PostgreSQL (the throwaway cluster of
//! `tests/src/postgres.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use futures::FutureExt;

use super::*;

#[allow(dead_code)]
#[path = "../../../../tests/src/postgres.rs"]
mod fixture;

fn fresh(name: &str) -> (std::sync::Arc<fixture::TestPostgres>, Pg) {
    let cluster = fixture::TestPostgres::shared();
    let pg = Pg::connect(&cluster.fresh_db(name)).unwrap();
    (cluster, pg)
}

fn counter(pg: &Pg) {
    pg.transaction_blocking("make the counter", true, |tx| {
        async move {
            tx.batch_execute(
                "CREATE TABLE counter (id int PRIMARY KEY, n bigint NOT NULL);
                 INSERT INTO counter VALUES (1, 0)",
            )
            .await?;
            Ok::<_, PgTxError>(())
        }
        .boxed()
    })
    .unwrap();
}

fn read_counter(pg: &Pg) -> i64 {
    pg.transaction_blocking("read the counter", true, |tx| {
        async move {
            let row = tx.query_one("SELECT n FROM counter", &[]).await?;
            Ok::<i64, PgTxError>(row.get(0))
        }
        .boxed()
    })
    .unwrap()
}

#[test]
fn conflicting_transactions_are_retried_until_both_commit() {
    let (_cluster, pg) = fresh("retry");
    counter(&pg);
    // An async barrier: transactions run as tasks on the store's one-thread
    // runtime, where a blocking wait would stall the other transaction.
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let attempts = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (pg, barrier, attempts) = (pg.clone(), barrier.clone(), attempts.clone());
            std::thread::spawn(move || {
                let mut first = true;
                pg.transaction_blocking("bump the counter", true, move |tx| {
                    attempts.fetch_add(1, Ordering::SeqCst);
                    // Both read before either writes (on the first run):
                    // one of them must lose the serialization conflict.
                    let wait = std::mem::take(&mut first).then(|| barrier.clone());
                    async move {
                        let n: i64 = tx.query_one("SELECT n FROM counter", &[]).await?.get(0);
                        if let Some(b) = wait {
                            b.wait().await;
                        }
                        tx.execute("UPDATE counter SET n = $1", &[&(n + 1)]).await?;
                        Ok::<_, PgTxError>(())
                    }
                    .boxed()
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap().unwrap();
    }
    assert_eq!(read_counter(&pg), 2, "no increment was lost");
    assert!(
        attempts.load(Ordering::SeqCst) >= 3,
        "one transaction ran again"
    );
}

#[test]
fn a_conflict_that_never_ends_gives_up_naming_the_operation() {
    let (_cluster, pg) = fresh("give_up");
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    let err = pg
        .transaction_blocking("append to the test log", true, move |tx| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tx.batch_execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$",
                )
                .await?;
                Ok::<_, PgTxError>(())
            }
            .boxed()
        })
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(runs.load(Ordering::SeqCst), MAX_ATTEMPTS);
    assert!(
        text.starts_with(&format!(
            "postgres {}: append to the test log: gave up after {MAX_ATTEMPTS} attempts",
            pg.server()
        )),
        "{text}"
    );
}

#[test]
fn a_store_refusal_is_returned_as_is_and_rolls_back() {
    let (_cluster, pg) = fresh("refusal");
    counter(&pg);
    let err = pg
        .transaction_blocking("bump and refuse", true, |tx| {
            async move {
                tx.execute("UPDATE counter SET n = 41", &[]).await?;
                Err::<(), _>(PgTxError::Store(StoreError::InvalidArgument("no".into())))
            }
            .boxed()
        })
        .unwrap_err();
    assert!(
        matches!(err, StoreError::InvalidArgument(ref m) if m == "no"),
        "{err:?}"
    );
    assert_eq!(
        read_counter(&pg),
        0,
        "the refused transaction wrote nothing"
    );
}

#[test]
fn asynchronous_commit_still_commits() {
    let (_cluster, pg) = fresh("async_commit");
    counter(&pg);
    let setting = pg
        .transaction_blocking("bump without waiting for the wal", false, |tx| {
            async move {
                tx.execute("UPDATE counter SET n = n + 1", &[]).await?;
                let row = tx.query_one("SHOW synchronous_commit", &[]).await?;
                Ok::<String, PgTxError>(row.get(0))
            }
            .boxed()
        })
        .unwrap();
    assert_eq!(setting, "off");
    assert_eq!(read_counter(&pg), 1);
}

#[test]
fn transactions_run_from_any_thread_of_a_tokio_runtime() {
    let (_cluster, pg) = fresh("runtimes");
    counter(&pg);
    let bump = |pg: &Pg| {
        pg.transaction_blocking("bump", true, |tx| {
            async move {
                tx.execute("UPDATE counter SET n = n + 1", &[]).await?;
                Ok::<_, PgTxError>(())
            }
            .boxed()
        })
        .unwrap()
    };
    for flavor in ["current_thread", "multi_thread"] {
        let rt = match flavor {
            "current_thread" => tokio::runtime::Builder::new_current_thread(),
            _ => tokio::runtime::Builder::new_multi_thread(),
        }
        .enable_all()
        .build()
        .unwrap();
        let pg2 = pg.clone();
        rt.block_on(async move {
            // Blocking calls on a worker (more than tokio's budget of 128
            // in one poll) and on the blocking pool, then the async one.
            for _ in 0..130 {
                bump(&pg2);
            }
            let pg3 = pg2.clone();
            tokio::task::spawn_blocking(move || bump(&pg3))
                .await
                .unwrap();
            pg2.transaction("bump", true, |tx| {
                async move {
                    tx.execute("UPDATE counter SET n = n + 1", &[]).await?;
                    Ok::<_, PgTxError>(())
                }
                .boxed()
            })
            .await
            .unwrap();
            // The last clone dropped inside the runtime does not panic.
            drop(pg2);
        });
        drop(rt);
    }
    assert_eq!(read_counter(&pg), 2 * 132);
    // Connections opened while those runtimes ran still work.
    bump(&pg);
    let last = Pg::connect(&_cluster.url()).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async move { drop(last) });
}

#[test]
fn the_transaction_future_is_send() {
    fn is_send<T: Send>(_: &T) {}
    let pg = Pg::open("postgres://u@127.0.0.1:1/db").unwrap();
    let fut = pg.transaction("nothing", true, |_tx| {
        async { Ok::<_, PgTxError>(()) }.boxed()
    });
    is_send(&fut);
}
