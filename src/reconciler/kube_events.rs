//! Kubernetes Events on the objects the worker manages, so `kubectl describe deploy <name>`
//! tells the same story as the record's timeline: published through kube-runtime's
//! [`Recorder`] (events.k8s.io/v1) with reporting controller `modelplane` and the worker's
//! id as reporting instance. Best-effort: a failure to publish is logged, never fails a
//! reconcile. A refusal (403: the worker's RBAC does not grant writing events) is more than
//! a log line: it is counted in the reconcile errors metric (`kind="forbidden"`, see `metrics.rs`) and
//! kept per namespace ([`Publisher::denied`]) until an event there is published again, so
//! the records there say so in their conditions.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The events' reporting controller (`reportingComponent` in core/v1, `From` in
/// `kubectl describe`).
pub const REPORTING_CONTROLLER: &str = "modelplane";

/// How long kube-runtime's `Recorder` keeps an event to count repeats into its series.
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);

/// How long one publish may take before the reconcile goes on without it.
const PUBLISH_TIMEOUT: Duration = Duration::from_secs(2);

/// Bounds of the events.k8s.io/v1 fields (`note` 1 kB, `reason` and `action` 128).
const NOTE_MAX: usize = 1024;
const REASON_MAX: usize = 128;

/// What makes two events one series, the note aside: the object (kind, namespace, name,
/// uid), the type, the reason and the action (kube-runtime's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    regarding: (String, String, String, String),
    warning: bool,
    reason: String,
    action: String,
}

/// Publishes events. A repeat of the same event (same object, type, reason, action and
/// note) within the `Recorder`'s six minutes is counted into the first one's series (a
/// PATCH); an event whose note differs starts a new one (a POST). kube-runtime keys its
/// series without the note and would report a new note as a repeat of the old one, so
/// each (object, type, reason, action) gets a `Recorder` of its own, replaced when the note
/// changes.
pub struct Publisher {
    client: kube::Client,
    reporter: Reporter,
    recorders: Mutex<Recorders>,
    /// The API server's last 403 for an event, by namespace.
    denied: Mutex<HashMap<String, kube::core::Status>>,
}

/// The recorders of recent series, and when they were last pruned.
struct Recorders {
    by_key: HashMap<SeriesKey, (String, Instant, Recorder)>,
    pruned: Instant,
}

impl Publisher {
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Self {
            client,
            reporter: Reporter {
                controller: REPORTING_CONTROLLER.into(),
                instance: Some(instance.into()),
            },
            recorders: Mutex::new(Recorders {
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
        self.publish(regarding, EventType::Normal, reason, action, note)
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
        self.publish(regarding, EventType::Warning, reason, action, note)
            .await;
    }

    async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let note = truncate(note, NOTE_MAX);
        let reason = truncate(reason, REASON_MAX);
        let key = SeriesKey {
            regarding: (
                regarding.kind.clone().unwrap_or_default(),
                regarding.namespace.clone().unwrap_or_default(),
                regarding.name.clone().unwrap_or_default(),
                regarding.uid.clone().unwrap_or_default(),
            ),
            warning: type_ == EventType::Warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
        };
        let recorder = {
            let mut recorders = self.recorders.lock().expect("not poisoned");
            let now = Instant::now();
            // Expired series go once a minute, not on every publish (thousands of records
            // publish at once during a rollout).
            if now.duration_since(recorders.pruned) >= Duration::from_secs(60) {
                recorders
                    .by_key
                    .retain(|_, (_, used, _)| now.duration_since(*used) < SERIES_TTL);
                recorders.pruned = now;
            }
            let recorder = match recorders.by_key.get(&key) {
                Some((last, used, recorder))
                    if last == note && now.duration_since(*used) < SERIES_TTL =>
                {
                    recorder.clone()
                }
                _ => Recorder::new(self.client.clone(), self.reporter.clone()),
            };
            recorders
                .by_key
                .insert(key, (note.to_owned(), now, recorder.clone()));
            recorder
        };
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.to_owned()),
            action: action.to_owned(),
            secondary: None,
        };
        let namespace = regarding.namespace.clone().unwrap_or_default();
        match tokio::time::timeout(PUBLISH_TIMEOUT, recorder.publish(&event, regarding)).await {
            Ok(Ok(())) => {
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
