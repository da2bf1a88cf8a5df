//! The model key check: may this credential call this deployment now?
//!
//! The Gateway asks it for every request to a deployment with `access: keys` (the
//! HTTPRoute's `ExternalAuth` filter, answered by `api/authz.rs`). It answers from memory:
//!
//! - **Keys**: every live key of every project, by the SHA-256 of its secret, loaded at start
//!   and kept current by the `model_key` table's notifications (its trigger says the id of
//!   each created, revoked or changed key; the key is read again). A revocation reaches every
//!   process within milliseconds of its commit. While the notification connection is down
//!   the check refuses every key (fail closed); when it is back, everything is read again.
//!   A credential that is no live key costs no database round trip, so a flood of bad keys
//!   reaches only memory.
//! - **Deployments**: the project and name of each deployment id asked about, read once
//!   (an id's project and name never change), only for a credential that is a live key.
//! - **Rates**: requests per key in the current minute (`requestsPerMinute`): this
//!   process's count since it last wrote, plus every process's as of that write. Each
//!   process adds its counts to `model_key_usage` every [`FLUSH`] and reads back the totals,
//!   so several processes together let through at most a limit plus what the others
//!   admitted in the last flush interval.
//! - **Concurrency** (`maxConcurrent`): the Gateway asks when a request starts and never
//!   says when it ends (GEP-1494's filter, like Envoy's ext_authz, is one call per request),
//!   so a request counts as in flight for its deployment's recent 95th-percentile latency
//!   (from the serving metrics; [`DEFAULT_HOLD`] before there is one): Little's law, not a
//!   count of open connections. Each process counts its own: with N processes answering,
//!   up to N times the limit can be in flight.
//! - **Token budgets** (`dailyTokenBudget`): the key's share of its deployments' metered
//!   tokens today (`store::model_keys::key_days`), read every [`SPENT_EVERY`] for the keys
//!   that have a budget. The count trails the model servers by the metrics' collection
//!   interval plus that, so a key can overrun its budget by what it uses meanwhile.
//! - **Which deployment**: with the HTTP protocol the route's filter names it in the
//!   check's path; with gRPC, from the request's host and path ([`routes`]).
//!
//! Answers never tell an unknown key from a revoked or expired one.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::tokens::hash_secret;
use crate::store;
use crate::store::model_keys::KeyGrant;

mod routes;

/// How often each process writes the counts of keys with a rate limit and reads everyone's.
pub const FLUSH: Duration = Duration::from_secs(1);
/// The counts of keys without a rate limit are written once every this many flushes, a
/// slice of them (by key id) at each flush: their usage and `lastUsedAt` trail by up to
/// that many seconds, and no flush writes every key's rows at once (one statement for
/// thousands of keys made the checks around it wait on a 2-core machine).
const USAGE_EVERY: u64 = 10;
/// How often the tokens of keys with a budget are read.
pub const SPENT_EVERY: Duration = Duration::from_secs(10);
/// How long a request counts as in flight when its deployment's latency is not known.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);
/// The longest credential looked at; anything longer is no key of ours.
const MAX_CREDENTIAL: usize = 256;
/// Deployment ids remembered (a bound: ids come from the routes modelplane wrote).
const MAX_DEPLOYMENTS: usize = 100_000;

/// What the check says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through; name the key and project to the model server.
    Allowed {
        key: String,
        key_id: Uuid,
        project: String,
    },
    /// Refuse it: `status` (401, 403 or 429), a message safe to show the caller, and for
    /// 429 the seconds until it may try again.
    Refused {
        status: u16,
        message: String,
        retry_after: Option<u64>,
    },
}

impl Verdict {
    fn refused(status: u16, message: impl Into<String>) -> Self {
        Self::Refused {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
}

/// What the check is asked about.
#[derive(Debug, Clone, Copy)]
enum Asked<'a> {
    /// A deployment by id (the HTTP protocol's path).
    Deployment(Uuid),
    /// Whatever deployment's route matches this host and path (gRPC).
    At { host: &'a str, path: &'a str },
}

/// How long a request to a deployment with this 95th-percentile latency counts as in flight.
fn hold_of(p95_seconds: Option<f64>) -> Duration {
    p95_seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_HOLD, |s| Duration::from_secs_f64(s.min(3600.0)))
}

/// Whether `key` may call `target`: same project, and named by the key if it names any.
fn in_scope(key: &KeyGrant, target: &Target) -> bool {
    key.project_id == target.project_id
        && key
            .deployments
            .as_ref()
            .is_none_or(|names| names.contains(&target.name))
}

/// What the caller presented (the check never sees more of the request).
#[derive(Debug, Clone, Copy, Default)]
pub struct Presented<'a> {
    /// The `Authorization` header's value.
    pub authorization: Option<&'a str>,
    /// The `x-api-key` header's value.
    pub api_key: Option<&'a str>,
}

/// A deployment as the check needs it.
#[derive(Debug, Clone)]
struct Target {
    id: Uuid,
    project_id: Uuid,
    name: String,
    /// How long one of its requests counts as in flight (read again every
    /// [`SPENT_EVERY`], off the check's path).
    hold: Duration,
}

/// One key's requests in the current minute.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    minute: i64,
    /// Every process's, as of the last flush.
    total: i64,
    /// This process's since the last flush.
    pending: i64,
}

/// One per process that answers the Gateway.
pub struct KeyCheck {
    pool: PgPool,
    /// Live keys by the hash of their secret; off (refusing every key) while not following.
    keys: RwLock<HashMap<String, Arc<KeyGrant>>>,
    following: AtomicBool,
    deployments: Mutex<HashMap<Uuid, Arc<Target>>>,
    routes: routes::RouteTable,
    windows: Mutex<HashMap<Uuid, Window>>,
    /// When each key's requests let through stop counting as in flight (keys with a
    /// concurrency limit), soonest first.
    in_flight: Mutex<HashMap<Uuid, VecDeque<Instant>>>,
    /// Tokens used today by each key with a budget, as last read.
    spent: RwLock<HashMap<Uuid, i64>>,
    /// Requests let through since the last flush, per key, deployment and minute (written
    /// then, with the keys' `lastUsedAt`).
    used: Mutex<HashMap<(Uuid, Uuid, i64), i64>>,
}

impl std::fmt::Debug for KeyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCheck")
            .field("keys", &self.keys.read().expect("not poisoned").len())
            .field("following", &self.following.load(Ordering::Relaxed))
            .finish()
    }
}

/// The credential in the request: `Authorization: Bearer <key>` (what OpenAI clients send),
/// else `x-api-key`. `None` when neither holds something that could be a key.
pub fn credential<'a>(presented: Presented<'a>) -> Option<&'a str> {
    let bearer = presented.authorization.and_then(|value| {
        let (scheme, rest) = value.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    bearer
        .or(presented.api_key.map(str::trim))
        .filter(|c| !c.is_empty() && c.len() <= MAX_CREDENTIAL && c.is_ascii())
}

fn minute_of(now: DateTime<Utc>) -> i64 {
    now.timestamp().div_euclid(60)
}

impl KeyCheck {
    /// Loads every live key and starts following changes until `shutdown`.
    pub async fn start(
        pool: PgPool,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, sqlx::Error> {
        let check = Arc::new(Self {
            pool: pool.clone(),
            keys: RwLock::default(),
            following: AtomicBool::new(false),
            deployments: Mutex::default(),
            routes: routes::RouteTable::new(pool.clone()),
            windows: Mutex::default(),
            in_flight: Mutex::default(),
            spent: RwLock::default(),
            used: Mutex::default(),
        });
        let listener = store::changes::listen_on(&pool, store::model_keys::CHANNEL).await?;
        check.reload().await?;
        check.following.store(true, Ordering::SeqCst);
        tokio::spawn(check.clone().follow(Some(listener), shutdown.clone()));
        tokio::spawn(check.clone().flush_every(shutdown.clone()));
        tokio::spawn(check.clone().read_spent_every(shutdown));
        Ok(check)
    }

    /// Whether it follows the keys' changes (while not, it refuses every key).
    pub fn following(&self) -> bool {
        self.following.load(Ordering::SeqCst)
    }

    /// Live keys known now.
    pub fn keys(&self) -> usize {
        self.keys.read().expect("not poisoned").len()
    }

    async fn reload(&self) -> Result<(), sqlx::Error> {
        let grants = store::model_keys::live_grants(&self.pool).await?;
        let keys = grants
            .into_iter()
            .map(|g| (g.key_hash.clone(), Arc::new(g)))
            .collect();
        *self.keys.write().expect("not poisoned") = keys;
        Ok(())
    }

    /// Reads key `id` again after a notification: stored while live, dropped otherwise.
    async fn refresh(&self, id: Uuid) -> Result<(), sqlx::Error> {
        let grant = store::model_keys::grant(&self.pool, id).await?;
        let mut keys = self.keys.write().expect("not poisoned");
        keys.retain(|_, g| g.id != id);
        if let Some(grant) = grant.filter(|g| g.revoked_at.is_none()) {
            keys.insert(grant.key_hash.clone(), Arc::new(grant));
        }
        Ok(())
    }

    async fn follow(
        self: Arc<Self>,
        mut connected: Option<sqlx::postgres::PgListener>,
        shutdown: CancellationToken,
    ) {
        loop {
            let mut listener = match connected.take() {
                Some(listener) => listener,
                None => {
                    let listening = async {
                        let listener =
                            store::changes::listen_on(&self.pool, store::model_keys::CHANNEL)
                                .await?;
                        // What changed while not listening went unannounced: read it all.
                        self.reload().await?;
                        Ok::<_, sqlx::Error>(listener)
                    };
                    match listening.await {
                        Ok(listener) => listener,
                        Err(err) => {
                            tracing::warn!(error = %err, "key check: cannot follow the keys; refusing every key until it can");
                            tokio::select! {
                                () = shutdown.cancelled() => return,
                                () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                            }
                        }
                    }
                }
            };
            self.following.store(true, Ordering::SeqCst);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    // `try_recv`: `recv` reconnects silently and what was said meanwhile
                    // would be missed.
                    message = listener.try_recv() => match message {
                        Ok(Some(n)) => {
                            let Ok(id) = n.payload().parse() else { continue };
                            if let Err(err) = self.refresh(id).await {
                                tracing::warn!(error = %err, "key check: cannot read a changed key; reading them all again");
                                break;
                            }
                        }
                        Ok(None) | Err(_) => {
                            tracing::warn!("key check: lost its notification connection; refusing every key until it is back");
                            break;
                        }
                    },
                }
            }
            self.following.store(false, Ordering::SeqCst);
        }
    }

    /// May `presented` call deployment `deployment` now? Counts the request when it may.
    pub async fn check(
        &self,
        presented: Presented<'_>,
        deployment: Uuid,
    ) -> Result<Verdict, sqlx::Error> {
        self.check_for(presented, Asked::Deployment(deployment))
            .await
    }

    /// May `presented` call the deployment whose route matches `host` and `path` now (the
    /// gRPC protocol, where the route does not name it)?
    pub async fn check_at(
        &self,
        presented: Presented<'_>,
        host: &str,
        path: &str,
    ) -> Result<Verdict, sqlx::Error> {
        self.check_for(presented, Asked::At { host, path }).await
    }

    async fn check_for(
        &self,
        presented: Presented<'_>,
        asked: Asked<'_>,
    ) -> Result<Verdict, sqlx::Error> {
        let now = Utc::now();
        let key = match self.live_key(presented, now) {
            Ok(key) => key,
            Err(refused) => return Ok(refused),
        };
        // Only a live key costs a look at the deployment (memory, then the store once).
        let candidates = match asked {
            Asked::Deployment(id) => vec![id],
            Asked::At { host, path } => self.routes.deployments_at(host, path).await?,
        };
        let mut target = None;
        for id in candidates {
            if let Some(t) = self.target(id).await?
                && in_scope(&key, &t)
            {
                target = Some(t);
                break;
            }
        }
        let Some(target) = target else {
            return Ok(Verdict::refused(
                403,
                "the model key may not call this deployment",
            ));
        };
        if let Some(refused) = self.limit(&key, &target, now) {
            return Ok(refused);
        }
        *self
            .used
            .lock()
            .expect("not poisoned")
            .entry((key.id, target.id, minute_of(now)))
            .or_default() += 1;
        Ok(Verdict::Allowed {
            key: key.name.clone(),
            key_id: key.id,
            project: key.project.clone(),
        })
    }

    /// The live key `presented` holds, or the refusal to answer.
    fn live_key(
        &self,
        presented: Presented<'_>,
        now: DateTime<Utc>,
    ) -> Result<Arc<KeyGrant>, Verdict> {
        let Some(secret) = credential(presented) else {
            return Err(Verdict::refused(
                401,
                "a model key is required: send it as `Authorization: Bearer <key>` or `x-api-key`",
            ));
        };
        if !self.following.load(Ordering::SeqCst) {
            // Fail closed: a revocation might be missed.
            return Err(Verdict::refused(
                401,
                "model keys cannot be checked right now; retry shortly",
            ));
        }
        let invalid = || Verdict::refused(401, "the model key is not valid");
        let key = self
            .keys
            .read()
            .expect("not poisoned")
            .get(&hash_secret(secret))
            .cloned()
            .ok_or_else(invalid)?;
        if key.expires_at.is_some_and(|at| at <= now) {
            return Err(invalid());
        }
        Ok(key)
    }

    /// The refusal when one of the key's limits is reached; otherwise counts the request
    /// against them.
    fn limit(&self, key: &KeyGrant, target: &Target, now: DateTime<Utc>) -> Option<Verdict> {
        let too_many = |message: String, seconds: i64| Verdict::Refused {
            status: 429,
            message,
            retry_after: Some(seconds.max(1) as u64),
        };
        if let Some(budget) = key.daily_token_budget {
            let spent = self
                .spent
                .read()
                .expect("not poisoned")
                .get(&key.id)
                .copied();
            if spent.is_some_and(|spent| spent >= budget) {
                let midnight = (now.date_naive() + chrono::Days::new(1))
                    .and_time(chrono::NaiveTime::MIN)
                    .and_utc();
                return Some(too_many(
                    format!("the model key's budget of {budget} tokens a day is used up"),
                    (midnight - now).num_seconds(),
                ));
            }
        }
        let started = Instant::now();
        if let Some(limit) = key.max_concurrent
            && let Some(free_in) = self.in_flight_full(key.id, limit, started)
        {
            return Some(too_many(
                format!("the model key's limit of {limit} requests at once is reached"),
                free_in.as_secs_f64().ceil() as i64,
            ));
        }
        if let Some(limit) = key.requests_per_minute
            && !self.admit(key.id, i64::from(limit), now)
        {
            return Some(too_many(
                format!("the model key's limit of {limit} requests a minute is reached"),
                60 - now.timestamp().rem_euclid(60),
            ));
        }
        if key.max_concurrent.is_some() {
            let mut in_flight = self.in_flight.lock().expect("not poisoned");
            in_flight
                .entry(key.id)
                .or_default()
                .push_back(started + target.hold);
        }
        None
    }

    /// `None` when key `id` has fewer than `limit` requests in flight; else how long until
    /// the first of them stops counting.
    fn in_flight_full(&self, id: Uuid, limit: i32, now: Instant) -> Option<Duration> {
        let mut in_flight = self.in_flight.lock().expect("not poisoned");
        let ends = in_flight.entry(id).or_default();
        // Ends are pushed in start order and holds differ per deployment: drop every
        // ended one, not only those in front.
        ends.retain(|end| *end > now);
        if ends.len() < usize::try_from(limit).unwrap_or(usize::MAX) {
            return None;
        }
        ends.iter().min().map(|end| *end - now)
    }

    /// Counts one request against `limit` in the current minute, unless it is reached.
    fn admit(&self, id: Uuid, limit: i64, now: DateTime<Utc>) -> bool {
        let minute = minute_of(now);
        let mut windows = self.windows.lock().expect("not poisoned");
        let window = windows.entry(id).or_default();
        if window.minute != minute {
            *window = Window {
                minute,
                ..Window::default()
            };
        }
        if window.total + window.pending >= limit {
            return false;
        }
        window.pending += 1;
        true
    }

    /// The project, name and latency of deployment `id` (`None`: no such deployment).
    async fn target(&self, id: Uuid) -> Result<Option<Arc<Target>>, sqlx::Error> {
        if let Some(known) = self.deployments.lock().expect("not poisoned").get(&id) {
            return Ok(Some(known.clone()));
        }
        let Some(found) = store::model_keys::deployment_of(&self.pool, id).await? else {
            // A deployment not found yet may be created later: only what exists is kept.
            return Ok(None);
        };
        let target = Arc::new(Target {
            id,
            project_id: found.project_id,
            name: found.name,
            hold: hold_of(found.e2e_p95_seconds),
        });
        let mut deployments = self.deployments.lock().expect("not poisoned");
        if deployments.len() >= MAX_DEPLOYMENTS {
            deployments.clear();
        }
        deployments.insert(id, target.clone());
        Ok(Some(target))
    }

    /// Reads the latency of every deployment known again (their project and name never
    /// change), so the check never waits on the database for it.
    pub async fn read_latencies(&self) -> Result<(), sqlx::Error> {
        let ids: Vec<Uuid> = self
            .deployments
            .lock()
            .expect("not poisoned")
            .keys()
            .copied()
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let latencies = store::model_keys::latencies(&self.pool, &ids).await?;
        let mut deployments = self.deployments.lock().expect("not poisoned");
        for (id, p95) in latencies {
            if let Some(known) = deployments.get_mut(&id) {
                let hold = hold_of(p95);
                if known.hold != hold {
                    *known = Arc::new(Target {
                        hold,
                        ..(**known).clone()
                    });
                }
            }
        }
        Ok(())
    }

    async fn read_spent_every(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            if let Err(err) = self.read_spent().await {
                tracing::warn!(error = %err, "key check: cannot read the keys' tokens");
            }
            if let Err(err) = self.read_latencies().await {
                tracing::warn!(error = %err, "key check: cannot read the deployments' latency");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(SPENT_EVERY) => {}
            }
        }
    }

    /// Reads today's tokens of every key with a budget.
    pub async fn read_spent(&self) -> Result<(), sqlx::Error> {
        let budgeted: Vec<Uuid> = self
            .keys
            .read()
            .expect("not poisoned")
            .values()
            .filter(|k| k.daily_token_budget.is_some())
            .map(|k| k.id)
            .collect();
        if budgeted.is_empty() {
            self.spent.write().expect("not poisoned").clear();
            return Ok(());
        }
        let now = Utc::now();
        let midnight = now.date_naive().and_time(chrono::NaiveTime::MIN).and_utc();
        let rows = store::model_keys::key_days(
            &self.pool,
            &budgeted,
            midnight,
            now + chrono::Duration::days(1),
        )
        .await?;
        let mut spent: HashMap<Uuid, f64> = HashMap::new();
        for row in rows {
            *spent.entry(row.key_id).or_default() += row.tokens;
        }
        *self.spent.write().expect("not poisoned") = spent
            .into_iter()
            .map(|(id, tokens)| (id, tokens.round() as i64))
            .collect();
        Ok(())
    }

    async fn flush_every(self: Arc<Self>, shutdown: CancellationToken) {
        for tick in 1u64.. {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(FLUSH) => {}
            }
            if let Err(err) = self.flush_counts(Some(tick % USAGE_EVERY)).await {
                tracing::warn!(error = %err, "key check: cannot write the keys' counts");
            }
        }
    }

    /// Adds this process's counts to `model_key_usage`, reads back every process's for the
    /// current minute, and writes `lastUsedAt` of the keys used.
    pub async fn flush(&self) -> Result<(), sqlx::Error> {
        self.flush_counts(None).await
    }

    /// Writes the counts of the keys with a rate limit (whose limit needs everyone's) and of
    /// the other keys in `slice` (`key id mod USAGE_EVERY`), or of all keys when `None`.
    async fn flush_counts(&self, slice: Option<u64>) -> Result<(), sqlx::Error> {
        let minute = minute_of(Utc::now());
        let limited: Vec<Uuid> = {
            let mut windows = self.windows.lock().expect("not poisoned");
            windows.retain(|_, w| w.minute == minute);
            windows.keys().copied().collect()
        };
        let used: Vec<((Uuid, Uuid, i64), i64)> = {
            let mut used = self.used.lock().expect("not poisoned");
            match slice {
                None => used.drain().collect(),
                Some(slice) => {
                    let limited: std::collections::HashSet<&Uuid> = limited.iter().collect();
                    used.extract_if(|(key, _, _), _| {
                        limited.contains(key)
                            || key.as_u128() % u128::from(USAGE_EVERY) == u128::from(slice)
                    })
                    .collect()
                }
            }
        };
        if used.is_empty() && limited.is_empty() {
            return Ok(());
        }
        let rows: Vec<store::model_keys::Counted> = used
            .iter()
            .map(
                |&((key_id, deployment_id, m), requests)| store::model_keys::Counted {
                    key_id,
                    deployment_id,
                    minute: DateTime::from_timestamp(m * 60, 0).unwrap_or_default(),
                    requests,
                },
            )
            .collect();
        let at = DateTime::from_timestamp(minute * 60, 0).unwrap_or_default();
        let totals = match store::model_keys::count_requests(&self.pool, &rows, at, &limited).await
        {
            Ok(totals) => totals,
            Err(err) => {
                // Kept for the next flush: a blip loses no count.
                let mut pending = self.used.lock().expect("not poisoned");
                for (k, n) in used {
                    *pending.entry(k).or_default() += n;
                }
                return Err(err);
            }
        };
        let mut windows = self.windows.lock().expect("not poisoned");
        for (id, total) in totals {
            if let Some(w) = windows.get_mut(&id).filter(|w| w.minute == minute) {
                // What was written is in `total` now; what came since stays pending.
                let written: i64 = used
                    .iter()
                    .filter(|((k, _, m), _)| *k == id && *m == minute)
                    .map(|(_, n)| *n)
                    .sum();
                w.total = total;
                w.pending = (w.pending - written).max(0);
            }
        }
        Ok(())
    }
}
