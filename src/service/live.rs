//! Live status: one change feed per process, fanned out to every watcher.
//!
//! Each process holds one `LISTEN` connection for the feed. A notification only says
//! "something is new": the hub reads the feed table after the last sequence number it has
//! seen and broadcasts what it finds, so a missed notification (a reconnect) loses nothing.
//! Watchers (the SSE streams and GraphQL subscriptions alike) filter the broadcast, load
//! what changed once for all of them, and resume from a sequence number out of the table.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::Stream;
use sqlx::PgPool;
use tokio::sync::{OnceCell, broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::access::{Authorized, authorize, still_allowed};
use super::{Actor, Context, ServiceError};
use crate::domain::{Change, ChangeKind, Deployment, LoadUpdate, Role, TimelineEvent};
use crate::store;

/// How long feed rows are kept: a watcher that was away longer must re-read.
pub const FEED_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How often a watcher checks that its credential still holds (revoked, expired, unbound).
const RECHECK: Duration = Duration::from_secs(2);
/// Events queued for one watcher.
const QUEUE: usize = 64;

pub use super::streams::StreamLimits;
use super::streams::{StreamSlot, StreamSlots};
const BATCH: i64 = 500;

/// The process's view of the change feed.
pub struct ChangeHub {
    /// Every change but new load readings: what most watchers follow.
    sender: broadcast::Sender<Change>,
    /// Every change, load readings included, for the watchers that asked for load (the
    /// others are not woken by a reading every interval).
    with_load: broadcast::Sender<Change>,
    /// The newest sequence number broadcast.
    latest: AtomicI64,
    /// What each recent change loaded, shared by every watcher it reaches: a thousand
    /// watchers of one deployment cost one read, not a thousand.
    loaded: Mutex<HashMap<i64, Arc<OnceCell<Loaded>>>>,
    /// Cancelled when the process shuts down: every watch ends (cleanly, for its client).
    shutdown: CancellationToken,
    /// Open WebSocket connections, which the HTTP server's graceful shutdown does not track
    /// once upgraded: the process waits for them to close.
    sockets: tokio_util::task::TaskTracker,
    /// Open watches and subscriptions, per caller and per address.
    slots: Arc<StreamSlots>,
    /// Deployments whose Service a worker has just seen gain a ready endpoint while they
    /// wake from zero (`store::autoscaling::SERVING_CHANNEL`, on the same connection): the
    /// activator's signal.
    serving: broadcast::Sender<Uuid>,
}

/// What a change's watchers send, read once.
#[derive(Debug, Clone)]
enum Loaded {
    Deployment(Option<Box<Deployment>>),
    Event(Option<TimelineEvent>),
}

/// Loads kept for changes this far behind the newest (a lagging watcher reads its own).
const SHARED_LOADS: i64 = 1024;

impl ChangeHub {
    /// Starts following the feed until `shutdown`, with the default stream caps.
    pub async fn start(
        pool: PgPool,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, sqlx::Error> {
        Self::start_with(pool, shutdown, StreamLimits::default()).await
    }

    /// Starts following the feed until `shutdown`; `limits` caps the open streams.
    pub async fn start_with(
        pool: PgPool,
        shutdown: CancellationToken,
        limits: StreamLimits,
    ) -> Result<Arc<Self>, sqlx::Error> {
        let (sender, _) = broadcast::channel(4096);
        let (with_load, _) = broadcast::channel(4096);
        let (serving, _) = broadcast::channel(256);
        let (_, newest) = store::changes::feed_bounds(&pool).await?;
        let hub = Arc::new(Self {
            sender,
            with_load,
            latest: AtomicI64::new(newest.unwrap_or(0)),
            loaded: Mutex::default(),
            shutdown: shutdown.clone(),
            sockets: tokio_util::task::TaskTracker::new(),
            slots: Arc::new(StreamSlots::new(limits)),
            serving,
        });
        tokio::spawn(hub.clone().follow(pool.clone(), shutdown.clone()));
        tokio::spawn(prune(pool, shutdown));
        Ok(hub)
    }

    /// Cancelled when the process shuts down.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }

    /// The open WebSocket connections (see [`ChangeHub::close_sockets`]).
    pub fn sockets(&self) -> &tokio_util::task::TaskTracker {
        &self.sockets
    }

    /// At shutdown: waits (at most `within`) for every WebSocket connection to close.
    pub async fn close_sockets(&self, within: Duration) -> bool {
        self.sockets.close();
        tokio::time::timeout(within, self.sockets.wait())
            .await
            .is_ok()
    }

    /// Deployments said to have a ready endpoint while waking from zero, from now on.
    pub fn serving(&self) -> broadcast::Receiver<Uuid> {
        self.serving.subscribe()
    }

    /// Every change but load readings, from now on (the activator waits on it).
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.sender.subscribe()
    }

    pub fn latest(&self) -> i64 {
        self.latest.load(Ordering::Acquire)
    }

    /// The cell holding what `seq` loads, made on first use; old cells are dropped.
    fn cell(&self, seq: i64) -> Arc<OnceCell<Loaded>> {
        let mut loaded = self.loaded.lock().expect("not poisoned");
        let floor = self.latest() - SHARED_LOADS;
        if loaded.len() as i64 > SHARED_LOADS {
            loaded.retain(|s, _| *s > floor);
        }
        loaded.entry(seq).or_default().clone()
    }

    /// What `change` loads (the deployment as it is now, or the timeline entry), read by
    /// the first watcher that needs it and shared with the rest. The caller has checked the
    /// change is in a project it may read.
    async fn load(&self, ctx: &Context, change: &Change, project: &str) -> Result<Loaded, ()> {
        let read = async {
            let loaded = match change.event_id {
                Some(id) if change.kind == ChangeKind::Event => Loaded::Event(
                    store::events::find_event(&ctx.pool, change.project_id, id)
                        .await
                        .map_err(|_| ())?,
                ),
                _ => {
                    let found = store::deployments::find_deployment_by_id(
                        &ctx.pool,
                        change.project_id,
                        change.deployment_id,
                    )
                    .await
                    .map_err(|_| ())?;
                    let mut deployment: Vec<Deployment> = found
                        .map(|row| row.into_record(project))
                        .into_iter()
                        .collect();
                    super::load::attach(ctx, &mut deployment)
                        .await
                        .map_err(|_| ())?;
                    Loaded::Deployment(deployment.pop().map(Box::new))
                }
            };
            Ok::<_, ()>(loaded)
        };
        if change.seq <= self.latest() - SHARED_LOADS {
            return read.await;
        }
        self.cell(change.seq)
            .get_or_try_init(|| read)
            .await
            .cloned()
    }

    async fn follow(self: Arc<Self>, pool: PgPool, shutdown: CancellationToken) {
        loop {
            let mut listener = match store::changes::listen(&pool).await {
                Ok(listener) => listener,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for changes; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            // Whatever was committed while not listening.
            self.catch_up(&pool).await;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    notification = listener.recv() => match notification {
                        Ok(n) if n.channel() == store::autoscaling::SERVING_CHANNEL => {
                            if let Ok(id) = n.payload().parse() {
                                let _ = self.serving.send(id);
                            }
                        }
                        Ok(notification) => self.notified(&pool, notification.payload()).await,
                        Err(err) => {
                            tracing::warn!(error = %err, "change listener failed; reconnecting");
                            break;
                        }
                    },
                }
            }
        }
    }

    /// A change was committed; `payload` is its sequence number. With nobody watching the
    /// feed is not read (the API and the worker would read it on every change): watchers
    /// subscribe before they read the feed, so they start past anything skipped here.
    async fn notified(&self, pool: &PgPool, payload: &str) {
        match payload.parse::<i64>() {
            Ok(seq) if self.sender.receiver_count() + self.with_load.receiver_count() == 0 => {
                self.latest.fetch_max(seq, Ordering::AcqRel);
            }
            _ => self.catch_up(pool).await,
        }
    }

    /// Broadcasts every change after the last one broadcast.
    async fn catch_up(&self, pool: &PgPool) {
        loop {
            let after = self.latest();
            let changes = match store::changes::changes_after(pool, after, None, None, BATCH).await
            {
                Ok(changes) => changes,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot read the change feed");
                    return;
                }
            };
            let full = changes.len() as i64 == BATCH;
            for change in changes {
                self.latest.store(change.seq, Ordering::Release);
                // No receiver is not an error: nobody is watching.
                if change.kind != ChangeKind::Load {
                    let _ = self.sender.send(change.clone());
                }
                let _ = self.with_load.send(change);
            }
            if !full {
                return;
            }
        }
    }
}

async fn prune(pool: PgPool, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(600));
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store::changes::prune_changes(&pool, FEED_RETENTION).await {
            Ok(0) => {}
            Ok(n) => tracing::debug!(rows = n, "pruned the change feed"),
            Err(err) => tracing::warn!(error = %err, "cannot prune the change feed"),
        }
    }
}

/// What a watcher receives.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// The deployment as it is now: first (`kind` `None`), and after every change but a
    /// deletion.
    Deployment {
        seq: i64,
        kind: Option<ChangeKind>,
        deployment: Box<Deployment>,
    },
    /// A new timeline entry.
    Timeline { seq: i64, event: TimelineEvent },
    /// A new reading of a deployment's load (only for watches that asked for load).
    Load { seq: i64, update: Box<LoadUpdate> },
    /// The record is gone.
    Deleted { seq: i64, id: Uuid },
    /// Everything before this is the starting point (the current state, or the changes
    /// replayed after a resume point); everything after is a live change. Sent once per
    /// watch, like Kubernetes' `initial-events-end` bookmark, so a client can tell an empty
    /// project from one still loading.
    Synced { seq: i64 },
    /// The resume point is older than the feed keeps ([`FEED_RETENTION`]): what follows is
    /// the current state, and the watcher must treat it as a fresh start.
    Reset { seq: i64 },
}

/// What to watch in a project.
#[derive(Debug, Clone, Copy)]
pub enum Watched<'a> {
    Project,
    Deployment(&'a str),
}

/// Where a watch starts and what it sends besides the changes.
#[derive(Debug, Clone, Copy, Default)]
pub struct WatchOptions {
    /// Replay every change after this sequence number instead of the current state.
    pub resume_after: Option<i64>,
    /// Also send new load readings ([`WatchEvent::Load`]).
    pub with_load: bool,
}

/// Starts a watch: the current state first (or, with `resume_after`, every change since),
/// then every change, until the caller goes away or its credential stops holding.
/// `address` is the client's, for the per-address stream cap.
pub async fn watch(
    ctx: &Context,
    hub: &Arc<ChangeHub>,
    actor: &Actor,
    address: &str,
    project: &str,
    watched: Watched<'_>,
    options: WatchOptions,
) -> Result<impl Stream<Item = WatchEvent> + Send + use<>, ServiceError> {
    let WatchOptions {
        resume_after,
        with_load,
    } = options;
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let slot = hub.slots.take(&actor.key(), address)?;
    // Subscribed before reading anything: no change can fall between the two.
    let receiver = if with_load {
        hub.with_load.subscribe()
    } else {
        hub.sender.subscribe()
    };
    // The feed's newest row, read now (the hub may not have caught up with it yet): every
    // change up to it is in the state read next, so the state's sequence number is a resume
    // point that replays nothing the state already shows.
    let (_, newest) = store::changes::feed_bounds(&ctx.pool).await?;
    let start = hub.latest().max(newest.unwrap_or(0));
    let deployment = match watched {
        Watched::Deployment(name) => {
            Some(super::deployments::get_deployment_in(ctx, &project, name).await?)
        }
        Watched::Project => None,
    };
    let (sender, events) = mpsc::channel(QUEUE);
    let watcher = Watcher {
        _slot: slot,
        hub: hub.clone(),
        ctx: ctx.clone(),
        actor: actor.clone(),
        project,
        only: deployment.as_ref().map(|d| d.id),
        with_load,
        sender,
        cursor: start,
        checked: Instant::now(),
    };
    tokio::spawn(watcher.run(receiver, deployment, resume_after));
    Ok(futures::stream::unfold(events, |mut events| async {
        events.recv().await.map(|event| (event, events))
    }))
}

struct Watcher {
    /// Held while the watch runs: its place under the stream caps.
    _slot: StreamSlot,
    hub: Arc<ChangeHub>,
    ctx: Context,
    actor: Actor,
    project: Authorized,
    /// One deployment, or the whole project.
    only: Option<Uuid>,
    /// Whether new load readings are sent.
    with_load: bool,
    sender: mpsc::Sender<WatchEvent>,
    /// The last sequence number delivered (or covered by a state sent).
    cursor: i64,
    checked: Instant,
}

impl Watcher {
    async fn run(
        mut self,
        mut receiver: broadcast::Receiver<Change>,
        deployment: Option<Deployment>,
        resume_after: Option<i64>,
    ) {
        if self.begin(deployment, resume_after).await.is_err() {
            return;
        }
        let mut recheck = tokio::time::interval(RECHECK);
        loop {
            let delivered = tokio::select! {
                () = self.sender.closed() => return,
                // The stream ends, so an SSE response or a subscription completes cleanly.
                () = self.hub.shutdown.cancelled() => return,
                _ = recheck.tick() => self.still_allowed().await,
                change = receiver.recv() => match change {
                    Ok(change) => self.deliver(change).await,
                    // Fell behind the broadcast: the table has every change.
                    Err(broadcast::error::RecvError::Lagged(_)) => self.replay(self.cursor).await,
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if delivered.is_err() {
                return;
            }
        }
    }

    /// The first messages: the current state, or every change since `resume_after`.
    async fn begin(
        &mut self,
        deployment: Option<Deployment>,
        resume_after: Option<i64>,
    ) -> Result<(), Ended> {
        self.send_start(deployment, resume_after).await?;
        self.send(WatchEvent::Synced { seq: self.cursor }).await
    }

    async fn send_start(
        &mut self,
        deployment: Option<Deployment>,
        resume_after: Option<i64>,
    ) -> Result<(), Ended> {
        if let Some(after) = resume_after {
            let (oldest, _) = store::changes::feed_bounds(&self.ctx.pool)
                .await
                .map_err(|_| Ended)?;
            // Nothing older than the oldest row kept may be missing, else start afresh; a
            // resume point past the newest change (a client of another installation, or of
            // a database that was restored) is no point in this feed: start afresh too.
            let known = after <= self.cursor;
            if known && oldest.is_none_or(|oldest| after >= oldest - 1) {
                return self.replay(after).await;
            }
            self.send(WatchEvent::Reset { seq: self.cursor }).await?;
        }
        match deployment {
            Some(deployment) => {
                self.send(WatchEvent::Deployment {
                    seq: self.cursor,
                    kind: None,
                    deployment: Box::new(deployment),
                })
                .await
            }
            None => self.send_project_state().await,
        }
    }

    /// Every deployment of the project as it is now.
    async fn send_project_state(&mut self) -> Result<(), Ended> {
        let mut query = super::deployments::ListDeployments {
            limit: Some(200),
            ..Default::default()
        };
        loop {
            let page = super::deployments::list_deployments_in(&self.ctx, &self.project, &query)
                .await
                .map_err(|_| Ended)?;
            for deployment in page.items {
                self.send(WatchEvent::Deployment {
                    seq: self.cursor,
                    kind: None,
                    deployment: Box::new(deployment),
                })
                .await?;
            }
            match page.next_cursor {
                Some(next) => query.cursor = Some(next),
                None => return Ok(()),
            }
        }
    }

    /// Delivers every change after `after` from the table.
    async fn replay(&mut self, after: i64) -> Result<(), Ended> {
        let mut after = after;
        loop {
            let changes = store::changes::changes_after(
                &self.ctx.pool,
                after,
                Some(self.project.id),
                self.only,
                BATCH,
            )
            .await
            .map_err(|_| Ended)?;
            let full = changes.len() as i64 == BATCH;
            for change in changes {
                after = change.seq;
                // Delivered even when the watch began later than this change.
                self.cursor = change.seq - 1;
                self.deliver(change).await?;
            }
            if !full {
                return Ok(());
            }
        }
    }

    async fn deliver(&mut self, change: Change) -> Result<(), Ended> {
        if change.seq <= self.cursor
            || change.project_id != self.project.id
            || self.only.is_some_and(|id| id != change.deployment_id)
            || (change.kind == ChangeKind::Load && !self.with_load)
        {
            return Ok(());
        }
        if self.checked.elapsed() >= RECHECK {
            self.still_allowed().await?;
        }
        self.cursor = change.seq;
        let event = match change.kind {
            ChangeKind::Deleted => WatchEvent::Deleted {
                seq: change.seq,
                id: change.deployment_id,
            },
            kind => match self
                .hub
                .load(&self.ctx, &change, &self.project.name)
                .await
                .map_err(|()| Ended)?
            {
                Loaded::Event(Some(event)) => WatchEvent::Timeline {
                    seq: change.seq,
                    event,
                },
                Loaded::Deployment(Some(deployment)) if kind == ChangeKind::Load => {
                    WatchEvent::Load {
                        seq: change.seq,
                        update: Box::new(LoadUpdate::of(&deployment)),
                    }
                }
                Loaded::Deployment(Some(deployment)) => WatchEvent::Deployment {
                    seq: change.seq,
                    kind: Some(kind),
                    deployment,
                },
                // Gone meanwhile: its deletion follows.
                Loaded::Event(None) | Loaded::Deployment(None) => return Ok(()),
            },
        };
        let deleted = matches!(event, WatchEvent::Deleted { .. });
        self.send(event).await?;
        // A watched deployment that is gone ends its watch.
        if deleted && self.only.is_some() {
            return Err(Ended);
        }
        Ok(())
    }

    async fn still_allowed(&mut self) -> Result<(), Ended> {
        self.checked = Instant::now();
        match still_allowed(&self.ctx, &self.actor, &self.project).await {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::info!(actor = %self.actor.name, "a watch ended: the credential no longer holds");
                Err(Ended)
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot recheck a watcher's access");
                Ok(())
            }
        }
    }

    /// Queues `event`; a client that has taken nothing for the slow-client time (its queue
    /// full all along) ends the watch.
    async fn send(&self, event: WatchEvent) -> Result<(), Ended> {
        let patience = self.hub.slots.limits().slow_client;
        match tokio::time::timeout(patience, self.sender.send(event)).await {
            Ok(sent) => sent.map_err(|_| Ended),
            Err(_) => {
                tracing::info!(actor = %self.actor.name, ?patience, "a watch ended: its client read nothing (it resumes from its last seq)");
                Err(Ended)
            }
        }
    }
}

/// The watch is over (the caller left, its credential lapsed, or the database failed).
struct Ended;
