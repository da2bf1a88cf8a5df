//! What to tell the user: phase, conditions, counts, a one-line cause and the URLs,
//! computed from what the cluster reports. A pure function, so every case is unit-tested.

use chrono::{DateTime, Utc};
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as K8sCondition;

use super::desired::{ANNOTATION_CONFIG_HASH, GatewayRef, Target, route_path_prefix};
use crate::domain::{
    Canary, CanaryStatus, Condition, ConditionStatus, Deployment, DeploymentStatus, Endpoints,
    FieldErrors, Phase, ReplicaCounts,
};

/// Everything observed about one record's objects.
#[derive(Debug, Default)]
pub struct Observed {
    pub deployment: Option<K8sDeployment>,
    /// Pods selected by the record's stable selector.
    pub pods: Vec<Pod>,
    pub service_exists: bool,
    /// The config hash the current generation's pods carry.
    pub config_hash: String,
    /// The live HTTPRoute, when one is wanted and exists.
    pub route: Option<HttpRoute>,
    /// Why no route could be made (e.g. the Gateway API is not installed).
    pub route_problem: Option<String>,
    pub gateway: Option<GatewayRef>,
    pub gateway_object: Option<Gateway>,
    /// The API server refused an object: (kind, message).
    pub rejected: Option<(String, String)>,
    /// The API server refused the HTTPRoute (the rest was applied): its message.
    pub route_rejected: Option<String>,
    /// The API server refused the PodDisruptionBudget: its message.
    pub budget_rejected: Option<String>,
    /// InferencePool mode: the route's backend is the pool.
    pub pool_mode: bool,
    /// InferencePool mode on a cluster without the InferencePool CRD.
    pub pool_unavailable: bool,
    /// The live InferencePool and endpoint picker Deployment, in InferencePool mode.
    pub pool: Option<super::inference_pool::InferencePool>,
    pub picker: Option<K8sDeployment>,
}

/// How long (or how often) a problem that may still clear is tolerated before the
/// deployment counts as Failed.
#[derive(Debug, Clone, Copy)]
pub struct Budgets {
    pub unschedulable_seconds: i64,
    /// Restarts after which a crash loop counts as Failed.
    pub crash_restarts: i32,
}

/// A problem found on a pod of the current generation.
struct Problem {
    /// The cause in one word, for conditions: `ImagePullBackOff`, `Unschedulable`, …
    reason: String,
    message: String,
    /// It will not get better without a change.
    fatal: bool,
}

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
    let weight = |b: &gateway_api::httproutes::HttpRouteRulesBackendRefs| {
        i64::from(b.weight.unwrap_or(1).max(0))
    };
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

/// Whether the Gateway has accepted the live route at its current generation (or there is
/// no route to wait for): a backend it no longer names receives nothing more.
pub fn route_settled(observed: &Observed) -> bool {
    observed.gateway.is_none()
        || observed.route_problem.is_some()
        || (route_state(observed).0 && route_processed(observed))
}

pub fn compute(
    t: &Target,
    namespace: &str,
    observed: &Observed,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> DeploymentStatus {
    let record = t.record;
    let previous = &record.status;
    let desired = i64::from(t.serving.replicas);
    let mut conditions = Vec::new();
    let mut set = |type_: &str, ok: bool, reason: &str, message: String| {
        conditions.push(condition(previous, type_, ok, reason, message, now));
    };

    if let Some((kind, message)) = &observed.rejected {
        set(
            "Applied",
            false,
            "Rejected",
            format!("{kind} rejected: {message}"),
        );
        return status(
            Phase::Failed,
            record,
            format!("Kubernetes rejected the {kind}: {message}"),
            ReplicaCounts {
                desired,
                ..Default::default()
            },
            conditions,
            endpoints(t, namespace, observed),
        );
    }
    let Some(dep) = &observed.deployment else {
        set(
            "Applied",
            false,
            "NotApplied",
            "objects not applied yet".into(),
        );
        return status(
            Phase::Pending,
            record,
            "Waiting for the reconciler to apply the deployment".into(),
            ReplicaCounts {
                desired,
                ..Default::default()
            },
            conditions,
            Endpoints::default(),
        );
    };
    set(
        "Applied",
        true,
        "Applied",
        format!("generation {} applied", record.generation),
    );

    let dep_status = dep.status.clone().unwrap_or_default();
    let current =
        dep_status.observed_generation.unwrap_or(0) >= dep.metadata.generation.unwrap_or(0);
    let counts = ReplicaCounts {
        desired,
        updated: i64::from(dep_status.updated_replicas.unwrap_or(0)),
        ready: i64::from(dep_status.ready_replicas.unwrap_or(0)),
        available: i64::from(dep_status.available_replicas.unwrap_or(0)),
    };
    let total = i64::from(dep_status.replicas.unwrap_or(0));
    let deadline_exceeded = current
        && dep_status.conditions.iter().flatten().any(|c| {
            c.type_ == "Progressing"
                && c.status == "False"
                && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        });

    let problem = pod_problem(&observed.pods, &observed.config_hash, budgets, now)
        .or_else(|| replica_failure(dep, budgets, now))
        .or_else(|| {
        deadline_exceeded.then(|| Problem {
            reason: "ProgressDeadlineExceeded".into(),
            message: format!(
                "the rollout did not progress within its deadline (ProgressDeadlineExceeded): {}/{} updated replicas available",
                counts.available.min(counts.updated), desired
            ),
            fatal: true,
        })
    });

    let rolled_out =
        current && counts.updated >= desired && counts.available >= desired && total <= desired;
    set(
        "Available",
        counts.available >= desired && desired > 0 || desired == 0,
        if counts.available >= desired {
            "MinimumReplicasAvailable"
        } else {
            "MinimumReplicasUnavailable"
        },
        format!("{}/{} replicas available", counts.available, desired),
    );
    // Progressing is decided below, once the phase is known, so the two always agree.
    let progressing_cause = problem
        .as_ref()
        .map(|p| (p.fatal, p.reason.clone(), p.message.clone()));

    let (route_ok, route_message) = route_state(observed);
    set(
        "Routed",
        route_ok,
        if route_ok {
            "Accepted"
        } else if observed.route_rejected.is_some() {
            "Rejected"
        } else if observed.route_problem.is_some() {
            "RouteUnavailable"
        } else {
            "NotAccepted"
        },
        route_message.clone(),
    );
    if observed.pool_mode || observed.pool_unavailable {
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
        } else {
            match &observed.gateway {
                Some(gateway) => {
                    let (ok, message) = pool_state(observed, gateway);
                    (ok, if ok { "Ready" } else { "NotReady" }, message)
                }
                None => (false, "NoGateway", "no Gateway configured".to_owned()),
            }
        };
        set("InferencePool", ok, reason, message);
    }
    if let Some(message) = &observed.budget_rejected {
        set(
            "DisruptionBudget",
            false,
            "Rejected",
            format!("Kubernetes rejected the PodDisruptionBudget: {message}"),
        );
    }
    let endpoints = endpoints(t, namespace, observed);

    let (phase, message) = if desired == 0 {
        if total == 0 {
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
    } else if counts.available == 0 {
        match problem {
            Some(p) if p.fatal => (Phase::Failed, p.message),
            // A refused route never serves until the spec changes.
            _ if observed.route_rejected.is_some() => (Phase::Failed, route_message.clone()),
            Some(p) => (Phase::Deploying, format!("waiting: {}", p.message)),
            None => (
                Phase::Deploying,
                format!(
                    "rolling out: {}/{} replicas available",
                    counts.available, desired
                ),
            ),
        }
    } else if rolled_out && route_ok {
        (
            Phase::Ready,
            format!("{desired}/{desired} replicas available"),
        )
    } else if let Some(p) = problem.as_ref().filter(|p| p.fatal) {
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
    } else if rolled_out && !route_ok {
        (
            Phase::Degraded,
            format!("replicas serve, but the route is not working: {route_message}"),
        )
    } else if current
        && counts.updated >= desired
        && counts.available < desired
        && !deadline_exceeded
        && total <= desired
        && (problem.is_some() || (starting_pods(observed) == 0 && pods_known(observed) >= total))
    {
        // Fewer serve than asked and nothing is on its way (or something is wrong): degraded.
        // Pods still starting without a problem are a rollout, e.g. every scale-up; so are
        // pods the Deployment counts that the pod watch has not delivered yet (a scale-up's
        // new pods reach the Deployment's status before they reach us).
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
    };
    // Progressing names what holds the rollout. Held by a cause, it is not progressing
    // (False, the cause as reason: "Progressing: Yes / Unschedulable" read as a
    // contradiction); the phase says whether it is still waited for (Deploying) or given up
    // (Failed), and the message for how long.
    let (progressing, reason, detail) = match progressing_cause {
        Some((_, reason, message)) => (false, reason, message),
        None if phase == Phase::Failed => (false, "Failed".to_owned(), message.clone()),
        None if rolled_out => (
            true,
            "RolloutComplete".to_owned(),
            format!("{}/{} replicas updated", counts.updated, desired),
        ),
        None => (
            true,
            "RollingOut".to_owned(),
            format!("{}/{} replicas updated", counts.updated, desired),
        ),
    };
    conditions.push(condition(
        previous,
        "Progressing",
        progressing,
        &reason,
        detail,
        now,
    ));
    status(phase, record, message, counts, conditions, endpoints)
}

fn status(
    phase: Phase,
    record: &Deployment,
    message: String,
    replicas: ReplicaCounts,
    conditions: Vec<Condition>,
    endpoints: Endpoints,
) -> DeploymentStatus {
    DeploymentStatus {
        phase,
        observed_generation: record.generation,
        message,
        replicas,
        conditions,
        endpoints,
        canary: None,
    }
}

/// A condition that keeps its last transition time while its status does not change.
fn condition(
    previous: &DeploymentStatus,
    type_: &str,
    ok: bool,
    reason: &str,
    message: String,
    now: DateTime<Utc>,
) -> Condition {
    let status = ConditionStatus::holds(ok);
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map_or(now, |c| c.last_transition_time);
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_owned(),
        message,
        last_transition_time: since,
    }
}

/// The first problem on a pod of the current generation, fatal ones first.
/// Pods of the current generation on their way up: not ready yet, not being removed.
/// Pods of the deployment the worker has seen that are not going away.
fn pods_known(observed: &Observed) -> i64 {
    observed
        .pods
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .count() as i64
}

fn starting_pods(observed: &Observed) -> usize {
    observed
        .pods
        .iter()
        .filter(|pod| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_CONFIG_HASH))
                == Some(&observed.config_hash)
                && pod.metadata.deletion_timestamp.is_none()
                && !pod
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .count()
}

/// Pods the cluster refuses to create: the ReplicaSet controller raises `ReplicaFailure`
/// (reason `FailedCreate`) and the Deployment controller copies it onto the Deployment.
/// An admission refusal (PodSecurity, a missing PriorityClass, …) stays until the spec or
/// the namespace changes, so it fails at once; an exceeded quota may free up, so it fails
/// only after the unschedulable budget.
fn replica_failure(dep: &K8sDeployment, budgets: Budgets, now: DateTime<Utc>) -> Option<Problem> {
    let condition = replica_failure_condition(dep)?;
    let message = condition.message.clone().unwrap_or_default();
    let reason = condition.reason.as_deref().unwrap_or("FailedCreate");
    let waited = seconds_since(condition.last_transition_time.as_ref(), now);
    let fatal = !may_resolve_itself(&message) || waited >= budgets.unschedulable_seconds;
    Some(Problem {
        reason: reason.to_owned(),
        message: format!("pods cannot be created ({reason}): {message}"),
        fatal,
    })
}

fn replica_failure_condition(
    dep: &K8sDeployment,
) -> Option<&k8s_openapi::api::apps::v1::DeploymentCondition> {
    dep.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
}

/// A refusal that can clear without a change to the deployment (a quota frees up).
fn may_resolve_itself(message: &str) -> bool {
    message.contains("exceeded quota")
}

fn seconds_since(
    time: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: DateTime<Utc>,
) -> i64 {
    time.and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .map_or(0, |t| (now - t).num_seconds())
}

fn pod_problem(
    pods: &[Pod],
    config_hash: &str,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<Problem> {
    let mut found: Vec<Problem> = Vec::new();
    for pod in pods {
        let annotations = pod.metadata.annotations.as_ref();
        if annotations
            .and_then(|a| a.get(ANNOTATION_CONFIG_HASH))
            .map(String::as_str)
            != Some(config_hash)
        {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let Some(status) = &pod.status else { continue };
        for cs in status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
        {
            let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref());
            let reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
            let detail = waiting.and_then(|w| w.message.clone()).unwrap_or_default();
            match reason {
                "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" => found.push(Problem {
                    reason: reason.to_owned(),
                    message: format!(
                        "pod {name}: image `{}` cannot be pulled ({reason}){}",
                        cs.image,
                        suffix(&detail)
                    ),
                    fatal: true,
                }),
                "CrashLoopBackOff" => {
                    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                    let why = last
                        .map(|t| {
                            let text = t
                                .message
                                .clone()
                                .or_else(|| t.reason.clone())
                                .unwrap_or_default();
                            format!("exit code {}{}", t.exit_code, suffix(&text))
                        })
                        .unwrap_or_default();
                    found.push(Problem {
                        reason: reason.to_owned(),
                        message: format!(
                            "pod {name}: container {} is crash-looping (CrashLoopBackOff, {} restarts){}",
                            cs.name, cs.restart_count, if why.is_empty() { String::new() } else { format!(": {why}") }
                        ),
                        fatal: cs.restart_count >= budgets.crash_restarts,
                    });
                }
                // Often a Secret or ConfigMap that another controller (external-secrets…)
                // delivers a little later: fatal only once it has had time to appear.
                "CreateContainerConfigError" | "CreateContainerError" => {
                    let waited = seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
                    let fatal = waited >= CONFIG_ERROR_GRACE_SECONDS;
                    let waiting = if fatal {
                        format!("for over {}", coarse_duration(CONFIG_ERROR_GRACE_SECONDS))
                    } else {
                        format!("for {}", coarse_duration(waited))
                    };
                    found.push(Problem {
                        reason: reason.to_owned(),
                        message: format!(
                            "pod {name} cannot start ({reason}, {waiting}){}",
                            suffix(&detail)
                        ),
                        fatal,
                    });
                }
                _ => {}
            }
        }
        if let Some(waiting) = scheduling_wait(pod, now) {
            let fatal = waiting.seconds >= budgets.unschedulable_seconds;
            // Past its budget the wait is stated as such, so a Failed message stays true.
            let waited = if fatal {
                format!(
                    "for over {}",
                    coarse_duration(budgets.unschedulable_seconds)
                )
            } else {
                format!("for {}", coarse_duration(waiting.seconds))
            };
            let reason = if waiting.unschedulable.is_some() {
                "Unschedulable"
            } else {
                "NotScheduled"
            };
            let message = match waiting.unschedulable {
                Some(why) => format!("pod {name} cannot be scheduled: {why} ({waited})"),
                None => format!(
                    "pod {name} is pending and not scheduled ({waited}): no scheduler has placed it; \
                     check that `spec.scheduling.schedulerName` names a running scheduler"
                ),
            };
            found.push(Problem {
                reason: reason.into(),
                message,
                fatal,
            });
        }
    }
    found.sort_by_key(|p| !p.fatal);
    found.into_iter().next()
}

/// A pod still waiting for a node: how long, and the scheduler's reason when it tried.
struct SchedulingWait {
    seconds: i64,
    /// `PodScheduled=False Unschedulable`'s message; `None` when no scheduler has looked at
    /// the pod at all (no `PodScheduled` condition), reported once it has waited a while.
    unschedulable: Option<String>,
}

/// How long a container's missing Secret or ConfigMap may take to appear before the
/// deployment counts as Failed.
const CONFIG_ERROR_GRACE_SECONDS: i64 = 60;

/// How long before an unscheduled pod with no scheduler verdict is worth reporting: the
/// usual scheduling delay is far below this.
const UNSCHEDULED_NOTICE_SECONDS: i64 = 10;

fn scheduling_wait(pod: &Pod, now: DateTime<Utc>) -> Option<SchedulingWait> {
    let status = pod.status.as_ref()?;
    let seconds = seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled");
    match scheduled {
        Some(c) if c.status == "False" && c.reason.as_deref() == Some("Unschedulable") => {
            Some(SchedulingWait {
                seconds,
                unschedulable: Some(c.message.clone().unwrap_or_default()),
            })
        }
        None if is_unscheduled(pod) && seconds >= UNSCHEDULED_NOTICE_SECONDS => {
            Some(SchedulingWait {
                seconds,
                unschedulable: None,
            })
        }
        _ => None,
    }
}

/// Pending on no node, and no scheduler has said anything about it yet.
fn is_unscheduled(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref().unwrap_or("Pending") == "Pending"
        && pod.spec.as_ref().is_none_or(|s| s.node_name.is_none())
        && status.container_statuses.as_ref().is_none_or(Vec::is_empty)
        && !status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "PodScheduled")
}

/// A duration as people read it, coarse enough that a message carrying it changes rarely:
/// `10s` steps under a minute, then whole minutes, then whole hours.
fn coarse_duration(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{}s", s / 10 * 10),
        s if s < 3600 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

/// The next second at which [`coarse_duration`] reads differently.
fn next_coarse_change(seconds: i64) -> i64 {
    let step = match seconds {
        s if s < 60 => 10,
        s if s < 3600 => 60,
        _ => 3600,
    };
    (seconds / step + 1) * step
}

/// When a time-based judgement (an unschedulable pod's budget) falls due, if one is pending.
/// Everything else arrives as a watch event, so no other timer is needed.
pub fn recheck_after(
    observed: &Observed,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<std::time::Duration> {
    let quota_budget = observed
        .deployment
        .as_ref()
        .and_then(replica_failure_condition)
        .filter(|c| may_resolve_itself(c.message.as_deref().unwrap_or("")))
        .and_then(|c| {
            let left =
                budgets.unschedulable_seconds - seconds_since(c.last_transition_time.as_ref(), now);
            (left > 0).then(|| std::time::Duration::from_secs(left as u64 + 1))
        });
    // A waiting pod's message says for how long, coarsely; look again when that changes,
    // and when its budget runs out.
    let pods = observed
        .pods
        .iter()
        .filter_map(|pod| scheduling_wait(pod, now))
        .filter_map(|waiting| {
            let budget_left = budgets.unschedulable_seconds - waiting.seconds;
            let next = next_coarse_change(waiting.seconds) - waiting.seconds;
            (budget_left > 0)
                .then(|| std::time::Duration::from_secs(budget_left.min(next).max(1) as u64))
        })
        .min();
    // A missing Secret or ConfigMap turns fatal when its grace ends.
    let config_grace = observed
        .pods
        .iter()
        .filter(|pod| {
            pod.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
                .any(|cs| {
                    cs.state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .and_then(|w| w.reason.as_deref())
                        .is_some_and(|r| r.starts_with("CreateContainer"))
                })
        })
        .filter_map(|pod| {
            let left = CONFIG_ERROR_GRACE_SECONDS
                - seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
            (left > 0).then(|| std::time::Duration::from_secs(left as u64 + 1))
        })
        .min();
    // A pod no scheduler has looked at is reported once it has waited a while.
    let unnoticed = observed
        .pods
        .iter()
        .filter(|pod| is_unscheduled(pod))
        .filter_map(|pod| {
            let left = UNSCHEDULED_NOTICE_SECONDS
                - seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
            (left > 0).then(|| std::time::Duration::from_secs(left as u64))
        })
        .min();
    [pods, quota_budget, unnoticed, config_grace]
        .into_iter()
        .flatten()
        .min()
}

fn suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
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
fn route_state(observed: &Observed) -> (bool, String) {
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
    // A route the Gateway accepted keeps serving as it was while the Gateway takes in a
    // change: that is routed, not broken (and said).
    let mut applying = false;
    for type_ in ["Accepted", "ResolvedRefs"] {
        match find_condition(&parent.conditions, type_) {
            Some(c)
                if c.status == "True"
                    && c.observed_generation.unwrap_or(generation) >= generation => {}
            Some(c) if c.status == "True" => applying = true,
            Some(c) => {
                return (
                    false,
                    format!("route {type_}=False ({}): {}", c.reason, c.message),
                );
            }
            None => {
                return (
                    false,
                    format!("the Gateway has not reported {type_} for the route yet"),
                );
            }
        }
    }
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
    let available = observed
        .picker
        .as_ref()
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.available_replicas)
        .unwrap_or(0);
    if available < 1 {
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

/// The in-cluster URL, the external URL through the Gateway, and the OpenAI base URL.
fn endpoints(t: &Target, namespace: &str, observed: &Observed) -> Endpoints {
    let record = t.record;
    if t.serving.replicas == 0 {
        // The Service and route are kept, but nothing behind them answers.
        return Endpoints {
            reason: Some("scaled to zero: no replica serves; scale up to get endpoints".into()),
            ..Endpoints::default()
        };
    }
    let port = t.serving.port;
    let cluster = observed.service_exists.then(|| {
        format!(
            "http://{}.{namespace}.svc.cluster.local:{port}",
            record.name
        )
    });
    let (route_ok, route_message) = route_state(observed);
    let mut external = Vec::new();
    let mut reason = None;
    if observed.gateway.is_some() {
        if route_ok {
            match external_url(t, observed) {
                Ok(url) => external.push(url),
                Err(why) => reason = Some(why),
            }
        } else {
            reason = Some(route_message);
        }
    }
    let base = external.first().cloned().or_else(|| cluster.clone());
    Endpoints {
        openai_base: base.map(|b| format!("{b}/v1")),
        cluster,
        external,
        reason,
    }
}

fn external_url(t: &Target, observed: &Observed) -> Result<String, String> {
    let gateway = observed.gateway.as_ref().expect("checked by the caller");
    let object = observed
        .gateway_object
        .as_ref()
        .ok_or_else(|| format!("Gateway {}/{} not found", gateway.namespace, gateway.name))?;
    let listeners = &object.spec.listeners;
    let listener = match &gateway.section {
        Some(section) => listeners.iter().find(|l| l.name == *section),
        None => listeners
            .iter()
            .find(|l| matches!(l.protocol.as_str(), "HTTP" | "HTTPS")),
    }
    .ok_or_else(|| "the Gateway has no matching HTTP listener".to_owned())?;
    let https = listener.protocol == "HTTPS";
    let scheme = if https { "https" } else { "http" };
    let port = listener.port;
    let host = t
        .serving
        .spec
        .routing
        .hostname
        .clone()
        .filter(|h| !h.starts_with("*."))
        .or_else(|| listener.hostname.clone().filter(|h| !h.starts_with("*.")))
        .or_else(|| {
            object
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .and_then(|a| a.first())
                .map(|a| a.value.clone())
        })
        .ok_or_else(|| "the Gateway has no address yet".to_owned())?;
    let default_port = (https && port == 443) || (!https && port == 80);
    let authority = if default_port {
        host
    } else {
        format!("{host}:{port}")
    };
    let path = route_path_prefix(t);
    let path = if path == "/" { String::new() } else { path };
    Ok(format!("{scheme}://{authority}{path}"))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use serde_json::Value;

    use crate::domain::{DeploymentSpec, ServingSpec, SpecLimits};

    const BUDGETS: Budgets = Budgets {
        unschedulable_seconds: 300,
        crash_restarts: 3,
    };

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap()
    }

    /// A record and its resolved spec, as the worker holds them.
    struct Rec {
        record: Deployment,
        serving: ServingSpec,
    }

    impl Rec {
        fn compute(&self, observed: &Observed, now: DateTime<Utc>) -> DeploymentStatus {
            let t = Target {
                record: &self.record,
                serving: &self.serving,
                canary_track: false,
            };
            compute(&t, "team-a", observed, BUDGETS, now)
        }
    }

    fn record(spec: Value) -> Rec {
        let spec: DeploymentSpec = serde_json::from_value(spec).unwrap();
        let serving = spec.parse("qwen", &SpecLimits::default()).unwrap();
        let record = Deployment {
            id: Uuid::now_v7(),
            project: "team-a".into(),
            name: "qwen".into(),
            generation: 2,
            status: DeploymentStatus::pending(i64::from(serving.replicas)),
            spec: serving.spec.clone(),
            restarted_at: None,
            deletion_requested_at: None,
            canary: None,
            created_at: now(),
            updated_at: now(),
            warnings: Vec::new(),
        };
        Rec { record, serving }
    }

    /// A route as a Gateway controller reports it: every required field of the Gateway API
    /// schema is set, as the API server would insist.
    fn route(conditions: Value) -> Option<HttpRoute> {
        Some(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                "metadata": {"name": "qwen", "namespace": "team-a", "generation": 1},
                "spec": {},
                "status": {"parents": [{"parentRef": {"name": "edge", "namespace": "gw"},
                                        "controllerName": "example.com/gateway",
                                        "conditions": conditions}]}
            }))
            .unwrap(),
        )
    }

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Value {
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "observedGeneration": 1, "lastTransitionTime": "2026-11-22T11:00:00Z"})
    }

    fn deployment(
        replicas: i32,
        updated: i32,
        available: i32,
        total: i32,
    ) -> Option<K8sDeployment> {
        Some(
            serde_json::from_value(json!({
                "metadata": {"name": "qwen", "generation": 4},
                "spec": {"replicas": replicas, "selector": {}, "template": {}},
                "status": {"observedGeneration": 4, "replicas": total, "updatedReplicas": updated,
                           "readyReplicas": available, "availableReplicas": available}
            }))
            .unwrap(),
        )
    }

    fn pod(name: &str, hash: &str, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {ANNOTATION_CONFIG_HASH: hash},
                         "creationTimestamp": "2026-11-22T11:58:00Z"},
            "status": status
        }))
        .unwrap()
    }

    fn observed(dep: Option<K8sDeployment>, pods: Vec<Pod>) -> Observed {
        Observed {
            deployment: dep,
            pods,
            service_exists: true,
            config_hash: "new".into(),
            ..Observed::default()
        }
    }

    fn run(spec: Value, observed: &Observed) -> DeploymentStatus {
        record(spec).compute(observed, now())
    }

    fn spec(replicas: i64) -> Value {
        json!({"model": {"source": "hf://a/b"}, "replicas": replicas})
    }

    #[test]
    fn all_replicas_available_is_ready_with_the_cluster_url() {
        let status = run(spec(2), &observed(deployment(2, 2, 2, 2), vec![]));
        assert_eq!(status.phase, Phase::Ready);
        assert_eq!(
            status.replicas,
            ReplicaCounts {
                desired: 2,
                updated: 2,
                ready: 2,
                available: 2
            }
        );
        assert_eq!(
            status.endpoints.cluster.as_deref(),
            Some("http://qwen.team-a.svc.cluster.local:8000")
        );
        assert_eq!(
            status.endpoints.openai_base.as_deref(),
            Some("http://qwen.team-a.svc.cluster.local:8000/v1")
        );
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.status == ConditionStatus::True),
            "{:?}",
            status.conditions
        );
    }

    #[test]
    fn only_a_running_unschedulable_budget_asks_for_a_timer_when_its_message_changes() {
        let unschedulable = pod(
            "qwen-1",
            "new",
            json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}]}),
        );
        let o = observed(deployment(1, 1, 0, 1), vec![unschedulable]);
        // Created 120 s before `now`: the message's "2m" becomes "3m" in 60 s.
        assert_eq!(
            recheck_after(&o, BUDGETS, now()),
            Some(std::time::Duration::from_secs(60))
        );
        // 10 s before the budget ends, the budget is what falls due.
        assert_eq!(
            recheck_after(&o, BUDGETS, now() + chrono::Duration::seconds(170)),
            Some(std::time::Duration::from_secs(10))
        );
        assert_eq!(
            recheck_after(&o, BUDGETS, now() + chrono::Duration::minutes(10)),
            None
        );
        assert_eq!(
            recheck_after(&observed(deployment(1, 1, 0, 1), vec![]), BUDGETS, now()),
            None
        );
    }

    #[test]
    fn an_image_that_cannot_be_pulled_fails_naming_the_image() {
        let p = pod(
            "qwen-1",
            "new",
            json!({"containerStatuses": [{"name": "server", "image": "vllm/vllm-openai:nope", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"vllm/vllm-openai:nope\""}}}]}),
        );
        let status = run(spec(1), &observed(deployment(1, 1, 0, 1), vec![p]));
        assert_eq!(status.phase, Phase::Failed);
        assert!(
            status.message.contains(
                "pod qwen-1: image `vllm/vllm-openai:nope` cannot be pulled (ImagePullBackOff)"
            ),
            "{}",
            status.message
        );
        // The conditions agree with the phase and name the cause.
        let progressing = condition_of(&status, "Progressing");
        assert_eq!(
            (progressing.status, progressing.reason.as_str()),
            (ConditionStatus::False, "ImagePullBackOff")
        );
    }

    fn condition_of<'a>(status: &'a DeploymentStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition"))
    }

    #[test]
    fn a_waiting_rollout_names_its_cause_in_progressing() {
        let p = pod(
            "qwen-1",
            "new",
            json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}),
        );
        let status = run(spec(1), &observed(deployment(1, 1, 0, 1), vec![p]));
        assert_eq!(status.phase, Phase::Deploying);
        let progressing = condition_of(&status, "Progressing");
        assert_eq!(
            (progressing.status, progressing.reason.as_str()),
            (ConditionStatus::False, "Unschedulable")
        );
        assert!(progressing.message.contains("Insufficient nvidia.com/gpu"));
    }

    #[test]
    fn a_missing_secret_waits_a_grace_period_before_failing() {
        let waiting = |created: &str| {
            let mut p = pod(
                "qwen-1",
                "new",
                json!({"containerStatuses": [{"name": "server", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                       "state": {"waiting": {"reason": "CreateContainerConfigError", "message": "secret \"hf-token\" not found"}}}]}),
            );
            p.metadata.creation_timestamp = Some(serde_json::from_value(json!(created)).unwrap());
            p
        };
        // 5 s old: an external-secrets controller may still be delivering it.
        let early = observed(
            deployment(1, 1, 0, 1),
            vec![waiting("2026-11-22T11:59:55Z")],
        );
        let status = run(spec(1), &early);
        assert_eq!(status.phase, Phase::Deploying);
        assert!(
            status.message.contains("secret \"hf-token\" not found"),
            "says what is missing: {}",
            status.message
        );
        assert_eq!(
            recheck_after(&early, BUDGETS, now()),
            Some(std::time::Duration::from_secs(56)),
            "looks again when the grace ends"
        );
        let late = observed(
            deployment(1, 1, 0, 1),
            vec![waiting("2026-11-22T11:58:00Z")],
        );
        let status = run(spec(1), &late);
        assert_eq!(status.phase, Phase::Failed);
        assert!(status.message.contains("for over 1m"), "{}", status.message);
    }

    #[test]
    fn a_crash_loop_fails_with_the_restart_count_and_last_message() {
        let p = pod(
            "qwen-1",
            "new",
            json!({"containerStatuses": [{"name": "server", "image": "x", "imageID": "", "ready": false, "restartCount": 5,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": "CUDA out of memory"}}}]}),
        );
        let status = run(spec(1), &observed(deployment(1, 1, 0, 1), vec![p]));
        assert_eq!(status.phase, Phase::Failed);
        assert!(
            status.message.contains("CrashLoopBackOff, 5 restarts")
                && status.message.contains("CUDA out of memory"),
            "{}",
            status.message
        );
    }

    #[test]
    fn unschedulable_waits_within_its_budget_then_fails() {
        let unschedulable = |created: &str| {
            let mut p = pod(
                "qwen-1",
                "new",
                json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}]}),
            );
            p.metadata.creation_timestamp = Some(serde_json::from_value(json!(created)).unwrap());
            p
        };
        let waiting = run(
            spec(1),
            &observed(
                deployment(1, 1, 0, 1),
                vec![unschedulable("2026-11-22T11:58:00Z")],
            ),
        );
        assert_eq!(waiting.phase, Phase::Deploying);
        assert!(
            waiting
                .message
                .contains("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."),
            "{}",
            waiting.message
        );
        let failed = run(
            spec(1),
            &observed(
                deployment(1, 1, 0, 1),
                vec![unschedulable("2026-11-22T11:00:00Z")],
            ),
        );
        assert_eq!(failed.phase, Phase::Failed);
        assert!(failed.message.contains("Insufficient nvidia.com/gpu"));
    }

    #[test]
    fn a_pod_no_scheduler_has_looked_at_says_so_with_how_long() {
        // Pending, no node, no PodScheduled condition: no scheduler has seen it.
        let pending = pod("qwen-1", "new", json!({"phase": "Pending"}));
        let status = run(
            spec(1),
            &observed(deployment(1, 1, 0, 1), vec![pending.clone()]),
        );
        assert_eq!(status.phase, Phase::Deploying);
        assert!(
            status
                .message
                .contains("pod qwen-1 is pending and not scheduled (for 2m)"),
            "{}",
            status.message
        );
        // The message's duration moves on: a recheck is due when it next reads differently.
        let o = observed(deployment(1, 1, 0, 1), vec![pending]);
        assert_eq!(
            recheck_after(&o, BUDGETS, now()),
            Some(std::time::Duration::from_secs(60))
        );
        // A pod seconds old is normal scheduling latency, not worth a word.
        let mut fresh = pod("qwen-2", "new", json!({"phase": "Pending"}));
        fresh.metadata.creation_timestamp =
            Some(serde_json::from_value(json!("2026-11-22T11:59:58Z")).unwrap());
        let status = run(spec(1), &observed(deployment(1, 1, 0, 1), vec![fresh]));
        assert!(
            status.message.starts_with("rolling out"),
            "{}",
            status.message
        );
    }

    #[test]
    fn durations_in_messages_are_coarse() {
        assert_eq!(coarse_duration(7), "0s");
        assert_eq!(coarse_duration(42), "40s");
        assert_eq!(coarse_duration(125), "2m");
        assert_eq!(coarse_duration(7300), "2h");
        assert_eq!(next_coarse_change(42), 50);
        assert_eq!(next_coarse_change(125), 180);
    }

    #[test]
    fn a_failing_new_generation_while_the_old_serves_is_degraded_saying_both() {
        let old = pod(
            "qwen-old",
            "old",
            json!({"containerStatuses": [{"name": "server", "image": "good", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}}]}),
        );
        let new = pod(
            "qwen-new",
            "new",
            json!({"containerStatuses": [{"name": "server", "image": "bad:tag", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ErrImagePull"}}}]}),
        );
        let status = run(spec(1), &observed(deployment(1, 1, 1, 2), vec![old, new]));
        assert_eq!(status.phase, Phase::Degraded);
        assert!(
            status.message.contains("generation 2 is failing")
                && status.message.contains("`bad:tag`")
                && status
                    .message
                    .contains("1/1 replicas of the previous one still serve"),
            "{}",
            status.message
        );
    }

    #[test]
    fn fewer_available_than_desired_after_a_rollout_is_degraded() {
        // A pod went away and nothing replaces it yet: the two left serve.
        let ready = |name: &str| {
            pod(
                name,
                "new",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            )
        };
        let status = run(
            spec(3),
            &observed(
                deployment(3, 3, 2, 2),
                vec![ready("qwen-1"), ready("qwen-2")],
            ),
        );
        assert_eq!(status.phase, Phase::Degraded);
        assert_eq!(status.message, "only 2/3 replicas available");
    }

    #[test]
    fn a_scale_down_says_so() {
        let ready = |name: &str| {
            pod(
                name,
                "new",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            )
        };
        let status = run(
            spec(1),
            &observed(
                deployment(1, 2, 2, 2),
                vec![ready("qwen-1"), ready("qwen-2")],
            ),
        );
        assert_eq!(status.phase, Phase::Deploying);
        assert_eq!(status.message, "scaling down to 1: 2 pods still running");
    }

    /// The regression a new user saw four times out of four: scaling 1 → 4 went Deploying →
    /// Degraded ("only 1/4 replicas available") → Ready. The Deployment controller counts the
    /// new ReplicaSet pods in `updatedReplicas` as soon as it creates them, and its status
    /// reached the worker before the pods did; the old test always handed the status every
    /// pod at once, so it never saw that order.
    #[test]
    fn a_scale_up_whose_pods_are_not_seen_yet_is_deploying() {
        let ready = pod(
            "qwen-1",
            "new",
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        );
        let status = run(spec(4), &observed(deployment(4, 4, 1, 4), vec![ready]));
        assert_eq!(status.phase, Phase::Deploying, "{}", status.message);
        assert!(
            status.message.starts_with("rolling out"),
            "{}",
            status.message
        );
    }

    #[test]
    fn a_scale_up_in_progress_is_deploying_not_degraded() {
        // Scaled from 2 to 3: the Deployment counts 3 updated at once, the third still starts.
        let ready = |name: &str| {
            pod(
                name,
                "new",
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            )
        };
        let starting = pod(
            "qwen-3",
            "new",
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]}),
        );
        let status = run(
            spec(3),
            &observed(
                deployment(3, 3, 2, 3),
                vec![ready("qwen-1"), ready("qwen-2"), starting],
            ),
        );
        assert_eq!(status.phase, Phase::Deploying, "{}", status.message);
        // The same shortfall with a crash-looping pod is degraded, saying why.
        let crashing = pod(
            "qwen-3",
            "new",
            json!({"phase": "Running", "containerStatuses": [{"name": "server", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
                   "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
        );
        let status = run(
            spec(3),
            &observed(
                deployment(3, 3, 2, 3),
                vec![ready("qwen-1"), ready("qwen-2"), crashing],
            ),
        );
        assert_eq!(status.phase, Phase::Degraded);
        assert!(
            status.message.contains("crash-looping"),
            "{}",
            status.message
        );
    }

    #[test]
    fn a_refused_disruption_budget_is_a_condition_not_a_phase() {
        let mut o = observed(deployment(3, 3, 3, 3), vec![]);
        o.budget_rejected = Some("denied by policy".into());
        let status = run(spec(3), &o);
        assert_eq!(status.phase, Phase::Ready, "{}", status.message);
        let budget = condition_of(&status, "DisruptionBudget");
        assert_eq!(
            (budget.status, budget.reason.as_str()),
            (ConditionStatus::False, "Rejected")
        );
        assert!(budget.message.contains("denied by policy"));
    }

    #[test]
    fn zero_replicas_is_scaled_to_zero_once_the_pods_are_gone() {
        assert_eq!(
            run(spec(0), &observed(deployment(0, 0, 0, 1), vec![])).phase,
            Phase::Deploying
        );
        let scaled = run(spec(0), &observed(deployment(0, 0, 0, 0), vec![]));
        assert_eq!(scaled.phase, Phase::ScaledToZero);
        // Nothing answers, so no URL is advertised, and the reason says why.
        assert!(scaled.endpoints.cluster.is_none() && scaled.endpoints.external.is_empty());
        assert!(scaled.endpoints.openai_base.is_none());
        assert!(
            scaled
                .endpoints
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("scaled to zero"))
        );
    }

    #[test]
    fn a_rejected_object_fails_with_the_api_servers_message() {
        let mut o = observed(None, vec![]);
        o.rejected = Some((
            "Deployment".into(),
            "spec.template.spec.priorityClassName: Invalid value".into(),
        ));
        let status = run(spec(1), &o);
        assert_eq!(status.phase, Phase::Failed);
        assert!(
            status
                .message
                .contains("Kubernetes rejected the Deployment")
        );
    }

    fn routed(listener: Value, hostname: Option<&str>, section: Option<&str>) -> DeploymentStatus {
        let mut s = spec(1);
        if let Some(h) = hostname {
            s["routing"] = json!({"hostname": h});
        }
        let mut o = observed(deployment(1, 1, 1, 1), vec![]);
        o.gateway = Some(GatewayRef {
            namespace: "gw".into(),
            name: "edge".into(),
            section: section.map(Into::into),
        });
        o.gateway_object = Some(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": {"name": "edge", "namespace": "gw"},
                "spec": {"gatewayClassName": "example", "listeners": [listener]},
                "status": {"addresses": [{"value": "203.0.113.7"}]}
            }))
            .unwrap(),
        );
        o.route = route(json!([
            condition("Accepted", "True", "Accepted", ""),
            condition("ResolvedRefs", "True", "ResolvedRefs", "")
        ]));
        run(s, &o)
    }

    #[test]
    fn a_route_the_gateway_accepted_stays_routed_while_it_takes_in_a_change() {
        let mut o = observed(deployment(1, 1, 1, 1), vec![]);
        o.gateway = Some(GatewayRef {
            namespace: "gw".into(),
            name: "edge".into(),
            section: None,
        });
        // Generation 2 applied; the Gateway last reported on generation 1, and accepted it.
        let mut stale = route(json!([
            condition("Accepted", "True", "Accepted", ""),
            condition("ResolvedRefs", "True", "ResolvedRefs", "")
        ]))
        .unwrap();
        stale.metadata.generation = Some(2);
        for parent in &mut stale.status.as_mut().unwrap().parents {
            for c in &mut parent.conditions {
                c.observed_generation = Some(1);
            }
        }
        o.route = Some(stale);
        let (ok, message) = route_state(&o);
        assert!(ok, "{message}");
        assert!(
            message.contains("still taking in route generation 2"),
            "{message}"
        );
        // But what the new generation no longer names may not go yet.
        assert!(!route_settled(&o));
        o.route.as_mut().unwrap().metadata.generation = Some(1);
        assert!(route_settled(&o));
        // A route never accepted is not routed.
        o.route = route(json!([condition(
            "Accepted",
            "False",
            "NotAllowedByListeners",
            "no"
        )]));
        assert!(!route_state(&o).0);
    }

    #[test]
    fn the_external_url_comes_from_the_gateway_listener_and_route() {
        let status = routed(
            json!({"name": "http", "protocol": "HTTP", "port": 80}),
            None,
            None,
        );
        assert_eq!(status.phase, Phase::Ready);
        assert_eq!(
            status.endpoints.external,
            ["http://203.0.113.7/team-a/qwen"]
        );
        assert_eq!(
            status.endpoints.openai_base.as_deref(),
            Some("http://203.0.113.7/team-a/qwen/v1")
        );
        let status = routed(
            json!({"name": "tls", "protocol": "HTTPS", "port": 8443}),
            Some("qwen.example.com"),
            Some("tls"),
        );
        assert_eq!(status.endpoints.external, ["https://qwen.example.com:8443"]);
    }

    #[test]
    fn an_unaccepted_route_leaves_the_external_url_empty_with_the_reason() {
        let mut o = observed(deployment(1, 1, 1, 1), vec![]);
        o.gateway = Some(GatewayRef {
            namespace: "gw".into(),
            name: "edge".into(),
            section: Some("nope".into()),
        });
        o.route = route(json!([condition(
            "Accepted",
            "False",
            "NoMatchingParent",
            "no listener named nope"
        )]));
        let status = run(spec(1), &o);
        assert_eq!(status.phase, Phase::Degraded);
        assert!(status.endpoints.external.is_empty());
        assert!(
            status
                .endpoints
                .reason
                .unwrap()
                .contains("NoMatchingParent")
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_it_holds() {
        let mut r = record(spec(2));
        let first = r.compute(&observed(deployment(2, 2, 2, 2), vec![]), now());
        r.record.status = first.clone();
        let later = r.compute(
            &observed(deployment(2, 2, 2, 2), vec![]),
            now() + chrono::Duration::minutes(5),
        );
        assert_eq!(
            first, later,
            "an unchanged cluster gives an unchanged status (no write)"
        );
    }
}
