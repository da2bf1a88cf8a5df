//! Cluster reachability: a probe of the API server that marks every record
//! `ClusterReachable=False` while the cluster does not answer (and requeues them all when
//! it does again), and the same condition on one record whose reconcile could not reach it.
//!
//! While the cluster does not answer, nothing tells whether a model still serves: a record
//! last seen `Ready` reads `Degraded` (the domain has no `Unknown` phase), naming the
//! outage, so a dashboard does not stay green on a status nobody can confirm. Every other
//! phase is kept: it already says that something is not (yet) serving.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{WORKER_ACTOR, Worker};
use crate::domain::{Condition, ConditionStatus, DeploymentStatus, EventKind, Phase};
use crate::reconciler::cluster::ClusterError;
use crate::store;
use crate::store::deployments::DeploymentFilter;
use crate::store::events::{NewEvent, Note};

/// The condition's type.
const CLUSTER_REACHABLE: &str = "ClusterReachable";

/// Rows read per page when looking for records to mark.
const PAGE: i64 = 500;

impl Worker {
    /// Asks the API server for its version every few seconds. When it stops answering,
    /// every record says so (`ClusterReachable=False`, the rest of its last status kept but
    /// a `Ready` phase), whether or not it has work pending; when it answers again, every
    /// record is looked at again, which writes a status without the condition.
    pub(super) async fn probe_cluster(self: Arc<Self>, shutdown: CancellationToken) {
        const EVERY: Duration = Duration::from_secs(2);
        // Two misses in a row: one lost request is not an outage.
        const MISSES: u32 = 2;
        let mut tick = tokio::time::interval(EVERY);
        let mut misses = 0;
        let mut marked = false;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            match tokio::time::timeout(EVERY, self.cluster.client.apiserver_version()).await {
                Ok(Ok(_)) => {
                    misses = 0;
                    if marked {
                        marked = false;
                        tracing::info!(cluster = %self.cluster.description, "the cluster answers again");
                        if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                            tracing::warn!(error = %err, "cannot requeue after the cluster came back");
                            marked = true;
                        }
                    }
                }
                outcome => {
                    misses += 1;
                    let why = match outcome {
                        Ok(Err(err)) => ClusterError::Api(err).outage_cause(),
                        _ => format!("no answer within {} s", EVERY.as_secs()),
                    };
                    if misses >= MISSES && !marked {
                        let condition = self.unreachable_condition(&why);
                        // Ready records first, with the condition and the phase in one
                        // write: no reader sees the outage beside a green phase.
                        if let Err(err) = self.degrade_ready(&condition).await {
                            tracing::warn!(error = %err, "cannot mark ready records degraded");
                        }
                        match store::deployments::mark_cluster_unreachable(&self.pool, &condition)
                            .await
                        {
                            Ok(n) => {
                                marked = true;
                                tracing::warn!(cluster = %self.cluster.description, records = n, %why, "the cluster does not answer");
                            }
                            Err(err) => tracing::warn!(error = %err, "cannot mark records"),
                        }
                    }
                }
            }
        }
    }

    /// Keeps the last status and adds `ClusterReachable=False` when the cluster cannot be
    /// reached (a `Ready` phase turns `Degraded`).
    pub(super) async fn note_unreachable(&self, id: Uuid, err: &ClusterError) {
        // A server error (5xx, e.g. etcd down behind the API server) is an outage too.
        if err.api_status().is_some_and(|s| s.code < 500)
            || matches!(
                err,
                ClusterError::Database(_) | ClusterError::Panicked(_) | ClusterError::Decode { .. }
            )
        {
            return;
        }
        let Ok(Some(target)) = store::deployments::find_reconcile_target(&self.pool, id).await
        else {
            return;
        };
        let last = &target.row.status.0;
        let marked = last
            .conditions
            .iter()
            .any(|c| c.type_ == CLUSTER_REACHABLE && c.status == ConditionStatus::False);
        // Marked by the probe already, but perhaps still Ready (marked before the phase).
        if marked && last.phase != Phase::Ready {
            return;
        }
        let condition = self.unreachable_condition(&err.outage_cause());
        let status = unreachable_status(last, &condition);
        let note = phase_note(last, &status);
        if store::deployments::update_status(
            &self.pool,
            id,
            target.row.generation,
            &status,
            note.as_deref().map(|message| Note {
                kind: EventKind::PhaseChanged,
                message,
                actor: WORKER_ACTOR,
            }),
        )
        .await
        .unwrap_or(false)
            && !marked
        {
            self.timeline(&target, EventKind::ClusterUnreachable, &condition.message)
                .await;
        }
    }

    /// `ClusterReachable=False`, saying which API server does not answer and why, in the
    /// words of whoever reads the status (never a credential: the server's URL only).
    fn unreachable_condition(&self, why: &str) -> Condition {
        Condition {
            type_: CLUSTER_REACHABLE.into(),
            status: ConditionStatus::False,
            reason: "Unreachable".into(),
            message: format!(
                "the Kubernetes API server at {} does not answer: {why}; the status below is the last seen",
                self.cluster.server
            ),
            last_transition_time: Utc::now(),
        }
    }

    /// Every record last seen `Ready` reads `Degraded` (with a `PhaseChanged` entry), its
    /// counts and URLs kept as last seen.
    async fn degrade_ready(&self, condition: &Condition) -> Result<(), sqlx::Error> {
        let mut after_project = None;
        loop {
            let projects =
                store::projects::list_projects(&self.pool, None, after_project, PAGE).await?;
            for project in &projects {
                let mut filter = DeploymentFilter {
                    phase: Some(Phase::Ready),
                    limit: PAGE,
                    ..DeploymentFilter::default()
                };
                loop {
                    let rows =
                        store::deployments::list_deployments(&self.pool, project.id, &filter)
                            .await?;
                    for row in &rows {
                        let status = unreachable_status(&row.status.0, condition);
                        let message = phase_note(&row.status.0, &status).unwrap_or_default();
                        let note = Note {
                            kind: EventKind::PhaseChanged,
                            message: &message,
                            actor: WORKER_ACTOR,
                        };
                        let written = store::deployments::update_status(
                            &self.pool,
                            row.id,
                            row.generation,
                            &status,
                            Some(note),
                        )
                        .await?;
                        // Marked here, so the sweep that follows skips it: it gets the
                        // sweep's timeline entry here.
                        if written {
                            store::events::insert_event(
                                &self.pool,
                                NewEvent {
                                    deployment_id: row.id,
                                    project_id: row.project_id,
                                    deployment_name: &row.name,
                                    kind: EventKind::ClusterUnreachable,
                                    message: &condition.message,
                                    actor: WORKER_ACTOR,
                                },
                            )
                            .await?;
                        }
                    }
                    match rows.last() {
                        Some(last) if rows.len() as i64 == PAGE => filter.after = Some(last.id),
                        _ => break,
                    }
                }
            }
            match projects.last() {
                Some(last) if projects.len() as i64 == PAGE => after_project = Some(last.id),
                _ => return Ok(()),
            }
        }
    }
}

/// The last status with `condition` (in place of an older one): a `Ready` phase reads
/// `Degraded`, its message naming the outage and what was last seen; the rest is kept.
fn unreachable_status(last: &DeploymentStatus, condition: &Condition) -> DeploymentStatus {
    let mut status = last.clone();
    status.conditions.retain(|c| c.type_ != CLUSTER_REACHABLE);
    status.conditions.push(condition.clone());
    if status.phase == Phase::Ready {
        status.phase = Phase::Degraded;
        let why = condition
            .message
            .split_once("; the status below")
            .map_or(condition.message.as_str(), |(why, _)| why);
        status.message = format!(
            "whether it still serves is unknown: {why}; last seen Ready ({})",
            last.message
        );
    }
    status
}

/// The `PhaseChanged` timeline entry of a phase the outage changed.
fn phase_note(last: &DeploymentStatus, status: &DeploymentStatus) -> Option<String> {
    (last.phase != status.phase)
        .then(|| format!("{} → {}: {}", last.phase, status.phase, status.message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Endpoints, ReplicaCounts};

    fn last(phase: Phase, message: &str) -> DeploymentStatus {
        DeploymentStatus {
            phase,
            observed_generation: 1,
            message: message.into(),
            replicas: ReplicaCounts {
                desired: 1,
                updated: 1,
                ready: 1,
                available: 1,
            },
            conditions: vec![],
            endpoints: Endpoints::default(),
            canary: None,
            adapters: Vec::new(),
            roles: Vec::new(),
            load: None,
            autoscaling: None,
        }
    }

    fn condition() -> Condition {
        Condition {
            type_: CLUSTER_REACHABLE.into(),
            status: ConditionStatus::False,
            reason: "Unreachable".into(),
            message: "the Kubernetes API server at https://k8s:6443 does not answer: connection refused; the status below is the last seen".into(),
            last_transition_time: Utc::now(),
        }
    }

    #[test]
    fn ready_is_not_kept_green_while_nothing_can_tell() {
        let condition = condition();
        let status = unreachable_status(&last(Phase::Ready, "1/1 replicas available"), &condition);
        assert_eq!(status.phase, Phase::Degraded);
        assert_eq!(
            status.message,
            "whether it still serves is unknown: the Kubernetes API server at https://k8s:6443 \
             does not answer: connection refused; last seen Ready (1/1 replicas available)"
        );
        assert_eq!(status.replicas.available, 1, "the counts are the last seen");
        assert_eq!(status.conditions, vec![condition]);
        let note = phase_note(&last(Phase::Ready, ""), &status).unwrap();
        assert!(note.starts_with("Ready → Degraded: "), "{note}");
    }

    #[test]
    fn other_phases_are_kept_with_the_condition() {
        for phase in [
            Phase::Pending,
            Phase::Deploying,
            Phase::Failed,
            Phase::Degraded,
        ] {
            let before = last(phase, "as it was");
            let status = unreachable_status(&before, &condition());
            assert_eq!(
                (status.phase, status.message.as_str()),
                (phase, "as it was")
            );
            assert!(phase_note(&before, &status).is_none());
        }
    }

    /// What the client reports as `ServiceError: client error (Connect)` reads as the cause.
    #[tokio::test]
    async fn a_refused_connection_is_said_in_words() {
        crate::install_crypto_provider();
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = kube::Config::new(format!("http://127.0.0.1:{port}").parse().unwrap());
        config.default_retry = false;
        let client = kube::Client::try_from(config).unwrap();
        let err = client.apiserver_version().await.unwrap_err();
        assert!(err.to_string().contains("ServiceError"), "{err}");
        assert_eq!(ClusterError::Api(err).outage_cause(), "connection refused");
    }
}
