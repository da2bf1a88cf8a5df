//! The HTTP surface: URL parsing into (kind, namespace, name, subresource), query options,
//! CRUD and list handlers and the request log. Watches live in `watch.rs`, Tables in
//! `table.rs`, scale and binding in `subresources.rs`, the Services' and Pods' `proxy`
//! subresources in `cluster/service_proxy.rs` and `cluster/pod_proxy.rs`; the response and body encoding and the write options they
//! all share live in `wire.rs`, below all of them.
//!
//! Every request passes through one axum middleware (`record`), which also applies the
//! injected faults (`cluster/faults.rs`) and serves the `/emulator/faults` admin endpoint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};

use crate::conversion::Served;
use crate::discovery;
use crate::ops::{self, DeleteOptions, Propagation, WriteOptions, WriteResult};
use crate::patch::PatchType;
use crate::resources::{ResourceKind, meta_str};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::{ApiError, ApiResult, Cause, success_status};
use crate::store::Store;
use crate::subresources::{bind_pod, scale};
use crate::table::{Repr, partial, representation, to_table};
use crate::watch::{WatchSettings, watch_response};
use crate::wire::{json_response, parse_body, write_options};

/// One recorded request (for tests that count writes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    /// `fieldManager` query parameter, if any.
    pub field_manager: Option<String>,
    /// `X-Client-Id` header, if any (lets tests tell clients apart).
    pub client_id: Option<String>,
    pub status: u16,
    /// When the request arrived (wall clock).
    pub at: std::time::SystemTime,
    /// When its response started (for watches: when the stream opened).
    pub finished: std::time::SystemTime,
}

/// How many requests the log keeps (the oldest tenth is dropped when full).
pub const REQUEST_LOG_LIMIT: usize = 100_000;

/// The request log shared by the middleware and the emulator handle.
#[derive(Clone, Default)]
pub struct RequestLog(Arc<Mutex<Vec<RecordedRequest>>>);

impl RequestLog {
    pub fn snapshot(&self) -> Vec<RecordedRequest> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
    fn push(&self, r: RecordedRequest) {
        let mut log = self.0.lock().unwrap_or_else(|p| p.into_inner());
        // Bounded so a long-running demo server does not grow without limit.
        if log.len() >= REQUEST_LOG_LIMIT {
            log.drain(..REQUEST_LOG_LIMIT / 10);
        }
        log.push(r);
    }
}

/// State shared by all handlers.
#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    pub log: RequestLog,
    pub server_address: Arc<str>,
    /// Bookmark interval and the shutdown signal, so open watches end promptly.
    pub watches: WatchSettings,
    /// Injected faults (of the simulated cluster), applied in `record`.
    pub faults: crate::cluster::Faults,
    /// `apiserver_request_total`, counted in `record` and served at `/metrics`.
    pub metrics: crate::metrics::Metrics,
    /// The Gateway data plane's state, which the service and pod proxies share.
    pub plane: crate::cluster::dataplane::Plane,
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(state.clone(), record))
        .with_state(state)
}

async fn record(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let field_manager = parse_query(&query).remove("fieldManager");
    let client_id = req
        .headers()
        .get("x-client-id")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let at = std::time::SystemTime::now();
    let resp = if path == "/metrics" {
        // Like the real server's /metrics: a non-resource path, not itself counted.
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            state.metrics.render(),
        )
            .into_response()
    } else if path.starts_with("/emulator/faults") {
        // The admin endpoint is never subject to the faults it sets.
        let m = req.method().clone();
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        state.faults.admin(&m, &body)
    } else {
        match state
            .faults
            .verdict(&method, &percent_decode(&path), &query)
        {
            crate::cluster::faults::Verdict::Respond(r) => r,
            crate::cluster::faults::Verdict::Pass { latency } => {
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                let q = parse_query(&query);
                let watch = path.contains("/watch/")
                    || q.get("watch").is_some_and(|w| w == "true" || w == "1");
                let resp = next.run(req).await;
                if watch {
                    state.faults.cuttable(resp)
                } else {
                    resp
                }
            }
        }
    };
    state.metrics.observe(
        &state.store.kinds(),
        &crate::metrics::RequestInfo {
            method: &method,
            path: &percent_decode(&path),
            query: &parse_query(&query),
            content_type: &content_type,
        },
        resp.status().as_u16(),
    );
    state.log.push(RecordedRequest {
        method,
        path,
        query,
        field_manager,
        client_id,
        status: resp.status().as_u16(),
        at,
        finished: std::time::SystemTime::now(),
    });
    resp
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: &str) -> HashMap<String, String> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// What a resource URL names.
struct Target {
    kind: &'static ResourceKind,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

async fn dispatch(
    State(state): State<AppState>,
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // `services/{name}/proxy[/{path...}]` and `pods/{name}/proxy[/{path...}]` take the
    // rest of the path as it is.
    if let Some(p) = crate::cluster::service_proxy::parse(uri.path()) {
        use crate::cluster::{pod_proxy, service_proxy};
        let answer = match p.resource {
            service_proxy::Proxied::Service => {
                service_proxy::serve(&state.store, &state.plane, &method, p, &body).await
            }
            service_proxy::Proxied::Pod => {
                pod_proxy::serve(&state.store, &state.plane, &method, p, &body).await
            }
        };
        return answer.unwrap_or_else(IntoResponse::into_response);
    }
    let query = parse_query(uri.query().unwrap_or(""));
    match route(&state, &method, uri.path(), &query, &headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn route(
    state: &AppState,
    method: &Method,
    path: &str,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let segs: Vec<String> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let kinds = &*state.store.kinds();
    let ok = |v: Value| Ok(json_response(StatusCode::OK, &v, &[]));
    match segs.as_slice() {
        ["version"] => return ok(discovery::version()),
        ["healthz"] | ["livez"] | ["readyz"] => return Ok((StatusCode::OK, "ok").into_response()),
        ["api"] => return ok(discovery::api_versions(&state.server_address)),
        ["apis"] => return ok(discovery::api_group_list(kinds)),
        ["api", v] => {
            return Ok(discovery::resource_list(kinds, "", v)
                .map(|d| json_response(StatusCode::OK, &d, &[]))
                .unwrap_or_else(mux_not_found));
        }
        ["apis", g] => {
            return Ok(discovery::api_group(kinds, g)
                .map(|d| json_response(StatusCode::OK, &d, &[]))
                .unwrap_or_else(mux_not_found));
        }
        ["apis", g, v] => {
            return Ok(discovery::resource_list(kinds, g, v)
                .map(|d| json_response(StatusCode::OK, &d, &[]))
                .unwrap_or_else(mux_not_found));
        }
        ["openapi", "v3"] => return ok(discovery::openapi_v3_index(kinds)),
        ["openapi", "v3", rest @ ..] => {
            return discovery::openapi_v3_doc(kinds, &rest.join("/"))
                .map(ok)
                .unwrap_or_else(|| Err(ApiError::page_not_found()));
        }
        _ => {}
    }
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Ok(mux_not_found()),
    };
    // Only served group-versions have a go-restful WebService; any other path falls
    // through to the mux's NotFound handler (a plain-text 404, not a Status).
    if !kinds.has_group_version(group, version) {
        return Ok(mux_not_found());
    }
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    let lookup = |plural: &str| {
        kinds
            .by_resource(group, version, plural)
            .ok_or_else(ApiError::page_not_found)
    };
    let target = match rest {
        [plural] => Target {
            kind: lookup(plural)?,
            namespace: None,
            name: None,
            subresource: None,
        },
        ["namespaces", ns, plural]
            if group.is_empty() && (*plural == "status" || *plural == "finalize") =>
        {
            Target {
                kind: lookup("namespaces")?,
                namespace: None,
                name: Some(ns.to_string()),
                subresource: Some(plural.to_string()),
            }
        }
        ["namespaces", ns, plural, tail @ ..] => {
            let kind = lookup(plural)?;
            if !kind.namespaced {
                return Err(ApiError::page_not_found());
            }
            let (name, sub) = match tail {
                [] => (None, None),
                [n] => (Some(n.to_string()), None),
                [n, s] => (Some(n.to_string()), Some(s.to_string())),
                _ => return Err(ApiError::page_not_found()),
            };
            Target {
                kind,
                namespace: Some(ns.to_string()),
                name,
                subresource: sub,
            }
        }
        [plural, name] => {
            let kind = lookup(plural)?;
            if kind.namespaced {
                return Err(ApiError::page_not_found());
            }
            Target {
                kind,
                namespace: None,
                name: Some(name.to_string()),
                subresource: None,
            }
        }
        [plural, name, sub] => {
            let kind = lookup(plural)?;
            if kind.namespaced {
                return Err(ApiError::page_not_found());
            }
            Target {
                kind,
                namespace: None,
                name: Some(name.to_string()),
                subresource: Some(sub.to_string()),
            }
        }
        _ => return Err(ApiError::page_not_found()),
    };
    if let Some(sub) = &target.subresource {
        let served = (sub == "status" && target.kind.status_subresource)
            || target.kind.extra_subresources().contains(&sub.as_str());
        if !served {
            return Err(ApiError::page_not_found());
        }
    }
    let watch = legacy_watch || query.get("watch").is_some_and(|w| w == "true" || w == "1");
    handle_resource(state, method, target, watch, query, headers, body).await
}

/// Go's `http.NotFound`, which the apiserver's mux answers for paths no API group serves.
fn mux_not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        "404 page not found\n",
    )
        .into_response()
}

/// The media types a create or update body may have (`negotiation.NegotiateInputSerializer`
/// over the serializers of the kind): built-in kinds also take protobuf, custom resources
/// only JSON and YAML. A request without a Content-Type is read as JSON.
fn check_body_media_type(kind: &ResourceKind, headers: &HeaderMap) -> ApiResult<()> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct.split(';').next().unwrap_or("").trim();
    let accepted: &[&str] = if kind.custom {
        &["application/json", "application/yaml"]
    } else {
        &[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ]
    };
    if base.is_empty() || accepted.contains(&base) {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(accepted))
    }
}

fn write_response(r: WriteResult, with_created: bool) -> Response {
    let code = if r.created && with_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    json_response(code, &r.object, &r.warnings)
}

fn repr(headers: &HeaderMap) -> Repr {
    representation(headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()))
}

async fn handle_resource(
    state: &AppState,
    method: &Method,
    t: Target,
    watch: bool,
    query: &HashMap<String, String>,
    headers: &HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let store = &state.store;
    let served = Served::new(store, t.kind)?;
    let kind = served.storage;
    let ns = t.namespace.clone().unwrap_or_default();
    let sub = t.subresource.clone().unwrap_or_default();
    let repr = repr(headers);
    let body_in = |b: &Bytes| parse_body(b).map(|v| served.stored(&v));
    // All-namespaces paths of namespaced kinds only list and watch.
    if served.kind.namespaced && t.namespace.is_none() && *method != Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    match (method.clone(), &t.name) {
        (Method::GET, None) if watch => {
            watch_response(
                store,
                &state.watches,
                served,
                t.namespace.as_deref(),
                None,
                query,
                repr,
            )
            .await
        }
        (Method::GET, Some(name)) if watch => {
            watch_response(
                store,
                &state.watches,
                served,
                t.namespace.as_deref(),
                Some(name),
                query,
                repr,
            )
            .await
        }
        (Method::GET, None) => list(store, served, t.namespace.as_deref(), query, repr),
        (_, Some(name)) if sub == "scale" => scale(
            store,
            kind,
            &ns,
            name,
            method.clone(),
            query,
            headers,
            &body,
        ),
        (Method::GET, Some(name)) => {
            if !sub.is_empty() && sub != "status" {
                return Err(ApiError::method_not_allowed());
            }
            let obj = served.out(&ops::get(store, kind, &ns, name)?);
            let body = match repr {
                Repr::Table => {
                    let rv = meta_str(&obj, "resourceVersion").unwrap_or("").to_string();
                    to_table(served.kind, &[obj], &rv, query)
                }
                Repr::Metadata => partial(&obj),
                Repr::Object => obj,
            };
            Ok(json_response(StatusCode::OK, &body, &[]))
        }
        (Method::POST, None) => {
            check_body_media_type(served.kind, headers)?;
            let opts = write_options(query, headers, "CreateOptions")?;
            let r = ops::create(store, kind, &ns, body_in(&body)?, &opts)?;
            Ok(write_response(served.result(r), true))
        }
        (Method::POST, Some(name)) if sub == "binding" => {
            bind_pod(store, kind, &ns, name, &body, query, headers)
        }
        (Method::PUT, Some(name)) => {
            check_body_media_type(served.kind, headers)?;
            let opts = write_options(query, headers, "UpdateOptions")?;
            // `finalize` writes the whole namespace, spec.finalizers included.
            let sub = if sub == "finalize" {
                String::new()
            } else {
                sub
            };
            let r = ops::update(store, kind, &ns, name, &sub, body_in(&body)?, &opts)?;
            Ok(write_response(served.result(r), false))
        }
        (Method::PATCH, Some(name)) => {
            let ct = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let pt = PatchType::from_content_type(ct)
                .ok_or_else(ApiError::route_unsupported_media_type)?;
            let opts = write_options(query, headers, "PatchOptions")?;
            if served.is_view() {
                return patch_view(store, served, &ns, name, &sub, pt, &body, &opts);
            }
            Ok(write_response(
                ops::patch(store, kind, &ns, name, &sub, pt, &body, &opts)?,
                true,
            ))
        }
        (Method::DELETE, Some(name)) if sub.is_empty() => {
            let opts = delete_options(query, &body)?;
            let r = ops::delete(store, kind, &ns, name, &opts)?;
            // Objects still held by finalizers come back as they are; immediate deletes
            // answer with the object or a success Status depending on the kind.
            let code = StatusCode::OK;
            if r.deleted && !served.kind.returns_deleted_object() {
                let uid = meta_str(&r.object, "uid").unwrap_or("").to_string();
                return Ok(json_response(
                    code,
                    &success_status(served.kind, name, &uid),
                    &[],
                ));
            }
            Ok(json_response(code, &served.out(&r.object), &[]))
        }
        (Method::DELETE, None) => {
            delete_collection(store, kind, t.namespace.as_deref(), query, &body)
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// PATCH through a converted view: the patch applies to the object as the view shows it.
#[allow(clippy::too_many_arguments)]
fn patch_view(
    store: &Store,
    served: Served,
    ns: &str,
    name: &str,
    sub: &str,
    pt: PatchType,
    body: &Bytes,
    opts: &WriteOptions,
) -> ApiResult<Response> {
    if pt == PatchType::Apply {
        return Err(ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "server-side apply to {} is not supported by the emulator; apply to {} instead",
                served.kind.qualified_resource(),
                served.storage.qualified_resource()
            ),
        ));
    }
    let stored = ops::get(store, served.storage, ns, name)?;
    let mut view = served.out(&stored);
    crate::patch::apply_patch(served.kind, pt, &mut view, body)?;
    let mut back = served.stored(&view);
    // Optimistic concurrency against the version the patch was applied to.
    if let Some(rv) = stored.pointer("/metadata/resourceVersion") {
        crate::resources::meta_mut(&mut back).insert("resourceVersion".into(), rv.clone());
    }
    let r = ops::update(store, served.storage, ns, name, sub, back, opts)?;
    Ok(write_response(served.result(r), false))
}

/// DeleteOptions from the query and the body, validated like `ValidateDeleteOptions`
/// (apimachinery `pkg/apis/meta/v1/validation/validation.go`): 422 on `DeleteOptions`.
fn delete_options(query: &HashMap<String, String>, body: &Bytes) -> ApiResult<DeleteOptions> {
    let b: Value = if body.is_empty() {
        json!({})
    } else {
        parse_body(body)?
    };
    let policy = query.get("propagationPolicy").cloned().or_else(|| {
        b.get("propagationPolicy")
            .and_then(Value::as_str)
            .map(String::from)
    });
    let orphan = query
        .get("orphanDependents")
        .map(|v| v == "true")
        .or_else(|| b.get("orphanDependents").and_then(Value::as_bool));
    let mut causes = Vec::new();
    if orphan.is_some() && policy.is_some() {
        causes.push(Cause::invalid(
            "propagationPolicy",
            &json!(policy),
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    let mut propagation = match policy.as_deref() {
        None => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            causes.push(Cause::not_supported(
                "propagationPolicy",
                &json!(other),
                &["Foreground", "Background", "Orphan", "nil"],
            ));
            None
        }
    };
    if propagation.is_none() && orphan == Some(true) {
        propagation = Some(Propagation::Orphan);
    }
    let body_dry_run: Vec<String> = b
        .get("dryRun")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut dry_run = crate::wire::dry_run(query, &mut causes);
    match body_dry_run.iter().find(|d| *d != "All") {
        Some(bad) => causes.push(Cause::new(
            "FieldValueNotSupported",
            "dryRun",
            format!("Unsupported value: []string{{{bad:?}}}: supported values: \"All\""),
        )),
        None => dry_run |= !body_dry_run.is_empty(),
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid_options("DeleteOptions", causes));
    }
    let pre = b.get("preconditions");
    let grace_period_seconds = query
        .get("gracePeriodSeconds")
        .and_then(|g| g.parse().ok())
        .or_else(|| b.get("gracePeriodSeconds").and_then(Value::as_i64));
    Ok(DeleteOptions {
        dry_run,
        grace_period_seconds,
        propagation,
        precondition_uid: pre
            .and_then(|p| p.get("uid"))
            .and_then(Value::as_str)
            .map(String::from),
        precondition_rv: pre
            .and_then(|p| p.get("resourceVersion"))
            .and_then(Value::as_str)
            .map(String::from),
    })
}

fn delete_collection(
    store: &Store,
    kind: &'static ResourceKind,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    body: &Bytes,
) -> ApiResult<Response> {
    let labels =
        LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map(String::as_str).unwrap_or(""),
        kind,
    )?;
    let opts = delete_options(query, body)?;
    let (items, rv) = {
        let st = store.lock();
        (st.list(kind, ns), st.current_rv())
    };
    let mut deleted = Vec::new();
    for o in items
        .iter()
        .filter(|o| labels.matches(o) && fields.matches(o))
    {
        let name = meta_str(o, "name").unwrap_or("");
        let ons = meta_str(o, "namespace").unwrap_or("");
        if let Ok(r) = ops::delete(store, kind, ons, name, &opts) {
            deleted.push(r.object);
        }
    }
    let list = list_body(kind, deleted, rv, None, None);
    Ok(json_response(StatusCode::OK, &list, &[]))
}

fn list_body(
    kind: &ResourceKind,
    items: Vec<Value>,
    rv: u64,
    cont: Option<String>,
    remaining: Option<usize>,
) -> Value {
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut o| {
            // Typed lists from the real server carry no apiVersion/kind on their items;
            // custom resource lists (unstructured) do.
            if let Some(m) = o.as_object_mut().filter(|_| !kind.custom) {
                m.remove("apiVersion");
                m.remove("kind");
            }
            o
        })
        .collect();
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if let Some(c) = cont {
        meta["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        meta["remainingItemCount"] = json!(r);
    }
    json!({"kind": kind.list_kind(), "apiVersion": kind.api_version(), "metadata": meta, "items": items})
}

/// Continue tokens: base64 JSON of the list's resourceVersion and the last key returned.
fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    let raw = json!({"v": "meta.k8s.io/v1", "rv": rv, "start": format!("{ns}/{name}")}).to_string();
    base64::engine::general_purpose::STANDARD.encode(raw)
}

fn decode_continue(token: &str) -> ApiResult<(u64, String)> {
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().unwrap_or(0),
        v["start"].as_str().unwrap_or("").to_string(),
    ))
}

fn list(
    store: &Store,
    served: Served,
    ns: Option<&str>,
    query: &HashMap<String, String>,
    repr: Repr,
) -> ApiResult<Response> {
    let kind = served.storage;
    let labels =
        LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))?;
    let fields = FieldSelector::parse(
        query.get("fieldSelector").map(String::as_str).unwrap_or(""),
        kind,
    )?;
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let (items, rv, compacted) = {
        let st = store.lock();
        (st.list(kind, ns), st.current_rv(), st.compacted_rv())
    };
    let mut start_after: Option<String> = None;
    let mut list_rv = rv;
    if let Some(token) = query.get("continue").filter(|c| !c.is_empty()) {
        let (crv, start) = decode_continue(token)?;
        if crv < compacted {
            return Err(ApiError::expired(
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
            ));
        }
        list_rv = crv;
        start_after = Some(start);
    }
    let key = |o: &Value| {
        format!(
            "{}/{}",
            meta_str(o, "namespace").unwrap_or(""),
            meta_str(o, "name").unwrap_or("")
        )
    };
    // Only the returned page is converted; the rest is only counted (remainingItemCount).
    let matching: Vec<&Arc<Value>> = items
        .iter()
        .filter(|o| {
            start_after
                .as_ref()
                .is_none_or(|s| key(o).as_str() > s.as_str())
        })
        .filter(|o| labels.matches(o) && fields.matches(o))
        .collect();
    let total = matching.len();
    let take = if limit > 0 { limit.min(total) } else { total };
    let matching: Vec<Value> = matching[..take].iter().map(|o| served.out(o)).collect();
    let (page, cont, remaining) = if limit > 0 && total > limit {
        let page: Vec<Value> = matching;
        let last = page.last().expect("limit > 0");
        let token = encode_continue(
            list_rv,
            meta_str(last, "namespace").unwrap_or(""),
            meta_str(last, "name").unwrap_or(""),
        );
        // etcd3 store's GetList counts the remaining items only for an empty predicate:
        // with a label or field selector, remainingItemCount is absent.
        let remaining = (labels.is_empty() && fields.is_empty()).then_some(total - limit);
        (page, Some(token), remaining)
    } else {
        (matching, None, None)
    };
    let body = match repr {
        Repr::Table => {
            let mut t = to_table(served.kind, &page, &list_rv.to_string(), query);
            if let Some(c) = cont {
                t["metadata"]["continue"] = json!(c);
            }
            t
        }
        Repr::Metadata => {
            let mut l = list_body(
                served.kind,
                page.iter().map(partial).collect(),
                list_rv,
                cont,
                remaining,
            );
            l["kind"] = json!("PartialObjectMetadataList");
            l["apiVersion"] = json!("meta.k8s.io/v1");
            l
        }
        Repr::Object => list_body(served.kind, page, list_rv, cont, remaining),
    };
    Ok(json_response(StatusCode::OK, &body, &[]))
}
