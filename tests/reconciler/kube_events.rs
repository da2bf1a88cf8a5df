//! Kubernetes Events on the objects the worker manages: what the timeline says is also on
//! the record's Deployment (and its HTTPRoute for route problems), reported by `modelplane`,
//! so `kubectl describe deploy <name>` tells the same story.
//!
//! What `kubectl describe` relies on (k8s.io/kubectl `pkg/describe/describe.go`):
//! `searchEvents` lists core/v1 Events with the field selector `involvedObject.name`,
//! `.namespace`, `.kind` and `.uid` of the object (so an event's `regarding` must carry the
//! object's uid), and `DescribeEvents` prints `Type Reason Age From Message`, `From` being
//! `source.component` or else `reportingComponent` (events.k8s.io's `reportingController`),
//! and `Age` `<last> (xN over <first>)` when the event has a `series`.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::json;
use sqlx::PgPool;

use super::{Harness, create, create_with, harness, harness_on, sim_spec, wait_for};

/// The pinned kubectl (`emulator/scripts/install-kubectl.sh`, or `$KUBECTL`); missing is a
/// failure, never a silent pass.
fn kubectl_path() -> PathBuf {
    let path = std::env::var_os("KUBECTL").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("emulator/tests/kubectl/bin/kubectl"),
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "kubectl not found at {}: run emulator/scripts/install-kubectl.sh or set KUBECTL",
        path.display()
    );
    path
}

impl Harness {
    /// `kubectl describe deployment <name>` in team-a against the emulator.
    async fn describe_deployment(&self, name: &str) -> String {
        let dir = self._dir.0.clone();
        let kubectl = kubectl_path();
        let name = name.to_owned();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(kubectl)
                .args(["describe", "deployment", &name, "--namespace", "team-a"])
                .env("KUBECONFIG", dir.join("kubeconfig"))
                .env("HOME", &dir)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "kubectl describe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The events.k8s.io/v1 Events in team-a about `kind` `name`.
    async fn kube_events(&self, kind: &str, name: &str) -> Vec<Event> {
        let api: Api<Event> = Api::namespaced(self.kube.clone(), "team-a");
        let mut events: Vec<Event> = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name)
                })
            })
            .collect();
        events.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
        events
    }

    /// Waits for an Event about `kind` `name` with `reason`, and returns it.
    async fn wait_kube_event(&self, kind: &str, name: &str, reason: &str) -> Event {
        wait_for(
            &format!("a {reason} Event on {kind} {name}"),
            Duration::from_secs(30),
            || async {
                self.kube_events(kind, name)
                    .await
                    .iter()
                    .any(|e| e.reason.as_deref() == Some(reason))
            },
        )
        .await;
        self.kube_events(kind, name)
            .await
            .into_iter()
            .find(|e| e.reason.as_deref() == Some(reason))
            .unwrap()
    }
}

fn reasons(events: &[Event]) -> Vec<&str> {
    events.iter().filter_map(|e| e.reason.as_deref()).collect()
}

/// After a create, the Deployment has an `Applied` Event from `modelplane` about it (by
/// uid, as `kubectl describe` selects them); a Service deleted behind the worker's back
/// gives a `DriftRepaired` Event naming it, and the same repair again counts into that
/// Event's series rather than adding one. `kubectl describe` shows them.
#[sqlx::test]
async fn applied_and_drift_repaired_are_events_on_the_deployment(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let live = h.live("apps/v1", "Deployment", "qwen").await.unwrap();
    let uid = live["metadata"]["uid"].as_str().unwrap().to_owned();

    let applied = h.wait_kube_event("Deployment", "qwen", "Applied").await;
    assert_eq!(applied.type_.as_deref(), Some("Normal"));
    assert_eq!(
        applied.note.as_deref(),
        Some("generation 1 applied to namespace team-a"),
        "the timeline's words"
    );
    assert_eq!(applied.reporting_controller.as_deref(), Some("modelplane"));
    assert_eq!(applied.reporting_instance.as_deref(), Some("worker-a"));
    let regarding = applied.regarding.as_ref().unwrap();
    assert_eq!(regarding.api_version.as_deref(), Some("apps/v1"));
    assert_eq!(regarding.namespace.as_deref(), Some("team-a"));
    assert_eq!(regarding.uid.as_deref(), Some(uid.as_str()));
    // The same Event as core/v1 (what `kubectl describe` reads): involvedObject and
    // reportingComponent.
    let core: Api<CoreEvent> = Api::namespaced(h.kube.clone(), "team-a");
    let core = core
        .get(applied.metadata.name.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(core.involved_object.kind.as_deref(), Some("Deployment"));
    assert_eq!(core.involved_object.name.as_deref(), Some("qwen"));
    assert_eq!(core.involved_object.uid.as_deref(), Some(uid.as_str()));
    assert_eq!(core.reporting_component.as_deref(), Some("modelplane"));
    assert_eq!(core.type_.as_deref(), Some("Normal"));

    for _ in 0..2 {
        h.api("v1", "Service")
            .delete("qwen", &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            "the Service to come back",
            Duration::from_secs(10),
            || async { h.live("v1", "Service", "qwen").await.is_some() },
        )
        .await;
    }
    let repaired = h
        .wait_kube_event("Deployment", "qwen", "DriftRepaired")
        .await;
    assert_eq!(repaired.type_.as_deref(), Some("Normal"));
    assert_eq!(
        repaired.note.as_deref(),
        Some("repaired what was done outside modelplane: Service qwen was deleted")
    );
    wait_for(
        "the second repair counted into the series",
        Duration::from_secs(10),
        || async {
            let events = h.kube_events("Deployment", "qwen").await;
            let repairs: Vec<_> = events
                .iter()
                .filter(|e| e.reason.as_deref() == Some("DriftRepaired"))
                .collect();
            repairs.len() == 1 && repairs[0].series.as_ref().is_some_and(|s| s.count == 2)
        },
    )
    .await;
    // The timeline tells the same: one entry per repair.
    let timeline = h.events("qwen").await;
    assert_eq!(
        timeline.iter().filter(|k| *k == "DriftRepaired").count(),
        2,
        "{timeline:?}"
    );

    let described = h.describe_deployment("qwen").await;
    let events = described
        .split("\nEvents:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section:\n{described}"));
    let line = |reason: &str| {
        events
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(reason))
            .unwrap_or_else(|| panic!("no {reason} line:\n{described}"))
            .to_owned()
    };
    let applied = line("Applied");
    assert!(
        applied.starts_with("  Normal")
            && applied.contains("modelplane")
            && applied.contains("generation 1 applied to namespace team-a"),
        "{applied}"
    );
    let repaired = line("DriftRepaired");
    assert!(
        repaired.contains("modelplane")
            && repaired.contains("(x2 over")
            && repaired.contains("Service qwen was deleted"),
        "{repaired}"
    );

    // The series' Event deleted (as `kubectl delete events` or the API server's event TTL
    // does): the next repeat is published as a new Event, not lost on the PATCH's 404.
    let events: Api<Event> = Api::namespaced(h.kube.clone(), "team-a");
    let counted = repaired_service(&h.kube_events("Deployment", "qwen").await);
    events
        .delete(counted.as_deref().unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    h.api("v1", "Service")
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "a new Event for the repair whose series was deleted",
        Duration::from_secs(10),
        || async {
            let again = repaired_service(&h.kube_events("Deployment", "qwen").await);
            again.is_some() && again != counted
        },
    )
    .await;

    // A repair with other words (another object) is an Event of its own. modelplane keys
    // a series on the note as well; client-go's `tools/events` `getKey` (action, reason,
    // reporting controller, regarding, related) would count it as a repeat and hide it.
    h.api("gateway.networking.k8s.io/v1", "HTTPRoute")
        .delete("qwen", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "a DriftRepaired Event naming the HTTPRoute",
        Duration::from_secs(10),
        || async {
            h.kube_events("Deployment", "qwen").await.iter().any(|e| {
                e.reason.as_deref() == Some("DriftRepaired")
                    && e.note
                        .as_deref()
                        .is_some_and(|n| n.contains("HTTPRoute qwen"))
                    && e.series.is_none()
            })
        },
    )
    .await;
}

/// The name of the DriftRepaired Event about the deleted Service.
fn repaired_service(events: &[Event]) -> Option<String> {
    events
        .iter()
        .find(|e| {
            e.reason.as_deref() == Some("DriftRepaired")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("Service qwen"))
        })
        .and_then(|e| e.metadata.name.clone())
}

/// An image that cannot be pulled: the phase turning Failed is a `Warning` on the
/// Deployment, with the cause as its reason and the status message naming the image.
#[sqlx::test]
async fn an_image_that_cannot_be_pulled_is_a_warning_naming_the_image(pool: PgPool) {
    let cluster = super::emulator()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .fail_images("*nope*")
        .gateway("gateway-system", "inference");
    let h = harness_on(pool, cluster, |_| {}).await;
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["engine"]["image"] = json!("registry.example.com/nope:missing");
    create_with(&h, "bad", spec).await;
    wait_for("Failed", Duration::from_secs(30), || async {
        h.deployment("bad").await["status"]["phase"] == "Failed"
    })
    .await;
    let warning = wait_for_warning(&h, "Deployment", "bad").await;
    let reason = warning.reason.as_deref().unwrap();
    assert!(
        reason == "ErrImagePull" || reason == "ImagePullBackOff",
        "{reason}"
    );
    let note = warning.note.as_deref().unwrap();
    assert!(
        note.contains("→ Failed")
            && note.contains("image `registry.example.com/nope:missing` cannot be pulled"),
        "{note}"
    );
    assert_eq!(warning.reporting_controller.as_deref(), Some("modelplane"));

    let described = h.describe_deployment("bad").await;
    let line = described
        .lines()
        .find(|l| l.trim_start().starts_with("Warning"))
        .unwrap_or_else(|| panic!("no Warning:\n{described}"));
    assert!(
        line.contains(reason)
            && line.contains("modelplane")
            && line.contains("registry.example.com/nope:missing"),
        "{line}"
    );
}

/// A route the API server refuses: the phase's `Warning` is on the Deployment and on the
/// HTTPRoute it could not replace, with the server's message.
#[sqlx::test]
async fn a_refused_route_is_a_warning_on_the_deployment_and_the_route(pool: PgPool) {
    let h = harness(pool.clone(), true, |_| {}).await;
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    h.wait_applied("qwen", 1).await;
    let record = h.store_a_route_kubernetes_refuses("qwen").await;
    assert_eq!(record["status"]["phase"], "Failed", "{record}");
    for kind in ["Deployment", "HTTPRoute"] {
        let warning = wait_for_warning(&h, kind, "qwen").await;
        assert_eq!(warning.reason.as_deref(), Some("Rejected"));
        let note = warning.note.as_deref().unwrap();
        assert!(
            note.contains("Kubernetes rejected the HTTPRoute") && note.contains("/../"),
            "{note}"
        );
    }
    // Generation 2 was not applied as a whole: no Applied Event says it was.
    let events = h.kube_events("Deployment", "qwen").await;
    assert!(
        !events.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.starts_with("generation 2"))),
        "{:?}",
        reasons(&events)
    );
}

async fn wait_for_warning(h: &Harness, kind: &str, name: &str) -> Event {
    wait_for(
        &format!("a Warning on {kind} {name}"),
        Duration::from_secs(30),
        || async {
            h.kube_events(kind, name)
                .await
                .iter()
                .any(|e| e.type_.as_deref() == Some("Warning"))
        },
    )
    .await;
    h.kube_events(kind, name)
        .await
        .into_iter()
        .find(|e| e.type_.as_deref() == Some("Warning"))
        .unwrap()
}

/// The record's `Authorized` condition, if it has one (and that it has no more than one).
fn authorized(record: &serde_json::Value) -> Option<serde_json::Value> {
    let found: Vec<_> = record["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "Authorized")
        .cloned()
        .collect();
    assert!(
        found.len() <= 1,
        "one Authorized condition at most: {found:?}"
    );
    found.into_iter().next()
}

/// Issue #41, item 5: an Event the API server forbids (403, as when the worker's RBAC does
/// not grant `create` on events.k8s.io events) is more than a log line: it is counted in
/// `modelplane_reconcile_errors_total{kind="forbidden"}`, and the record says so once, in
/// an `Authorized=False` condition naming the verb, the resource and the namespace. Once
/// events are allowed again, the next one published clears it.
#[sqlx::test]
async fn a_forbidden_event_is_said_in_the_conditions_and_counted(pool: PgPool) {
    let h = harness(pool, true, |_| {}).await;
    let faults = h.emulator.as_ref().unwrap().faults();
    faults.forbid("create", "events");
    h.app.create_project("team-a").await;
    create(&h, "qwen").await;
    wait_for(
        "Authorized=False on the record",
        Duration::from_secs(20),
        || async { authorized(&h.deployment("qwen").await).is_some() },
    )
    .await;
    let condition = authorized(&h.deployment("qwen").await).unwrap();
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some("False"), Some("Forbidden"))
    );
    let message = condition["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "the worker may not create events.events.k8s.io in namespace team-a: its RBAC is too narrow"
        ) && message.contains("cannot create resource \"events\" in API group \"events.k8s.io\""),
        "{message}"
    );
    // The deployment itself was applied: only its Events were refused.
    assert!(h.live("apps/v1", "Deployment", "qwen").await.is_some());
    let metrics = h.app.get("/metrics").await.text().await.unwrap();
    let forbidden = super::common::sample(
        &metrics,
        modelplane::metrics::RECONCILE_ERRORS,
        &["kind=\"forbidden\""],
    );
    assert!(forbidden.is_some_and(|n| n >= 1.0), "{metrics}");

    faults.allow("create", "events");
    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    assert!(scaled.status().is_success());
    h.wait_kube_event("Deployment", "qwen", "Applied").await;
    wait_for(
        "the condition gone once an Event is published",
        Duration::from_secs(20),
        || async { authorized(&h.deployment("qwen").await).is_none() },
    )
    .await;
}
