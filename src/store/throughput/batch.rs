//! Group work: requests that arrive while Postgres is busy with earlier ones are sent
//! together, in one statement, the way group commit works.
//!
//! Nobody waits for a batch to fill: a batch starts at once while fewer than `in_flight`
//! are running, and a batch is whatever queued up while they ran (at most `max_batch`). At
//! low load every request is a batch of one. Batches run in their own tasks, so a request
//! that is cancelled cancels nobody else's work, and one whose caller went away before its
//! batch started is not sent at all. Used by [`super::lookups`] (gets) and
//! [`super::creates`] (creates).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Work done in batches: what a batch task runs.
pub trait BatchWork: Send + Sync + Sized + 'static {
    /// One request, carrying the channel its answer goes back on.
    type Item: Send + 'static;
    fn batcher(&self) -> &Batcher<Self::Item>;
    /// The request's caller went away (its answer channel is closed).
    fn abandoned(item: &Self::Item) -> bool;
    /// Runs one batch and answers each of its requests.
    fn run(self: &Arc<Self>, batch: Vec<Self::Item>) -> impl Future<Output = ()> + Send;
}

/// The queue of requests waiting for a batch.
pub struct Batcher<I> {
    queue: Mutex<Queue<I>>,
    in_flight: usize,
    max_batch: usize,
    /// Batches run so far (for tests).
    batches: AtomicU64,
}

struct Queue<I> {
    waiting: Vec<I>,
    /// Tasks running batches now.
    running: usize,
}

impl<I: Send + 'static> Batcher<I> {
    pub fn new(in_flight: usize, max_batch: usize) -> Self {
        Self {
            queue: Mutex::new(Queue {
                waiting: Vec::new(),
                running: 0,
            }),
            in_flight,
            max_batch,
            batches: AtomicU64::new(0),
        }
    }

    /// How many batches have run (for tests).
    pub fn batches(&self) -> u64 {
        self.batches.load(Ordering::Relaxed)
    }

    /// The queue. Nothing panics while holding it, but if something ever did, the queue
    /// is still consistent (each change is one push or one drain), so it is used as it is.
    fn lock(&self) -> MutexGuard<'_, Queue<I>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `item`, and starts a batch task unless enough are running.
    pub fn submit<W: BatchWork<Item = I>>(work: &Arc<W>, item: I) {
        let start = {
            let mut queue = work.batcher().lock();
            queue.waiting.push(item);
            let start = queue.running < work.batcher().in_flight;
            if start {
                queue.running += 1;
            }
            start
        };
        if start {
            // The slot travels with the task: if the task ends without giving it back (a
            // panic, or a runtime shutting down that drops it unpolled), its drop does.
            let slot = Slot {
                work: Arc::clone(work),
                held: true,
            };
            tokio::spawn(drain(slot));
        }
    }
}

/// Runs batches until nobody is waiting, then gives its slot back.
async fn drain<W: BatchWork>(mut slot: Slot<W>) {
    let work = Arc::clone(&slot.work);
    loop {
        let batch: Vec<W::Item> = {
            let batcher = work.batcher();
            let mut queue = batcher.lock();
            queue.waiting.retain(|item| !W::abandoned(item));
            if queue.waiting.is_empty() {
                queue.running -= 1;
                slot.held = false;
                return;
            }
            let n = queue.waiting.len().min(batcher.max_batch);
            batcher.batches.fetch_add(1, Ordering::Relaxed);
            queue.waiting.drain(..n).collect()
        };
        work.run(batch).await;
    }
}

/// A batch task's place among the `in_flight`. Given back under the lock when the queue is
/// empty. If the task ends any other way (a panic, or dropped by a runtime shutting down),
/// it is given back on drop, and the requests still queued are let go: each sees its answer
/// channel closed and does its work alone (starting another task here could loop in a
/// runtime that drops every new task).
struct Slot<W: BatchWork> {
    work: Arc<W>,
    held: bool,
}

impl<W: BatchWork> Drop for Slot<W> {
    fn drop(&mut self) {
        if !self.held {
            return;
        }
        let waiting = {
            let mut queue = self.work.batcher().lock();
            queue.running -= 1;
            std::mem::take(&mut queue.waiting)
        };
        // Dropped outside the lock.
        drop(waiting);
    }
}
