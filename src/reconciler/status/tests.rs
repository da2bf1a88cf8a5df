use chrono::TimeZone;
use serde_json::json;
use uuid::Uuid;

use super::problems::{coarse_duration, since};
use super::*;
use serde_json::Value;

use crate::domain::{DeploymentSpec, ServingSpec, SpecLimits};
use crate::reconciler::desired::ANNOTATION_CONFIG_HASH;

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
            role: None,
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

fn deployment(replicas: i32, updated: i32, available: i32, total: i32) -> Option<K8sDeployment> {
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
fn only_a_running_unschedulable_budget_asks_for_a_timer() {
    let unschedulable = pod(
        "qwen-1",
        "new",
        json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no"}]}),
    );
    let o = observed(deployment(1, 1, 0, 1), vec![unschedulable]);
    // Created 120 s before `now`: the message says since when, so only the budget's end
    // (in 180 s) asks for a look without a cluster change.
    assert_eq!(
        recheck_after(&o, BUDGETS, now()),
        Some(std::time::Duration::from_secs(180))
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
            .contains("pod qwen-1 is pending and not scheduled (since 2026-11-22T11:58:00Z)"),
        "{}",
        status.message
    );
    // The message says since when, so it stays true: a recheck is due only when the
    // unschedulable budget runs out.
    let o = observed(deployment(1, 1, 0, 1), vec![pending]);
    assert_eq!(
        recheck_after(&o, BUDGETS, now()),
        Some(std::time::Duration::from_secs(
            (BUDGETS.unschedulable_seconds - 120) as u64
        ))
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
    assert_eq!(since(125, now()), "since 2026-11-22T11:57:55Z");
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

/// Issue #41, item 12, the other order: the kubelet's Ready reaches the worker before the
/// ReplicaSet and Deployment controllers count the pods as available. Every pod is seen
/// ready while the Deployment still says 1/4 available: the scale-up is still rolling out,
/// not Degraded ("only 1/4 replicas available").
#[test]
fn a_scale_up_whose_ready_pods_are_not_counted_yet_is_deploying() {
    let ready = |name: &str| {
        pod(
            name,
            "new",
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
        )
    };
    let pods = (1..=4).map(|i| ready(&format!("qwen-{i}"))).collect();
    let status = run(spec(4), &observed(deployment(4, 4, 1, 4), pods));
    assert_eq!(status.phase, Phase::Deploying, "{}", status.message);
    assert_eq!(status.message, "rolling out: 4/4 updated, 1/4 available");
    // Once counted, Ready.
    let pods = (1..=4).map(|i| ready(&format!("qwen-{i}"))).collect();
    let status = run(spec(4), &observed(deployment(4, 4, 4, 4), pods));
    assert_eq!(status.phase, Phase::Ready, "{}", status.message);
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

// Replicas lost with their node, and Ready waiting for the Service's endpoints.
mod serving;
