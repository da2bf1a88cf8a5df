//! What the API server took: the Applied condition, the status of a record with nothing
//! (or something refused) applied, and the DisruptionBudget condition.

use chrono::{DateTime, Utc};

use super::endpoints::endpoints;
use super::{Check, Observed, condition, status};
use crate::domain::{Deployment, DeploymentStatus, Endpoints, FieldErrors, Phase, ReplicaCounts};
use crate::reconciler::desired::Target;

/// The status of a record whose stored spec does not resolve: nothing is applied from it.
pub fn invalid_spec(
    record: &Deployment,
    errors: &FieldErrors,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let message = format!("the stored spec is not valid: {errors}");
    let conditions = vec![condition(
        &record.status,
        "Applied",
        false,
        "InvalidSpec",
        message.clone(),
        now,
    )];
    status(
        Phase::Failed,
        record,
        format!("{message}; change the spec to apply it"),
        // What ran before keeps running: the counts stand until a valid spec is applied.
        record.status.replicas.clone(),
        conditions,
        Endpoints::default(),
    )
}

/// The status while the API server refuses an object (Failed, naming it), or before the
/// Deployment exists (Pending): Applied is the only condition.
pub(super) fn not_applied(
    t: &Target,
    namespace: &str,
    observed: &Observed,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let record = t.record;
    let (check, phase, message, endpoints) = match &observed.rejected {
        _ if observed.unserved.is_some() => {
            let why = observed.unserved.clone().unwrap_or_default();
            (
                Check::new("Applied", false, "KindNotServed", why.clone()),
                Phase::Failed,
                why,
                Endpoints::default(),
            )
        }
        Some((kind, message)) => (
            Check::new(
                "Applied",
                false,
                "Rejected",
                format!("{kind} rejected: {message}"),
            ),
            Phase::Failed,
            format!("Kubernetes rejected the {kind}: {message}"),
            endpoints(t, namespace, observed),
        ),
        None => (
            Check::new(
                "Applied",
                false,
                "NotApplied",
                "objects not applied yet".into(),
            ),
            Phase::Pending,
            "Waiting for the reconciler to apply the deployment".into(),
            Endpoints::default(),
        ),
    };
    let counts = ReplicaCounts {
        desired: i64::from(t.serving.replicas),
        ..Default::default()
    };
    let conditions = vec![check.at(&record.status, now)];
    status(phase, record, message, counts, conditions, endpoints)
}

/// Applied: every object of the record's generation is in the cluster.
pub(super) fn applied(record: &Deployment) -> Check {
    Check::new(
        "Applied",
        true,
        "Applied",
        format!("generation {} applied", record.generation),
    )
}

/// DisruptionBudget, only when the API server refused the budget (the rest was applied).
pub(super) fn disruption_budget(observed: &Observed) -> Option<Check> {
    let message = observed.budget_rejected.as_ref()?;
    Some(Check::new(
        "DisruptionBudget",
        false,
        "Rejected",
        format!("Kubernetes rejected the PodDisruptionBudget: {message}"),
    ))
}
