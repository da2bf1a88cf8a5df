//! What the worker tells readiness about itself: that its loop is alive, and whether its
//! recent work against the cluster succeeded (a live `/version` says nothing about a
//! failing write path, such as etcd down behind a live API server).

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use chrono::Utc;

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
        metrics::gauge!(crate::telemetry::WORKER_HEARTBEAT).set(now as f64);
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
