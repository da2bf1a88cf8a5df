//! Connections handed from one request to the next without a trip through sqlx's pool.
//!
//! sqlx pings every connection it takes back (`sqlx-core` 0.9 `pool/connection.rs`,
//! `return_to_pool`; not configurable), to flush a rollback left by a dropped transaction
//! and to find broken connections. On the busiest paths (get, list, create) that ping was a
//! second round trip to Postgres per request, and each round trip is a send that wakes the
//! other side: about a tenth of the API's CPU on a get. Here a connection whose work ended
//! cleanly goes onto a short stack instead, for the next request to take as it is.
//!
//! What the ping was for stays covered:
//! - only a connection its user marked [`HotConnection::reuse`] after its last statement
//!   succeeded (and with nothing queued to send, such as a rollback, and no transaction
//!   open) is kept; any other goes back to sqlx, which pings or closes it as before;
//! - a connection kept [`STALE`] without serving goes back to sqlx (a task returns it), so
//!   only a busy path holds connections: an idle one is proven by sqlx before it serves
//!   again (`store::connect`), and closing the pool is not held up;
//! - a connection out of sqlx's hands for [`MAX_HELD`] goes back at its next release, so
//!   sqlx's own checks (its `max_lifetime`) still reach connections that never rest, and
//!   code that takes connections from the pool directly (listeners, the worker where it
//!   shares the pool) gets its turn in sqlx's queue: a client asking every few milliseconds
//!   would otherwise keep a connection here for good (seen when a 50 ms poll of one record
//!   starved a worker sharing a 5-connection pool);
//! - while a request of this stack waits for sqlx's pool, a finished connection goes back to
//!   sqlx (to the waiter) instead of onto the stack, where the waiter would not see it.
//!
//! At most half the pool is kept idle here. Code that takes connections from the pool
//! directly may wait up to [`STALE`] for one kept here when the rest are all in use. Kept
//! connections count as in use in the pool's gauges.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a kept connection may wait for the next request before it goes back to sqlx.
pub const STALE: Duration = Duration::from_millis(250);

/// How long a connection may pass from request to request before it goes back to sqlx
/// (which pings it: one round trip per connection per quarter second, against one per
/// request without this stack).
pub const MAX_HELD: Duration = Duration::from_millis(250);

/// The stack of connections kept between requests; see the module docs.
pub struct HotConnections {
    pool: PgPool,
    state: Mutex<Kept>,
    keep: usize,
    /// Wakes the task that returns stale connections (a connection was kept, or the stack
    /// is gone).
    kept_one: Arc<Notify>,
}

/// What the lock guards: the stack, and who is waiting for sqlx's pool. One lock for both,
/// so a release never misses a request that found the stack empty.
#[derive(Default)]
struct Kept {
    /// Oldest first.
    stack: Vec<Entry>,
    /// Requests of this stack waiting for a connection from sqlx's pool now.
    waiting: usize,
}

struct Entry {
    conn: PoolConnection<Postgres>,
    /// When it was kept.
    at: Instant,
    /// When it left sqlx's pool.
    since: Instant,
}

impl HotConnections {
    /// A stack over `pool`, with the task that returns its stale connections (it ends with
    /// the stack).
    pub fn new(pool: PgPool) -> Arc<Self> {
        let keep = (pool.options().get_max_connections() / 2) as usize;
        let hot = Arc::new(Self {
            pool,
            state: Mutex::new(Kept::default()),
            keep,
            kept_one: Arc::new(Notify::new()),
        });
        tokio::spawn(return_stale(Arc::downgrade(&hot), hot.kept_one.clone()));
        hot
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.state.lock().expect("hot connections lock")
    }

    /// The most recently kept connection, else one from the pool.
    pub async fn acquire(&self) -> Result<HotConnection<'_>, sqlx::Error> {
        let popped = {
            let mut kept = self.lock();
            let popped = kept.stack.pop();
            if popped.is_none() {
                kept.waiting += 1;
            }
            popped
        };
        let (conn, since) = match popped {
            Some(entry) => (entry.conn, entry.since),
            None => {
                let _waiting = Waiting(self);
                (self.pool.acquire().await?, Instant::now())
            }
        };
        Ok(HotConnection {
            conn: Some(conn),
            since,
            home: self,
            reusable: false,
        })
    }

    /// Takes the connections kept [`STALE`] or longer; returns when the oldest left will be.
    fn take_stale(&self) -> (Vec<PoolConnection<Postgres>>, Option<Instant>) {
        let mut kept = self.lock();
        let now = Instant::now();
        let stale = kept
            .stack
            .partition_point(|entry| now.duration_since(entry.at) >= STALE);
        let taken = kept.stack.drain(..stale).map(|entry| entry.conn).collect();
        (taken, kept.stack.first().map(|entry| entry.at + STALE))
    }

    /// How many connections are kept now (for tests).
    pub fn kept(&self) -> usize {
        self.lock().stack.len()
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

/// One request of the stack waiting for sqlx's pool, counted until it is done waiting
/// (also when it is cancelled).
struct Waiting<'a>(&'a HotConnections);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().waiting -= 1;
    }
}

/// A connection from [`HotConnections`]; dereferences to the connection for the store's
/// functions and transactions.
pub struct HotConnection<'a> {
    conn: Option<PoolConnection<Postgres>>,
    /// When it left sqlx's pool.
    since: Instant,
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
        if self.since.elapsed() >= MAX_HELD {
            return;
        }
        let mut kept = self.home.lock();
        if kept.waiting == 0 && kept.stack.len() < self.home.keep {
            let now = Instant::now();
            kept.stack.push(Entry {
                conn,
                at: now,
                since: self.since,
            });
            drop(kept);
            self.home.kept_one.notify_one();
            return;
        }
        drop(kept);
        // Otherwise `conn` goes back to sqlx when it drops here.
    }
}
