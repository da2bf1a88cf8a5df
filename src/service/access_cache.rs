//! A per-process cache of what authentication and authorisation read on every request:
//! tokens by hash, projects by name, and an OIDC user's roles on a project.
//!
//! Correctness first: every change to `api_token`, `project` or `role_binding` that can
//! take access away is announced by a trigger on [`CHANNEL`] (see the migration
//! `access_notify`), and any announcement empties the whole cache. The process that made
//! the change empties its own cache before answering, so a revoke takes effect on its next
//! request; other processes follow when the notification reaches them (milliseconds after
//! the commit). While the listening connection is down the cache is off: every request
//! reads the database, as without a cache.
//!
//! A read that raced an invalidation is never stored: entries are stored only if no
//! invalidation happened since the read began (the `epoch`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::domain::{Project, Role};
use crate::store;
use crate::store::tokens::TokenGrant;

/// The channel the access triggers `NOTIFY` on.
pub const CHANNEL: &str = "modelplane_access";

/// Entries beyond this many in one map empty that map (a bound, not an eviction policy:
/// real installations have far fewer tokens, projects and users).
const MAX_ENTRIES: usize = 10_000;

/// Shared by every clone of the service [`Context`](super::Context).
#[derive(Clone, Default)]
pub struct AccessCache {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Only while a listener is connected; off by default (tests and tools without one).
    enabled: AtomicBool,
    /// Bumped by every invalidation.
    epoch: AtomicU64,
    maps: Mutex<Maps>,
}

#[derive(Default)]
struct Maps {
    tokens: HashMap<String, TokenGrant>,
    projects: HashMap<String, Project>,
    roles: HashMap<RoleKey, Option<Role>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct RoleKey {
    project_id: Uuid,
    subject: String,
    groups: Vec<String>,
}

/// Where a read started, for storing its result only if nothing changed meanwhile.
#[derive(Clone, Copy)]
pub struct Ticket(Option<u64>);

impl AccessCache {
    /// Starts listening for access changes; the cache is on while the listener is connected.
    pub async fn start(pool: PgPool, shutdown: CancellationToken) -> Result<Self, sqlx::Error> {
        let cache = Self::default();
        let first = store::changes::listen_on(&pool, CHANNEL).await?;
        tokio::spawn(cache.clone().follow(pool, first, shutdown));
        Ok(cache)
    }

    async fn follow(self, pool: PgPool, first: PgListener, shutdown: CancellationToken) {
        let mut connected = Some(first);
        loop {
            let mut listener = match connected.take() {
                Some(listener) => listener,
                None => match store::changes::listen_on(&pool, CHANNEL).await {
                    Ok(listener) => listener,
                    Err(err) => {
                        tracing::debug!(error = %err, "access listener");
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        }
                    }
                },
            };
            // Whatever changed while not listening went unannounced: start empty.
            self.invalidate();
            self.inner.enabled.store(true, Ordering::SeqCst);
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => {
                        self.inner.enabled.store(false, Ordering::SeqCst);
                        return;
                    }
                    // `try_recv`, not `recv`: `recv` reconnects silently, and what was announced
                    // meanwhile would be missed.
                    message = listener.try_recv() => match message {
                        Ok(Some(_)) => self.invalidate(),
                        Ok(None) => {
                            tracing::warn!("access cache off: its notification connection was lost");
                            break;
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "access cache off: its notification connection failed");
                            break;
                        }
                    },
                }
            }
            // Off, and the listener's connection given back, before trying again.
            self.inner.enabled.store(false, Ordering::SeqCst);
            self.invalidate();
        }
    }

    /// Forgets everything; the next reads go to the database.
    pub fn invalidate(&self) {
        self.inner.epoch.fetch_add(1, Ordering::SeqCst);
        let mut maps = self.inner.maps.lock().expect("access cache lock");
        *maps = Maps::default();
    }

    /// Taken before a database read whose result may be stored.
    pub fn ticket(&self) -> Ticket {
        Ticket(
            self.inner
                .enabled
                .load(Ordering::SeqCst)
                .then(|| self.inner.epoch.load(Ordering::SeqCst)),
        )
    }

    fn read<T>(&self, f: impl FnOnce(&mut Maps) -> Option<T>) -> Option<T> {
        if !self.inner.enabled.load(Ordering::SeqCst) {
            return None;
        }
        f(&mut self.inner.maps.lock().expect("access cache lock"))
    }

    fn store(&self, ticket: Ticket, f: impl FnOnce(&mut Maps)) {
        let Ticket(Some(epoch)) = ticket else { return };
        let mut maps = self.inner.maps.lock().expect("access cache lock");
        // Under the lock: an invalidation either happened before (epoch moved: not stored)
        // or comes after and removes the entry.
        if self.inner.enabled.load(Ordering::SeqCst)
            && self.inner.epoch.load(Ordering::SeqCst) == epoch
        {
            f(&mut maps);
        }
    }

    pub fn token(&self, hash: &str) -> Option<TokenGrant> {
        self.read(|m| m.tokens.get(hash).cloned())
    }

    pub fn store_token(&self, ticket: Ticket, hash: &str, grant: &TokenGrant) {
        self.store(ticket, |m| {
            bounded(&mut m.tokens);
            m.tokens.insert(hash.to_owned(), grant.clone());
        });
    }

    /// Records that a cached token's use was written at `at`.
    pub fn token_used(&self, hash: &str, at: DateTime<Utc>) {
        if let Some(grant) = self
            .inner
            .maps
            .lock()
            .expect("access cache lock")
            .tokens
            .get_mut(hash)
        {
            grant.last_used_at = Some(at);
        }
    }

    pub fn project(&self, name: &str) -> Option<Project> {
        self.read(|m| m.projects.get(name).cloned())
    }

    pub fn store_project(&self, ticket: Ticket, project: &Project) {
        self.store(ticket, |m| {
            bounded(&mut m.projects);
            m.projects.insert(project.name.clone(), project.clone());
        });
    }

    pub fn role(&self, project_id: Uuid, subject: &str, groups: &[String]) -> Option<Option<Role>> {
        let key = RoleKey {
            project_id,
            subject: subject.to_owned(),
            groups: groups.to_vec(),
        };
        self.read(|m| m.roles.get(&key).copied())
    }

    pub fn store_role(
        &self,
        ticket: Ticket,
        project_id: Uuid,
        subject: &str,
        groups: &[String],
        role: Option<Role>,
    ) {
        let key = RoleKey {
            project_id,
            subject: subject.to_owned(),
            groups: groups.to_vec(),
        };
        self.store(ticket, |m| {
            bounded(&mut m.roles);
            m.roles.insert(key, role);
        });
    }
}

fn bounded<K, V>(map: &mut HashMap<K, V>) {
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
}
