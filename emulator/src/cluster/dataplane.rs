//! The Gateway data plane: a real local port that routes HTTP requests by the HTTPRoutes
//! the emulator's Gateway controller accepted (hostname, path/method/header/query
//! matches with the Gateway API's precedence, URL rewrite, weighted backendRefs, the
//! ExternalAuth filter: `external_auth.rs`) to ready
//! backend pods: behind a Service, or selected by an InferencePool, where a simulated
//! endpoint picker chooses the pod with the fewest requests in flight. Pods of
//! modelplane's `sim` engine answer with a built-in OpenAI-compatible simulator (with
//! llm-d-inference-sim's latency flags and vLLM-style `/metrics`); any other backend
//! answers 503, since no real model server runs in the emulator. Every answer a pod gives
//! carries `x-emulator-pod` and `x-emulator-namespace`.
//!
//! Precedence (HTTPRouteSpec.Hostnames and HTTPRouteRule.Matches in gateway-api
//! apis/v1/httproute_types.go) goes first by hostname: the route with the most characters
//! in a matching non-wildcard hostname, then in a matching hostname (so an exact hostname
//! beats a wildcard, a longer wildcard a shorter one, and any hostname a route without
//! hostnames), where a listener's hostname narrows the route's; then by the match (an
//! Exact path, the longest prefix, a method, the most header matches, the most query
//! param matches); then the oldest route, "{namespace}/{name}", and the first rule. Hosts
//! compare case-insensitively and without the Host header's port. All Gateways share this
//! one port, so listener isolation (a request reaching only the routes of its most
//! specific listener) is not modelled beyond that ranking.

use std::cmp::Ordering as Cmp;
use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::{GATEWAY_CONTROLLER, external, external_auth, is_true};
use crate::resources::meta_str;
use crate::selectors::LabelSelector;
use crate::store::Store;

/// The response header naming the pod that answered (and its namespace).
pub const POD_HEADER: &str = "x-emulator-pod";
pub const NAMESPACE_HEADER: &str = "x-emulator-namespace";

const INFERENCE_GROUP: &str = "inference.networking.k8s.io";

#[derive(Clone)]
pub(crate) struct Plane {
    store: Store,
    state: Arc<PlaneState>,
}

#[derive(Default)]
struct PlaneState {
    /// Smooth weighted round robin: the current weights of each rule's backendRefs, by
    /// route uid, generation and rule index.
    wrr: Mutex<HashMap<String, Vec<i64>>>,
    /// Round robin over a backend's ready pods (and the picker's tie-break), by backend.
    rr: Mutex<HashMap<String, usize>>,
    /// Requests in flight per pod uid (and a sim pod's running/waiting requests and the
    /// figures of the requests it served).
    loads: Mutex<Loads>,
}

/// The load records by pod uid. They are forgotten only once their pod is gone from the
/// store and no request holds them: a sim pod's record carries its served figures, which
/// a live pod must keep (forgetting them would be a counter reset no restart caused).
#[derive(Default)]
struct Loads {
    by_uid: HashMap<String, Arc<PodLoad>>,
    /// The size at which the records of deleted pods are swept (at least
    /// `LOADS_SWEPT_AT`; twice what a sweep leaves, so a sweep is rare however many pods
    /// are alive).
    sweep_at: usize,
}

const LOADS_SWEPT_AT: usize = 1024;

/// What a pod is doing: requests the data plane has sent it and not yet seen answered,
/// and, for sim pods, how many of them run or wait for one of `--max-num-seqs` slots,
/// and what the requests it answered add up to (its `/metrics` counters and histograms).
struct PodLoad {
    in_flight: AtomicUsize,
    running: AtomicUsize,
    waiting: AtomicUsize,
    max_num_seqs: usize,
    slots: Arc<Semaphore>,
    served: Mutex<Served>,
    /// The LoRA adapters the sim process serves besides its model.
    loras: Mutex<Loras>,
}

/// A sim process's LoRA adapters: those of `--lora-modules` when it starts, then what
/// `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` add and remove (llm-d-inference-sim
/// pkg/llm-d-inference-sim/lora.go keeps them in memory: a restarted process has only its
/// `--lora-modules` again).
struct Loras {
    incarnation: i64,
    initial: BTreeSet<String>,
    names: BTreeSet<String>,
}

/// One request in flight to a pod; dropped when its answer (a stream included) is done.
struct InFlight(Arc<PodLoad>);

impl InFlight {
    fn new(load: &Arc<PodLoad>) -> InFlight {
        load.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(load.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request waiting for a sim slot (a client that goes away stops waiting).
struct Waiting(Arc<PodLoad>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request holding one of a sim pod's `--max-num-seqs` slots.
struct Running(Arc<PodLoad>, #[allow(dead_code)] OwnedSemaphorePermit);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PodLoad {
    /// Waits for a free slot, counted as waiting meanwhile (vLLM's scheduler queue).
    async fn admit(self: &Arc<Self>) -> Option<Running> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting(self.clone());
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        self.running.fetch_add(1, Ordering::SeqCst);
        drop(waiting);
        Some(Running(self.clone(), permit))
    }

    fn served(&self) -> std::sync::MutexGuard<'_, Served> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the served figures over when the pod's sim container has restarted since
    /// they began: a new process, whose counters start from zero (a Prometheus counter
    /// reset). A view of the pod older than the figures changes nothing.
    fn follow_restarts(&self, incarnation: i64) {
        let mut served = self.served();
        if incarnation > served.incarnation {
            *served = Served::new(incarnation);
        }
        let mut loras = self.loras();
        if incarnation > loras.incarnation {
            loras.incarnation = incarnation;
            loras.names = loras.initial.clone();
        }
    }

    fn loras(&self) -> std::sync::MutexGuard<'_, Loras> {
        self.loras.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds to the served figures what a request of process `incarnation` did; nothing
    /// when that process has since restarted (the request died with it).
    fn record(&self, incarnation: i64, f: impl FnOnce(&mut Served)) {
        let mut served = self.served();
        if served.incarnation == incarnation {
            f(&mut served);
        }
    }
}

/// How many times a pod's first container (the one `sim_config` reads) has restarted:
/// its `restartCount` in `status.containerStatuses`, 0 before it has a status.
fn incarnation(pod: &Value) -> i64 {
    let name = pod
        .pointer("/spec/containers/0/name")
        .and_then(Value::as_str);
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|s| s.get("name").and_then(Value::as_str) == name)
        .and_then(|s| s.get("restartCount"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

impl PlaneState {
    /// The load record of a pod, created on first use; a sim pod's served figures start
    /// over when its container has restarted.
    fn load_locked(
        store: &Store,
        loads: &mut Loads,
        pod: &Value,
        sim: Option<&SimConfig>,
    ) -> Arc<PodLoad> {
        let uid = meta_str(pod, "uid").unwrap_or("").to_string();
        let restarts = incarnation(pod);
        if let Some(load) = loads.by_uid.get(&uid) {
            load.follow_restarts(restarts);
            return load.clone();
        }
        if loads.by_uid.len() >= loads.sweep_at.max(LOADS_SWEPT_AT) {
            // Forget the records of deleted pods that no request holds.
            let live: std::collections::HashSet<String> = store
                .kinds()
                .by_resource("", "v1", "pods")
                .map(|kind| {
                    store
                        .lock()
                        .list(kind, None)
                        .iter()
                        .filter_map(|p| meta_str(p, "uid").map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            loads
                .by_uid
                .retain(|uid, l| Arc::strong_count(l) > 1 || live.contains(uid));
            loads.sweep_at = (2 * loads.by_uid.len()).max(LOADS_SWEPT_AT);
        }
        let n = sim.map_or(DEFAULT_MAX_NUM_SEQS, |s| s.max_num_seqs).max(1);
        let load = Arc::new(PodLoad {
            in_flight: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            max_num_seqs: n,
            slots: Arc::new(Semaphore::new(n)),
            served: Mutex::new(Served::new(restarts)),
            loras: Mutex::new(Loras {
                incarnation: restarts,
                initial: sim.map(|s| s.lora_modules.clone()).unwrap_or_default(),
                names: sim.map(|s| s.lora_modules.clone()).unwrap_or_default(),
            }),
        });
        loads.by_uid.insert(uid, load.clone());
        load
    }

    fn next_rr(&self, key: &str) -> usize {
        let mut rr = self.rr.lock().unwrap_or_else(|e| e.into_inner());
        if !rr.contains_key(key) && rr.len() >= 4096 {
            rr.clear();
        }
        let n = rr.entry(key.to_string()).or_default();
        let v = *n;
        *n = n.wrapping_add(1);
        v
    }

    /// Smooth weighted round robin (as nginx balances weighted upstreams): each pick adds
    /// every weight to its backend's current value, takes the largest and subtracts the
    /// total from it. Over any `total` consecutive picks each backend gets exactly its
    /// weight, spread out; weight 0 is never picked. None when all weights are 0.
    fn pick_weighted(&self, key: &str, weights: &[i64]) -> Option<usize> {
        let total: i64 = weights.iter().sum();
        if total <= 0 {
            return None;
        }
        let mut wrr = self.wrr.lock().unwrap_or_else(|e| e.into_inner());
        if !wrr.contains_key(key) && wrr.len() >= 4096 {
            wrr.clear();
        }
        let current = wrr
            .entry(key.to_string())
            .or_insert_with(|| vec![0; weights.len()]);
        if current.len() != weights.len() {
            *current = vec![0; weights.len()];
        }
        let mut best: Option<usize> = None;
        for (i, w) in weights.iter().enumerate() {
            if *w <= 0 {
                continue;
            }
            current[i] += w;
            if best.is_none_or(|b| current[i] > current[b]) {
                best = Some(i);
            }
        }
        let b = best?;
        current[b] -= total;
        Some(b)
    }
}

/// Serves the data plane on `listener`, with the state it shares with the API server's
/// service proxy (`Plane::new`).
pub(crate) async fn serve(listener: tokio::net::TcpListener, plane: Plane) {
    let app = Router::new().fallback(handle).with_state(plane);
    let _ = axum::serve(listener, app).await;
}

fn text(code: StatusCode, msg: &str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain")],
        format!("{msg}\n"),
    )
        .into_response()
}

fn json_resp(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A route rule that matched: where to send the request and the rewritten path.
struct Matched {
    namespace: String,
    backends: Vec<Value>,
    path: String,
    /// Identifies the rule (route uid, generation, index) for the weighted choice.
    rule_key: String,
    /// The rule's `ExternalAuth` filter (`external_auth.rs`), if it has one.
    external_auth: Option<Value>,
}

/// Whether a hostname of a route or listener matches the request's host. A wildcard
/// (`*.example.com`) is a suffix match of one or more labels: it matches `foo.example.com`
/// and `foo.bar.example.com` but not `example.com` (HTTPRouteSpec.Hostnames in gateway-api
/// apis/v1/httproute_types.go). Hosts compare case-insensitively (RFC 3986 3.2.2: "The
/// host subcomponent is case-insensitive"; Gateway API hostnames are lower case).
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => {
            let (h, s) = (host.as_bytes(), suffix.as_bytes());
            suffix.starts_with('.')
                && h.len() > s.len()
                && h[h.len() - s.len()..].eq_ignore_ascii_case(s)
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The host a request is for, in lower case and without the port: "Implementations MUST
/// ignore any port value specified in the HTTP Host header while performing a match"
/// (HTTPRouteSpec.Hostnames). From the Host header, else the request target's authority.
fn request_host(headers: &HeaderMap, uri: &axum::http::Uri) -> String {
    let authority = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or("");
    let host = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.to_ascii_lowercase()
}

fn prefix_matches(prefix: &str, path: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

/// Applies a URLRewrite filter's path modifier.
fn rewrite(filter: &Value, matched_prefix: Option<&str>, path: &str) -> String {
    let Some(m) = filter.pointer("/urlRewrite/path") else {
        return path.to_string();
    };
    match m.get("type").and_then(Value::as_str) {
        Some("ReplaceFullPath") => m["replaceFullPath"].as_str().unwrap_or("/").to_string(),
        Some("ReplacePrefixMatch") => {
            let prefix = matched_prefix.unwrap_or("/").trim_end_matches('/');
            let rest = &path[prefix.len().min(path.len())..];
            let repl = m["replacePrefixMatch"].as_str().unwrap_or("/");
            let joined = format!(
                "{}/{}",
                repl.trim_end_matches('/'),
                rest.trim_start_matches('/')
            );
            // "/" + "" must stay "/", and a non-root replacement keeps no trailing slash
            // unless the request had one.
            if rest.is_empty() && repl != "/" {
                joined.trim_end_matches('/').to_string()
            } else {
                joined
            }
        }
        _ => path.to_string(),
    }
}

/// Decodes `%XX` escapes and `+` of a query component.
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters of a query string, in order.
fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// The request as the matcher sees it.
struct Req<'a> {
    host: &'a str,
    method: &'a Method,
    path: &'a str,
    headers: &'a HeaderMap,
    /// Query parameters in order (the first value of a repeated one is matched).
    query: Vec<(String, String)>,
}

/// Whether the match's header conditions hold, and how many there are. Names are
/// case-insensitive and only the first entry of equivalent names counts (HTTPHeaderMatch
/// in gateway-api apis/v1/httproute_types.go). `Exact` (the default) compares the value;
/// `RegularExpression` (implementation-specific) is not supported: it never matches.
fn headers_match(m: &Value, req: &Req) -> Option<usize> {
    let mut seen: Vec<String> = Vec::new();
    for h in m
        .get("headers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = h.get("name").and_then(Value::as_str)?.to_ascii_lowercase();
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let want = h.get("value").and_then(Value::as_str).unwrap_or("");
        let ty = h.get("type").and_then(Value::as_str).unwrap_or("Exact");
        let ok = ty == "Exact"
            && req
                .headers
                .get_all(name.as_str())
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v == want));
        if !ok {
            return None;
        }
    }
    Some(seen.len())
}

/// Query parameter conditions: names match exactly, `Exact` values against the first
/// value of the parameter (HTTPQueryParamMatch in apis/v1/httproute_types.go).
fn query_match(m: &Value, req: &Req) -> Option<usize> {
    let mut seen: Vec<&str> = Vec::new();
    for q in m
        .get("queryParams")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = q.get("name").and_then(Value::as_str)?;
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let want = q.get("value").and_then(Value::as_str).unwrap_or("");
        let ty = q.get("type").and_then(Value::as_str).unwrap_or("Exact");
        let first = req.query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        if ty != "Exact" || first.is_none_or(|v| v != want) {
            return None;
        }
    }
    Some(seen.len())
}

/// How specific a hostname is, in the order of the Gateway API's precedence across
/// HTTPRoutes (HTTPRouteSpec.Hostnames in gateway-api apis/v1/httproute_types.go):
/// "precedence must be given to rules from the HTTPRoute with the largest number of:
///
/// * Characters in a matching non-wildcard hostname.
/// * Characters in a matching hostname."
///
/// A wildcard counts all its characters, `*.` included (the same two for every wildcard,
/// so only the order among wildcards matters: `*.b.example.com` before `*.example.com`);
/// no hostname (any host) is (0, 0). Larger is more specific.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct HostSpecificity {
    /// Characters of the matching hostname if it has no wildcard, else 0.
    exact: usize,
    /// Characters of the matching hostname.
    chars: usize,
}

impl HostSpecificity {
    fn of(hostname: Option<&str>) -> HostSpecificity {
        match hostname {
            None => HostSpecificity::default(),
            Some(h) if h.starts_with('*') => HostSpecificity {
                exact: 0,
                chars: h.len(),
            },
            Some(h) => HostSpecificity {
                exact: h.len(),
                chars: h.len(),
            },
        }
    }
}

/// How specific the hostnames are that let a route take a request: first the hostname
/// the listener and the route intersect in (the more specific of the two, since both
/// match the host: a route without hostnames on a `foo.example.com` listener serves that
/// host only, and is as specific as a route naming it), then the route's own hostname
/// (newer text of HTTPRouteSpec.Hostnames, the Extended feature
/// GatewayRouteHostnameIntersectionPrecedence: "When multiple HTTPRoutes attach to the
/// same Listener and yield identical Listener/Route intersected hostnames,
/// implementations SHOULD evaluate precedence using the original hostnames configured on
/// the Route"). Behind a listener without a hostname both are the route's hostname.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct HostRank {
    intersection: HostSpecificity,
    route: HostSpecificity,
}

/// The best hostname rank with which a route matches `host`, over the hostnames of the
/// listeners it is attached to (None: any host) and its own hostnames (none: any host);
/// None when no pair matches. Route hostnames the listener's hostname does not match are
/// ignored ("any HTTPRoute hostnames that do not match the Listener hostname MUST be
/// ignored"): a pair only counts when both match the host.
fn host_rank(listeners: &[Option<String>], hostnames: &[&str], host: &str) -> Option<HostRank> {
    let route_hosts: Vec<Option<&str>> = if hostnames.is_empty() {
        vec![None]
    } else {
        hostnames.iter().map(|h| Some(*h)).collect()
    };
    let mut best: Option<HostRank> = None;
    for l in listeners
        .iter()
        .map(Option::as_deref)
        .filter(|l| l.is_none_or(|l| host_matches(l, host)))
    {
        for h in route_hosts
            .iter()
            .copied()
            .filter(|h| h.is_none_or(|h| host_matches(h, host)))
        {
            let route = HostSpecificity::of(h);
            let rank = HostRank {
                intersection: route.max(HostSpecificity::of(l)),
                route,
            };
            best = best.max(Some(rank));
        }
    }
    best
}

/// The hostnames of the listeners a route is attached to through the parents of ours
/// that accepted it (None: a listener without a hostname). Empty when none did.
fn listener_hostnames(store: &Store, route: &Value) -> Vec<Option<String>> {
    let Some(gateways) = store
        .kinds()
        .by_resource("gateway.networking.k8s.io", "v1", "gateways")
    else {
        return Vec::new();
    };
    let route_ns = meta_str(route, "namespace").unwrap_or("");
    let mut out = Vec::new();
    for p in route
        .pointer("/status/parents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let accepted = p["controllerName"] == GATEWAY_CONTROLLER
            && p["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Accepted" && c["status"] == "True")
            });
        let parent = &p["parentRef"];
        let is_gateway = parent
            .get("group")
            .and_then(Value::as_str)
            .is_none_or(|g| g == "gateway.networking.k8s.io")
            && parent
                .get("kind")
                .and_then(Value::as_str)
                .is_none_or(|k| k == "Gateway");
        if !accepted || !is_gateway {
            continue;
        }
        let ns = parent
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(route_ns);
        let name = parent.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(gw) = store.get(gateways, ns, name) else {
            continue;
        };
        let a = super::networking::attach(store, route, parent, &gw);
        if a.accepted.0 {
            out.extend(a.hostnames);
        }
    }
    out
}

/// How specific a match is, in the order of the Gateway API's precedence (the
/// HTTPRouteRule doc comment in gateway-api apis/v1/httproute_types.go): an Exact path,
/// then the longest PathPrefix, then a method match, then the most header matches, then
/// the most query param matches. Larger is more specific.
type Specificity = (bool, usize, bool, usize, usize);

/// Where a match stands: its route's hostname rank, then its specificity ("If ties exist
/// across multiple Routes, the matching precedence rules for HTTPRouteMatches takes
/// over"), then the tie-breaks (the oldest route, then "{namespace}/{name}"
/// alphabetically, then the first rule in list order).
#[derive(PartialEq, Eq)]
struct Rank {
    host: HostRank,
    spec: Specificity,
    created: String,
    route: String,
    rule: usize,
}

impl Ord for Rank {
    /// Greater is preferred.
    fn cmp(&self, o: &Self) -> Cmp {
        self.host
            .cmp(&o.host)
            .then_with(|| self.spec.cmp(&o.spec))
            .then_with(|| o.created.cmp(&self.created))
            .then_with(|| o.route.cmp(&self.route))
            .then_with(|| o.rule.cmp(&self.rule))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, o: &Self) -> Option<Cmp> {
        Some(self.cmp(o))
    }
}

/// Finds the accepted rule with the most specific match for the request: the routes
/// whose listeners and hostnames take the request's host, ranked by [`Rank`].
fn route(store: &Store, req: &Req) -> Option<Matched> {
    let kind = store
        .kinds()
        .by_resource("gateway.networking.k8s.io", "v1", "httproutes")?;
    let mut best: Option<(Rank, Matched)> = None;
    for r in store.list(kind, None) {
        // Empty unless a parent of ours accepted the route.
        let listeners = listener_hostnames(store, &r);
        if listeners.is_empty() {
            continue;
        }
        let hostnames: Vec<&str> = r
            .pointer("/spec/hostnames")
            .and_then(Value::as_array)
            .map(|h| h.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(host) = host_rank(&listeners, &hostnames, req.host) else {
            continue;
        };
        let ns = meta_str(&r, "namespace").unwrap_or("").to_string();
        let name = meta_str(&r, "name").unwrap_or("");
        let created = r
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generation = r
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let uid = meta_str(&r, "uid").unwrap_or("");
        for (ri, rule) in r
            .pointer("/spec/rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let default = vec![json!({"path": {"type": "PathPrefix", "value": "/"}})];
            let matches = rule
                .get("matches")
                .and_then(Value::as_array)
                .filter(|m| !m.is_empty())
                .unwrap_or(&default);
            for m in matches {
                let method = m.get("method").and_then(Value::as_str);
                if method.is_some_and(|want| want != req.method.as_str()) {
                    continue;
                }
                let ty = m
                    .pointer("/path/type")
                    .and_then(Value::as_str)
                    .unwrap_or("PathPrefix");
                let value = m
                    .pointer("/path/value")
                    .and_then(Value::as_str)
                    .unwrap_or("/");
                let (ok, exact, len, prefix) = match ty {
                    "Exact" => (req.path == value, true, value.len(), None),
                    "PathPrefix" => (
                        prefix_matches(value, req.path),
                        false,
                        value.len(),
                        Some(value),
                    ),
                    _ => (false, false, 0, None),
                };
                if !ok {
                    continue;
                }
                let (Some(nh), Some(nq)) = (headers_match(m, req), query_match(m, req)) else {
                    continue;
                };
                let rank = Rank {
                    host,
                    spec: (exact, len, method.is_some(), nh, nq),
                    created: created.clone(),
                    route: format!("{ns}/{name}"),
                    rule: ri,
                };
                // Of equally ranked matches (the same rule) the first is kept.
                if best.as_ref().is_some_and(|(b, _)| rank <= *b) {
                    continue;
                }
                let mut new_path = req.path.to_string();
                let mut external_auth = None;
                for f in rule
                    .get("filters")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if f["type"] == "URLRewrite" {
                        new_path = rewrite(f, prefix, req.path);
                    }
                    if f["type"] == "ExternalAuth" {
                        external_auth = f.get("externalAuth").cloned();
                    }
                }
                let backends = rule
                    .get("backendRefs")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                best = Some((
                    rank,
                    Matched {
                        namespace: ns.clone(),
                        backends,
                        path: new_path,
                        rule_key: format!("{uid}/{generation}/{ri}"),
                        external_auth,
                    },
                ));
            }
        }
    }
    best.map(|(_, m)| m)
}

/// The pods among `pods` that are Ready and not terminating.
fn ready<'a>(pods: impl IntoIterator<Item = &'a Value>) -> Vec<Value> {
    pods.into_iter()
        .filter(|p| is_true(p, "Ready") && p.pointer("/metadata/deletionTimestamp").is_none())
        .cloned()
        .collect()
}

/// Ready pods behind a Service; None when the Service does not exist.
fn ready_pods(store: &Store, ns: &str, name: &str) -> Option<Vec<Value>> {
    let kinds = store.kinds();
    let svc = store.get(kinds.by_resource("", "v1", "services")?, ns, name)?;
    let pods = store.list(kinds.by_resource("", "v1", "pods")?, Some(ns));
    Some(ready(super::networking::selected_pods(&pods, &svc)))
}

/// Ready pods an InferencePool selects: `spec.selector.matchLabels` within its namespace
/// (InferencePoolSpec.Selector in gateway-api-inference-extension api/v1/inferencepool_types.go).
fn pool_pods(store: &Store, pool: &Value) -> Vec<Value> {
    let ns = meta_str(pool, "namespace").unwrap_or("");
    let Some(labels) = pool
        .pointer("/spec/selector/matchLabels")
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
    else {
        return Vec::new();
    };
    let selector = LabelSelector::from_object(&json!({ "matchLabels": labels }));
    let Some(kind) = store.kinds().by_resource("", "v1", "pods") else {
        return Vec::new();
    };
    let pods = store.list(kind, Some(ns));
    ready(pods.iter().filter(|p| selector.matches(p)))
}

/// llm-d-inference-sim's default `--max-num-seqs` (pkg/common/config.go in
/// github.com/llm-d/llm-d-inference-sim).
const DEFAULT_MAX_NUM_SEQS: usize = 5;

/// What a `sim` engine pod was started with (its container's command and args).
pub(crate) struct SimConfig {
    /// The served model (`--model`).
    pub model: String,
    /// `--time-to-first-token`: before the first token of an answer.
    pub ttft: Duration,
    /// `--inter-token-latency`: before each further token.
    pub itl: Duration,
    /// `--max-num-seqs`: requests processed at the same time; more wait in a queue.
    pub max_num_seqs: usize,
    /// The adapter names of `--lora-modules` (each value a JSON object with `name`, as
    /// llm-d-inference-sim's README gives them), served from the start.
    pub lora_modules: BTreeSet<String>,
}

/// A duration flag of llm-d-inference-sim: a Go duration (`100ms`, `1.5s`, `1m30s`), as
/// its flags take them since v0.7.0, or a plain integer in milliseconds, the format of
/// the releases before (v0.5.1, which modelplane runs, declares `time-to-first-token`
/// and `inter-token-latency` as ints "in milliseconds" in pkg/common/config.go).
pub(crate) fn sim_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if let Ok(ms) = s.parse::<u64>() {
        return Some(Duration::from_millis(ms));
    }
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest.is_empty() {
        return None;
    }
    let mut secs = 0f64;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let (num, after) = rest.split_at(num_end);
        let n: f64 = num.parse().ok()?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let mult = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        secs += n * mult;
        rest = next;
    }
    Some(Duration::from_secs_f64(secs))
}

/// The configuration of a `sim` engine pod, or None for pods that run anything else.
pub(crate) fn sim_config(pod: &Value) -> Option<SimConfig> {
    let labelled = pod
        .pointer("/metadata/labels/modelplane.io~1engine")
        .and_then(Value::as_str)
        == Some("sim");
    let c = pod.pointer("/spec/containers/0")?;
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    if !labelled && !image.contains("llm-d-inference-sim") {
        return None;
    }
    let args: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|f| c.get(*f).and_then(Value::as_array).into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    // `--name value` or `--name=value`.
    let flag = |name: &str| {
        let long = format!("--{name}");
        args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix(&format!("{long}="))
                .map(String::from)
                .or_else(|| (*a == long).then(|| args.get(i + 1).map(|s| s.to_string()))?)
        })
    };
    let duration = |name: &str| {
        flag(name)
            .and_then(|v| sim_duration(&v))
            .unwrap_or(Duration::ZERO)
    };
    // `--lora-modules '{"name":…}' '{"name":…}'`: the values up to the next flag.
    let lora_modules = args
        .iter()
        .position(|a| *a == "--lora-modules")
        .map(|at| {
            args[at + 1..]
                .iter()
                .take_while(|a| !a.starts_with("--"))
                .filter_map(|v| serde_json::from_str::<Value>(v).ok())
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Some(SimConfig {
        lora_modules,
        model: flag("model").unwrap_or_else(|| "sim-model".into()),
        ttft: duration("time-to-first-token"),
        itl: duration("inter-token-latency"),
        max_num_seqs: flag("max-num-seqs")
            .and_then(|v| v.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_NUM_SEQS),
    })
}

/// Why a request cannot be forwarded: the status and message of the answer.
type Refusal = (StatusCode, String);

fn refuse(code: StatusCode, msg: &str) -> Refusal {
    (code, msg.to_string())
}

/// Where a backendRef sends a request: a pod (answered here, as that pod would), or an
/// address a selector-less Service's EndpointSlices name (`external.rs`).
enum Backend {
    Pod(Target),
    Address(std::net::SocketAddr),
}

/// The pod a request goes to, with its request counted in flight.
struct Target {
    pod: Value,
    sim: Option<SimConfig>,
    in_flight: InFlight,
}

impl Plane {
    fn target(&self, pod: Value) -> Target {
        let sim = sim_config(&pod);
        let mut loads = self.state.loads.lock().unwrap_or_else(|e| e.into_inner());
        let load = PlaneState::load_locked(&self.store, &mut loads, &pod, sim.as_ref());
        Target {
            pod,
            sim,
            in_flight: InFlight::new(&load),
        }
    }

    /// Round robin over a backend's ready pods.
    fn any(&self, key: &str, mut pods: Vec<Value>) -> Target {
        let i = self.state.next_rr(key) % pods.len();
        self.target(pods.swap_remove(i))
    }

    /// The emulator's endpoint picker: the pod with the fewest requests in flight (ties
    /// go round robin). The real one is the pool's EPP, an ext-proc gRPC service that
    /// scores pods by queue depth, KV-cache use and prefix cache hits.
    fn least_busy(&self, key: &str, pods: Vec<Value>) -> Target {
        let start = self.state.next_rr(key);
        let mut loads = self.state.loads.lock().unwrap_or_else(|e| e.into_inner());
        let mut best: Option<(usize, usize, Arc<PodLoad>, Option<SimConfig>)> = None;
        for k in 0..pods.len() {
            let i = (start + k) % pods.len();
            let sim = sim_config(&pods[i]);
            let load = PlaneState::load_locked(&self.store, &mut loads, &pods[i], sim.as_ref());
            let n = load.in_flight.load(Ordering::SeqCst);
            if best.as_ref().is_none_or(|(_, b, _, _)| n < *b) {
                best = Some((i, n, load, sim));
            }
        }
        let (i, _, load, sim) = best.expect("at least one pod");
        let in_flight = InFlight::new(&load);
        drop(loads);
        let mut pods = pods;
        Target {
            pod: pods.swap_remove(i),
            sim,
            in_flight,
        }
    }

    /// Resolves one backendRef of the matched rule to a pod or an address, or the error
    /// answer.
    fn resolve(&self, route_ns: &str, backend: &Value) -> Result<Backend, Refusal> {
        let group = backend.get("group").and_then(Value::as_str).unwrap_or("");
        let kind = backend
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("Service");
        let ns = backend
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(route_ns);
        let name = backend.get("name").and_then(Value::as_str).unwrap_or("");
        match (group, kind) {
            ("", "Service") => {
                let svc = self
                    .store
                    .kinds()
                    .by_resource("", "v1", "services")
                    .and_then(|k| self.store.get(k, ns, name));
                let Some(svc) = svc else {
                    return Err(refuse(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("backend Service {ns}/{name} not found"),
                    ));
                };
                let key = format!("Service/{ns}/{name}");
                if external::selectorless(&svc) {
                    let port = backend.get("port").and_then(Value::as_i64);
                    let addresses = external::slice_addresses(&self.store, &svc, port);
                    if addresses.is_empty() {
                        return Err(refuse(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "no healthy upstream",
                        ));
                    }
                    let i = self.state.next_rr(&key) % addresses.len();
                    return Ok(Backend::Address(addresses[i]));
                }
                let pods = ready_pods(&self.store, ns, name).unwrap_or_default();
                if pods.is_empty() {
                    return Err(refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no healthy upstream",
                    ));
                }
                Ok(Backend::Pod(self.any(&key, pods)))
            }
            (INFERENCE_GROUP, "InferencePool") => self.resolve_pool(ns, name).map(Backend::Pod),
            _ => Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unsupported backend kind {group}/{kind}"),
            )),
        }
    }

    fn resolve_pool(&self, ns: &str, name: &str) -> Result<Target, Refusal> {
        let pool = self
            .store
            .kinds()
            .by_resource(INFERENCE_GROUP, "v1", "inferencepools")
            .and_then(|k| self.store.get(k, ns, name));
        let Some(pool) = pool else {
            return Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("backend InferencePool {ns}/{name} not found"),
            ));
        };
        let pods = pool_pods(&self.store, &pool);
        let key = format!("InferencePool/{ns}/{name}");
        // The endpoint picker the pool names must be up; when it is not, its failureMode
        // decides (EndpointPickerRef.FailureMode in gateway-api-inference-extension
        // api/v1/inferencepool_types.go): FailClose (the default) drops the request,
        // FailOpen forwards it "to an endpoint of its picking".
        if let Some(epp) = pool.pointer("/spec/endpointPickerRef") {
            let group = epp.get("group").and_then(Value::as_str).unwrap_or("");
            let kind = epp.get("kind").and_then(Value::as_str).unwrap_or("Service");
            let epp_name = epp.get("name").and_then(Value::as_str).unwrap_or("");
            let problem = if !group.is_empty() || kind != "Service" {
                Some(format!(
                    "its endpointPickerRef kind {group}/{kind} is not supported"
                ))
            } else {
                match ready_pods(&self.store, ns, epp_name) {
                    None => Some(format!(
                        "its endpoint picker Service {ns}/{epp_name} does not exist"
                    )),
                    Some(p) if p.is_empty() => Some(format!(
                        "its endpoint picker Service {ns}/{epp_name} has no ready endpoints"
                    )),
                    Some(_) => None,
                }
            };
            if let Some(problem) = problem {
                if epp.get("failureMode").and_then(Value::as_str) != Some("FailOpen") {
                    return Err(refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &format!(
                            "InferencePool {ns}/{name}: {problem}; failureMode FailClose drops the request"
                        ),
                    ));
                }
                if pods.is_empty() {
                    return Err(refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "no healthy upstream",
                    ));
                }
                return Ok(self.any(&key, pods));
            }
        }
        if pods.is_empty() {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("InferencePool {ns}/{name} selects no ready pods"),
            ));
        }
        Ok(self.least_busy(&key, pods))
    }
}

async fn handle(State(plane): State<Plane>, req: Request) -> Response {
    let host = request_host(req.headers(), req.uri());
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query_string = req.uri().query().map(str::to_string);
    let query = parse_query(query_string.as_deref().unwrap_or(""));
    let mut headers = req.headers().clone();
    let body = match axum::body::to_bytes(req.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
    };
    let r = Req {
        host: &host,
        method: &method,
        path: &path,
        headers: &headers,
        query,
    };
    let Some(m) = route(&plane.store, &r) else {
        return text(StatusCode::NOT_FOUND, "no HTTPRoute matches this request");
    };
    // The rule's ExternalAuth filter decides before any backend is picked.
    if let Some(filter) = &m.external_auth {
        let address = filter
            .get("backendRef")
            .and_then(|b| match plane.resolve(&m.namespace, b) {
                Ok(Backend::Address(address)) => Some(address),
                _ => None,
            });
        let path_and_query = match &query_string {
            Some(q) => format!("{path}?{q}"),
            None => path.clone(),
        };
        // The client's Host as sent (port included), as Envoy passes its :authority on.
        let authority = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or(&host)
            .to_owned();
        let asked = external_auth::Asked {
            method: &method,
            path_and_query: &path_and_query,
            host: &authority,
            headers: &headers,
            body: &body,
        };
        match external_auth::check(external::client(), address, filter, asked).await {
            Ok(allowed) => allowed.apply(&mut headers),
            Err(denied) => return denied,
        }
    }
    // The Gateway API's BackendRef.Weight (apis/v1/shared_types.go): each backendRef
    // gets weight/(sum of the weights) of the requests, weight 0 none, and the weight
    // defaults to 1. A rule whose backendRefs are all invalid answers 500 (HTTPRouteRule
    // .BackendRefs in apis/v1/httproute_types.go), as do the requests that would have
    // gone to an invalid backendRef; a Service without ready endpoints answers 503.
    let weights: Vec<i64> = m
        .backends
        .iter()
        .map(|b| b.get("weight").and_then(Value::as_i64).unwrap_or(1).max(0))
        .collect();
    let Some(i) = plane.state.pick_weighted(&m.rule_key, &weights) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the matched HTTPRoute rule has no usable backendRefs",
        );
    };
    match plane.resolve(&m.namespace, &m.backends[i]) {
        Ok(Backend::Pod(target)) => answer(target, &method, &m.path, &body).await,
        Ok(Backend::Address(address)) => {
            let path = match query_string {
                Some(q) => format!("{}?{q}", m.path),
                None => m.path.clone(),
            };
            external::forward(address, &method, &path, &headers, body).await
        }
        Err((code, msg)) => text(code, &msg),
    }
}

fn words(s: &str) -> usize {
    s.split_whitespace().count().max(1)
}

fn openai_error(code: StatusCode, ty: &str, msg: &str) -> Response {
    json_resp(
        code,
        &json!({"error": {"message": msg, "type": ty, "param": null, "code": code.as_u16()}}),
    )
}

// A sim pod's serving figures, as vLLM's PrometheusStatLogger (vllm/v1/metrics/loggers.py
// in github.com/vllm-project/vllm) and llm-d-inference-sim, the simulator the emulator
// imitates (pkg/llm-d-inference-sim/metrics.go, docs/metrics.md), export them, measured
// from the requests the pod really answered. The histograms' bucket boundaries are
// vLLM's (loggers.py; vllm/v1/metrics/buckets.py in later releases), which the simulator
// copies in pkg/common/utils.go (TTFTBucketsBoundaries, TPOTBucketsBoundaries,
// RequestLatencyBucketsBoundaries).

/// `vllm:time_to_first_token_seconds`.
const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// `vllm:inter_token_latency_seconds` and `vllm:time_per_output_token_seconds`.
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// `vllm:e2e_request_latency_seconds`.
const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Why a request finished: vLLM's FinishReason (vllm/v1/engine/__init__.py), the value of
/// the `finished_reason` label of `vllm:request_success_total` (later vLLM releases add
/// `error` and `repetition`, which the simulator never gives).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Finish {
    /// The answer ended on its own.
    Stop,
    /// The answer was cut at max_tokens.
    Length,
    /// The client went away before the end.
    Abort,
}

impl Finish {
    const ALL: [Finish; 3] = [Finish::Stop, Finish::Length, Finish::Abort];

    fn label(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Abort => "abort",
        }
    }
}

/// A Prometheus histogram: observations per bucket (not cumulative; the exposition
/// accumulates them), their sum and count.
struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then the `+Inf` bucket.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, d: Duration) {
        let v = d.as_secs_f64();
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// What one run of a sim pod's process (one `incarnation` of its container) has served.
struct Served {
    /// The container's restartCount when these figures began.
    incarnation: i64,
    prompt_tokens: u64,
    generation_tokens: u64,
    /// Finished requests, by `Finish` (in `Finish::ALL` order).
    finished: [u64; 3],
    ttft: Histogram,
    itl: Histogram,
    e2e: Histogram,
}

impl Served {
    fn new(incarnation: i64) -> Served {
        Served {
            incarnation,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished: [0; 3],
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            e2e: Histogram::new(REQUEST_LATENCY_BUCKETS),
        }
    }
}

/// One completion request's course through a sim pod, recorded into its figures as it
/// goes, as vLLM's frontend records them (docs/design/metrics.md, "Interval
/// Calculations" and "Frontend Stats Collection"): the time to first token from the
/// request's arrival (so the wait for a slot counts), an inter-token latency between
/// successive tokens, the prompt tokens once prefill is done (the first token) and each
/// generated token when it is produced, and at the end the finish reason and the
/// end-to-end latency from arrival to the final token. Dropped before it finished (the
/// client went away: axum drops the handler, or hyper the streamed body), it finishes
/// as `abort`.
struct Course {
    load: Arc<PodLoad>,
    incarnation: i64,
    arrival: Instant,
    prompt_tokens: u64,
    generated: u64,
    last_token: Option<Instant>,
    done: bool,
}

impl Course {
    fn new(load: Arc<PodLoad>, incarnation: i64, arrival: Instant, prompt_tokens: usize) -> Course {
        Course {
            load,
            incarnation,
            arrival,
            prompt_tokens: prompt_tokens as u64,
            generated: 0,
            last_token: None,
            done: false,
        }
    }

    /// A token is produced now; returns when.
    fn token(&mut self) -> Instant {
        let now = Instant::now();
        let (arrival, prompt, last) = (self.arrival, self.prompt_tokens, self.last_token);
        self.load.record(self.incarnation, |s| {
            match last {
                None => {
                    s.ttft.observe(now - arrival);
                    s.prompt_tokens += prompt;
                }
                Some(last) => s.itl.observe(now - last),
            }
            s.generation_tokens += 1;
        });
        self.generated += 1;
        self.last_token = Some(now);
        now
    }

    fn finish(&mut self, why: Finish) {
        if self.done {
            return;
        }
        self.done = true;
        let now = Instant::now();
        // An answer of no tokens still had its prompt processed (unless it was aborted
        // before that).
        let prompt = if self.last_token.is_none() && why != Finish::Abort {
            self.prompt_tokens
        } else {
            0
        };
        let e2e = now - self.arrival;
        self.load.record(self.incarnation, |s| {
            s.prompt_tokens += prompt;
            s.finished[why as usize] += 1;
            s.e2e.observe(e2e);
        });
    }
}

impl Drop for Course {
    fn drop(&mut self) {
        self.finish(Finish::Abort);
    }
}

/// Sleeps until `t` (not at all when it has passed).
async fn until(t: Instant) {
    if t > Instant::now() {
        tokio::time::sleep_until(t).await;
    }
}

/// A label value in the text exposition format: backslash, double quote and line feed
/// escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The `# HELP` and `# TYPE` lines of a metric family (once per family).
fn family(out: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
}

/// A histogram's `_bucket` series (cumulative, ending with `le="+Inf"`), `_sum` and
/// `_count`.
fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    family(out, name, "histogram", help);
    let mut cumulative = 0;
    for (i, n) in h.counts.iter().enumerate() {
        cumulative += n;
        let le = h.bounds.get(i).map_or("+Inf".to_string(), f64::to_string);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// A sim pod's `/metrics`, in the Prometheus text exposition format 0.0.4, every series
/// labelled `model_name`:
///
/// - vLLM's gauges of running and waiting requests and KV-cache use (names and help as
///   llm-d-inference-sim exports them; the older `vllm:gpu_cache_usage_perc` name too).
///   The emulator models the KV cache as filled in proportion to the running requests:
///   running / max-num-seqs.
/// - the counters `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` and
///   `vllm:request_success_total` by `finished_reason`, whose `stop`, `length` and
///   `abort` series are there from zero (vLLM creates a child per FinishReason when it
///   starts). The label is vLLM's `finished_reason`; llm-d-inference-sim names it
///   `finish_reason` (PromLabelFinishReason in pkg/api/vllm-models.go), which a
///   collector written for vLLM would not find. Aborted requests are counted as
///   `abort`, as the label means; vLLM releases up to at least 0.13 leave that series
///   at 0 because their abort path skips the finished-request stats
///   (vllm-project/vllm#31503), while counting the tokens an aborted request had
///   processed (vllm-project/vllm#55634), as here.
/// - the histograms `vllm:time_to_first_token_seconds`,
///   `vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, and
///   `vllm:time_per_output_token_seconds`, the name vLLM 0.11 deprecated for the
///   inter-token latency (hidden since 0.12) and which llm-d-inference-sim still
///   exports with the same observations (its `tpotUpdater` observes both).
///
/// The prompt tokens are the words the sim counts for `usage.prompt_tokens`, the
/// generation tokens the completion tokens it produced. The figures belong to the
/// process: a restarted container (or a new pod) starts them from zero.
fn metrics(model: &str, load: &PodLoad) -> Response {
    let running = load.running.load(Ordering::SeqCst);
    let waiting = load.waiting.load(Ordering::SeqCst);
    let usage = (running as f64 / load.max_num_seqs as f64).min(1.0);
    let labels = format!("model_name=\"{}\"", label_value(model));
    let mut out = String::new();
    for (name, help, value) in [
        (
            "vllm:num_requests_running",
            "Number of requests currently running on GPU.",
            running as f64,
        ),
        (
            "vllm:num_requests_waiting",
            "Prometheus metric for the number of queued requests.",
            waiting as f64,
        ),
        (
            "vllm:kv_cache_usage_perc",
            "Prometheus metric for the fraction of KV-cache blocks currently in use (from 0 to 1).",
            usage,
        ),
        (
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            usage,
        ),
    ] {
        family(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
    let served = load.served();
    for (name, help, value) in [
        (
            "vllm:prompt_tokens_total",
            "Total number of prompt tokens processed.",
            served.prompt_tokens,
        ),
        (
            "vllm:generation_tokens_total",
            "Total number of generated tokens.",
            served.generation_tokens,
        ),
    ] {
        family(&mut out, name, "counter", help);
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
    let name = "vllm:request_success_total";
    family(
        &mut out,
        name,
        "counter",
        "Count of successfully processed requests.",
    );
    for why in Finish::ALL {
        let _ = writeln!(
            out,
            "{name}{{{labels},finished_reason=\"{}\"}} {}",
            why.label(),
            served.finished[why as usize]
        );
    }
    for (name, help, h) in [
        (
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &served.ttft,
        ),
        (
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &served.itl,
        ),
        (
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            &served.itl,
        ),
        (
            "vllm:e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            &served.e2e,
        ),
    ] {
        histogram(&mut out, name, help, &labels, h);
    }
    drop(served);
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        out,
    )
        .into_response()
}

/// The OpenAI-compatible simulator (as llm-d-inference-sim in echo mode: the answer
/// repeats the last user message, cut to max_tokens words). A completion waits for one
/// of the pod's `--max-num-seqs` slots, then `--time-to-first-token` before its first
/// token and `--inter-token-latency` after each token before the next (as the
/// simulator's `simulateTTFT` and `simulateInterTokenLatency` sleep, in
/// pkg/llm-d-inference-sim/context.go); streamed answers send each token when it is
/// produced. Each completion's course is recorded for `/metrics` (`Course`); `incarnation`
/// is the restart count of the pod's container the request reached.
async fn openai(
    sim: &SimConfig,
    in_flight: InFlight,
    incarnation: i64,
    method: &Method,
    path: &str,
    body: &Bytes,
) -> Response {
    // The request's arrival at the pod, from which vLLM measures the time to first
    // token and the end-to-end latency.
    let arrival = Instant::now();
    let model = sim.model.as_str();
    let created = chrono::Utc::now().timestamp();
    match (method.as_str(), path) {
        ("GET", "/health" | "/ready") => text(StatusCode::OK, "OK"),
        ("GET", "/metrics") => metrics(model, &in_flight.0),
        // The base model, then each adapter with the model as its parent and itself as
        // its root (`createModelsResponse` in llm-d-inference-sim).
        ("GET", "/v1/models") => {
            let mut data = vec![
                json!({"id": model, "object": "model", "created": created, "owned_by": "modelplane-emulator", "root": model, "parent": null}),
            ];
            data.extend(in_flight.0.loras().names.iter().map(|lora| {
                json!({"id": lora, "object": "model", "created": created, "owned_by": "modelplane-emulator", "root": lora, "parent": model})
            }));
            json_resp(StatusCode::OK, &json!({"object": "list", "data": data}))
        }
        // llm-d-inference-sim's `loadLoraAdaptor`/`unloadLoraAdaptor`: a body that does not
        // parse is a 400 in plain text; otherwise 200 with an empty body, whether or not
        // the adapter was there (the path is not read).
        ("POST", "/v1/load_lora_adapter" | "/v1/unload_lora_adapter") => {
            let load = path == "/v1/load_lora_adapter";
            let what = if load { "load" } else { "unload" };
            let name = serde_json::from_slice::<Value>(body)
                .map_err(|e| e.to_string())
                .and_then(|v| match v.get("lora_name") {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(name)) => Ok(name.clone()),
                    Some(_) => Err("lora_name is not a string".to_owned()),
                });
            match name {
                Err(err) => text(
                    StatusCode::BAD_REQUEST,
                    &format!("failed to read and parse {what} lora request body, {err}"),
                ),
                Ok(name) => {
                    let mut loras = in_flight.0.loras();
                    if load {
                        loras.names.insert(name);
                    } else {
                        loras.names.remove(&name);
                    }
                    (StatusCode::OK, "").into_response()
                }
            }
        }
        ("POST", "/v1/chat/completions" | "/v1/completions") => {
            let chat = path == "/v1/chat/completions";
            let Ok(req) = serde_json::from_slice::<Value>(body) else {
                return openai_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequestError",
                    "the request body is not valid JSON",
                );
            };
            let asked = req.get("model").and_then(Value::as_str).unwrap_or("");
            if asked != model && !in_flight.0.loras().names.contains(asked) {
                return openai_error(
                    StatusCode::NOT_FOUND,
                    "NotFoundError",
                    &format!("The model `{asked}` does not exist."),
                );
            }
            // The answer names the model asked for: the base model or an adapter.
            let model = asked.to_owned();
            let (prompt_text, last) = if chat {
                let msgs = req
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let content = |m: &Value| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                let all: Vec<String> = msgs.iter().map(content).collect();
                let last = msgs
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(content)
                    .unwrap_or_default();
                (all.join(" "), last)
            } else {
                let p = match req.get("prompt") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                (p.clone(), p)
            };
            let max = req
                .get("max_completion_tokens")
                .or_else(|| req.get("max_tokens"))
                .and_then(Value::as_u64)
                .map(|m| m as usize);
            let mut tokens: Vec<&str> = last.split_whitespace().collect();
            if tokens.is_empty() {
                tokens.push("Hello!");
            }
            let finish = match max {
                Some(m) if m < tokens.len() => {
                    tokens.truncate(m);
                    "length"
                }
                _ => "stop",
            };
            let answer = tokens.join(" ");
            let prompt_tokens = words(&prompt_text);
            let completion_tokens = tokens.len();
            let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
            let finish_reason = if finish == "length" {
                Finish::Length
            } else {
                Finish::Stop
            };
            // From here the request is the engine's: one that goes away, even while it
            // waits for a slot, is aborted.
            let mut course = Course::new(in_flight.0.clone(), incarnation, arrival, prompt_tokens);
            let Some(running) = in_flight.0.admit().await else {
                return openai_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "ServiceUnavailable",
                    "the simulator is shutting down",
                );
            };
            let id = format!(
                "{}-{}",
                if chat { "chatcmpl" } else { "cmpl" },
                uuid::Uuid::new_v4().simple()
            );
            let object = if chat {
                "chat.completion"
            } else {
                "text_completion"
            };
            if req.get("stream").and_then(Value::as_bool) != Some(true) {
                let choice = if chat {
                    json!({"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish, "logprobs": null})
                } else {
                    json!({"index": 0, "text": answer, "finish_reason": finish, "logprobs": null})
                };
                let mut due = Instant::now() + sim.ttft;
                for _ in 0..completion_tokens {
                    until(due).await;
                    due = course.token() + sim.itl;
                }
                if completion_tokens == 0 {
                    until(due).await;
                }
                course.finish(finish_reason);
                drop(running);
                return json_resp(
                    StatusCode::OK,
                    &json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice], "usage": usage}),
                );
            }
            // Server-sent events: a role chunk (chat), one chunk per token, the finish
            // chunk, optional usage, then [DONE].
            let object = if chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let chunk = |choice: Value| json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            let mut events: Vec<Value> = Vec::new();
            if chat {
                events.push(chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})));
            }
            for (i, t) in tokens.iter().enumerate() {
                let piece = if i == 0 {
                    t.to_string()
                } else {
                    format!(" {t}")
                };
                events.push(chunk(if chat {
                    json!({"index": 0, "delta": {"content": piece}, "finish_reason": null})
                } else {
                    json!({"index": 0, "text": piece, "finish_reason": null, "logprobs": null})
                }));
            }
            events.push(chunk(if chat {
                json!({"index": 0, "delta": {}, "finish_reason": finish})
            } else {
                json!({"index": 0, "text": "", "finish_reason": finish, "logprobs": null})
            }));
            if req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true)
            {
                events.push(json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage}));
            }
            // Each token's chunk is sent when it is produced; the finish chunk follows the
            // last token. The request stays running (and in flight) until the stream ends
            // or the client goes away.
            let first = usize::from(chat);
            let mut frames: Vec<(Bytes, Beat)> = events
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let beat = match i {
                        i if i >= first && i < first + completion_tokens => Beat::Token,
                        i if i == first + completion_tokens => Beat::Finish,
                        _ => Beat::Frame,
                    };
                    (Bytes::from(format!("data: {e}\n\n")), beat)
                })
                .collect();
            frames.push((Bytes::from_static(b"data: [DONE]\n\n"), Beat::Frame));
            let streamed = Streamed {
                frames: frames.into_iter(),
                due: Instant::now() + sim.ttft,
                itl: sim.itl,
                course,
                finish: finish_reason,
                _running: running,
                _in_flight: in_flight,
            };
            let stream = futures::stream::unfold(streamed, |mut a| async move {
                let (frame, beat) = a.frames.next()?;
                match beat {
                    Beat::Token => {
                        until(a.due).await;
                        a.due = a.course.token() + a.itl;
                    }
                    Beat::Finish => {
                        if a.course.generated == 0 {
                            until(a.due).await;
                        }
                        a.course.finish(a.finish);
                    }
                    Beat::Frame => {}
                }
                Some((Ok::<_, Infallible>(frame), a))
            });
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(Body::from_stream(stream))
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"))
        }
        _ => openai_error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!("{method} {path} is not served by the simulator"),
        ),
    }
}

/// What a frame of a streamed answer is.
enum Beat {
    /// A token's chunk, sent when the token is produced.
    Token,
    /// The finish chunk, after the last token: the request is done.
    Finish,
    /// Anything else (the role chunk, usage, `[DONE]`), sent at once.
    Frame,
}

/// A streamed answer's state: its frames, when the next token is due, and what it holds
/// (fields drop in order: the course records an abort before the slot is freed).
struct Streamed {
    frames: std::vec::IntoIter<(Bytes, Beat)>,
    due: Instant,
    itl: Duration,
    course: Course,
    finish: Finish,
    _running: Running,
    _in_flight: InFlight,
}

// The API server's service and pod proxies (`service_proxy.rs`, `pod_proxy.rs`) share the
// data plane's state: service proxy requests go to a Service's pods round robin, as a
// Service backendRef's do, pod proxy requests to the one pod, and both count in the pods'
// in-flight load (and a sim pod's running/waiting requests) the same way.
impl Plane {
    /// The data plane's state for a store, created once and shared by the Gateway
    /// listener and the API server.
    pub(crate) fn new(store: Store) -> Plane {
        Plane {
            store,
            state: Default::default(),
        }
    }

    /// Sends a request to one of `pods` (ready endpoints of Service `ns/name`), picked
    /// and counted in flight as for the Gateway, and answers as that pod does.
    pub(crate) async fn answer_for_service(
        &self,
        ns: &str,
        name: &str,
        pods: Vec<Value>,
        method: &Method,
        path: &str,
        body: &Bytes,
    ) -> Response {
        let target = self.any(&format!("Service/{ns}/{name}"), pods);
        answer(target, method, path, body).await
    }

    /// Sends a request to `pod` itself (the API server's pod proxy, `pod_proxy.rs`),
    /// counted in flight as for the Gateway, and answers as that pod does.
    pub(crate) async fn answer_for_pod(
        &self,
        pod: Value,
        method: &Method,
        path: &str,
        body: &Bytes,
    ) -> Response {
        answer(self.target(pod), method, path, body).await
    }
}

/// A pod's answer, as `handle` gives it: a `sim` pod's simulator, any other pod 503
/// (no real model server runs in the emulator); with the pod's headers.
async fn answer(target: Target, method: &Method, path: &str, body: &Bytes) -> Response {
    let ns = meta_str(&target.pod, "namespace").unwrap_or("").to_string();
    let pod_name = meta_str(&target.pod, "name").unwrap_or("").to_string();
    let mut resp = match &target.sim {
        Some(sim) => {
            let incarnation = incarnation(&target.pod);
            openai(sim, target.in_flight, incarnation, method, path, body).await
        }
        None => {
            let image = target
                .pod
                .pointer("/spec/containers/0/image")
                .and_then(Value::as_str)
                .unwrap_or("");
            let msg = format!(
                "no real model server runs in the Kubernetes emulator: pod {ns}/{pod_name} runs {image}; only pods of the sim engine answer"
            );
            json_resp(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"error": {"message": msg, "type": "ServiceUnavailable", "code": 503}}),
            )
        }
    };
    for (h, v) in [(POD_HEADER, &pod_name), (NAMESPACE_HEADER, &ns)] {
        if let Ok(v) = HeaderValue::from_str(v) {
            resp.headers_mut().insert(h, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_rewrite_replaces_the_prefix() {
        let f = json!({"urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}});
        assert_eq!(
            rewrite(&f, Some("/team-a/qwen"), "/team-a/qwen/v1/models"),
            "/v1/models"
        );
        assert_eq!(rewrite(&f, Some("/team-a/qwen"), "/team-a/qwen"), "/");
        let g = json!({"urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/api"}}});
        assert_eq!(rewrite(&g, Some("/x/"), "/x/v1"), "/api/v1");
        assert!(prefix_matches("/team-a/qwen", "/team-a/qwen/v1"));
        assert!(!prefix_matches("/team-a/qwen", "/team-a/qwen2"));
    }

    #[test]
    fn sim_pods_are_recognised_with_their_model() {
        let pod = json!({"metadata": {"labels": {"modelplane.io/engine": "sim"}},
                         "spec": {"containers": [{"image": "x", "args": ["--model", "qwen-small", "--port", "8000"]}]}});
        let cfg = sim_config(&pod).unwrap();
        assert_eq!(cfg.model, "qwen-small");
        assert_eq!(
            (cfg.ttft, cfg.itl, cfg.max_num_seqs),
            (Duration::ZERO, Duration::ZERO, 5)
        );
        let other = json!({"spec": {"containers": [{"image": "vllm/vllm-openai:v0.9", "args": ["--model", "m"]}]}});
        assert!(sim_config(&other).is_none());
        let slow = json!({"spec": {"containers": [{"image": "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1",
            "args": ["--model=m", "--time-to-first-token", "250", "--inter-token-latency=1.5s", "--max-num-seqs", "2"]}]}});
        let cfg = sim_config(&slow).unwrap();
        assert_eq!(cfg.model, "m");
        assert_eq!(cfg.ttft, Duration::from_millis(250));
        assert_eq!(cfg.itl, Duration::from_millis(1500));
        assert_eq!(cfg.max_num_seqs, 2);
    }

    #[test]
    fn sim_durations_are_go_durations_or_milliseconds() {
        assert_eq!(sim_duration("100"), Some(Duration::from_millis(100)));
        assert_eq!(sim_duration("100ms"), Some(Duration::from_millis(100)));
        assert_eq!(sim_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(sim_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(sim_duration("250us"), Some(Duration::from_micros(250)));
        assert_eq!(sim_duration("2x"), None);
        assert_eq!(sim_duration(""), None);
    }

    #[test]
    fn smooth_weighted_round_robin_gives_the_exact_proportions() {
        let st = PlaneState::default();
        let mut counts = [0; 3];
        for _ in 0..1000 {
            counts[st.pick_weighted("r", &[80, 20, 0]).unwrap()] += 1;
        }
        assert_eq!(counts, [800, 200, 0]);
        assert_eq!(st.pick_weighted("z", &[0, 0]), None);
    }

    #[test]
    fn query_strings_are_decoded() {
        assert_eq!(
            parse_query("a=1&b=x%20y+z&c&a=2"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y z".into()),
                ("c".into(), "".into()),
                ("a".into(), "2".into())
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
    }

    /// A sim pod `p` (uid `uid`) whose container has restarted `restarts` times.
    fn sim_pod(uid: &str, restarts: i64) -> Value {
        json!({"metadata": {"name": "p", "namespace": "default", "uid": uid,
                            "labels": {"modelplane.io/engine": "sim"}},
               "spec": {"containers": [{"name": "server", "image": "x",
                                        "args": ["--model", "m", "--time-to-first-token", "50ms"]}]},
               "status": {"containerStatuses": [{"name": "server", "restartCount": restarts}]}})
    }

    async fn body_text(r: Response) -> String {
        let b = axum::body::to_bytes(r.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// The value of the series written exactly `series` (name and labels).
    fn sample(text: &str, series: &str) -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .parse()
            .unwrap()
    }

    async fn scrape(plane: &Plane, pod: &Value) -> String {
        body_text(
            plane
                .answer_for_pod(pod.clone(), &Method::GET, "/metrics", &Bytes::new())
                .await,
        )
        .await
    }

    async fn complete(plane: &Plane, pod: &Value, path: &str, body: Value) -> Response {
        let body = Bytes::from(body.to_string());
        plane
            .answer_for_pod(pod.clone(), &Method::POST, path, &body)
            .await
    }

    const M: &str = "{model_name=\"m\"}";

    async fn get(plane: &Plane, pod: &Value, path: &str) -> Value {
        let r = plane
            .answer_for_pod(pod.clone(), &Method::GET, path, &Bytes::new())
            .await;
        serde_json::from_str(&body_text(r).await).unwrap()
    }

    fn ids(models: &Value) -> Vec<(String, Value)> {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["id"].as_str().unwrap().to_owned(), m["parent"].clone()))
            .collect()
    }

    // llm-d-inference-sim pkg/llm-d-inference-sim/lora.go and simulator.go: load and
    // unload answer 200 with an empty body (unload of an unknown adapter too), a body that
    // does not parse 400 in plain text; `/v1/models` lists the base model, then each adapter
    // with the first served name as parent; `--lora-modules` are there from the start and
    // again after a restart, loaded ones are gone with the process.
    #[tokio::test]
    async fn sim_pods_load_and_unload_lora_adapters_at_run_time() {
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let mut pod = sim_pod("u-lora", 0);
        pod["spec"]["containers"][0]["args"] = json!([
            "--model",
            "m",
            "--lora-modules",
            r#"{"name":"boot","path":"/l/boot","base_model_name":"m"}"#,
            "--port",
            "8000"
        ]);
        assert_eq!(
            ids(&get(&plane, &pod, "/v1/models").await),
            vec![
                ("m".to_owned(), Value::Null),
                ("boot".to_owned(), json!("m"))
            ]
        );
        let r = complete(
            &plane,
            &pod,
            "/v1/load_lora_adapter",
            json!({"lora_name": "sql", "lora_path": "acme/sql"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(body_text(r).await, "");
        let answer = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "sql", "prompt": "a b", "max_tokens": 1}),
        )
        .await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(
            serde_json::from_str::<Value>(&body_text(answer).await).unwrap()["model"],
            "sql"
        );
        let r = complete(
            &plane,
            &pod,
            "/v1/unload_lora_adapter",
            json!({"lora_name": "sql"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let r = complete(
            &plane,
            &pod,
            "/v1/unload_lora_adapter",
            json!({"lora_name": "never"}),
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
        let gone = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "sql", "prompt": "a", "max_tokens": 1}),
        )
        .await;
        assert_eq!(gone.status(), StatusCode::NOT_FOUND);
        let body: Value = serde_json::from_str(&body_text(gone).await).unwrap();
        assert_eq!(body["error"]["message"], "The model `sql` does not exist.");
        let bad = plane
            .answer_for_pod(
                pod.clone(),
                &Method::POST,
                "/v1/load_lora_adapter",
                &Bytes::from_static(b"{"),
            )
            .await;
        assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
        assert!(
            body_text(bad)
                .await
                .starts_with("failed to read and parse load lora request body, ")
        );
        // Loaded again, then the container restarts: only `--lora-modules` remain.
        complete(
            &plane,
            &pod,
            "/v1/load_lora_adapter",
            json!({"lora_name": "sql", "lora_path": "acme/sql"}),
        )
        .await;
        pod["status"]["containerStatuses"][0]["restartCount"] = json!(1);
        assert_eq!(
            ids(&get(&plane, &pod, "/v1/models").await),
            vec![
                ("m".to_owned(), Value::Null),
                ("boot".to_owned(), json!("m"))
            ]
        );
    }

    // vLLM's counters belong to the process: "generally reset to zero when the vLLM
    // instance restarts" (docs/design/metrics.md, Metrics Publishing - Prometheus). A
    // container restart is seen as a higher restartCount of the pod's sim container.
    #[tokio::test]
    async fn a_restarted_sim_container_starts_its_figures_from_zero() {
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let before = sim_pod("u1", 0);
        let r = complete(
            &plane,
            &before,
            "/v1/completions",
            json!({"model": "m", "prompt": "one two three", "max_tokens": 2}),
        )
        .await;
        let usage = serde_json::from_str::<Value>(&body_text(r).await).unwrap()["usage"].clone();
        assert_eq!(
            usage,
            json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
        );
        let r = complete(
            &plane,
            &before,
            "/v1/chat/completions",
            json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "a b"}]}),
        )
        .await;
        assert!(body_text(r).await.ends_with("data: [DONE]\n\n"));
        let m = scrape(&plane, &before).await;
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 5.0);
        assert_eq!(sample(&m, &format!("vllm:generation_tokens_total{M}")), 4.0);
        let success = |m: &str, why: &str| {
            sample(
                m,
                &format!(
                    "vllm:request_success_total{{model_name=\"m\",finished_reason=\"{why}\"}}"
                ),
            )
        };
        assert_eq!(
            (
                success(&m, "stop"),
                success(&m, "length"),
                success(&m, "abort")
            ),
            (1.0, 1.0, 0.0)
        );
        assert_eq!(
            sample(&m, &format!("vllm:time_to_first_token_seconds_count{M}")),
            2.0
        );
        assert!(sample(&m, &format!("vllm:time_to_first_token_seconds_sum{M}")) >= 0.1);
        assert_eq!(
            sample(&m, &format!("vllm:inter_token_latency_seconds_count{M}")),
            2.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:e2e_request_latency_seconds_count{M}")),
            2.0
        );

        // A request the old process took is still waiting for its first token when the
        // container restarts: the new process's figures start from zero and never see it.
        let old = complete(
            &plane,
            &before,
            "/v1/completions",
            json!({"model": "m", "prompt": "x y"}),
        );
        tokio::pin!(old);
        assert!(futures::poll!(&mut old).is_pending());
        let after = sim_pod("u1", 1);
        let zero = |m: &str| {
            assert_eq!(
                sample(m, &format!("vllm:prompt_tokens_total{M}")),
                0.0,
                "{m}"
            );
            assert_eq!(
                sample(m, &format!("vllm:generation_tokens_total{M}")),
                0.0,
                "{m}"
            );
            for why in ["stop", "length", "abort"] {
                assert_eq!(success(m, why), 0.0, "{m}");
            }
            for h in [
                "time_to_first_token_seconds",
                "inter_token_latency_seconds",
                "time_per_output_token_seconds",
                "e2e_request_latency_seconds",
            ] {
                assert_eq!(sample(m, &format!("vllm:{h}_count{M}")), 0.0, "{m}");
                assert_eq!(sample(m, &format!("vllm:{h}_sum{M}")), 0.0, "{m}");
            }
        };
        zero(&scrape(&plane, &after).await);
        assert_eq!(old.await.status(), StatusCode::OK);
        zero(&scrape(&plane, &after).await);
        // An older view of the pod does not bring the old figures back.
        zero(&scrape(&plane, &before).await);

        // The new process counts its own requests.
        complete(
            &plane,
            &after,
            "/v1/completions",
            json!({"model": "m", "prompt": "x y"}),
        )
        .await;
        let m = scrape(&plane, &after).await;
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 2.0);
        assert_eq!(success(&m, "stop"), 1.0);
    }

    // A client that goes away mid-stream (hyper drops the body) aborts the request: it
    // counts as finished_reason="abort" with the tokens produced so far, and its slot
    // is free again.
    #[tokio::test]
    async fn a_dropped_stream_is_an_aborted_request() {
        use futures::StreamExt;
        let plane = Plane::new(Store::new(crate::resources::Kinds::new(true, true), 64));
        let pod = sim_pod("u1", 0);
        let r = complete(
            &plane,
            &pod,
            "/v1/completions",
            json!({"model": "m", "stream": true, "prompt": "a b c d e f"}),
        )
        .await;
        let mut frames = r.into_body().into_data_stream();
        let first = frames.next().await.unwrap().unwrap();
        assert!(String::from_utf8_lossy(&first).contains("\"text\":\"a\""));
        let m = scrape(&plane, &pod).await;
        assert_eq!(sample(&m, &format!("vllm:num_requests_running{M}")), 1.0);
        drop(frames);
        let m = scrape(&plane, &pod).await;
        assert_eq!(sample(&m, &format!("vllm:num_requests_running{M}")), 0.0);
        assert_eq!(
            sample(
                &m,
                "vllm:request_success_total{model_name=\"m\",finished_reason=\"abort\"}"
            ),
            1.0
        );
        assert_eq!(sample(&m, &format!("vllm:prompt_tokens_total{M}")), 6.0);
        assert_eq!(sample(&m, &format!("vllm:generation_tokens_total{M}")), 1.0);
        assert_eq!(
            sample(&m, &format!("vllm:time_to_first_token_seconds_count{M}")),
            1.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:inter_token_latency_seconds_count{M}")),
            0.0
        );
        assert_eq!(
            sample(&m, &format!("vllm:e2e_request_latency_seconds_count{M}")),
            1.0
        );
    }

    // The text exposition format 0.0.4: label values escape backslash, double quote and
    // line feed; a histogram's buckets are cumulative and end with le="+Inf" = _count.
    #[test]
    fn histograms_and_labels_follow_the_text_format() {
        assert_eq!(label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut h = Histogram::new(ITL_BUCKETS);
        for ms in [5, 10, 30, 30, 100_000] {
            h.observe(Duration::from_millis(ms));
        }
        let mut out = String::new();
        histogram(&mut out, "x", "Help.", "model_name=\"m\"", &h);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "# HELP x Help.");
        assert_eq!(lines[1], "# TYPE x histogram");
        assert_eq!(lines[2], "x_bucket{model_name=\"m\",le=\"0.01\"} 2");
        assert_eq!(lines[3], "x_bucket{model_name=\"m\",le=\"0.025\"} 2");
        assert_eq!(lines[4], "x_bucket{model_name=\"m\",le=\"0.05\"} 4");
        assert_eq!(lines[20], "x_bucket{model_name=\"m\",le=\"80\"} 4");
        assert_eq!(lines[21], "x_bucket{model_name=\"m\",le=\"+Inf\"} 5");
        let sum: f64 = 0.005 + 0.01 + 0.03 + 0.03 + 100.0;
        assert_eq!(lines[22], format!("x_sum{{model_name=\"m\"}} {sum}"));
        assert_eq!(lines[23], "x_count{model_name=\"m\"} 5");
    }
}

/// Hostname precedence across HTTPRoutes. The rules are quoted from the doc comment of
/// `HTTPRouteSpec.Hostnames` in gateway-api apis/v1/httproute_types.go (commit 4564255a,
/// whose CRDs the emulator serves); the listener cases follow the conformance tests
/// HTTPRouteListenerHostnameMatching and HTTPRouteHostnameIntersection.
#[cfg(test)]
mod hostname_tests {
    use super::*;
    use crate::ops;
    use crate::resources::{Kinds, ResourceKind};

    const GW_NS: &str = "gateway-system";
    const GW: &str = "public";

    /// A store with one Gateway (`gateway-system/public`) and the routes added to it,
    /// whose status says what the emulator's Gateway controller would (`attach`).
    struct Cluster {
        store: Store,
    }

    impl Cluster {
        /// One HTTP listener `http`, with this hostname.
        fn new(listener_hostname: Option<&str>) -> Cluster {
            let mut l = json!({"name": "http", "protocol": "HTTP", "port": 80,
                               "allowedRoutes": {"namespaces": {"from": "All"}}});
            if let Some(h) = listener_hostname {
                l["hostname"] = json!(h);
            }
            Cluster::with_listeners(json!([l]))
        }

        fn with_listeners(listeners: Value) -> Cluster {
            let store = Store::new(Kinds::new(true, true), 64);
            let c = Cluster { store };
            let namespaces = c.store.kinds().by_resource("", "v1", "namespaces").unwrap();
            for ns in [GW_NS, "default", "team-a", "team-b"] {
                let body = json!({"metadata": {"name": ns}});
                ops::create(&c.store, namespaces, "", body, &c.opts()).unwrap();
            }
            let gw = json!({"metadata": {"name": GW, "namespace": GW_NS},
                            "spec": {"gatewayClassName": super::super::GATEWAY_CLASS, "listeners": listeners}});
            ops::create(&c.store, c.kind("gateways"), GW_NS, gw, &c.opts()).unwrap();
            c
        }

        fn kind(&self, plural: &str) -> &'static ResourceKind {
            self.store
                .kinds()
                .by_resource("gateway.networking.k8s.io", "v1", plural)
                .unwrap()
        }

        fn opts(&self) -> ops::WriteOptions {
            super::super::manager("test")
        }

        /// A route `ns/name` with these hostnames and one rule (`path` as `Exact:/x` or a
        /// PathPrefix) sending to Service `backend`, attached to `sections` of the
        /// Gateway (all listeners when empty). Create the route a test expects to lose
        /// first and give it the alphabetically first name: then the oldest-route and
        /// name tie-breaks would pick it, were hostnames not ranked first.
        fn route(&self, ns: &str, name: &str, hostnames: &[&str], path: &str, sections: &[&str]) {
            let m = match path.strip_prefix("Exact:") {
                Some(p) => json!({"path": {"type": "Exact", "value": p}}),
                None => json!({"path": {"type": "PathPrefix", "value": path}}),
            };
            let parents: Vec<Value> = if sections.is_empty() {
                vec![json!({"namespace": GW_NS, "name": GW})]
            } else {
                sections
                    .iter()
                    .map(|s| json!({"namespace": GW_NS, "name": GW, "sectionName": s}))
                    .collect()
            };
            let mut spec = json!({"parentRefs": parents, "rules": [{"matches": [m],
                "backendRefs": [{"name": format!("{name}-svc"), "port": 8000}]}]});
            if !hostnames.is_empty() {
                spec["hostnames"] = json!(hostnames);
            }
            let kind = self.kind("httproutes");
            let body = json!({"metadata": {"name": name, "namespace": ns}, "spec": spec});
            let created = ops::create(&self.store, kind, ns, body, &self.opts())
                .unwrap()
                .object;
            let gw = self.store.get(self.kind("gateways"), GW_NS, GW).unwrap();
            let parents: Vec<Value> = created["spec"]["parentRefs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let ok = super::super::networking::attach(&self.store, &created, p, &gw)
                        .accepted
                        .0;
                    json!({"parentRef": p, "controllerName": GATEWAY_CONTROLLER,
                           "conditions": [{"type": "Accepted", "status": if ok { "True" } else { "False" },
                                           "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
                })
                .collect();
            assert!(super::super::write_status(
                &self.store,
                kind,
                &created,
                json!({"parents": parents}),
                GATEWAY_CONTROLLER
            ));
        }

        /// `namespace/backend` of the rule a GET with this Host header and path goes to.
        fn pick(&self, host_header: &str, path: &str) -> Option<String> {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host_header).unwrap());
            let uri: axum::http::Uri = path.parse().unwrap();
            let host = request_host(&headers, &uri);
            let req = Req {
                host: &host,
                method: &Method::GET,
                path,
                headers: &headers,
                query: Vec::new(),
            };
            route(&self.store, &req).map(|m| {
                let svc = m.backends[0]["name"].as_str().unwrap().to_string();
                format!("{}/{}", m.namespace, svc.trim_end_matches("-svc"))
            })
        }
    }

    // "precedence must be given to rules from the HTTPRoute with the largest number of:
    // * Characters in a matching non-wildcard hostname." An exact hostname has them, a
    // wildcard has none, so the exact route wins before paths are compared.
    #[test]
    fn an_exact_hostname_beats_a_wildcard_even_with_a_shorter_path() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-wildcard",
            &["*.example.com"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/b-exact")
        );
        // Other hosts under the wildcard still reach the wildcard route.
        assert_eq!(
            c.pick("other.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/a-wildcard")
        );
    }

    // "* Characters in a matching hostname." A route without hostnames matches any host
    // with no characters of a matching hostname, so a wildcard that matches beats it,
    // even against an Exact path ("If ties exist across multiple Routes, the matching
    // precedence rules for HTTPRouteMatches takes over": there is no tie here).
    #[test]
    fn a_wildcard_hostname_beats_no_hostnames_even_against_an_exact_path() {
        let c = Cluster::new(None);
        c.route("default", "a-any", &[], "Exact:/team-a/demo/v1/models", &[]);
        c.route("default", "b-wildcard", &["*.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/b-wildcard")
        );
        // A host the wildcard does not cover goes to the route for any host.
        assert_eq!(
            c.pick("127.0.0.1:8080", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/a-any")
        );
    }

    // "* Characters in a matching hostname.": between two wildcards that match, the
    // longer one. "`*.example.com` would match both `test.example.com`, and
    // `foo.test.example.com`, but not `example.com`."
    #[test]
    fn a_longer_wildcard_beats_a_shorter_one() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-short",
            &["*.example.com"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-long", &["*.b.example.com"], "/", &[]);
        assert_eq!(
            c.pick("x.b.example.com", "/team-a/demo").as_deref(),
            Some("default/b-long")
        );
        assert_eq!(
            c.pick("y.x.b.example.com", "/team-a/demo").as_deref(),
            Some("default/b-long")
        );
        // `*.b.example.com` does not match `b.example.com`; `*.example.com` does.
        assert_eq!(
            c.pick("b.example.com", "/team-a/demo").as_deref(),
            Some("default/a-short")
        );
        assert_eq!(
            c.pick("x.c.example.com", "/team-a/demo").as_deref(),
            Some("default/a-short")
        );
    }

    // "If ties exist across multiple Routes, the matching precedence rules for
    // HTTPRouteMatches takes over": the same hostname on both routes, so the longest
    // PathPrefix ("Prefix" path match with largest number of characters) wins.
    #[test]
    fn hostname_ties_fall_back_to_path_precedence() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-short-path",
            &["demo.example.com"],
            "/team-a",
            &[],
        );
        c.route(
            "default",
            "b-long-path",
            &["demo.example.com"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1").as_deref(),
            Some("default/b-long-path")
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/other").as_deref(),
            Some("default/a-short-path")
        );
        // Two routes without hostnames tie too.
        let c = Cluster::new(None);
        c.route("default", "a-short-path", &[], "/team-a", &[]);
        c.route("default", "b-long-path", &[], "/team-a/demo", &[]);
        assert_eq!(
            c.pick("anything.example.com", "/team-a/demo/v1").as_deref(),
            Some("default/b-long-path")
        );
    }

    // "Hostnames defines a set of hostnames that should match against the HTTP Host
    // header": a route listing several is ranked by the best one that matches ("the
    // largest number of: * Characters in a matching non-wildcard hostname"), so it ties
    // with a route naming only that hostname and paths decide.
    #[test]
    fn a_route_ranks_by_its_best_matching_hostname() {
        let c = Cluster::new(None);
        c.route("default", "a-single", &["demo.example.com"], "/team-a", &[]);
        c.route(
            "default",
            "b-several",
            &["*.example.com", "demo.example.com", "demo.example.net"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-several")
        );
        // For another host only its wildcard matches, and the other route not at all.
        assert_eq!(
            c.pick("x.example.com", "/team-a/demo").as_deref(),
            Some("default/b-several")
        );
        // Hostnames that do not match the host count for nothing: here only the
        // wildcard does, so the exact route wins despite its shorter path.
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-wildcard-too",
            &["*.example.com", "x.example.net"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-exact")
        );
    }

    // "Implementations MUST ignore any port value specified in the HTTP Host header
    // while performing a match"; hosts are case-insensitive (RFC 3986 3.2.2: "The host
    // subcomponent is case-insensitive"), while Gateway API hostnames are lower case
    // (the Hostname pattern in apis/v1/shared_types.go).
    #[test]
    fn hostnames_match_case_insensitively_and_without_the_port() {
        let c = Cluster::new(None);
        c.route("default", "a-any", &[], "/team-a/demo/v1", &[]);
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        c.route("default", "c-wildcard", &["*.b.example.com"], "/", &[]);
        for host in [
            "demo.example.com",
            "Demo.EXAMPLE.com",
            "demo.example.com:8080",
            "DEMO.example.COM:443",
        ] {
            assert_eq!(
                c.pick(host, "/team-a/demo/v1").as_deref(),
                Some("default/b-exact"),
                "{host}"
            );
        }
        for host in ["x.b.example.com", "X.B.Example.Com:80"] {
            assert_eq!(
                c.pick(host, "/team-a/demo/v1").as_deref(),
                Some("default/c-wildcard"),
                "{host}"
            );
        }
        let uri: axum::http::Uri = "/".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("[::1]:8080"));
        assert_eq!(request_host(&h, &uri), "::1");
        let absolute: axum::http::Uri = "http://Demo.Example.com:8080/x".parse().unwrap();
        assert_eq!(
            request_host(&HeaderMap::new(), &absolute),
            "demo.example.com"
        );
    }

    // "Hostnames defines a set of hostnames that should match against the HTTP Host
    // header to select a HTTPRoute": a route none of whose hostnames match is never
    // chosen, however specific its path; without another route the answer is a 404
    // ("When no rules matching a request have been successfully attached to the parent a
    // request is coming from, a HTTP 404 status code MUST be returned").
    #[test]
    fn a_route_whose_hostnames_do_not_match_is_never_chosen() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-other",
            &["other.example.com", "*.example.net"],
            "Exact:/team-a/demo",
            &[],
        );
        assert_eq!(c.pick("demo.example.com", "/team-a/demo"), None);
        // `*.example.net` does not match `example.net` itself.
        assert_eq!(c.pick("example.net", "/team-a/demo"), None);
        c.route("default", "b-any", &[], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-any")
        );
        assert_eq!(
            c.pick("other.example.com", "/team-a/demo").as_deref(),
            Some("default/a-other")
        );
    }

    // The multi-tenant case: project A's route has no hostnames and the path
    // `/team-a/demo`; project B's names its own hostname with the same path. "precedence
    // must be given to rules from the HTTPRoute with the largest number of:
    // * Characters in a matching non-wildcard hostname": B's hostname, none for A. A
    // request to B's hostname goes to B although A's route is older and first by
    // "{namespace}/{name}"; any other host goes to A.
    #[test]
    fn a_projects_hostname_route_beats_another_projects_hostless_route_on_the_same_path() {
        let c = Cluster::new(None);
        c.route("team-a", "demo", &[], "/team-a/demo", &[]);
        c.route(
            "team-b",
            "demo",
            &["demo.b.example.com"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.b.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("team-b/demo")
        );
        assert_eq!(
            c.pick("127.0.0.1:8080", "/team-a/demo/v1/models")
                .as_deref(),
            Some("team-a/demo")
        );
    }

    // Listener hostnames: "A Listener with `test.example.com` as the hostname matches
    // HTTPRoutes that have either not specified any hostnames, or have specified at least
    // one of `test.example.com` or `*.example.com`", and the route then serves the
    // listener's hosts only. As in the conformance test HTTPRouteListenerHostnameMatching,
    // routes without hostnames behind listeners `bar.com`, `foo.bar.com`, `*.bar.com` and
    // `*.foo.com` take the hosts of the most specific listener that matches.
    #[test]
    fn listener_hostnames_narrow_and_rank_the_routes_behind_them() {
        let l = |name: &str, host: &str| {
            json!({"name": name, "protocol": "HTTP", "port": 80, "hostname": host,
                   "allowedRoutes": {"namespaces": {"from": "All"}}})
        };
        let c = Cluster::with_listeners(json!([
            l("listener-1", "bar.com"),
            l("listener-2", "foo.bar.com"),
            l("listener-3", "*.bar.com"),
            l("listener-4", "*.foo.com"),
        ]));
        // "three" sorts before "two": the name tie-break alone would pick it.
        c.route("default", "three", &[], "/", &["listener-3", "listener-4"]);
        c.route("default", "one", &[], "/", &["listener-1"]);
        c.route("default", "two", &[], "/", &["listener-2"]);
        for (host, want) in [
            ("bar.com", Some("default/one")),
            ("foo.bar.com", Some("default/two")),
            ("baz.bar.com", Some("default/three")),
            ("multiple.prefixes.bar.com", Some("default/three")),
            ("multiple.prefixes.foo.com", Some("default/three")),
            ("foo.com", None),
            ("no.matching.host", None),
        ] {
            assert_eq!(c.pick(host, "/").as_deref(), want, "{host}");
        }
    }

    // "If both the Listener and HTTPRoute have specified hostnames, any HTTPRoute
    // hostnames that do not match the Listener hostname MUST be ignored. For example, if
    // a Listener specified `*.example.com`, and the HTTPRoute specified
    // `test.example.com` and `test.example.net`, `test.example.net` must not be
    // considered for a match."
    #[test]
    fn route_hostnames_outside_the_listener_hostname_are_ignored() {
        let c = Cluster::new(Some("*.example.com"));
        c.route(
            "default",
            "r",
            &["test.example.com", "test.example.net"],
            "/",
            &[],
        );
        assert_eq!(
            c.pick("test.example.com", "/").as_deref(),
            Some("default/r")
        );
        assert_eq!(c.pick("test.example.net", "/"), None);
        // A route without hostnames behind the listener takes its hosts only.
        c.route("default", "s", &[], "/", &[]);
        assert_eq!(
            c.pick("other.example.com", "/").as_deref(),
            Some("default/s")
        );
        assert_eq!(c.pick("example.com", "/"), None);
    }

    // Routes whose intersections with the listener's hostname are the same: the newer
    // text of HTTPRouteSpec.Hostnames (GatewayRouteHostnameIntersectionPrecedence, as in
    // the conformance test GRPCRouteMultipleRoutesAttachmentSameHostnameIntersection):
    // "implementations SHOULD evaluate precedence using the original hostnames
    // configured on the Route, not the calculated Listener/Route hostname intersection."
    #[test]
    fn equal_intersections_are_ranked_by_the_routes_own_hostnames() {
        let c = Cluster::new(Some("abc.example.com"));
        c.route("default", "a-wildcard-older", &["*.example.com"], "/", &[]);
        c.route("default", "b-exact-newer", &["abc.example.com"], "/", &[]);
        assert_eq!(
            c.pick("abc.example.com", "/").as_deref(),
            Some("default/b-exact-newer")
        );
        let c = Cluster::new(Some("*.example.com"));
        c.route("default", "a-any-older", &[], "/", &[]);
        c.route("default", "b-com", &["*.com"], "/", &[]);
        c.route("default", "c-example-newer", &["*.example.com"], "/", &[]);
        assert_eq!(
            c.pick("abc.example.com", "/").as_deref(),
            Some("default/c-example-newer")
        );
    }
}
