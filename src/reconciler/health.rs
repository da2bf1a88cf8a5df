//! What the worker tells readiness about itself: that its loop is alive, and whether its
//! recent work against the cluster succeeded (a live `/version` says nothing about a
//! failing write path, such as etcd down behind a live API server).

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::Utc;

use super::cluster::Cluster;
use crate::domain::{CheckResult, ReadinessCheck};

/// How long the loop may go without a beat before the worker counts as stuck. The loop
/// beats at least every 30 s while idle, and reconciles end within their budget.
pub const HEARTBEAT_STALE_AFTER: Duration = Duration::from_secs(120);

#[derive(Debug, Default)]
pub struct WorkerHealth {
    /// Unix seconds of the loop's last beat; 0 before the first.
    heartbeat: AtomicI64,
    /// Cluster results are numbered in the order they happen; the latest decides.
    results: AtomicU64,
    last_success: AtomicU64,
    last_failure: Mutex<Option<(u64, String)>>,
    /// The serving metrics' source (Prometheus) at the last round: `None` before one or
    /// without Prometheus; the error when it failed.
    load_source: Mutex<Option<Result<(), String>>>,
}

/// The worker's state as readiness reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerReport {
    pub alive: bool,
    pub message: String,
    /// The last reconcile against the cluster failed (and none succeeded since): why.
    pub cluster_failing: Option<String>,
}

impl WorkerHealth {
    pub fn beat(&self) {
        let now = Utc::now().timestamp();
        self.heartbeat.store(now, Ordering::Relaxed);
        metrics::gauge!(crate::metrics::WORKER_HEARTBEAT).set(now as f64);
    }

    /// A reconcile reached the cluster and the cluster did its part.
    pub fn cluster_succeeded(&self) {
        let n = self.results.fetch_add(1, Ordering::SeqCst) + 1;
        self.last_success.fetch_max(n, Ordering::SeqCst);
    }

    /// A reconcile failed because of the cluster (unreachable, timed out, a 5xx).
    pub fn cluster_failed(&self, why: &str) {
        let n = self.results.fetch_add(1, Ordering::SeqCst) + 1;
        *self.last_failure.lock().expect("health lock") = Some((n, why.into()));
    }

    /// The result of the last query of the serving metrics' Prometheus.
    pub fn load_source(&self, result: Result<(), String>) {
        *self.load_source.lock().expect("health lock") = Some(result);
    }

    /// Why the serving metrics' Prometheus failed at the last round, if it did (`Some(None)`:
    /// it answered).
    pub fn load_source_report(&self) -> Option<Option<String>> {
        let last = self.load_source.lock().expect("health lock");
        last.as_ref().map(|r| r.as_ref().err().cloned())
    }

    pub fn report(&self) -> WorkerReport {
        let now = Utc::now().timestamp();
        let beat = self.heartbeat.load(Ordering::Relaxed);
        let (alive, message) = if beat == 0 {
            (false, "the worker loop has not started".to_owned())
        } else if now - beat > HEARTBEAT_STALE_AFTER.as_secs() as i64 {
            (
                false,
                format!("the worker loop has not run for {} s", now - beat),
            )
        } else {
            (true, format!("the worker loop ran {} s ago", now - beat))
        };
        let success = self.last_success.load(Ordering::SeqCst);
        let cluster_failing = self
            .last_failure
            .lock()
            .expect("health lock")
            .as_ref()
            .filter(|(n, _)| *n > success)
            .map(|(_, why)| why.clone());
        WorkerReport {
            alive,
            message,
            cluster_failing,
        }
    }
}

/// How long the cluster may take to answer a readiness check.
const CLUSTER_CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The readiness checks of the reconciler's side of a process: the cluster it drives (if
/// any) and its worker loop (if it runs one).
pub struct ReconcilerReadiness {
    pub cluster: Option<Cluster>,
    /// Whether an unreachable cluster makes the process unready: only a worker-only
    /// process, since the API serves without the cluster.
    pub cluster_required: bool,
    pub worker: Option<Arc<WorkerHealth>>,
}

impl ReadinessCheck for ReconcilerReadiness {
    fn check(&self) -> Pin<Box<dyn Future<Output = Vec<CheckResult>> + Send + '_>> {
        Box::pin(async move {
            let mut checks = Vec::new();
            let report = self.worker.as_ref().map(|w| w.report());
            if let Some(cluster) = &self.cluster {
                let answer =
                    tokio::time::timeout(CLUSTER_CHECK_TIMEOUT, cluster.client.apiserver_version())
                        .await;
                let (mut ok, mut message) = match answer {
                    Ok(Ok(version)) => (
                        true,
                        format!(
                            "reachable: {} (Kubernetes {}.{})",
                            cluster.description, version.major, version.minor
                        ),
                    ),
                    Ok(Err(err)) => (
                        false,
                        format!(
                            "unreachable: {} ({})",
                            cluster.description,
                            super::cluster::ClusterError::Api(err).outage_cause()
                        ),
                    ),
                    Err(_) => (
                        false,
                        format!(
                            "no answer within {} s: {}",
                            CLUSTER_CHECK_TIMEOUT.as_secs(),
                            cluster.description
                        ),
                    ),
                };
                // A live `/version` says nothing of a failing write path: the worker's last
                // results do.
                if let Some(failing) = report.as_ref().and_then(|r| r.cluster_failing.as_ref())
                    && ok
                {
                    ok = false;
                    message = format!("{message}; but the last reconcile failed: {failing}");
                }
                checks.push(CheckResult {
                    name: "cluster".into(),
                    ok,
                    required: self.cluster_required,
                    message,
                });
            }
            if let Some(report) = report {
                checks.push(CheckResult {
                    name: "worker".into(),
                    ok: report.alive,
                    required: true,
                    message: report.message,
                });
            }
            // The serving metrics are not what the process serves: a Prometheus that is
            // down degrades readiness, it never fails it.
            if let Some(source) = self.worker.as_ref().and_then(|w| w.load_source_report()) {
                checks.push(CheckResult {
                    name: "prometheus".into(),
                    ok: source.is_none(),
                    required: false,
                    message: source.map_or_else(
                        || "answered the last serving-metrics query".to_owned(),
                        |why| format!("serving metrics are stale: {why}"),
                    ),
                });
            }
            checks
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_counts_until_the_next_success() {
        let health = WorkerHealth::default();
        assert!(!health.report().alive, "no beat yet");
        health.beat();
        assert!(health.report().alive);
        health.cluster_failed("etcdserver: request timed out");
        assert_eq!(
            health.report().cluster_failing.as_deref(),
            Some("etcdserver: request timed out")
        );
        health.cluster_succeeded();
        assert_eq!(health.report().cluster_failing, None);
        health.cluster_failed("again");
        assert_eq!(health.report().cluster_failing.as_deref(), Some("again"));
    }
}
