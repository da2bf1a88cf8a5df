//! Cluster reachability: a probe of the API server that marks every record
//! `ClusterReachable=False` while the cluster does not answer (and requeues them all when
//! it does again), and the same condition on one record whose reconcile could not reach it.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::Worker;
use crate::domain::{Condition, ConditionStatus, EventKind};
use crate::reconciler::cluster::ClusterError;
use crate::store;

impl Worker {
    /// Asks the API server for its version every few seconds. When it stops answering,
    /// every record says so (`ClusterReachable=False`, the rest of its last status kept),
    /// whether or not it has work pending; when it answers again, every record is looked at
    /// again, which writes a status without the condition.
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
                        Ok(Err(err)) => err.to_string(),
                        _ => format!("no answer within {} s", EVERY.as_secs()),
                    };
                    if misses >= MISSES && !marked {
                        let condition = Condition {
                            type_: "ClusterReachable".into(),
                            status: ConditionStatus::False,
                            reason: "Unreachable".into(),
                            message: format!("cannot reach the cluster: {why}"),
                            last_transition_time: Utc::now(),
                        };
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

    /// Keeps the last status and adds `ClusterReachable=False` when the cluster cannot be reached.
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
        let mut status = target.row.status.0.clone();
        if status
            .conditions
            .iter()
            .any(|c| c.type_ == "ClusterReachable" && c.status == ConditionStatus::False)
        {
            return;
        }
        status.conditions.push(Condition {
            type_: "ClusterReachable".into(),
            status: ConditionStatus::False,
            reason: "Unreachable".into(),
            message: format!("cannot reach the cluster: {err}"),
            last_transition_time: Utc::now(),
        });
        if store::deployments::update_status(&self.pool, id, target.row.generation, &status, None)
            .await
            .unwrap_or(false)
        {
            self.timeline(
                &target,
                EventKind::ClusterUnreachable,
                &format!("cannot reach the cluster: {err}"),
            )
            .await;
        }
    }
}
