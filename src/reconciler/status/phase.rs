//! The phase and its one-line message: what the rollout, its problem and the route add up
//! to; and the Progressing condition, which agrees with it.

use chrono::SecondsFormat;

use super::problems::Problem;
use super::rollout::{NodeLoss, Rollout, node_losses};
use super::{Check, Observed};
use crate::domain::{Deployment, Phase};

/// The phase and message of an applied record. `route`: whether the route works, and what
/// to say about it.
pub(super) fn phase(
    record: &Deployment,
    observed: &Observed,
    rollout: &Rollout,
    problem: Option<&Problem>,
    route: &(bool, String),
) -> (Phase, String) {
    if rollout.desired == 0 {
        scaling_to_zero(rollout, observed.activating)
    } else if rollout.counts.available == 0 {
        none_available(observed, rollout, problem, &route.1)
    } else {
        some_available(record, observed, rollout, problem, route)
    }
}

fn scaling_to_zero(rollout: &Rollout, activating: bool) -> (Phase, String) {
    let total = rollout.total;
    if total == 0 && activating {
        (
            Phase::ScaledToZero,
            "scaled to zero; the first request starts a replica".to_owned(),
        )
    } else if total == 0 {
        (
            Phase::ScaledToZero,
            "scaled to zero; objects kept".to_owned(),
        )
    } else {
        (
            Phase::Deploying,
            format!("scaling to zero: {total} pod(s) still running"),
        )
    }
}

/// Nothing serves yet: Failed on a cause that will not clear, else still deploying.
fn none_available(
    observed: &Observed,
    rollout: &Rollout,
    problem: Option<&Problem>,
    route_message: &str,
) -> (Phase, String) {
    match problem {
        Some(p) if p.fatal => (Phase::Failed, p.message.clone()),
        // A refused route never serves until the spec changes.
        _ if observed.route_rejected.is_some() => (Phase::Failed, route_message.to_owned()),
        // Not Failed: a lost node comes back, or its pods are evicted and replaced.
        _ if let Some(message) = lost_nodes(observed, rollout, problem) => {
            (Phase::Degraded, message)
        }
        Some(p) => (Phase::Deploying, format!("waiting: {}", p.message)),
        None => (
            Phase::Deploying,
            format!(
                "rolling out: {}/{} replicas available",
                rollout.counts.available, rollout.desired
            ),
        ),
    }
}

/// Some replicas serve: Ready once rolled out and routed, Degraded when something stands
/// in the way, else still deploying.
fn some_available(
    record: &Deployment,
    observed: &Observed,
    rollout: &Rollout,
    problem: Option<&Problem>,
    (route_ok, route_message): &(bool, String),
) -> (Phase, String) {
    let (desired, counts, total) = (rollout.desired, &rollout.counts, rollout.total);
    // Ready means the URL serves: the Service's endpoints must list a ready pod too (the
    // EndpointSlice controller follows pod readiness a moment later; requests meanwhile
    // find no endpoint).
    if rollout.rolled_out && *route_ok && observed.serving_endpoints == Some(0) {
        (
            Phase::Deploying,
            format!(
                "{desired}/{desired} replicas available; waiting for the Service's endpoints (EndpointSlices) to list a ready pod"
            ),
        )
    } else if rollout.rolled_out && *route_ok {
        (
            Phase::Ready,
            format!("{desired}/{desired} replicas available"),
        )
    } else if let Some(p) = problem.filter(|p| p.fatal) {
        (
            Phase::Degraded,
            format!(
                "generation {} is failing ({}) while {}/{} replicas of the previous one still serve",
                record.generation, p.message, counts.available, desired
            ),
        )
    } else if observed.route_rejected.is_some() {
        (
            Phase::Degraded,
            format!(
                "{}/{desired} replicas serve in the cluster, but {route_message}",
                counts.available
            ),
        )
    } else if rollout.rolled_out && !route_ok {
        (
            Phase::Degraded,
            format!("replicas serve, but the route is not working: {route_message}"),
        )
    } else if let Some(message) = lost_nodes(observed, rollout, problem) {
        (Phase::Degraded, message)
    } else if rollout.short_of_replicas(observed, problem.is_some()) {
        let cause = problem
            .map(|p| format!(": {}", p.message))
            .unwrap_or_default();
        (
            Phase::Degraded,
            format!(
                "only {}/{} replicas available{cause}",
                counts.available, desired
            ),
        )
    } else if total > desired && counts.available >= desired && counts.updated >= desired {
        // Replicas being removed: "rolling out: 2/1 updated" read as nonsense.
        (
            Phase::Deploying,
            format!("scaling down to {desired}: {total} pods still running"),
        )
    } else {
        (
            Phase::Deploying,
            format!(
                "rolling out: {}/{} updated, {}/{} available",
                counts.updated, desired, counts.available, desired
            ),
        )
    }
}

/// Fewer replicas serve than desired because nodes holding them stopped serving them (the
/// kubelet stopped reporting, or reports the node not ready): the message names the nodes,
/// how many replicas each holds back and what else holds the rollout. Nothing is rolling
/// out then, though the pods there look like a rollout's (not ready, of the current
/// generation) and the Deployment still says `NewReplicaSetAvailable`.
fn lost_nodes(observed: &Observed, rollout: &Rollout, problem: Option<&Problem>) -> Option<String> {
    if rollout.counts.available >= rollout.desired {
        return None;
    }
    let losses = node_losses(observed);
    if losses.is_empty() {
        return None;
    }
    let nodes: Vec<String> = losses.iter().map(describe_loss).collect();
    let cause = problem
        .map(|p| format!("; {}", p.message))
        .unwrap_or_default();
    Some(format!(
        "{}; {}/{} replicas available{cause}",
        nodes.join("; "),
        rollout.counts.available,
        rollout.desired
    ))
}

/// `node gpu-node-1 stopped reporting (NotReady, Ready=Unknown since 2026-11-22T11:00:00Z):
/// 2 of 2 replicas there are not ready`.
fn describe_loss(loss: &NodeLoss) -> String {
    let node = loss.node;
    let (state, not_ready) = match node.ready.as_str() {
        "Unknown" => ("stopped reporting", "NotReady, "),
        "False" => ("is not ready", "NotReady, "),
        // Ready again, its taint not lifted yet.
        _ => ("is still tainted by the node controller", ""),
    };
    let since = node
        .since
        .map(|t| format!(" since {}", t.to_rfc3339_opts(SecondsFormat::Secs, true)))
        .unwrap_or_default();
    let evicted = match loss.evicted {
        0 => String::new(),
        n => format!(" ({n} evicted, being replaced on other nodes)"),
    };
    format!(
        "node {} {state} ({not_ready}Ready={}{since}): {} of {} replicas there are not ready{evicted}",
        node.name, node.ready, loss.not_ready, loss.pods
    )
}

/// Progressing names what holds the rollout. Held by a cause, it is not progressing
/// (False, the cause as reason: "Progressing: Yes / Unschedulable" read as a
/// contradiction); the phase says whether it is still waited for (Deploying) or given up
/// (Failed), and the message for how long.
pub(super) fn progressing(
    observed: &Observed,
    rollout: &Rollout,
    problem: Option<&Problem>,
    phase: Phase,
    message: &str,
) -> Check {
    let updated = || {
        format!(
            "{}/{} replicas updated",
            rollout.counts.updated, rollout.desired
        )
    };
    let (ok, reason, detail) = match problem {
        Some(p) => (false, p.reason.clone(), p.message.clone()),
        None if phase == Phase::Failed => (false, "Failed".to_owned(), message.to_owned()),
        // Replicas lost with their node: nothing rolls out (the Deployment's own
        // Progressing stays `NewReplicaSetAvailable`).
        None if phase == Phase::Degraded && lost_nodes(observed, rollout, None).is_some() => {
            (false, "NodeNotReady".to_owned(), message.to_owned())
        }
        None if rollout.rolled_out => (true, "RolloutComplete".to_owned(), updated()),
        None => (true, "RollingOut".to_owned(), updated()),
    };
    Check::new("Progressing", ok, reason, detail)
}
