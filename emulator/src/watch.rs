//! Watch streams: newline-delimited JSON events from a resourceVersion (or from a
//! synthetic initial state), selector transitions, bookmarks, timeouts and 410 Expired.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use crate::conversion::Served;
use crate::resources::{ResourceKind, meta_str};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult};
use crate::store::{Change, EventType, Store};
use crate::table::{Repr, partial, to_table};

/// What every watch stream needs from the server besides the store: how often to send
/// bookmarks, and the signal that ends open watches when the emulator shuts down.
#[derive(Clone)]
pub(crate) struct WatchSettings {
    pub(crate) bookmark_interval: Duration,
    /// Becomes true when the emulator shuts down.
    pub(crate) closing: tokio::sync::watch::Receiver<bool>,
}

/// A watch event line (newline-delimited JSON).
fn event_line(ty: &str, obj: &Value) -> Bytes {
    // `{"object":...,"type":"..."}` (serde_json's key order), written without building
    // (and deep-copying the object into) a wrapper value.
    let mut s = Vec::with_capacity(1024);
    s.extend_from_slice(b"{\"object\":");
    if serde_json::to_writer(&mut s, obj).is_err() {
        return Bytes::new();
    }
    s.extend_from_slice(b",\"type\":");
    let _ = serde_json::to_writer(&mut s, ty);
    s.extend_from_slice(b"}\n");
    Bytes::from(s)
}

struct WatchFilter {
    kind: &'static ResourceKind,
    ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    fn scope(&self, c: &Change) -> bool {
        std::ptr::eq(c.kind, self.kind)
            && self.ns.as_ref().is_none_or(|n| *n == c.namespace)
            && self.name.as_ref().is_none_or(|n| *n == c.name)
    }
    fn matches(&self, o: &Value) -> bool {
        self.labels.matches(o) && self.fields.matches(o)
    }
    /// Turns a change into the event this watcher sees (selector transitions become ADDED/DELETED).
    fn event(&self, c: &Change) -> Option<(&'static str, Arc<Value>)> {
        if !self.scope(c) {
            return None;
        }
        let new_m = self.matches(&c.object);
        match c.event {
            EventType::Added => new_m.then(|| ("ADDED", c.object.clone())),
            EventType::Deleted => {
                let old_m = c.old.as_ref().is_none_or(|o| self.matches(o));
                old_m.then(|| ("DELETED", c.object.clone()))
            }
            EventType::Modified => {
                let old_m = c.old.as_ref().is_some_and(|o| self.matches(o));
                match (old_m, new_m) {
                    (true, true) => Some(("MODIFIED", c.object.clone())),
                    // Like the watch cache: the previous content, at the change's resourceVersion.
                    (true, false) => {
                        let mut old = c.old.as_deref().cloned().unwrap_or_default();
                        crate::resources::meta_mut(&mut old)
                            .insert("resourceVersion".into(), json!(c.rv.to_string()));
                        Some(("DELETED", Arc::new(old)))
                    }
                    (false, true) => Some(("ADDED", c.object.clone())),
                    (false, false) => None,
                }
            }
        }
    }
}

fn bookmark(kind: &ResourceKind, rv: u64, initial_end: bool) -> Value {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": kind.kind, "apiVersion": kind.api_version(), "metadata": meta})
}

pub(crate) async fn watch_response(
    store: &Store,
    settings: &WatchSettings,
    served: Served,
    ns: Option<&str>,
    name: Option<&str>,
    query: &HashMap<String, String>,
    repr: Repr,
) -> ApiResult<Response> {
    let kind = served.storage;
    let mut field_sel = query.get("fieldSelector").cloned().unwrap_or_default();
    if let Some(n) = name {
        // A watch on one object is a watch with a metadata.name field selector.
        field_sel = if field_sel.is_empty() {
            format!("metadata.name={n}")
        } else {
            format!("{field_sel},metadata.name={n}")
        };
    }
    let filter = WatchFilter {
        kind,
        ns: ns.map(String::from),
        name: name.map(String::from),
        labels: LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?,
        fields: FieldSelector::parse(&field_sel, kind)?,
    };
    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|b| b == "true");
    let send_initial = query.get("sendInitialEvents").is_some_and(|b| b == "true");
    if send_initial && !bookmarks {
        return Err(ApiError::invalid(
            kind,
            "",
            vec![crate::status::Cause::forbidden(
                "allowWatchBookmarks",
                "sendInitialEvents requires setting allowWatchBookmarks=true",
            )],
        ));
    }
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs);
    let rv_param = query.get("resourceVersion").cloned().unwrap_or_default();
    // A version ahead of the store: the watch cache waits up to 3 s for it, then refuses
    // (apiserver watch_cache.go `waitUntilFreshAndBlock`, blockTimeout = 3 s).
    if !send_initial
        && let Ok(wanted) = rv_param.parse::<u64>()
        && wanted > 0
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
        let mut changes = store.subscribe();
        loop {
            let current = store.lock().current_rv();
            if current >= wanted {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ApiError::too_large_resource_version(wanted, current));
            }
            let _ = tokio::time::timeout_at(deadline, changes.recv()).await;
        }
    }

    // Snapshot + subscription under one lock so no change is missed or duplicated.
    enum Start {
        Initial(Vec<Value>),
        Resume(Vec<Arc<Change>>),
        Expired(u64),
    }
    // The version the watch starts from: events (bookmarks included) are only sent when
    // newer than it (cache_watcher.go `processInterval`).
    let from_rv: Option<u64> = rv_param.parse().ok().filter(|rv| *rv > 0 && !send_initial);
    let (start, mut rx, start_rv) = {
        let mut st = store.lock();
        let rx = st.subscribe_kind(kind);
        let cur = st.current_rv();
        let start = if send_initial || rv_param.is_empty() || rv_param == "0" {
            Start::Initial(
                st.list(kind, ns)
                    .into_iter()
                    .map(|o| (*o).clone())
                    .collect(),
            )
        } else {
            let rv: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param:?}"))
            })?;
            match st.changes_since(rv) {
                Ok(changes) => Start::Resume(changes),
                Err(oldest) => Start::Expired(oldest),
            }
        };
        // The version was waited for above, so the store is at or past it.
        (start, rx, cur)
    };

    let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let interval = settings.bookmark_interval;
    let mut closing = settings.closing.clone();
    let query = query.clone();
    let store_for_bookmarks = store.clone();
    tokio::spawn(async move {
        let render = |obj: &Value| {
            let obj = served.out(obj);
            match repr {
                Repr::Table => to_table(
                    served.kind,
                    std::slice::from_ref(&obj),
                    meta_str(&obj, "resourceVersion").unwrap_or(""),
                    &query,
                ),
                Repr::Metadata => partial(&obj),
                Repr::Object => obj,
            }
        };
        // Unconverted objects are written straight from the store, without the deep copy
        // `render` makes (one per event and watcher).
        let plain = std::ptr::eq(served.kind, served.storage) && matches!(repr, Repr::Object);
        let line = |ty: &str, obj: &Value| {
            if plain {
                event_line(ty, obj)
            } else {
                event_line(ty, &render(obj))
            }
        };
        let mut last_rv = start_rv;
        match start {
            Start::Expired(oldest) => {
                let status =
                    ApiError::expired(format!("too old resource version: {rv_param} ({oldest})"))
                        .to_status();
                let _ = tx.send(Ok(event_line("ERROR", &status))).await;
                return;
            }
            Start::Initial(objs) => {
                for o in objs.iter().filter(|o| {
                    filter.matches(o)
                        && filter
                            .name
                            .as_ref()
                            .is_none_or(|n| meta_str(o, "name") == Some(n))
                }) {
                    if tx.send(Ok(line("ADDED", o))).await.is_err() {
                        return;
                    }
                }
                if send_initial
                    && tx
                        .send(Ok(event_line(
                            "BOOKMARK",
                            &bookmark(served.kind, start_rv, true),
                        )))
                        .await
                        .is_err()
                {
                    return;
                }
            }
            Start::Resume(changes) => {
                for c in changes {
                    if let Some((ty, obj)) = filter.event(&c)
                        && tx.send(Ok(line(ty, &obj))).await.is_err()
                    {
                        return;
                    }
                }
            }
        }
        let floor = from_rv.unwrap_or(start_rv);
        let now = tokio::time::Instant::now();
        let deadline = timeout.map(|t| now + t);
        // cache_watcher.go `nextBookmarkTime`: besides the periodic bookmark, one is sent
        // 2 s before the watch's deadline, and none after that; if that moment has already
        // passed when the watch starts, no bookmark is sent at all.
        let pretimeout = deadline.and_then(|d| d.checked_sub(Duration::from_secs(2)));
        let bookmarks = bookmarks && pretimeout.is_none_or(|p| p > now);
        let mut pretimeout_due = pretimeout.filter(|_| bookmarks);
        let mut ticker = tokio::time::interval(interval);
        ticker.tick().await;
        loop {
            let sleep_until = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => futures::future::pending().await,
                }
            };
            let pretimeout_sleep = async {
                match pretimeout_due {
                    Some(p) => tokio::time::sleep_until(p).await,
                    None => futures::future::pending().await,
                }
            };
            let bookmark_now = tokio::select! {
                _ = sleep_until => return,
                // The only change ever sent is "closing".
                _ = closing.changed() => return,
                _ = pretimeout_sleep => {
                    pretimeout_due = None;
                    true
                }
                _ = ticker.tick(), if bookmarks && pretimeout.is_none_or(|p| tokio::time::Instant::now() < p) => true,
                msg = rx.recv() => match msg {
                    Ok(c) => {
                        if c.rv <= start_rv {
                            continue;
                        }
                        last_rv = c.rv;
                        if let Some((ty, obj)) = filter.event(&c)
                            && tx.send(Ok(line(ty, &obj))).await.is_err() {
                                return;
                            }
                        false
                    }
                    // Too slow a reader: end the watch; the client resumes from its last resourceVersion.
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
                },
                _ = tx.closed() => return,
            };
            if bookmark_now {
                // The watch's ring carries only its kind: when nothing is pending in it,
                // every change up to the store's current version has been seen (changes
                // are sent under the lock that hands out versions).
                let current = store_for_bookmarks.lock().current_rv();
                if rx.is_empty() {
                    last_rv = last_rv.max(current);
                }
                // Only a bookmark newer than the version the watch started from is sent.
                if last_rv > floor
                    && tx
                        .send(Ok(event_line(
                            "BOOKMARK",
                            &bookmark(served.kind, last_rv, false),
                        )))
                        .await
                        .is_err()
                {
                    return;
                }
            }
        }
    });
    let stream = futures::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}
