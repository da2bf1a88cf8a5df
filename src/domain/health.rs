//! Readiness: what a process checks before it says it can serve, as plain values, so the
//! HTTP layer reports checks it does not implement (the worker's and the cluster's).

use std::future::Future;
use std::pin::Pin;

/// One dependency's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub name: String,
    pub ok: bool,
    /// Whether a failure makes the process unready.
    pub required: bool,
    pub message: String,
}

/// Checks a part of the process other than the database (the cluster, the worker).
pub trait ReadinessCheck: Send + Sync {
    /// Runs the checks; the caller bounds how long they may take.
    fn check(&self) -> Pin<Box<dyn Future<Output = Vec<CheckResult>> + Send + '_>>;
}
