//! A disaggregated deployment's status from its two roles': Ready only when both are, the
//! cause named with its role, the counts summed, each role's kept in `roles`.

use crate::domain::{DeploymentStatus, Phase, ReplicaCounts, RoleStatus, ServingRole};

/// How much the prefill role's phase holds the deployment back: the deployment takes it
/// when it weighs more than the decode side's. Prefill pods at zero hold nothing (decode
/// pods serve whole requests), so the deployment is at zero only when decode is.
fn weight(phase: Phase) -> u8 {
    match phase {
        Phase::Ready | Phase::ScaledToZero => 0,
        Phase::Pending => 2,
        Phase::Deploying => 3,
        Phase::Degraded => 4,
        Phase::Failed => 5,
        Phase::Deleting => 6,
    }
}

/// Joins the deployment's status as its decode role gives it (with the route, pool and
/// URLs) with each role's own (`decode`, `prefill`: from their Deployments and pods alone).
/// `desired`: both roles' replicas.
pub fn roles_status(
    deployment: DeploymentStatus,
    decode: DeploymentStatus,
    prefill: DeploymentStatus,
    desired: i32,
) -> DeploymentStatus {
    let role = |role: ServingRole, s: &DeploymentStatus| RoleStatus {
        role: role.as_str().into(),
        replicas: s.replicas.clone(),
        message: if s.phase == Phase::Ready {
            String::new()
        } else {
            s.message.clone()
        },
    };
    let roles = vec![
        role(ServingRole::Prefill, &prefill),
        role(ServingRole::Decode, &decode),
    ];
    let sum = |f: fn(&ReplicaCounts) -> i64| f(&prefill.replicas) + f(&decode.replicas);
    let replicas = ReplicaCounts {
        desired: i64::from(desired),
        updated: sum(|c| c.updated),
        ready: sum(|c| c.ready),
        available: sum(|c| c.available),
    };
    let (p, d) = (&prefill.replicas, &decode.replicas);
    let available = format!(
        "{}/{} replicas available (prefill {}/{}, decode {}/{})",
        replicas.available, replicas.desired, p.available, p.desired, d.available, d.desired
    );
    let prefill_holds = weight(prefill.phase) > weight(deployment.phase);
    let mut status = deployment;
    if prefill_holds {
        status.phase = prefill.phase;
        status.message = format!("prefill: {}", prefill.message);
        // Progressing agrees with the phase: the role that decided it says why.
        if let Some(progressing) = prefill.conditions.iter().find(|c| c.type_ == "Progressing")
            && let Some(mine) = status
                .conditions
                .iter_mut()
                .find(|c| c.type_ == "Progressing")
        {
            *mine = progressing.clone();
        }
    } else if status.phase != Phase::Ready && decode.phase != Phase::Ready {
        // The decode role's own pods hold it; otherwise (the route, the pool) the cause
        // is the deployment's and is said as it is.
        status.message = format!("decode: {}", status.message);
    }
    for condition in status.conditions.iter_mut() {
        if condition.type_ == "Available" {
            let both = prefill
                .conditions
                .iter()
                .find(|c| c.type_ == "Available")
                .is_some_and(|c| c.status == condition.status);
            if !both {
                // One role short is the deployment short.
                condition.status = crate::domain::ConditionStatus::holds(false);
                condition.reason = "MinimumReplicasUnavailable".into();
            }
            condition.message = available.clone();
        }
    }
    status.replicas = replicas;
    status.roles = roles;
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Condition, ConditionStatus};

    fn status(phase: Phase, message: &str, desired: i64, available: i64) -> DeploymentStatus {
        let mut s = DeploymentStatus::pending(desired);
        s.phase = phase;
        s.message = message.into();
        s.replicas.available = available;
        s.replicas.ready = available;
        s.replicas.updated = desired;
        s.conditions = vec![Condition {
            type_: "Available".into(),
            status: ConditionStatus::holds(available >= desired),
            reason: "MinimumReplicasAvailable".into(),
            message: String::new(),
            last_transition_time: chrono::Utc::now(),
        }];
        s
    }

    #[test]
    fn ready_only_when_both_roles_are_and_the_cause_names_its_role() {
        let both = roles_status(
            status(Phase::Ready, "ready", 2, 2),
            status(Phase::Ready, "ready", 2, 2),
            status(Phase::Ready, "ready", 1, 1),
            3,
        );
        assert_eq!(both.phase, Phase::Ready);
        assert_eq!((both.replicas.desired, both.replicas.available), (3, 3));
        assert_eq!(both.roles.len(), 2);
        assert_eq!(both.roles[0].role, "prefill");
        assert_eq!(both.roles[0].replicas.available, 1);
        assert_eq!(
            both.conditions[0].message,
            "3/3 replicas available (prefill 1/1, decode 2/2)"
        );

        let starting = roles_status(
            status(Phase::Ready, "ready", 2, 2),
            status(Phase::Ready, "ready", 2, 2),
            status(Phase::Deploying, "1 of 1 replicas starting", 1, 0),
            3,
        );
        assert_eq!(starting.phase, Phase::Deploying);
        assert_eq!(starting.message, "prefill: 1 of 1 replicas starting");
        assert_eq!(starting.roles[0].message, "1 of 1 replicas starting");
        assert_eq!(starting.roles[1].message, "");
        assert_eq!(starting.conditions[0].status, ConditionStatus::holds(false));

        let failing = roles_status(
            status(Phase::Failed, "image pull failed", 2, 0),
            status(Phase::Failed, "image pull failed", 2, 0),
            status(Phase::Deploying, "starting", 1, 0),
            3,
        );
        assert_eq!(failing.phase, Phase::Failed);
        assert_eq!(failing.message, "decode: image pull failed");

        // The route, not a role, holds it: said as the deployment's, no role named.
        let unrouted = roles_status(
            status(
                Phase::Degraded,
                "the Gateway has not accepted the route",
                2,
                2,
            ),
            status(Phase::Ready, "ready", 2, 2),
            status(Phase::Ready, "ready", 1, 1),
            3,
        );
        assert_eq!(unrouted.phase, Phase::Degraded);
        assert_eq!(unrouted.message, "the Gateway has not accepted the route");
        assert!(unrouted.roles.iter().all(|r| r.message.is_empty()));
    }
}
