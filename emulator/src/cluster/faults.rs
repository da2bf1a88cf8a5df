//! Fault injection for the API server: refuse connections (as if the server were down),
//! add latency, fail a fraction of requests with 500 or 429, forbid a verb on a resource
//! (403, as RBAC would), and cut open watch streams.
//! Set from the library ([`Faults`], via `RunningEmulator::faults()`) or over HTTP with
//! the admin endpoint `/emulator/faults` (see the crate README).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, Default)]
struct Settings {
    refuse: bool,
    /// When set, the refusal lifts itself at this instant.
    refuse_until: Option<Instant>,
    latency: Duration,
    fail_fraction: f64,
    fail_code: u16,
    /// Accumulates the fraction so failures are spread exactly and deterministically.
    acc: f64,
    /// (verb, resource) pairs answered 403 Forbidden.
    forbidden: Vec<Forbid>,
}

/// A verb on a resource the API server forbids, as an authorizer that does not grant it
/// would: `verb` as the authorizer names it (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`, `deletecollection`, or `*`), `resource` its plural, optionally with
/// `/subresource` or `.group` (`deployments`, `deployments.apps`, `pods/status`, or `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forbid {
    verb: String,
    resource: String,
}

impl Forbid {
    fn new(verb: &str, resource: &str) -> Self {
        Forbid {
            verb: verb.to_owned(),
            resource: resource.to_owned(),
        }
    }

    fn matches(&self, a: &Attributes) -> bool {
        let resource = match (a.subresource.as_str(), a.group.as_str()) {
            ("", "") => vec![a.resource.clone()],
            ("", group) => vec![a.resource.clone(), format!("{}.{group}", a.resource)],
            (sub, _) => vec![format!("{}/{sub}", a.resource)],
        };
        (self.verb == "*" || self.verb == a.verb)
            && (self.resource == "*" || resource.contains(&self.resource))
    }
}

/// What the API server's authorizer is asked about a request, read from its path as
/// k8s.io/apiserver's `pkg/endpoints/request/requestinfo.go` (`NewRequestInfo`) does:
/// `/api/{v}/…` is the core group, `/apis/{group}/{v}/…` another; a `watch/` prefix is the
/// verb; `namespaces/{ns}/` is skipped unless what follows is a namespace subresource
/// (`status`, `finalize`); then `resource/name/subresource`. POST is `create`, GET and HEAD
/// `get` (`list` without a name, `watch` with `?watch=true`), PUT `update`, PATCH `patch`,
/// DELETE `delete` (`deletecollection` without a name). `None`: not a resource request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub(crate) verb: String,
    pub(crate) group: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

pub(crate) fn attributes(method: &str, path: &str, query: &str) -> Option<Attributes> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, mut rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return None,
    };
    let mut verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    };
    if rest.first() == Some(&"watch") {
        verb = "watch";
        rest = &rest[1..];
    }
    let mut namespace = "";
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        namespace = rest[1];
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    let resource = rest.first().copied().unwrap_or_default();
    let name = rest.get(1).copied().unwrap_or_default();
    let subresource = rest.get(2).copied().unwrap_or_default();
    let watch = query.split('&').any(|kv| {
        kv.strip_prefix("watch=")
            .is_some_and(|v| v == "true" || v == "1")
    });
    verb = match (verb, name.is_empty()) {
        ("get", true) if watch => "watch",
        ("get", true) => "list",
        ("delete", true) => "deletecollection",
        (verb, _) => verb,
    };
    Some(Attributes {
        verb: verb.to_owned(),
        group: group.to_owned(),
        resource: resource.to_owned(),
        subresource: subresource.to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

/// The answer of an authorizer that does not grant the request: k8s.io/apiserver's
/// `pkg/endpoints/handlers/responsewriters/errors.go` (`Forbidden`, `forbiddenMessage`)
/// wrapped in apimachinery's `pkg/api/errors/errors.go` (`NewForbidden`): reason
/// `Forbidden`, the group and resource (as `kind`) and name in `details`, and the message
/// `<resource>[.<group>] ["<name>"] is forbidden: User "<user>" cannot <verb> resource
/// "<resource>[/<subresource>]" in API group "<group>" in the namespace "<ns>"` (or `at
/// the cluster scope`). The emulator authenticates nobody, so the user is
/// `system:anonymous`.
fn forbidden_response(a: &Attributes) -> Response {
    const USER: &str = "system:anonymous";
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let why = if a.namespace.is_empty() {
        format!(
            "User {USER:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            a.verb, a.group
        )
    } else {
        format!(
            "User {USER:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            a.verb, a.group, a.namespace
        )
    };
    // schema.GroupResource.String(): `resource.group`, or the resource alone in the core group.
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let message = if a.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", a.name)
    };
    // metav1.StatusDetails: every field omitempty.
    let mut details = serde_json::Map::new();
    for (key, value) in [
        ("name", &a.name),
        ("group", &a.group),
        ("kind", &a.resource),
    ] {
        if !value.is_empty() {
            details.insert(key.into(), json!(value));
        }
    }
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": "Forbidden", "details": details, "code": 403});
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

struct Inner {
    settings: Mutex<Settings>,
    /// Bumped to end every open watch.
    cut: tokio::sync::watch::Sender<u64>,
}

/// Shared fault settings (cheap to clone). Every setter takes effect for the next request.
#[derive(Clone)]
pub struct Faults(Arc<Inner>);

impl Default for Faults {
    fn default() -> Self {
        Faults(Arc::new(Inner {
            settings: Mutex::new(Settings {
                fail_code: 500,
                ..Default::default()
            }),
            cut: tokio::sync::watch::channel(0).0,
        }))
    }
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faults({})", self.describe())
    }
}

/// What the middleware does with one request.
pub(crate) enum Verdict {
    Pass { latency: Duration },
    Respond(Response),
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.0.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses every connection (new connections are closed at once; requests on open
    /// connections get 503 with `Connection: close`) and cuts open watches, as if the
    /// API server were down. `false` brings it back.
    pub fn refuse_all(&self, on: bool) {
        {
            let mut s = self.lock();
            s.refuse = on;
            s.refuse_until = None;
        }
        if on {
            self.cut_watches();
        }
    }

    /// Refuses everything for `d`, then recovers by itself.
    pub fn refuse_for(&self, d: Duration) {
        self.refuse_all(true);
        self.lock().refuse_until = Some(Instant::now() + d);
    }

    /// Delays every request by `d` before it is served.
    pub fn latency(&self, d: Duration) {
        self.lock().latency = d;
    }

    /// Fails this fraction (0.0–1.0) of requests with `code`: 500 (InternalError) or
    /// 429 (TooManyRequests, with `Retry-After: 1`). Failures are spread evenly: 0.5
    /// fails every second request.
    pub fn fail_fraction(&self, fraction: f64, code: u16) {
        let mut s = self.lock();
        s.fail_fraction = fraction.clamp(0.0, 1.0);
        s.fail_code = code;
        s.acc = 0.0;
    }

    /// Answers `verb` on `resource` with 403 Forbidden from now on (see [`Forbid`]), as an
    /// API server whose RBAC does not grant it; [`Faults::clear`] lifts it.
    pub fn forbid(&self, verb: &str, resource: &str) {
        let rule = Forbid::new(verb, resource);
        let mut s = self.lock();
        if !s.forbidden.contains(&rule) {
            s.forbidden.push(rule);
        }
    }

    /// Grants `verb` on `resource` again.
    pub fn allow(&self, verb: &str, resource: &str) {
        let rule = Forbid::new(verb, resource);
        self.lock().forbidden.retain(|r| *r != rule);
    }

    /// Ends every open watch stream now (clients see the watch close and re-watch).
    pub fn cut_watches(&self) {
        self.0.cut.send_modify(|n| *n += 1);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        let mut s = self.lock();
        *s = Settings {
            fail_code: 500,
            ..Default::default()
        };
    }

    /// Whether connections are being refused now.
    pub fn refusing(&self) -> bool {
        let mut s = self.lock();
        if let Some(until) = s.refuse_until
            && Instant::now() >= until
        {
            s.refuse = false;
            s.refuse_until = None;
        }
        s.refuse
    }

    /// The current settings as JSON (what the admin endpoint shows).
    pub fn describe(&self) -> Value {
        let refusing = self.refusing();
        let s = self.lock();
        json!({
            "refuseAll": refusing,
            "latencyMs": s.latency.as_millis() as u64,
            "failFraction": s.fail_fraction,
            "failCode": s.fail_code,
            "forbid": s.forbidden.iter()
                .map(|r| json!({"verb": r.verb, "resource": r.resource}))
                .collect::<Vec<_>>(),
        })
    }

    /// What to do with a request (`method`, `path`, `query`).
    pub(crate) fn verdict(&self, method: &str, path: &str, query: &str) -> Verdict {
        if self.refusing() {
            let mut r = status_response(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request (injected fault: refusing all requests)",
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Verdict::Respond(r);
        }
        let mut s = self.lock();
        if !s.forbidden.is_empty()
            && let Some(a) = attributes(method, path, query)
            && s.forbidden.iter().any(|r| r.matches(&a))
        {
            return Verdict::Respond(forbidden_response(&a));
        }
        if s.fail_fraction > 0.0 {
            s.acc += s.fail_fraction;
            if s.acc >= 1.0 - 1e-9 {
                s.acc -= 1.0;
                let mut r = if s.fail_code == 429 {
                    status_response(
                        429,
                        "TooManyRequests",
                        "the server has received too many requests and has asked us to try again later (injected fault)",
                    )
                } else {
                    status_response(
                        s.fail_code,
                        "InternalError",
                        "Internal error occurred: injected fault",
                    )
                };
                if s.fail_code == 429 {
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                return Verdict::Respond(r);
            }
        }
        Verdict::Pass { latency: s.latency }
    }

    /// Wraps a watch response so that `cut_watches` ends it.
    pub(crate) fn cuttable(&self, resp: Response) -> Response {
        let mut rx = self.0.cut.subscribe();
        rx.mark_unchanged();
        let (parts, body) = resp.into_parts();
        let cut = async move {
            let _ = rx.changed().await;
        };
        let stream = body.into_data_stream().take_until(Box::pin(cut));
        Response::from_parts(parts, Body::from_stream(stream))
    }

    /// The admin endpoint: GET shows the settings; POST/PUT a JSON object with any of
    /// `refuseAll` (bool), `forMs` (with refuseAll: lift it after this long), `latencyMs`,
    /// `failFraction` and `failCode`, `forbid` (a list of `{"verb", "resource"}`, added),
    /// `cutWatches` (true), `clear` (true).
    pub(crate) fn admin(&self, method: &axum::http::Method, body: &[u8]) -> Response {
        if method == axum::http::Method::POST || method == axum::http::Method::PUT {
            let Ok(v) = serde_json::from_slice::<Value>(body) else {
                return status_response(400, "BadRequest", "the body must be a JSON object");
            };
            if v["clear"] == true {
                self.clear();
            }
            if let Some(ms) = v["latencyMs"].as_u64() {
                self.latency(Duration::from_millis(ms));
            }
            if let Some(f) = v["failFraction"].as_f64() {
                let code = v["failCode"].as_u64().unwrap_or(500) as u16;
                if code != 500 && code != 429 {
                    return status_response(400, "BadRequest", "failCode must be 500 or 429");
                }
                self.fail_fraction(f, code);
            }
            for rule in v["forbid"].as_array().into_iter().flatten() {
                match (rule["verb"].as_str(), rule["resource"].as_str()) {
                    (Some(verb), Some(resource)) => self.forbid(verb, resource),
                    _ => {
                        return status_response(
                            400,
                            "BadRequest",
                            "each forbid entry needs a verb and a resource",
                        );
                    }
                }
            }
            if v["cutWatches"] == true {
                self.cut_watches();
            }
            match (v["refuseAll"].as_bool(), v["forMs"].as_u64()) {
                (Some(true), Some(ms)) => self.refuse_for(Duration::from_millis(ms)),
                (Some(on), _) => self.refuse_all(on),
                _ => {}
            }
        }
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            self.describe().to_string(),
        )
            .into_response()
    }
}

fn status_response(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A TCP listener that closes new connections at once while the faults refuse them.
pub(crate) struct RefusingListener {
    inner: tokio::net::TcpListener,
    faults: Faults,
}

impl RefusingListener {
    pub(crate) fn new(inner: tokio::net::TcpListener, faults: Faults) -> Self {
        RefusingListener { inner, faults }
    }
}

impl axum::serve::Listener for RefusingListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            if self.faults.refusing() {
                // Reset (linger 0) before any byte is read, like a server that is down.
                let _ = io.set_zero_linger();
                drop(io);
                continue;
            }
            return (io, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
