//! Connections handed from one request to the next without a trip through sqlx's pool.
//!
//! sqlx pings every connection it takes back (`sqlx-core` 0.9 `pool/connection.rs`,
//! `return_to_pool`; not configurable), to flush a rollback left by a dropped transaction
//! and to find broken connections. On the busiest paths (get, list, create) that ping was a
//! second round trip to Postgres per request, and each round trip is a send that wakes the
//! other side: about a tenth of the API's CPU on a get. Here a connection whose work ended
//! cleanly goes onto a short stack instead, for the next request to take as it is.
//!
//! What the ping was for stays covered, and nothing waits on a kept connection:
//! - only a connection its user marked [`HotConnection::reuse`] after its last statement
//!   succeeded (and with nothing queued to send, such as a rollback, and no transaction
//!   open) is kept; any other goes back to sqlx, which pings or closes it as before;
//! - a connection kept [`STALE`] without serving goes back to sqlx (a task returns it), so
//!   only a busy path holds connections: an idle one is proven by sqlx before it serves
//!   again (`store::connect`), other paths waiting for the pool get it, and closing the
//!   pool is not held up;
//! - at most half the pool is kept, so the other paths, which use the pool directly,
//!   always have the rest;
//! - while a request waits for sqlx's pool, a finished connection goes back to sqlx (to the
//!   waiter) instead of onto the stack, where nobody waiting would see it.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a kept connection may wait for the next request before it goes back to sqlx.
pub const STALE: Duration = Duration::from_millis(250);

/// The stack of connections kept between requests; see the module docs.
pub struct HotConnections {
    pool: PgPool,
    /// Oldest first; each with the moment it was kept.
    kept: Mutex<Vec<(PoolConnection<Postgres>, Instant)>>,
    keep: usize,
    /// Requests waiting for a connection from sqlx's pool now.
    waiting: AtomicUsize,
    /// Wakes the task that returns stale connections (a connection was kept, or the stack
    /// is gone).
    kept_one: Arc<Notify>,
}

impl HotConnections {
    /// A stack over `pool`, with the task that returns its stale connections (it ends with
    /// the stack).
    pub fn new(pool: PgPool) -> Arc<Self> {
        let keep = (pool.options().get_max_connections() / 2) as usize;
        let hot = Arc::new(Self {
            pool,
            kept: Mutex::new(Vec::new()),
            keep,
            waiting: AtomicUsize::new(0),
            kept_one: Arc::new(Notify::new()),
        });
        tokio::spawn(return_stale(Arc::downgrade(&hot), hot.kept_one.clone()));
        hot
    }

    /// The most recently kept connection, else one from the pool.
    pub async fn acquire(&self) -> Result<HotConnection<'_>, sqlx::Error> {
        let fresh = self.kept.lock().expect("hot connections lock").pop();
        let conn = match fresh {
            Some((conn, _)) => conn,
            None => {
                let _waiting = Waiting::count(&self.waiting);
                self.pool.acquire().await?
            }
        };
        Ok(HotConnection {
            conn: Some(conn),
            home: self,
            reusable: false,
        })
    }

    /// Takes the connections kept [`STALE`] or longer; returns when the oldest left will be.
    fn take_stale(&self) -> (Vec<PoolConnection<Postgres>>, Option<Instant>) {
        let mut kept = self.kept.lock().expect("hot connections lock");
        let now = Instant::now();
        let stale = kept.partition_point(|(_, at)| now.duration_since(*at) >= STALE);
        let taken = kept.drain(..stale).map(|(conn, _)| conn).collect();
        (taken, kept.first().map(|(_, at)| *at + STALE))
    }

    /// How many connections are kept now (for tests and metrics).
    pub fn kept(&self) -> usize {
        self.kept.lock().expect("hot connections lock").len()
    }
}

/// Gives stale connections back to sqlx: sleeps until the oldest kept one turns stale, or,
/// with none kept, until one is. Ends when the stack is dropped.
async fn return_stale(hot: Weak<HotConnections>, kept_one: Arc<Notify>) {
    loop {
        let next = {
            let Some(hot) = hot.upgrade() else { return };
            let (stale, next) = hot.take_stale();
            // Dropped here, outside the lock: sqlx pings each and takes it back (or closes it).
            drop(stale);
            next
        };
        match next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => kept_one.notified().await,
        }
    }
}

impl Drop for HotConnections {
    fn drop(&mut self) {
        // The task may be waiting for a connection to be kept: let it see the stack is gone.
        self.kept_one.notify_one();
    }
}

/// Counts one request waiting for sqlx's pool for as long as it lives (also when the
/// waiting request is cancelled).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn count(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Self(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection from [`HotConnections`]; dereferences to the connection for the store's
/// functions and transactions.
pub struct HotConnection<'a> {
    conn: Option<PoolConnection<Postgres>>,
    home: &'a HotConnections,
    reusable: bool,
}

impl HotConnection<'_> {
    /// Marks the work done and clean: the next request may take this connection as it is.
    /// Call it only after the last statement (or the commit) succeeded.
    pub fn reuse(mut self) {
        self.reusable = true;
    }
}

impl Deref for HotConnection<'_> {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        self.conn.as_ref().expect("connection present until drop")
    }
}

impl DerefMut for HotConnection<'_> {
    fn deref_mut(&mut self) -> &mut PgConnection {
        self.conn.as_mut().expect("connection present until drop")
    }
}

impl Drop for HotConnection<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        // Anything still to send (a rollback queued by a dropped transaction), or a
        // transaction still open, needs sqlx's flush; so does a connection not marked clean.
        if !self.reusable || conn.should_flush() || conn.is_in_transaction() {
            return;
        }
        if self.home.waiting.load(Ordering::SeqCst) > 0 {
            return;
        }
        let mut kept = self.home.kept.lock().expect("hot connections lock");
        if kept.len() < self.home.keep {
            kept.push((conn, Instant::now()));
            drop(kept);
            self.home.kept_one.notify_one();
        }
        // Otherwise `conn` goes back to sqlx when it drops here.
    }
}
