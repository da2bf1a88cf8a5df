//! The connections the busiest paths pass from request to request (`store::hot`): kept only
//! when their work ended cleanly, and never kept from a request waiting for the pool.

use std::time::Duration;

use modelplane::store::hot::HotConnections;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};

#[sqlx::test]
async fn a_connection_is_kept_only_when_its_work_ended_cleanly(pool: PgPool) {
    let hot = HotConnections::new(pool.clone());

    let mut conn = hot.acquire().await.unwrap();
    sqlx::query("select 1").execute(&mut *conn).await.unwrap();
    conn.reuse();
    assert_eq!(hot.kept(), 1, "a clean connection is kept");

    // The kept one serves the next request; a statement that failed is not marked clean.
    let mut conn = hot.acquire().await.unwrap();
    assert_eq!(hot.kept(), 0);
    assert!(sqlx::query("select 1/0").execute(&mut *conn).await.is_err());
    drop(conn);
    assert_eq!(
        hot.kept(),
        0,
        "a connection not marked clean goes back to sqlx"
    );

    // A transaction dropped without commit leaves a rollback to send: sqlx must flush it.
    let mut conn = hot.acquire().await.unwrap();
    let tx = conn.begin().await.unwrap();
    drop(tx);
    conn.reuse();
    assert_eq!(
        hot.kept(),
        0,
        "a connection with a rollback queued is not kept"
    );

    // A committed transaction leaves the connection clean.
    let mut conn = hot.acquire().await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("select 1").execute(&mut *tx).await.unwrap();
    tx.commit().await.unwrap();
    conn.reuse();
    assert_eq!(hot.kept(), 1);
    let mut conn = hot.acquire().await.unwrap();
    // SAVEPOINT works only inside a transaction block.
    let savepoint = sqlx::query("savepoint probe").execute(&mut *conn).await;
    assert!(
        savepoint.is_err(),
        "the kept connection is not inside a transaction"
    );
}

#[sqlx::test]
async fn a_finished_connection_goes_to_a_request_waiting_for_the_pool(pool: PgPool) {
    // Two connections, so at most one is kept; both are taken.
    let small = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(pool.connect_options().as_ref().clone())
        .await
        .unwrap();
    let hot = HotConnections::new(small);
    let first = hot.acquire().await.unwrap();
    let second = hot.acquire().await.unwrap();

    let waiting = hot.acquire();
    tokio::pin!(waiting);
    // The third request starts waiting for the pool (its first poll queues it there).
    assert!(
        futures::poll!(waiting.as_mut()).is_pending(),
        "the pool is exhausted"
    );
    // Kept on the stack, `first` would wait there unseen by the waiter.
    first.reuse();
    assert_eq!(hot.kept(), 0, "handed back to sqlx, for the waiter");
    let third = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiting request got the finished connection")
        .unwrap();
    drop((second, third));
}
