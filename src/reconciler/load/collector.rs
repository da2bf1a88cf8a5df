//! The collection loop: every interval, read what each deployment's ready pods serve,
//! per track, and write one round of readings (`store::load::write_round`). One worker
//! collects at a time (a Postgres advisory lock); the others wait to take over.
//!
//! The pods come from the worker's own pod watch (no LIST each round), and their pages are
//! read spread over half the interval rather than in one burst, as Prometheus spreads its
//! targets' scrapes over theirs (`scrape/target.go`, `Target.offset`): the API and Postgres
//! beside the worker then see a steady trickle, not a spike every interval.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use sqlx::{Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::engines::dialect_of;
use super::parse::{self, PodMetrics};
use super::prometheus::{PromSource, TrackedFigures};
use super::rates::{self, PodDelta, Tracker};
use super::scrape::{self, Via};
use crate::domain::{Load, LoadFigures, LoadSample, MetricsDialect, Track};
use crate::reconciler::autoscaler::Autoscaler;
use crate::reconciler::desired::{
    LABEL_DEPLOYMENT_ID, LABEL_ENGINE, LABEL_INSTALLATION, LABEL_MANAGED_BY, LABEL_TRACK,
    TRACK_CANARY, WORKER_INDEX_LABEL,
};
use crate::reconciler::health::WorkerHealth;
use crate::reconciler::seen::SeenKinds;
use crate::store;
use crate::store::load::{Reading, Scope, Target};

/// The advisory lock the collecting worker holds.
const COLLECTOR_LOCK: i64 = 7254017193842;
/// Pods read at once.
const CONCURRENCY: usize = 32;
/// How often the fine series is rolled up and both series pruned.
const HOUSEKEEPING: Duration = Duration::from_secs(300);

/// Where the figures come from.
pub enum Source {
    /// Each pod's own page.
    Pods(Via),
    /// A Prometheus that scrapes them (PromQL over its HTTP API).
    Prometheus(PromSource),
}

/// How the collector runs.
pub struct LoadSettings {
    pub interval: Duration,
    pub timeout: Duration,
    pub max_bytes: usize,
    pub source: Source,
    pub installation: String,
}

/// The collector: see the module documentation.
pub struct Collector {
    pool: PgPool,
    client: kube::Client,
    settings: LoadSettings,
    health: Arc<WorkerHealth>,
    tracker: Tracker,
    /// The last reading written per deployment and scope: a failed reading keeps its
    /// figures (marked stale) rather than showing none.
    last: HashMap<(Uuid, Scope), Load>,
    /// When the series were last rolled up and pruned.
    housekept: Option<Instant>,
    /// The worker's watch caches, when it runs beside one: its managed pods are read from
    /// there instead of listed each round.
    seen: Option<Arc<SeenKinds>>,
    /// Decides the replicas of autoscaled deployments after each round, from its readings.
    autoscaler: Option<Autoscaler>,
}

impl Collector {
    pub fn new(
        pool: PgPool,
        client: kube::Client,
        settings: LoadSettings,
        health: Arc<WorkerHealth>,
    ) -> Self {
        Self {
            pool,
            client,
            settings,
            health,
            tracker: Tracker::default(),
            last: HashMap::new(),
            housekept: None,
            seen: None,
            autoscaler: None,
        }
    }

    /// Runs `autoscaler` after each round, on the readings just taken.
    pub fn with_autoscaler(mut self, autoscaler: Autoscaler) -> Self {
        self.autoscaler = Some(autoscaler);
        self
    }

    /// Reads the pods from the worker's watch caches (they watch the same pods: those of
    /// this installation); until its first list is complete, the pods are listed.
    pub fn with_pods_from(mut self, seen: Arc<SeenKinds>) -> Self {
        self.seen = Some(seen);
        self
    }

    /// Collects every interval while this worker holds the collector's lock, until
    /// `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lock: Option<PgConnection> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            if !self.holds_lock(&mut lock).await {
                continue;
            }
            let started = Instant::now();
            match self.round().await {
                Ok(stats) => {
                    tracing::debug!(deployments = stats.deployments, pods = stats.pods, failed = stats.failed, changed = stats.changed, scaled = stats.scaled, elapsed = ?started.elapsed(), "load round");
                    metrics::counter!(crate::metrics::LOAD_ROUNDS, "outcome" => "ok").increment(1);
                }
                Err(err) => {
                    tracing::warn!(error = %err, "cannot write this round of load readings");
                    metrics::counter!(crate::metrics::LOAD_ROUNDS, "outcome" => "error")
                        .increment(1);
                }
            }
            metrics::histogram!(crate::metrics::LOAD_ROUND_DURATION)
                .record(started.elapsed().as_secs_f64());
            self.housekeeping().await;
        }
    }

    /// Whether this worker holds the collector's lock now (taking it if free). A session
    /// lock lasts as long as its connection: a live connection still holds it.
    async fn holds_lock(&self, lock: &mut Option<PgConnection>) -> bool {
        if let Some(conn) = lock.as_mut() {
            if conn.ping().await.is_ok() {
                return true;
            }
            tracing::warn!("lost the load collector's lock connection; taking the lock again");
            *lock = None;
        }
        let options = self.pool.connect_options();
        let Ok(mut conn) = PgConnection::connect_with(&options).await else {
            return false;
        };
        let taken: Result<bool, _> = sqlx::query_scalar("select pg_try_advisory_lock($1)")
            .bind(COLLECTOR_LOCK)
            .fetch_one(&mut conn)
            .await;
        if matches!(taken, Ok(true)) {
            tracing::info!("this worker collects the serving metrics");
            *lock = Some(conn);
            true
        } else {
            false
        }
    }

    async fn round(&mut self) -> Result<Stats, sqlx::Error> {
        let at = Utc::now();
        let targets = store::load::targets(&self.pool).await?;
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.settings.installation
        );
        let cached = self
            .seen
            .as_ref()
            .and_then(|seen| seen.of::<Pod>())
            .and_then(|pods| pods.all());
        let listed = match cached {
            Some(pods) => Ok(pods),
            None => Api::<Pod>::all(self.client.clone())
                .list(&ListParams::default().labels(&selector))
                .await
                .map(|list| list.items.into_iter().map(Arc::new).collect()),
        };
        let mut stats = Stats {
            deployments: targets.len(),
            ..Stats::default()
        };
        let readings = match listed {
            Err(err) => {
                let why = format!("cannot list the pods: {err}");
                targets
                    .iter()
                    .flat_map(|t| scopes(t).map(move |scope| (t, scope)))
                    .map(|(t, scope)| self.failed(t, scope, at, None, &why))
                    .collect()
            }
            Ok(pods) => {
                let ready = ready_pods(pods);
                stats.pods = ready.values().map(Vec::len).sum();
                match &self.settings.source {
                    Source::Pods(via) => {
                        let via = via.clone();
                        self.read_pods(&via, &targets, &ready, at, &mut stats).await
                    }
                    Source::Prometheus(prom) => {
                        let window = (self.settings.interval * 4).max(Duration::from_secs(60));
                        let read = prom.read(window).await;
                        self.health
                            .load_source(read.as_ref().map(|_| ()).map_err(|e| e.to_string()));
                        match read {
                            Ok(loads) => {
                                self.read_prometheus(&loads.deployments, &targets, &ready, at)
                            }
                            Err(err) => {
                                let why = err.to_string();
                                targets
                                    .iter()
                                    .flat_map(|t| scopes(t).map(move |scope| (t, scope)))
                                    .map(|(t, scope)| {
                                        let pods = ready.get(&t.id).map_or(0, |p| count(p, scope));
                                        self.failed(t, scope, at, Some(pods), &why)
                                    })
                                    .collect()
                            }
                        }
                    }
                }
            }
        };
        for reading in &readings {
            self.last
                .insert((reading.deployment_id, reading.scope), reading.load.clone());
        }
        let live: HashSet<Uuid> = targets.iter().map(|t| t.id).collect();
        self.last.retain(|(id, _), _| live.contains(id));
        let mut conn = self.pool.acquire().await?;
        stats.changed = store::load::write_round(&mut conn, &readings).await?.len();
        drop(conn);
        if let Some(autoscaler) = &mut self.autoscaler {
            stats.scaled = autoscaler.round(&self.last, Utc::now()).await?;
        }
        Ok(stats)
    }

    /// Readings from each ready pod's own page. One piece on purpose: its three steps (read
    /// every page, turn each into a change since its last reading, sum them per scope)
    /// share the round's maps of pages, deltas and errors; split, they pass all three around.
    async fn read_pods(
        &mut self,
        via: &Via,
        targets: &[Target],
        ready: &HashMap<Uuid, Vec<(Track, Arc<Pod>)>>,
        at: DateTime<Utc>,
        stats: &mut Stats,
    ) -> Vec<Reading> {
        let timeout = self.settings.timeout;
        let max_bytes = self.settings.max_bytes;
        let jobs: Vec<(String, Arc<Pod>, MetricsDialect)> = ready
            .values()
            .flatten()
            .map(|(_, pod)| {
                let engine = pod_label(pod, LABEL_ENGINE).unwrap_or_default();
                (uid(pod), pod.clone(), dialect_of(engine))
            })
            .collect();
        // Pod i starts at i/n of the spread; each is timed when its page arrives, so its
        // rates divide by its own time between reads.
        let started = tokio::time::Instant::now();
        let spread = self.settings.interval / 2;
        let n = jobs.len().max(1) as u32;
        let pages: HashMap<String, (DateTime<Utc>, Result<PodMetrics, String>)> =
            futures::stream::iter(
                jobs.into_iter()
                    .enumerate()
                    .map(|(i, (uid, pod, dialect))| {
                        let via = via.clone();
                        async move {
                            tokio::time::sleep_until(started + spread * i as u32 / n).await;
                            let result = read_pod(&via, &pod, dialect, timeout, max_bytes).await;
                            (uid, (Utc::now(), result))
                        }
                    }),
            )
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let failed = pages.values().filter(|(_, r)| r.is_err()).count();
        metrics::counter!(crate::metrics::LOAD_POD_READS, "outcome" => "ok")
            .increment((pages.len() - failed) as u64);
        metrics::counter!(crate::metrics::LOAD_POD_READS, "outcome" => "error")
            .increment(failed as u64);
        stats.failed = failed;

        // Each pod's change since its previous reading, once (a pod counts in `all` and in
        // its track).
        let mut deltas: HashMap<String, PodDelta> = HashMap::new();
        let mut errors: HashMap<String, String> = HashMap::new();
        for (uid, (read_at, page)) in pages {
            match page {
                Ok(metrics) => {
                    deltas.insert(uid.clone(), self.tracker.observe(&uid, read_at, metrics));
                }
                Err(why) => {
                    errors.insert(uid, why);
                }
            }
        }
        self.tracker.retain(&deltas.keys().cloned().collect());

        let mut readings = Vec::new();
        for target in targets {
            let pods = ready.get(&target.id).map(Vec::as_slice).unwrap_or(&[]);
            for scope in scopes(target) {
                let in_scope: Vec<&Pod> = pods
                    .iter()
                    .filter(|(track, _)| in_track(scope, *track))
                    .map(|(_, pod)| pod.as_ref())
                    .collect();
                let read: Vec<&PodDelta> = in_scope
                    .iter()
                    .filter_map(|pod| deltas.get(&uid(pod)))
                    .collect();
                let failed: Vec<String> = in_scope
                    .iter()
                    .filter_map(|pod| {
                        let why = errors.get(&uid(pod))?;
                        Some(format!(
                            "pod {}: {why}",
                            pod.metadata.name.as_deref().unwrap_or("?")
                        ))
                    })
                    .collect();
                let dialect = in_scope
                    .first()
                    .and_then(|pod| pod_label(pod, LABEL_ENGINE))
                    .map_or_else(|| dialect_of(&target.engine), dialect_of);
                let figures = rates::figures(&read);
                readings.push(self.reading(
                    target,
                    scope,
                    at,
                    dialect,
                    in_scope.len(),
                    read.len(),
                    figures,
                    &failed,
                ));
            }
        }
        readings
    }

    /// Readings from Prometheus' answer (its own scrapes of the pods).
    fn read_prometheus(
        &self,
        found: &HashMap<Uuid, TrackedFigures>,
        targets: &[Target],
        ready: &HashMap<Uuid, Vec<(Track, Arc<Pod>)>>,
        at: DateTime<Utc>,
    ) -> Vec<Reading> {
        let mut readings = Vec::new();
        for target in targets {
            let pods = ready.get(&target.id).map(Vec::as_slice).unwrap_or(&[]);
            for scope in scopes(target) {
                let in_scope = count(pods, scope);
                let dialect = dialect_of(&target.engine);
                let tracked = found.get(&target.id);
                let figures = tracked.and_then(|t| match scope {
                    Scope::All => Some(t.all.clone()),
                    Scope::Track(track) => t.tracks.get(&track).cloned(),
                });
                let pods_read = tracked.map_or(0, |t| match scope {
                    Scope::All => t.pods,
                    Scope::Track(track) => t.track_pods.get(&track).copied().unwrap_or(0),
                }) as usize;
                let failed = if in_scope > 0 && figures.is_none() {
                    vec!["Prometheus has no series of these pods (is a PodMonitor or scrape config selecting them?)".to_owned()]
                } else {
                    Vec::new()
                };
                readings.push(self.reading(
                    target,
                    scope,
                    at,
                    dialect,
                    in_scope,
                    pods_read.min(in_scope),
                    figures.unwrap_or_default(),
                    &failed,
                ));
            }
        }
        readings
    }

    /// One reading: fresh when every ready pod was read, else stale with the reason (and
    /// the last good figures when none was read).
    #[allow(clippy::too_many_arguments)]
    fn reading(
        &self,
        target: &Target,
        scope: Scope,
        at: DateTime<Utc>,
        dialect: MetricsDialect,
        pods: usize,
        pods_read: usize,
        figures: LoadFigures,
        failed: &[String],
    ) -> Reading {
        let mut load = Load {
            as_of: at,
            stale: false,
            reason: None,
            dialect,
            pods: pods as i64,
            pods_read: pods_read as i64,
            figures,
        };
        let mut fresh = true;
        if pods == 0 {
            load.reason = Some("no ready pods".into());
        } else if dialect == MetricsDialect::Unknown {
            load.reason = Some(format!(
                "modelplane does not know the metrics of the `{}` engine",
                target.engine
            ));
        } else if !failed.is_empty() {
            fresh = false;
            load.stale = true;
            let more = if failed.len() > 1 {
                format!(" (and {} more)", failed.len() - 1)
            } else {
                String::new()
            };
            load.reason = Some(format!(
                "{} of {pods} ready pods could not be read: {}{more}",
                pods - pods_read,
                failed[0]
            ));
            if pods_read == 0
                && let Some(last) = self.last.get(&(target.id, scope))
            {
                load.figures = last.figures.clone();
            }
        }
        Reading {
            deployment_id: target.id,
            project_id: target.project_id,
            scope,
            sample: fresh.then(|| LoadSample {
                at,
                replicas: pods as i64,
                figures: load.figures.clone(),
            }),
            load,
        }
    }

    /// A reading when nothing could be read this round: stale, with the last figures.
    fn failed(
        &self,
        target: &Target,
        scope: Scope,
        at: DateTime<Utc>,
        pods: Option<usize>,
        why: &str,
    ) -> Reading {
        let last = self.last.get(&(target.id, scope));
        Reading {
            deployment_id: target.id,
            project_id: target.project_id,
            scope,
            sample: None,
            load: Load {
                as_of: at,
                stale: true,
                reason: Some(why.to_owned()),
                dialect: last.map_or_else(|| dialect_of(&target.engine), |l| l.dialect),
                pods: pods.map_or_else(|| last.map_or(0, |l| l.pods), |p| p as i64),
                pods_read: 0,
                figures: last.map(|l| l.figures.clone()).unwrap_or_default(),
            },
        }
    }

    /// Rolls the fine series up into 5-minute rollups and prunes both (every 5 minutes).
    async fn housekeeping(&mut self) {
        if self.housekept.is_some_and(|t| t.elapsed() < HOUSEKEEPING) {
            return;
        }
        self.housekept = Some(Instant::now());
        let result = async {
            let now = Utc::now();
            let bucket = |t: DateTime<Utc>| {
                let s = t.timestamp();
                DateTime::from_timestamp(s - s.rem_euclid(300), 0).unwrap_or(t)
            };
            let to = bucket(now);
            let oldest = now
                - chrono::Duration::from_std(crate::service::load::FINE_RETENTION)
                    .unwrap_or_default();
            // Resume after the newest rollup (re-rolling it: it may have been partial).
            let from = store::load::newest_coarse(&self.pool)
                .await?
                .map_or(bucket(oldest), |t| t.max(bucket(oldest)));
            let rolled = if from < to {
                store::load::roll_up(&self.pool, from, to).await?
            } else {
                0
            };
            let coarse_oldest = now
                - chrono::Duration::from_std(crate::service::load::COARSE_RETENTION)
                    .unwrap_or_default();
            let mut conn = self.pool.acquire().await?;
            let pruned = store::load::prune(&mut conn, oldest, coarse_oldest).await?;
            Ok::<_, sqlx::Error>((rolled, pruned))
        }
        .await;
        match result {
            Ok((rolled, pruned)) => {
                tracing::debug!(rolled, pruned, "load series rolled up and pruned")
            }
            Err(err) => tracing::warn!(error = %err, "cannot roll up or prune the load series"),
        }
    }
}

/// What one round did, for the log.
#[derive(Debug, Default)]
struct Stats {
    deployments: usize,
    pods: usize,
    failed: usize,
    changed: usize,
    scaled: usize,
}

/// The scopes a deployment is read in: the whole, and each track while it has a canary.
fn scopes(target: &Target) -> impl Iterator<Item = Scope> + use<> {
    let tracks: &[Scope] = if target.has_canary {
        &[
            Scope::All,
            Scope::Track(Track::Stable),
            Scope::Track(Track::Canary),
        ]
    } else {
        &[Scope::All]
    };
    tracks.iter().copied()
}

fn in_track(scope: Scope, track: Track) -> bool {
    match scope {
        Scope::All => true,
        Scope::Track(t) => t == track,
    }
}

fn count(pods: &[(Track, Arc<Pod>)], scope: Scope) -> usize {
    pods.iter().filter(|(t, _)| in_track(scope, *t)).count()
}

/// Reads and parses one pod's page; the error is one line.
async fn read_pod(
    via: &Via,
    pod: &Pod,
    dialect: MetricsDialect,
    timeout: Duration,
    max_bytes: usize,
) -> Result<PodMetrics, String> {
    if dialect == MetricsDialect::Unknown {
        return Ok(PodMetrics::default());
    }
    let port = scrape::metrics_port(pod).ok_or("the pod declares no container port")?;
    let text = scrape::scrape(via, pod, port, timeout, max_bytes)
        .await
        .map_err(|e| e.to_string())?;
    let metrics = parse::read(dialect, &text).map_err(|e| e.to_string())?;
    if metrics.is_empty() {
        return Err(format!(
            "its /metrics has none of the {} metrics",
            dialect.as_str()
        ));
    }
    Ok(metrics)
}

/// The ready pods of each deployment, with their track. A pod being deleted is not ready
/// for this: it is draining.
fn ready_pods(pods: Vec<Arc<Pod>>) -> HashMap<Uuid, Vec<(Track, Arc<Pod>)>> {
    let mut out: HashMap<Uuid, Vec<(Track, Arc<Pod>)>> = HashMap::new();
    for pod in pods {
        let ready = pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let Some(id) = pod_label(&pod, LABEL_DEPLOYMENT_ID).and_then(|v| v.parse().ok()) else {
            continue;
        };
        // A group's workers run headless (no API, no metrics): its leader speaks for it.
        let worker = pod_label(&pod, WORKER_INDEX_LABEL).is_some_and(|i| i != "0");
        if !ready || worker {
            continue;
        }
        let track = if pod_label(&pod, LABEL_TRACK) == Some(TRACK_CANARY) {
            Track::Canary
        } else {
            Track::Stable
        };
        out.entry(id).or_default().push((track, pod));
    }
    out
}

fn pod_label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// The pod's uid (its name when the server gave none): a replacement pod is a new one.
fn uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default()
}
