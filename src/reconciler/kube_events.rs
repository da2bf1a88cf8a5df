//! Kubernetes Events on the objects the worker manages, so `kubectl describe deploy <name>`
//! tells the same story as the record's timeline: events.k8s.io/v1 Events with reporting
//! controller `modelplane` and the worker's id as reporting instance, a repeat counted
//! into its series (`series.count`, as client-go's `tools/events` does). Best-effort: a
//! failure to publish is logged, never fails a reconcile. A refusal (403: the worker's RBAC
//! does not grant writing events) is more than a log line: it is counted in the reconcile
//! errors metric (`kind="forbidden"`, see `metrics.rs`) and kept per namespace
//! ([`Publisher::denied`]) until an event there is published again, so the records there
//! say so in their conditions.

use std::collections::HashMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};

/// The events' reporting controller (`reportingComponent` in core/v1, `From` in
/// `kubectl describe`).
pub const REPORTING_CONTROLLER: &str = "modelplane";

/// How long a series stays open for repeats (kube-runtime's and client-go's six minutes).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// How long one publish may take before the reconcile goes on without it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);

/// Bounds of the events.k8s.io/v1 fields (`note` 1 kB, `reason` and `action` 128).
const NOTE_MAX: usize = 1024;
const REASON_MAX: usize = 128;

/// An open series: the Event that counts it, and what it was last published with.
struct Series {
    /// The hash of the note: a different note starts a new series.
    note: u64,
    /// The Event's name, for the PATCH of a repeat.
    name: Box<str>,
    count: i32,
    used: Instant,
}

/// Publishes events. A repeat of the same event (same object, type, reason, action and
/// note) within six minutes is counted into the first one's series (a PATCH of its
/// `series`); an event whose note differs starts a new one (a POST). kube-runtime's
/// `Recorder` keys its series without the note (it would report a new note as a repeat of
/// the old one) and keeps a whole `Event` per series; this keeps a hash of the key and the
/// note, and the Event's name, about a hundred bytes per series.
pub struct Publisher {
    client: kube::Client,
    instance: String,
    hasher: RandomState,
    series: Mutex<Recent>,
    /// The API server's last 403 for an event, by namespace.
    denied: Mutex<HashMap<String, kube::core::Status>>,
}

/// The series published recently, by the hash of (object, type, reason, action), and when
/// they were last pruned.
struct Recent {
    by_key: HashMap<u64, Series>,
    pruned: Instant,
}

impl Publisher {
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Self {
            client,
            instance: instance.into(),
            hasher: RandomState::new(),
            series: Mutex::new(Recent {
                by_key: HashMap::new(),
                pruned: Instant::now(),
            }),
            denied: Mutex::new(HashMap::new()),
        }
    }

    /// The API server's refusal (403) of the last event published in `namespace`, until
    /// one is published there again.
    pub fn denied(&self, namespace: &str) -> Option<kube::core::Status> {
        self.denied
            .lock()
            .expect("not poisoned")
            .get(namespace)
            .cloned()
    }

    /// Publishes a `Normal` event about `regarding`.
    pub async fn normal(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.publish(regarding, "Normal", reason, action, note)
            .await;
    }

    /// Publishes a `Warning` event about `regarding`.
    pub async fn warning(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        self.publish(regarding, "Warning", reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: &str,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let note = truncate(note, NOTE_MAX);
        let reason = truncate(reason, REASON_MAX);
        let namespace = regarding.namespace.clone().unwrap_or_default();
        // What makes two events one series (kube-runtime's key: the object, the type, the
        // reason and the action); 64 bits of a keyed hash, so a collision is as likely as
        // never.
        let key = self.hasher.hash_one((
            (
                &regarding.kind,
                &regarding.namespace,
                &regarding.name,
                &regarding.uid,
            ),
            type_,
            reason,
            action,
        ));
        let note_hash = self.hasher.hash_one(note);
        let now = Instant::now();
        let repeat = {
            let mut recent = self.series.lock().expect("not poisoned");
            // Expired series go once a minute, not on every publish (thousands of records
            // publish at once during a rollout).
            if now.duration_since(recent.pruned) >= Duration::from_secs(60) {
                recent
                    .by_key
                    .retain(|_, s| now.duration_since(s.used) < SERIES_TTL);
                recent.pruned = now;
            }
            match recent.by_key.get_mut(&key) {
                Some(series)
                    if series.note == note_hash && now.duration_since(series.used) < SERIES_TTL =>
                {
                    series.count += 1;
                    series.used = now;
                    Some((series.name.clone(), series.count))
                }
                _ => None,
            }
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let mut published = None;
        if let Some((name, count)) = repeat {
            let patch = serde_json::json!({
                "series": EventSeries { count, last_observed_time: MicroTime(Timestamp::now()) },
            });
            let patched =
                timeout(events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))).await;
            // A series whose Event is gone (deleted, or expired by the API server's event
            // TTL) starts again: this repeat is published as a new event.
            if !matches!(&patched, Ok(Err(kube::Error::Api(status))) if status.code == 404) {
                published = Some(patched.map(|r| r.map(drop)));
            }
        }
        let published = match published {
            Some(patched) => patched,
            None => {
                let event = self.event(regarding, [type_, reason, action, note]);
                let created = timeout(events.create(&PostParams::default(), &event)).await;
                if let (Ok(Ok(_)), Some(name)) = (&created, event.metadata.name) {
                    self.series.lock().expect("not poisoned").by_key.insert(
                        key,
                        Series {
                            note: note_hash,
                            name: name.into(),
                            count: 1,
                            used: now,
                        },
                    );
                }
                created.map(|r| r.map(drop))
            }
        };
        match published {
            Ok(Ok(_)) => {
                self.denied.lock().expect("not poisoned").remove(&namespace);
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 403 => {
                metrics::counter!(crate::metrics::RECONCILE_ERRORS, "kind" => "forbidden")
                    .increment(1);
                let first = self
                    .denied
                    .lock()
                    .expect("not poisoned")
                    .insert(namespace.clone(), *status.clone())
                    .is_none();
                // Said once per namespace; the records there carry it in their conditions.
                if first {
                    tracing::warn!(%namespace, message = %status.message, %reason, "the API server forbids publishing Kubernetes Events: the worker's RBAC is too narrow");
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, %reason, "cannot publish a Kubernetes Event")
            }
            Err(_) => tracing::warn!(%reason, "publishing a Kubernetes Event timed out"),
        }
    }

    /// A new event of `what` (type, reason, action, note), named as client-go and
    /// kube-runtime name them: the object's name, then the time in nanoseconds.
    fn event(&self, regarding: &ObjectReference, what: [&str; 4]) -> Event {
        let [type_, reason, action, note] = what;
        let stamp = Timestamp::now();
        Event {
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(REPORTING_CONTROLLER),
                    stamp.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(stamp)),
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(note.into()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

async fn timeout<T>(
    call: impl std::future::Future<Output = kube::Result<T>>,
) -> Result<kube::Result<T>, tokio::time::error::Elapsed> {
    tokio::time::timeout(PUBLISH_TIMEOUT, call).await
}

/// A reference to an object for an event's `regarding`: kind, name, namespace and uid (what
/// `kubectl describe` selects its events by), without a resourceVersion, so that events
/// about one object stay one series across its changes.
pub fn reference(api_version: &str, kind: &str, meta: &ObjectMeta) -> Option<ObjectReference> {
    Some(ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: Some(meta.name.clone()?),
        namespace: meta.namespace.clone(),
        uid: Some(meta.uid.clone()?),
        ..ObjectReference::default()
    })
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_on_a_character_boundary() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("aé", 2), "a");
        assert_eq!(truncate(&"x".repeat(2000), NOTE_MAX).len(), NOTE_MAX);
    }

    #[test]
    fn a_reference_needs_a_name_and_a_uid() {
        let meta = ObjectMeta {
            name: Some("qwen".into()),
            namespace: Some("team-a".into()),
            uid: Some("u-1".into()),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        };
        let r = reference("apps/v1", "Deployment", &meta).unwrap();
        assert_eq!(r.uid.as_deref(), Some("u-1"));
        assert_eq!(r.resource_version, None);
        assert!(reference("apps/v1", "Deployment", &ObjectMeta { uid: None, ..meta }).is_none());
    }
}
