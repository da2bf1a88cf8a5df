//! The canary track's status, and how a failing canary weighs on the deployment's.

use chrono::{DateTime, Utc};
use gateway_api::experimental::httproutes::{HttpRoute, HttpRouteRulesBackendRefs};

use super::{Budgets, Observed, compute};
use crate::domain::{Canary, CanaryStatus, DeploymentStatus, Endpoints, Phase};
use crate::reconciler::desired::Target;

/// The canary track's status: its own phase, counts and cause (worked out like any
/// deployment's, from its own Deployment and pods), the weight asked for and the weight the
/// live route (`observed.route`, the deployment's) applies, and its URLs.
pub fn canary_status(
    t: &Target,
    canary: &Canary,
    namespace: &str,
    observed: &Observed,
    stable: &DeploymentStatus,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> CanaryStatus {
    let live_route = observed.route.as_ref();
    let track = compute(t, namespace, observed, budgets, now);
    let external = stable.endpoints.external.clone();
    let cluster = track.endpoints.cluster.clone();
    let reason = if external.is_empty() {
        stable.endpoints.reason.clone()
    } else {
        Some(format!(
            "the external URLs are the deployment's: requests with `{}: {}` reach the canary",
            canary.header.name, canary.header.value
        ))
    };
    CanaryStatus {
        phase: track.phase,
        message: track.message,
        replicas: track.replicas,
        weight: canary.weight,
        routed_weight: live_route
            .map(|route| routed_weight(route, &t.record.name))
            .unwrap_or(0),
        header: canary.header.clone(),
        promoting: canary.promoting,
        endpoints: Endpoints {
            openai_base: external
                .first()
                .or(cluster.as_ref())
                .map(|b| format!("{b}/v1")),
            cluster,
            external,
            reason,
        },
        load: None,
    }
}

/// The percent of header-less requests the route's weighted rule sends to `backend`.
fn routed_weight(route: &HttpRoute, backend: &str) -> i32 {
    let Some(rule) = route.spec.rules.iter().flatten().find(|rule| {
        rule.matches
            .iter()
            .flatten()
            .all(|m| m.headers.as_ref().is_none_or(Vec::is_empty))
    }) else {
        return 0;
    };
    let backends = rule.backend_refs.iter().flatten();
    let weight = |b: &HttpRouteRulesBackendRefs| i64::from(b.weight.unwrap_or(1).max(0));
    let total: i64 = backends.clone().map(weight).sum();
    let ours: i64 = backends.filter(|b| b.name == backend).map(weight).sum();
    if total == 0 {
        0
    } else {
        i32::try_from(ours * 100 / total).unwrap_or(0)
    }
}

/// The deployment's status with its canary's: a failing canary while the stable track is
/// Ready makes the deployment `Degraded`, saying that stable still serves.
pub fn with_canary(mut status: DeploymentStatus, canary: CanaryStatus) -> DeploymentStatus {
    if matches!(canary.phase, Phase::Failed | Phase::Degraded) && status.phase == Phase::Ready {
        status.phase = Phase::Degraded;
        status.message = if canary.routed_weight == 0 {
            format!(
                "the canary is failing ({}); the stable track serves every request without the canary header",
                canary.message
            )
        } else {
            format!(
                "the canary is failing ({}) and still receives {}% of requests",
                canary.message, canary.routed_weight
            )
        };
    }
    status.canary = Some(canary);
    status
}
