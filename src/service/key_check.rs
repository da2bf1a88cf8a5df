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
//!
//! Answers never tell an unknown key from a revoked or expired one.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::tokens::hash_secret;
use crate::store;
use crate::store::model_keys::KeyGrant;

/// How often each process writes its counts and reads everyone's.
pub const FLUSH: Duration = Duration::from_secs(1);
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
    project_id: Uuid,
    name: String,
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
    deployments: Mutex<HashMap<Uuid, Option<Arc<Target>>>>,
    windows: Mutex<HashMap<Uuid, Window>>,
    /// Requests let through since the last flush, per key and minute (written then, with
    /// the keys' `lastUsedAt`).
    used: Mutex<HashMap<(Uuid, i64), i64>>,
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
            windows: Mutex::default(),
            used: Mutex::default(),
        });
        let listener = store::changes::listen_on(&pool, store::model_keys::CHANNEL).await?;
        check.reload().await?;
        check.following.store(true, Ordering::SeqCst);
        tokio::spawn(check.clone().follow(Some(listener), shutdown.clone()));
        tokio::spawn(check.clone().flush_every(shutdown));
        Ok(check)
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
        let now = Utc::now();
        let Some(secret) = credential(presented) else {
            return Ok(Verdict::refused(
                401,
                "a model key is required: send it as `Authorization: Bearer <key>` or `x-api-key`",
            ));
        };
        let invalid = || Verdict::refused(401, "the model key is not valid");
        if !self.following.load(Ordering::SeqCst) {
            // Fail closed: a revocation might be missed.
            return Ok(Verdict::refused(
                401,
                "model keys cannot be checked right now; retry shortly",
            ));
        }
        let Some(key) = self
            .keys
            .read()
            .expect("not poisoned")
            .get(&hash_secret(secret))
            .cloned()
        else {
            return Ok(invalid());
        };
        if key.expires_at.is_some_and(|at| at <= now) {
            return Ok(invalid());
        }
        let Some(target) = self.target(deployment).await? else {
            return Ok(Verdict::refused(
                403,
                "the model key may not call this deployment",
            ));
        };
        let in_scope = key.project_id == target.project_id
            && key
                .deployments
                .as_ref()
                .is_none_or(|names| names.contains(&target.name));
        if !in_scope {
            return Ok(Verdict::refused(
                403,
                "the model key may not call this deployment",
            ));
        }
        if let Some(limit) = key.requests_per_minute
            && !self.admit(key.id, i64::from(limit), now)
        {
            let retry_after = 60 - now.timestamp().rem_euclid(60);
            return Ok(Verdict::Refused {
                status: 429,
                message: format!("the model key's limit of {limit} requests a minute is reached"),
                retry_after: Some(retry_after.max(1) as u64),
            });
        }
        *self
            .used
            .lock()
            .expect("not poisoned")
            .entry((key.id, minute_of(now)))
            .or_default() += 1;
        Ok(Verdict::Allowed {
            key: key.name.clone(),
            key_id: key.id,
            project: key.project.clone(),
        })
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

    /// The project and name of deployment `id` (`None`: no such deployment).
    async fn target(&self, id: Uuid) -> Result<Option<Arc<Target>>, sqlx::Error> {
        if let Some(known) = self.deployments.lock().expect("not poisoned").get(&id) {
            return Ok(known.clone());
        }
        let found = store::model_keys::deployment_of(&self.pool, id)
            .await?
            .map(|(project_id, name)| Arc::new(Target { project_id, name }));
        let mut deployments = self.deployments.lock().expect("not poisoned");
        if deployments.len() >= MAX_DEPLOYMENTS {
            deployments.clear();
        }
        // A deployment not found yet may be created later: only what exists is kept.
        if found.is_some() {
            deployments.insert(id, found.clone());
        }
        Ok(found)
    }

    async fn flush_every(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(FLUSH) => {}
            }
            if let Err(err) = self.flush().await {
                tracing::warn!(error = %err, "key check: cannot write the keys' counts");
            }
        }
    }

    /// Adds this process's counts to `model_key_usage`, reads back every process's for the
    /// current minute, and writes `lastUsedAt` of the keys used.
    pub async fn flush(&self) -> Result<(), sqlx::Error> {
        let minute = minute_of(Utc::now());
        let used: Vec<((Uuid, i64), i64)> =
            self.used.lock().expect("not poisoned").drain().collect();
        let limited: Vec<Uuid> = {
            let mut windows = self.windows.lock().expect("not poisoned");
            windows.retain(|_, w| w.minute == minute);
            windows.keys().copied().collect()
        };
        if used.is_empty() && limited.is_empty() {
            return Ok(());
        }
        let rows: Vec<store::model_keys::Counted> = used
            .iter()
            .map(|&((key_id, m), requests)| store::model_keys::Counted {
                key_id,
                minute: DateTime::from_timestamp(m * 60, 0).unwrap_or_default(),
                requests,
            })
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
                let written = used
                    .iter()
                    .find(|((k, m), _)| *k == id && *m == minute)
                    .map_or(0, |(_, n)| *n);
                w.total = total;
                w.pending = (w.pending - written).max(0);
            }
        }
        Ok(())
    }
}
