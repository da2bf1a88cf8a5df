//! The canary track: the record's canary as a record of its own, the share of requests
//! the route gives it, promotion (the stable track settled on the canary's spec), and the
//! removal of its objects once aborted or promoted.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Service;

use super::{Outcome, WORKER_ACTOR, Worker, deployment_ref};
use crate::domain::{Canary, Deployment, EventKind, ServingSpec, canary_object_name};
use crate::reconciler::cluster::ClusterError;
use crate::reconciler::desired::{ANNOTATION_CONFIG_HASH, DesiredObjects, Target, canary_record};
use crate::reconciler::status::Observed;
use crate::store;
use crate::store::deployments::ReconcileTarget;
use crate::store::events::Note;

/// A record's canary track, while it has a canary: its record ([`canary_record`]) and its
/// spec, when that resolves.
pub(super) struct CanaryTrack {
    record: Option<Deployment>,
    serving: Option<ServingSpec>,
}

impl CanaryTrack {
    pub(super) fn of(record: &Deployment) -> Self {
        let canary_rec = record.canary.as_ref().map(|c| canary_record(record, c));
        let canary_serving = record.canary.as_ref().and_then(|c| {
            c.spec
                .serving(&record.name)
                .inspect_err(
                    |errors| tracing::error!(%errors, "the stored canary spec is not valid"),
                )
                .ok()
        });
        Self {
            record: canary_rec,
            serving: canary_serving,
        }
    }

    /// The canary track to build and report on, when the record has one whose spec resolves.
    pub(super) fn target(&self) -> Option<Target<'_>> {
        self.record
            .as_ref()
            .zip(self.serving.as_ref())
            .map(|(record, serving)| Target {
                record,
                serving,
                canary_track: true,
                role: None,
            })
    }
}

impl Worker {
    /// The percent of requests without the header that the route gives `record`'s canary.
    pub(super) async fn canary_weight(
        &self,
        namespace: &str,
        record: &Deployment,
        canary: &Canary,
    ) -> Result<i32, ClusterError> {
        // A canary takes its share only once a replica is available (a Gateway does not
        // move the share of a backend without endpoints elsewhere: it fails it); while a
        // promotion rolls the stable track, the canary carries everything.
        Ok(if canary.promoting {
            100
        } else if self
            .canary_available(namespace, &canary_object_name(&record.name))
            .await?
        {
            canary.weight
        } else {
            0
        })
    }

    /// Whether the canary's Deployment has a replica available to take its share.
    async fn canary_available(&self, namespace: &str, name: &str) -> Result<bool, ClusterError> {
        let seen = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(Some(namespace), name));
        let live = match seen {
            Some(live) => live,
            None => {
                self.cluster
                    .get::<K8sDeployment>(Some(namespace), name)
                    .await?
            }
        };
        Ok(live
            .and_then(|d| d.status)
            .and_then(|s| s.available_replicas)
            .is_some_and(|n| n >= 1))
    }

    /// Whether the stable Deployment has rolled to `desired`'s pod template on every replica,
    /// all of them available: a promotion can then send traffic back to it.
    pub(super) async fn stable_settled(
        &self,
        desired: &DesiredObjects,
    ) -> Result<bool, ClusterError> {
        let meta = &desired.deployment.metadata;
        let name = meta.name.as_deref().unwrap_or_default();
        let seen = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(meta.namespace.as_deref(), name));
        let live = match seen {
            Some(live) => live,
            None => {
                self.cluster
                    .get::<K8sDeployment>(meta.namespace.as_deref(), name)
                    .await?
            }
        };
        let Some(live) = live else {
            return Ok(false);
        };
        let hash = live
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION_CONFIG_HASH));
        let want = desired
            .deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(1);
        let status = live.status.clone().unwrap_or_default();
        Ok(hash == Some(&desired.config_hash)
            && status.observed_generation.unwrap_or(0) >= live.metadata.generation.unwrap_or(0)
            && status.updated_replicas.unwrap_or(0) >= want
            && status.available_replicas.unwrap_or(0) >= want
            && status.replicas.unwrap_or(0) <= want)
    }

    /// Removes a canary's objects the record no longer wants (aborted, or promoted and the
    /// stable track settled), once the Gateway has accepted the route that no longer sends
    /// them anything; a finished promotion then forgets the canary. `Some`: the pass ends.
    pub(super) async fn remove_canary(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
        observed: &mut Observed,
    ) -> Result<Option<Outcome>, ClusterError> {
        let namespace = target.namespace.as_str();
        let name = canary_object_name(&record.name);
        let known = |seen: Option<Option<bool>>| match seen {
            Some(exists) => exists,
            // Not known yet (the watch has not listed): ask when there may be one.
            None => Some(record.canary.is_some() || record.status.canary.is_some()),
        };
        let deployment = known(
            self.seen
                .of::<K8sDeployment>()
                .map(|seen| seen.get(Some(namespace), &name).map(|d| d.is_some())),
        );
        let service = known(
            self.seen
                .of::<Service>()
                .map(|seen| seen.get(Some(namespace), &name).map(|d| d.is_some())),
        );
        let promoting = record.canary.as_ref().is_some_and(|c| c.promoting);
        let present = deployment.unwrap_or(false) || service.unwrap_or(false);
        if !present && !promoting {
            return Ok(None);
        }
        if present
            && !self
                .may_remove(target, record, observed, "the canary's objects")
                .await
        {
            // The route's status watch brings the Gateway's answer.
            return Ok(None);
        }
        if present {
            for result in [
                self.cluster
                    .delete::<K8sDeployment>(Some(namespace), &name)
                    .await,
                self.cluster.delete::<Service>(Some(namespace), &name).await,
            ] {
                match result {
                    Ok(_) => {}
                    Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                    Err(err) => return Err(err),
                }
            }
        }
        if promoting {
            return self.finish_promotion(record, observed).await.map(Some);
        }
        let message = "the canary's objects are removed; all traffic is on the stable track";
        self.timeline(target, EventKind::CanaryRemoved, message)
            .await;
        if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
            self.events
                .normal(&regarding, "CanaryRemoved", "RemoveCanary", message)
                .await;
        }
        Ok(None)
    }

    /// Forgets a promoted canary whose objects are gone: the record moves to a new
    /// generation, which the next pass reports on.
    async fn finish_promotion(
        &self,
        record: &Deployment,
        observed: &Observed,
    ) -> Result<Outcome, ClusterError> {
        let message = "promotion finished: every stable replica runs the canary's spec and takes all traffic; the canary's objects are removed";
        let note = Note {
            kind: EventKind::CanaryRemoved,
            message,
            actor: WORKER_ACTOR,
        };
        store::deployments::finish_canary(&self.pool, record.id, record.generation, note).await?;
        if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
            self.events
                .normal(&regarding, "CanaryRemoved", "RemoveCanary", message)
                .await;
        }
        // The record moved to a new generation: report on it.
        Ok(Outcome::Again(Duration::ZERO))
    }
}
