//! What holds a rollout: a problem on a pod of the current generation (an image that
//! cannot be pulled, a crash loop, a missing Secret or ConfigMap, no node), pods the
//! cluster refuses to create, or the Deployment's exceeded deadline; whether it is fatal
//! yet, and when a judgement that depends on time falls due.

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, DeploymentCondition};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::rollout::Rollout;
use super::{Budgets, Observed};
use crate::reconciler::desired::ANNOTATION_CONFIG_HASH;

/// A problem found on a pod of the current generation.
pub(super) struct Problem {
    /// The cause in one word, for conditions: `ImagePullBackOff`, `Unschedulable`, …
    pub(super) reason: String,
    pub(super) message: String,
    /// It will not get better without a change.
    pub(super) fatal: bool,
}

/// How long a container's missing Secret or ConfigMap may take to appear before the
/// deployment counts as Failed.
const CONFIG_ERROR_GRACE_SECONDS: i64 = 60;

/// How long before an unscheduled pod with no scheduler verdict is worth reporting: the
/// usual scheduling delay is far below this.
const UNSCHEDULED_NOTICE_SECONDS: i64 = 10;

/// What holds the rollout, if anything: a pod's problem first, then pods the cluster
/// refuses to create, then the Deployment's exceeded deadline.
pub(super) fn rollout_problem(
    observed: &Observed,
    dep: &K8sDeployment,
    rollout: &Rollout,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<Problem> {
    pod_problem(&observed.pods, &observed.config_hash, budgets, now)
        .or_else(|| replica_failure(dep, budgets, now))
        .or_else(|| {
        rollout.deadline_exceeded.then(|| Problem {
            reason: "ProgressDeadlineExceeded".into(),
            message: format!(
                "the rollout did not progress within its deadline (ProgressDeadlineExceeded): {}/{} updated replicas available",
                rollout.counts.available.min(rollout.counts.updated), rollout.desired
            ),
            fatal: true,
        })
    })
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

fn replica_failure_condition(dep: &K8sDeployment) -> Option<&DeploymentCondition> {
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

fn seconds_since(time: Option<&Time>, now: DateTime<Utc>) -> i64 {
    time.and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .map_or(0, |t| (now - t).num_seconds())
}

/// The first problem on a pod of the current generation, fatal ones first.
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
        let containers = status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten());
        found.extend(containers.filter_map(|cs| container_problem(pod, &name, cs, budgets, now)));
        found.extend(scheduling_problem(pod, &name, budgets, now));
    }
    found.sort_by_key(|p| !p.fatal);
    found.into_iter().next()
}

/// What keeps the first of `pods` that is not running from starting (its image, a crash
/// loop, its config, or no node), whatever generation it belongs to: the endpoint picker's,
/// which the InferencePool condition names.
pub(super) fn any_pod_problem(
    pods: &[Pod],
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<String> {
    pods.iter().find_map(|pod| {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.as_ref()?;
        status
            .container_statuses
            .iter()
            .flatten()
            .chain(status.init_container_statuses.iter().flatten())
            .find_map(|cs| container_problem(pod, &name, cs, budgets, now))
            .or_else(|| scheduling_problem(pod, &name, budgets, now))
            .map(|p| p.message)
    })
}

/// A container of pod `name` that cannot start: its image, a crash loop, or its config.
fn container_problem(
    pod: &Pod,
    name: &str,
    cs: &ContainerStatus,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<Problem> {
    let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref());
    let reason = waiting.and_then(|w| w.reason.as_deref()).unwrap_or("");
    let detail = waiting.and_then(|w| w.message.clone()).unwrap_or_default();
    match reason {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" => Some(Problem {
            reason: reason.to_owned(),
            message: format!(
                "pod {name}: image `{}` cannot be pulled ({reason}){}",
                cs.image,
                suffix(pull_error(&detail))
            ),
            fatal: true,
        }),
        "CrashLoopBackOff" => Some(crash_loop(name, cs, budgets)),
        // Often a Secret or ConfigMap that another controller (external-secrets…)
        // delivers a little later: fatal only once it has had time to appear.
        "CreateContainerConfigError" | "CreateContainerError" => {
            let waited = seconds_since(pod.metadata.creation_timestamp.as_ref(), now);
            let fatal = waited >= CONFIG_ERROR_GRACE_SECONDS;
            let waiting = if fatal {
                format!("for over {}", coarse_duration(CONFIG_ERROR_GRACE_SECONDS))
            } else {
                since(waited, now)
            };
            Some(Problem {
                reason: reason.to_owned(),
                message: format!(
                    "pod {name} cannot start ({reason}, {waiting}){}",
                    suffix(&detail)
                ),
                fatal,
            })
        }
        _ => None,
    }
}

/// The cause in an image's waiting message. During the back-off the kubelet says
/// `Back-off pulling image "x": ErrImagePull: <the registry's error>` (since v1.32 its image
/// manager appends the failed pull's error, kubernetes `pkg/kubelet/images/image_manager.go`
/// `pullImage`, `prevPullErrMsg`): the error is the cause, so the message keeps it, the same
/// as while the state reads ErrImagePull. A back-off message without an error (older
/// kubelets) and every other message are kept as they are.
fn pull_error(detail: &str) -> &str {
    detail
        .strip_prefix("Back-off pulling image \"")
        .and_then(|rest| rest.split_once("\": "))
        .map_or(detail, |(_, error)| {
            error.strip_prefix("ErrImagePull: ").unwrap_or(error)
        })
}

/// A crash-looping container, with its restarts and last exit; fatal after the budget's
/// restarts.
fn crash_loop(name: &str, cs: &ContainerStatus, budgets: Budgets) -> Problem {
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
    Problem {
        reason: "CrashLoopBackOff".to_owned(),
        message: format!(
            "pod {name}: container {} is crash-looping (CrashLoopBackOff, {} restarts){}",
            cs.name,
            cs.restart_count,
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        ),
        fatal: cs.restart_count >= budgets.crash_restarts,
    }
}

/// Pod `name` waiting for a node; fatal past the unschedulable budget.
fn scheduling_problem(
    pod: &Pod,
    name: &str,
    budgets: Budgets,
    now: DateTime<Utc>,
) -> Option<Problem> {
    let waiting = scheduling_wait(pod, now)?;
    let fatal = waiting.seconds >= budgets.unschedulable_seconds;
    // Past its budget the wait is stated as such, so a Failed message stays true.
    let waited = if fatal {
        format!(
            "for over {}",
            coarse_duration(budgets.unschedulable_seconds)
        )
    } else {
        since(waiting.seconds, now)
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
    Some(Problem {
        reason: reason.into(),
        message,
        fatal,
    })
}

/// A pod still waiting for a node: how long, and the scheduler's reason when it tried.
struct SchedulingWait {
    seconds: i64,
    /// `PodScheduled=False Unschedulable`'s message; `None` when no scheduler has looked at
    /// the pod at all (no `PodScheduled` condition), reported once it has waited a while.
    unschedulable: Option<String>,
}

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
pub(super) fn coarse_duration(seconds: i64) -> String {
    match seconds {
        s if s < 60 => format!("{}s", s / 10 * 10),
        s if s < 3600 => format!("{}m", s / 60),
        s => format!("{}h", s / 3600),
    }
}

/// `since <when>`, `seconds` before `now`, to the second: a wait stated as a moment stays
/// true as long as the message is shown (a refusal that quotes the status, or a page left
/// open), where "for 0s" is stale a second later, and the message need not be rewritten
/// as the wait goes on.
pub(super) fn since(seconds: i64, now: DateTime<Utc>) -> String {
    let when = now - chrono::Duration::seconds(seconds);
    format!(
        "since {}",
        when.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    )
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
    // A waiting pod's message says since when, so it needs no rewrite as the wait goes
    // on: look again when its budget runs out.
    let pods = observed
        .pods
        .iter()
        .filter_map(|pod| scheduling_wait(pod, now))
        .filter_map(|waiting| {
            let budget_left = budgets.unschedulable_seconds - waiting.seconds;
            (budget_left > 0).then(|| std::time::Duration::from_secs(budget_left.max(1) as u64))
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

#[cfg(test)]
mod tests {
    use super::pull_error;

    #[test]
    fn an_image_back_off_keeps_the_pull_error() {
        let error = "rpc error: code = NotFound desc = failed to pull and unpack image \"r/x:1\": not found";
        assert_eq!(
            pull_error(&format!(
                "Back-off pulling image \"r/x:1\": ErrImagePull: {error}"
            )),
            error
        );
        assert_eq!(pull_error(error), error);
        // A kubelet before v1.32 says no more than this.
        assert_eq!(
            pull_error("Back-off pulling image \"r/x:1\""),
            "Back-off pulling image \"r/x:1\""
        );
        // Other pull errors keep their name, which says what failed.
        assert_eq!(
            pull_error(
                "Back-off pulling image \"r/x:1\": RegistryUnavailable: image pull failed for r/x:1 because the registry is unavailable"
            ),
            "RegistryUnavailable: image pull failed for r/x:1 because the registry is unavailable"
        );
    }
}
