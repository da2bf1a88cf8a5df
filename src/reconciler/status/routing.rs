//! Whether the Gateway routes to the deployment: the live HTTPRoute's (and in
//! InferencePool mode the pool's) status, and the Routed and InferencePool conditions.

use gateway_api::experimental::httproutes::HttpRouteStatusParents;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;

use super::problems::any_pod_problem;
use super::{Budgets, Check, Observed};
use crate::reconciler::desired::GatewayRef;

/// Whether the Gateway has accepted the live route at its current generation (or there is
/// no route to wait for): a backend it no longer names receives nothing more.
pub fn route_settled(observed: &Observed) -> bool {
    observed.gateway.is_none()
        || observed.route_problem.is_some()
        || (route_state(observed).0 && route_processed(observed))
}

/// Routed: the route works, else why not ([`route_state`]'s message).
pub(super) fn routed(observed: &Observed, (ok, message): &(bool, String)) -> Check {
    let reason = if *ok {
        "Accepted"
    } else if observed.route_rejected.is_some() {
        "Rejected"
    } else if observed.route_problem.is_some() {
        "RouteUnavailable"
    } else {
        "NotAccepted"
    };
    Check::new("Routed", *ok, reason, message.clone())
}

/// InferencePool, in InferencePool mode only: the pool works, or the cluster does not serve
/// InferencePools (and what was made instead).
pub(super) fn inference_pool(
    observed: &Observed,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<Check> {
    if !observed.pool_mode && !observed.pool_unavailable {
        return None;
    }
    let (ok, reason, message) = if observed.pool_unavailable {
        (
            false,
            "Unavailable",
            if observed.route_problem.is_some() {
                "the cluster does not serve InferencePools (CRD missing); nothing of the mode was made".to_owned()
            } else {
                "the cluster does not serve InferencePools (CRD missing); routed through the Service, as spec.routing.inferencePool.whenUnavailable allows".to_owned()
            },
        )
    } else if observed.pool_switch_pending {
        (
            false,
            "Switching",
            "the route moves to the InferencePool once its endpoint picker has an available replica; until then requests go to the Service".to_owned(),
        )
    } else {
        match &observed.gateway {
            Some(gateway) => {
                let (ok, mut message) = pool_state(observed, gateway);
                // The picker's pod trouble, when it has one (an image that cannot be
                // pulled, a crash loop): why it has no available replica.
                if !ok
                    && !picker_available(observed)
                    && let Some(problem) = any_pod_problem(&observed.picker_pods, budgets, now)
                {
                    message = format!("{message}; the endpoint picker's {problem}");
                }
                (ok, if ok { "Ready" } else { "NotReady" }, message)
            }
            None => (false, "NoGateway", "no Gateway configured".to_owned()),
        }
    };
    Some(Check::new("InferencePool", ok, reason, message))
}

/// Why a Gateway has not answered for the route: it does not exist, no controller runs it
/// (the CRD's default status, `Accepted=Unknown Pending: Waiting for controller`), it refused
/// itself, or it is simply slow.
fn gateway_not_ready(gateway: &GatewayRef, observed: &Observed) -> String {
    let name = format!("{}/{}", gateway.namespace, gateway.name);
    let Some(object) = &observed.gateway_object else {
        return format!("Gateway {name} does not exist");
    };
    let accepted = object
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .and_then(|cs| find_condition(cs, "Accepted"));
    match accepted {
        Some(c) if c.status != "True" => format!(
            "Gateway {name} is not accepted: Accepted={} ({}): {}",
            c.status, c.reason, c.message
        ),
        None => format!("Gateway {name} has no status: no controller has seen it"),
        Some(_) => format!("Gateway {name} has not accepted the route yet"),
    }
}

/// Whether the route works, and what to say about it.
pub(super) fn route_state(observed: &Observed) -> (bool, String) {
    let Some(gateway) = &observed.gateway else {
        return (
            true,
            "no Gateway configured; reachable in the cluster only".into(),
        );
    };
    if let Some(message) = &observed.route_rejected {
        return (
            false,
            format!("Kubernetes rejected the HTTPRoute: {message}"),
        );
    }
    if let Some(problem) = &observed.route_problem {
        return (false, problem.clone());
    }
    let Some(route) = &observed.route else {
        return (false, "the HTTPRoute does not exist yet".into());
    };
    let generation = route.metadata.generation.unwrap_or(0);
    let parent = route.status.as_ref().and_then(|status| {
        status.parents.iter().find(|p| {
            p.parent_ref.name == gateway.name
                // A parentRef without a namespace means the route's own.
                && p.parent_ref
                    .namespace
                    .as_ref()
                    .or(route.metadata.namespace.as_ref())
                    == Some(&gateway.namespace)
        })
    });
    let Some(parent) = parent else {
        return (false, gateway_not_ready(gateway, observed));
    };
    let applying = match route_accepted(parent, generation) {
        Ok(applying) => applying,
        Err(message) => return (false, message),
    };
    if observed.pool_mode {
        let (ok, message) = pool_state(observed, gateway);
        if !ok {
            return (false, message);
        }
    }
    let through = if observed.pool_mode {
        " through its InferencePool"
    } else if observed.pool_unavailable {
        " through the Service (the cluster does not serve InferencePools)"
    } else {
        ""
    };
    let pending = if applying {
        format!("; the Gateway is still taking in route generation {generation}")
    } else {
        String::new()
    };
    (
        true,
        format!(
            "accepted by Gateway {}/{}{through}{pending}",
            gateway.namespace, gateway.name
        ),
    )
}

/// Whether the Gateway accepted the route with its references resolved: `Ok(true)` while
/// it has not yet reported on the route's current `generation`, else why not.
///
/// A route the Gateway accepted keeps serving as it was while the Gateway takes in a
/// change: that is routed, not broken (and said).
fn route_accepted(parent: &HttpRouteStatusParents, generation: i64) -> Result<bool, String> {
    let mut applying = false;
    for type_ in ["Accepted", "ResolvedRefs"] {
        match find_condition(&parent.conditions, type_) {
            Some(c)
                if c.status == "True"
                    && c.observed_generation.unwrap_or(generation) >= generation => {}
            Some(c) if c.status == "True" => applying = true,
            Some(c) => {
                return Err(format!("route {type_}=False ({}): {}", c.reason, c.message));
            }
            None => {
                return Err(format!(
                    "the Gateway has not reported {type_} for the route yet"
                ));
            }
        }
    }
    Ok(applying)
}

/// Whether the Gateway has reported on the live route at its current generation.
fn route_processed(observed: &Observed) -> bool {
    let Some(route) = &observed.route else {
        return false;
    };
    let generation = route.metadata.generation.unwrap_or(0);
    route.status.iter().flat_map(|s| &s.parents).any(|p| {
        !p.conditions.is_empty()
            && p.conditions
                .iter()
                .all(|c| c.observed_generation.unwrap_or(generation) >= generation)
    })
}

/// Whether the InferencePool works: the Gateway accepted it at its generation with its
/// references resolved (`status.parents[].conditions`), and its endpoint picker has an
/// available replica.
fn pool_state(observed: &Observed, gateway: &GatewayRef) -> (bool, String) {
    let Some(pool) = &observed.pool else {
        return (false, "the InferencePool does not exist yet".into());
    };
    let generation = pool.metadata.generation.unwrap_or(0);
    let parent = pool.status.as_ref().and_then(|status| {
        status.parents.iter().find(|p| {
            p.parent_ref.name == gateway.name
                && p.parent_ref
                    .namespace
                    .as_ref()
                    .or(pool.metadata.namespace.as_ref())
                    == Some(&gateway.namespace)
        })
    });
    let Some(parent) = parent else {
        return (
            false,
            format!(
                "Gateway {}/{} has not reported on the InferencePool yet",
                gateway.namespace, gateway.name
            ),
        );
    };
    for type_ in ["Accepted", "ResolvedRefs"] {
        match find_condition(&parent.conditions, type_) {
            Some(c)
                if c.status == "True"
                    && c.observed_generation.unwrap_or(generation) >= generation => {}
            Some(c) if c.status == "True" => {
                return (
                    false,
                    format!(
                        "the Gateway has not yet processed InferencePool generation {generation}"
                    ),
                );
            }
            Some(c) => {
                return (
                    false,
                    format!("InferencePool {type_}=False ({}): {}", c.reason, c.message),
                );
            }
            None => {
                return (
                    false,
                    format!("the Gateway has not reported {type_} for the InferencePool yet"),
                );
            }
        }
    }
    if !picker_available(observed) {
        return (
            false,
            "the endpoint picker has no available replica yet: the Gateway cannot pick a model server"
                .into(),
        );
    }
    (true, "InferencePool accepted; endpoint picker ready".into())
}

fn find_condition<'a>(conditions: &'a [K8sCondition], type_: &str) -> Option<&'a K8sCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the endpoint picker's Deployment reports an available replica.
fn picker_available(observed: &Observed) -> bool {
    has_available_replica(observed.picker.as_ref())
}

/// Whether a Deployment reports an available replica.
pub fn has_available_replica(deployment: Option<&K8sDeployment>) -> bool {
    deployment
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
        >= 1
}
