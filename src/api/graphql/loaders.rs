//! DataLoaders: a page of deployments reads its nested lists in one statement each, not
//! one per deployment. Keys carry the project's authorisation, so a loader reads nothing the
//! query was not allowed to.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use async_graphql::dataloader::Loader;
use uuid::Uuid;

use crate::domain::TimelineEvent;
use crate::service::access::Authorized;
use crate::service::{self, Context};

/// A deployment of an authorised project (and, for events, how many to read).
#[derive(Clone)]
pub struct Key {
    pub project: Arc<Authorized>,
    pub deployment: Uuid,
    pub per: i64,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        (self.project.id, self.deployment, self.per)
            == (other.project.id, other.deployment, other.per)
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.project.id, self.deployment, self.per).hash(state);
    }
}

/// Reads per request; errors are shared by every key of the failed batch.
pub struct Batch(pub Context);

impl Batch {
    /// A loader for one request (or one WebSocket connection). Its batches run in the
    /// request's span, so their statements are logged with its request id.
    pub fn per_request(ctx: Context) -> async_graphql::dataloader::DataLoader<Self> {
        async_graphql::dataloader::DataLoader::new(Self(ctx), |batch| {
            tokio::spawn(tracing::Instrument::in_current_span(batch))
        })
    }
}

/// Groups keys by project (and count), so each group is one read.
fn groups(keys: &[Key]) -> HashMap<(Uuid, i64), (Arc<Authorized>, Vec<Uuid>)> {
    let mut groups: HashMap<(Uuid, i64), (Arc<Authorized>, Vec<Uuid>)> = HashMap::new();
    for key in keys {
        groups
            .entry((key.project.id, key.per))
            .or_insert_with(|| (key.project.clone(), Vec::new()))
            .1
            .push(key.deployment);
    }
    groups
}

/// The newest events of a deployment.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LatestEvents(pub Key);
/// How many revisions a deployment has.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RevisionCount(pub Key);

#[derive(Clone)]
pub struct Events(pub Vec<TimelineEvent>);

impl Loader<LatestEvents> for Batch {
    type Value = Events;
    type Error = Arc<service::ServiceError>;

    async fn load(
        &self,
        keys: &[LatestEvents],
    ) -> Result<HashMap<LatestEvents, Events>, Self::Error> {
        let keys: Vec<Key> = keys.iter().map(|k| k.0.clone()).collect();
        let mut out = HashMap::new();
        for ((_, per), (project, ids)) in groups(&keys) {
            let mut found = service::deployments::latest_events_in(&self.0, &project, &ids, per)
                .await
                .map_err(Arc::new)?;
            for id in ids {
                let key = Key {
                    project: project.clone(),
                    deployment: id,
                    per,
                };
                out.insert(
                    LatestEvents(key),
                    Events(found.remove(&id).unwrap_or_default()),
                );
            }
        }
        Ok(out)
    }
}

impl Loader<RevisionCount> for Batch {
    type Value = i64;
    type Error = Arc<service::ServiceError>;

    async fn load(
        &self,
        keys: &[RevisionCount],
    ) -> Result<HashMap<RevisionCount, i64>, Self::Error> {
        let keys: Vec<Key> = keys.iter().map(|k| k.0.clone()).collect();
        let mut out = HashMap::new();
        for ((_, per), (project, ids)) in groups(&keys) {
            let counts = service::deployments::revision_counts_in(&self.0, &project, &ids)
                .await
                .map_err(Arc::new)?;
            for id in ids {
                let key = Key {
                    project: project.clone(),
                    deployment: id,
                    per,
                };
                out.insert(RevisionCount(key), counts.get(&id).copied().unwrap_or(0));
            }
        }
        Ok(out)
    }
}
