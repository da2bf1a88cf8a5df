//! The Gateway data plane: a real local port that routes HTTP requests by the HTTPRoutes
//! the emulator's Gateway controller accepted (hostname, path/method/header/query
//! matches with the Gateway API's precedence and URL rewrite: `routes.rs`; weighted
//! backendRefs; the ExternalAuth filter: `external_auth.rs`) to ready
//! backend pods: behind a Service, or selected by an InferencePool, where a simulated
//! endpoint picker chooses the pod with the fewest requests in flight. Pods of
//! modelplane's `sim` engine answer with a built-in OpenAI-compatible simulator
//! (`sim.rs`, with llm-d-inference-sim's latency flags and vLLM-style `/metrics`); any
//! other backend answers 503, since no real model server runs in the emulator. Every
//! answer a pod gives carries `x-emulator-pod` and `x-emulator-namespace`. A pool whose
//! picker runs llm-d's prefill/decode profiles, and a decode pod's routing sidecar, are
//! simulated in `disagg.rs`.

mod disagg;
pub(crate) mod multinode;
mod routes;
mod sim;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use self::routes::{Req, parse_query, request_host, route};
pub(crate) use self::sim::sim_config;
use self::sim::{DEFAULT_MAX_NUM_SEQS, Loras, Served, SimConfig, openai};
use super::{external, external_auth, is_true};
use crate::resources::meta_str;
use crate::selectors::LabelSelector;
use crate::store::Store;

/// The response header naming the pod that answered (and its namespace).
pub const POD_HEADER: &str = "x-emulator-pod";
pub const NAMESPACE_HEADER: &str = "x-emulator-namespace";
/// On the answers of a multi-node sim leader: its joined workers' pod names, sorted.
pub const GROUP_HEADER: &str = "x-emulator-group";

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
    /// The prefill pod (`ip:port`) a P/D picker named for it, in place of any the caller
    /// sent; `None`: no P/D picker chose this pod (the caller's header goes on as sent).
    prefiller: Option<Option<String>>,
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
            prefiller: None,
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
            prefiller: None,
        }
    }

    /// Resolves one backendRef of the matched rule to a pod or an address, or the error
    /// answer.
    fn resolve(&self, route_ns: &str, backend: &Value, body: &[u8]) -> Result<Backend, Refusal> {
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
            (INFERENCE_GROUP, "InferencePool") => {
                self.resolve_pool(ns, name, body).map(Backend::Pod)
            }
            _ => Err(refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("unsupported backend kind {group}/{kind}"),
            )),
        }
    }

    fn resolve_pool(&self, ns: &str, name: &str, body: &[u8]) -> Result<Target, Refusal> {
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
        let mut picker_pods = Vec::new();
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
                    Some(p) => {
                        picker_pods = p;
                        None
                    }
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
        let Some(pd) = disagg::pd_picker(&self.store, ns, &picker_pods) else {
            return Ok(self.least_busy(&key, pods));
        };
        // The decode profile picks the pod the request goes to; the prefill profile, when
        // the decider runs it, the pod its sidecar has compute the prompt.
        let decode = disagg::decode_pods(&pods);
        if decode.is_empty() {
            return Err(refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("InferencePool {ns}/{name}: no ready pod passes the decode filter"),
            ));
        }
        let prefill = disagg::prefill_pods(&pods);
        let port = pool
            .pointer("/spec/targetPorts/0/number")
            .and_then(Value::as_i64)
            .unwrap_or(8000);
        let prefiller = if !prefill.is_empty() && pd.disaggregates(body) {
            let chosen = self.least_busy(&format!("{key}/prefill"), prefill);
            chosen
                .pod
                .pointer("/status/podIP")
                .and_then(Value::as_str)
                .map(|ip| format!("{ip}:{port}"))
        } else {
            None
        };
        let mut target = self.least_busy(&format!("{key}/decode"), decode);
        target.prefiller = Some(prefiller);
        Ok(target)
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
        let address =
            filter
                .get("backendRef")
                .and_then(|b| match plane.resolve(&m.namespace, b, &[]) {
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
    match plane.resolve(&m.namespace, &m.backends[i], &body) {
        Ok(Backend::Pod(target)) => {
            plane
                .answer(target, &method, &m.path, &headers, &body)
                .await
        }
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
        self.answer(target, method, path, &HeaderMap::new(), body)
            .await
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
        self.answer(self.target(pod), method, path, &HeaderMap::new(), body)
            .await
    }
}

impl Plane {
    /// A pod's answer, as `handle` gives it: a `sim` pod's simulator, any other pod 503
    /// (no real model server runs in the emulator); with the pod's headers. A pod whose
    /// routing sidecar is named a prefill pod (`disagg.rs`) has that pod compute the
    /// prompt first.
    async fn answer(
        &self,
        target: Target,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: &Bytes,
    ) -> Response {
        let ns = meta_str(&target.pod, "namespace").unwrap_or("").to_string();
        let pod_name = meta_str(&target.pod, "name").unwrap_or("").to_string();
        let mut prefilled_by = None;
        if let Some(sidecar) = disagg::sidecar(&target.pod) {
            let named = match &target.prefiller {
                Some(picked) => picked.clone(),
                None => headers
                    .get(disagg::PREFILLER_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.split(',').next())
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty()),
            };
            if let Some(host_port) = named {
                if !sidecar.allows(&self.store, &host_port) {
                    return text(
                        StatusCode::FORBIDDEN,
                        "Forbidden: prefill target not allowed by SSRF protection",
                    );
                }
                let ip = host_port
                    .rsplit_once(':')
                    .map_or(host_port.as_str(), |(ip, _)| ip);
                let Some(pod) = disagg::pod_at(&self.store, &ns, ip) else {
                    return text(
                        StatusCode::BAD_GATEWAY,
                        &format!("the prefill pod at {host_port} does not answer"),
                    );
                };
                let name = meta_str(&pod, "name").unwrap_or("").to_string();
                let prefill = Box::pin(self.answer(
                    self.target(pod),
                    method,
                    path,
                    &HeaderMap::new(),
                    &disagg::prefill_request(body),
                ))
                .await;
                if !prefill.status().is_success() {
                    return prefill;
                }
                prefilled_by = Some(name);
            }
        }
        // A leader's joined workers; `Some` only for the head of a multi-node engine.
        let group = target
            .sim
            .as_ref()
            .filter(|sim| sim.multinode.leads_group())
            .map(|sim| multinode::joined_workers(&self.store, &target.pod, &sim.multinode));
        let group_incomplete = target
            .sim
            .as_ref()
            .zip(group.as_ref())
            .is_some_and(|(sim, joined)| (joined.len() as u32) + 1 < sim.multinode.nnodes);
        let mut resp = match &target.sim {
            // A headless engine (`--headless`, vLLM's `vllm serve` without an API server)
            // listens on no HTTP port, and a head whose workers have not all joined has
            // not started its API server yet: the connection is refused, which the data
            // plane answers 503 as for any pod with no model server behind it.
            Some(sim) if sim.multinode.headless || group_incomplete => {
                let msg = if sim.multinode.headless {
                    format!(
                        "pod {ns}/{pod_name} runs a headless engine (--headless): it serves no HTTP, only its group's leader does"
                    )
                } else {
                    format!(
                        "pod {ns}/{pod_name} leads a {}-node engine whose workers have not all joined: its API server is not up",
                        sim.multinode.nnodes
                    )
                };
                json_resp(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({"error": {"message": msg, "type": "ServiceUnavailable", "code": 503}}),
                )
            }
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
        let prefill = prefilled_by.unwrap_or_default();
        for (h, v) in [
            (POD_HEADER, &pod_name),
            (NAMESPACE_HEADER, &ns),
            (disagg::PREFILL_POD_HEADER, &prefill),
        ] {
            if !v.is_empty()
                && let Ok(v) = HeaderValue::from_str(v)
            {
                resp.headers_mut().insert(h, v);
            }
        }
        // The workers that serve with a group's leader (`multinode.rs`), so that a client
        // sees its request was computed by the whole group.
        if let Some(mut joined) = group
            && !group_incomplete
            && let Ok(v) = HeaderValue::from_str(&{
                joined.sort();
                joined.join(",")
            })
        {
            resp.headers_mut().insert(GROUP_HEADER, v);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
