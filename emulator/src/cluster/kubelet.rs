//! Kubelets for the simulated nodes: bound pods go ContainerCreating → Running → Ready
//! after the start delay (plus the probes' initial delays); images matching the failing
//! patterns go ErrImagePull → ImagePullBackOff; images matching the crashing patterns
//! run for the start delay, exit 1 and back off (CrashLoopBackOff, doubling); a missing
//! Secret/ConfigMap in env gives CreateContainerConfigError, in a volume FailedMount;
//! terminating pods are removed. Each step also records the kubelet's Events.
//!
//! Init containers are pulled first: a failing one holds the pod `Pending` with
//! `Initialized` False (`ContainersNotInitialized`) and its containers `PodInitializing`;
//! once the pod runs, regular init containers have completed (exit 0) and sidecars
//! (`restartPolicy: Always`, KEP-753) run, started and ready beside the containers.
//!
//! One file (about 840 lines before its tests) because every step writes the one pod
//! status the kubelet's status manager would: splitting it would split that status.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{ClusterConfig, Sim, deleting, glob, go_duration, since, uid, write_status};
use crate::ops::{self, DeleteOptions};
use crate::resources::meta_str;

const KUBELET: &str = "kubelet";

/// What the kubelet remembers about one pod.
pub(crate) struct PodRuntime {
    bound: Instant,
    ip: String,
    start_time: String,
    /// When the current container instance started (wall clock string and instant).
    running: Option<(Instant, String)>,
    ready_at: Option<String>,
    restarts: i64,
    last_terminated: Option<Value>,
    /// End of the current crash-loop back-off.
    backoff_until: Option<Instant>,
    backoff: Duration,
    /// Events already sent (so each is sent once per occurrence).
    sent: HashSet<String>,
}

fn hex(n: usize) -> String {
    let mut s = String::new();
    while s.len() < n {
        s.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    s.truncate(n);
    s
}

/// A missing reference in env/envFrom (CreateContainerConfigError), with the kubelet's message.
fn config_error(sim: &Sim, pod: &Value, ns: &str) -> Option<String> {
    let secret = |name: &str| sim.store.get(sim.k.secret, ns, name);
    let configmap = |name: &str| sim.store.get(sim.k.configmap, ns, name);
    let optional = |r: &Value| r.get("optional").and_then(Value::as_bool) == Some(true);
    for c in pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
            for (field, what) in [("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")] {
                let Some(r) = e.pointer(&format!("/valueFrom/{field}")) else {
                    continue;
                };
                if optional(r) {
                    continue;
                }
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                let key = r.get("key").and_then(Value::as_str).unwrap_or("");
                let obj = if what == "Secret" {
                    secret(name)
                } else {
                    configmap(name)
                };
                match obj {
                    None => return Some(format!("{} \"{name}\" not found", what.to_lowercase())),
                    Some(o) => {
                        let has = ["data", "binaryData", "stringData"]
                            .iter()
                            .any(|d| o.get(*d).and_then(|m| m.get(key)).is_some());
                        if !has {
                            return Some(format!("couldn't find key {key} in {what} {ns}/{name}"));
                        }
                    }
                }
            }
        }
        for e in c
            .get("envFrom")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            for (field, what) in [("secretRef", "secret"), ("configMapRef", "configmap")] {
                let Some(r) = e.get(field) else { continue };
                let name = r.get("name").and_then(Value::as_str).unwrap_or("");
                let exists = if what == "secret" {
                    secret(name).is_some()
                } else {
                    configmap(name).is_some()
                };
                if !exists && !optional(r) {
                    return Some(format!("{what} \"{name}\" not found"));
                }
            }
        }
    }
    None
}

/// A missing Secret/ConfigMap volume source (the pod stays ContainerCreating).
fn mount_error(sim: &Sim, pod: &Value, ns: &str) -> Option<String> {
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let vol = v.get("name").and_then(Value::as_str).unwrap_or("");
        let checks = [
            (v.get("secret"), "secretName", "secret", sim.k.secret),
            (v.get("configMap"), "name", "configmap", sim.k.configmap),
        ];
        for (src, field, what, kind) in checks {
            let Some(src) = src else { continue };
            let name = src.get(field).and_then(Value::as_str).unwrap_or("");
            let optional = src.get("optional").and_then(Value::as_bool) == Some(true);
            if !optional && sim.store.get(kind, ns, name).is_none() {
                return Some(format!(
                    "MountVolume.SetUp failed for volume \"{vol}\" : {what} \"{name}\" not found"
                ));
            }
        }
    }
    None
}

/// The probes' initial delays before the container counts as started and ready.
fn probe_delay(pod: &Value) -> Duration {
    let delay = |c: &Value, p: &str| {
        c.pointer(&format!("/{p}/initialDelaySeconds"))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let secs = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        // Both probe workers start with the container; readiness is only probed once the
        // startup probe succeeded, and the (always healthy) server passes the first probe.
        .map(|c| delay(c, "startupProbe").max(delay(c, "readinessProbe")))
        .max()
        .unwrap_or(0);
    Duration::from_secs(secs)
}

pub(super) fn run(sim: &mut Sim) {
    let pods = if sim.resync {
        let pods = sim.list(sim.k.pod);
        let live: HashSet<String> = pods.iter().map(|p| uid(p).to_string()).collect();
        sim.pods.retain(|u, _| live.contains(u));
        sim.busy_pods.clear();
        pods
    } else {
        // The pods that changed and those with timers running.
        for u in std::mem::take(&mut sim.dirty.removed_pods) {
            sim.pods.remove(&u);
        }
        let mut keys = std::mem::take(&mut sim.busy_pods);
        keys.extend(sim.dirty.pods.iter().cloned());
        sim.candidates(sim.k.pod, &keys, false)
    };
    sim.pod_ips = sim.pods.values().map(|r| r.ip.clone()).collect();
    for pod in &pods {
        let node = pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(node_idx) = sim.node_index(node) else {
            continue;
        };
        let ns = meta_str(pod, "namespace").unwrap_or("").to_string();
        let name = meta_str(pod, "name").unwrap_or("").to_string();
        if deleting(pod) {
            // Containers stop at once; the kubelet then removes the pod object.
            let opts = DeleteOptions {
                grace_period_seconds: Some(0),
                ..Default::default()
            };
            let _ = ops::delete(&sim.store, sim.k.pod, &ns, &name, &opts);
            sim.pods.remove(uid(pod));
            continue;
        }
        if matches!(
            pod.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        ) {
            continue;
        }
        if !sim.pods.contains_key(uid(pod)) {
            let ip = (2..255)
                .map(|i| format!("10.244.{node_idx}.{i}"))
                .find(|ip| !sim.pod_ips.contains(ip))
                .unwrap_or_else(|| format!("10.244.{node_idx}.254"));
            sim.pod_ips.insert(ip.clone());
            sim.pods.insert(
                uid(pod).to_string(),
                PodRuntime {
                    bound: Instant::now(),
                    ip,
                    start_time: ops::now(),
                    running: None,
                    ready_at: None,
                    restarts: 0,
                    last_terminated: None,
                    backoff_until: None,
                    backoff: sim.config.restart_backoff,
                    sent: HashSet::new(),
                },
            );
        }
        step(sim, pod, node_idx, &ns, &name);
    }
}

/// A kubelet Event not yet sent: (type, reason, message, key); the key makes each
/// occurrence go out once.
type PendingEvent = (&'static str, &'static str, String, String);

/// A container's waiting reason and message; `None` once the containers run.
type Waiting = Option<(String, String)>;

fn container_creating() -> Waiting {
    Some(("ContainerCreating".into(), String::new()))
}

/// What the kubelet reads from a pod's spec (and the Secrets and ConfigMaps it refers
/// to) on every step.
struct PodSpecView {
    containers: Vec<Value>,
    images: Vec<String>,
    /// The init containers, run before the containers; those with `restartPolicy: Always`
    /// are sidecars that keep running beside them (KEP-753).
    init: Vec<Value>,
    /// The first image (of an init container, a container or an image volume) that fails
    /// to pull.
    failing: Option<String>,
    /// That image is an init container's: the containers wait for it (`PodInitializing`).
    failing_init: bool,
    crashing: bool,
    /// The terminated message of a crashing container.
    crash_message: String,
    /// A multi-node sim head whose workers have not all joined (`dataplane/multinode.rs`):
    /// its API server, and so its readiness, waits for them.
    awaiting_workers: bool,
    config_err: Option<String>,
    mount_err: Option<String>,
    probe: Duration,
    /// `name_namespace(uid)`, as the kubelet names pods in its messages.
    pod_ref: String,
}

impl PodSpecView {
    fn read(sim: &Sim, pod: &Value, ns: &str, name: &str) -> Self {
        let cfg = &sim.config;
        let containers: Vec<Value> = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let images: Vec<String> = containers
            .iter()
            .map(|c| c["image"].as_str().unwrap_or("").to_string())
            .collect();
        let init: Vec<Value> = pod
            .pointer("/spec/initContainers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let fails = |i: &str| cfg.fail_images.iter().any(|p| glob(p, i));
        // Init containers start (and so pull) first, in order.
        let failing_init_image = init
            .iter()
            .filter_map(|c| c["image"].as_str())
            .find(|i| fails(i))
            .map(String::from);
        // Image volumes (`volumes[].image.reference`) are pulled like container images.
        let volume_images: Vec<String> = pod
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.pointer("/image/reference").and_then(Value::as_str))
            .map(String::from)
            .collect();
        let failing_init = failing_init_image.is_some();
        let failing = failing_init_image.or_else(|| {
            images
                .iter()
                .chain(&volume_images)
                .find(|i| fails(i))
                .cloned()
        });
        let image_crash = images
            .iter()
            .any(|i| cfg.crash_images.iter().any(|p| glob(p, i)));
        // A sim whose multi-node flags vLLM refuses exits 1 at start, like vLLM's
        // ParallelConfig checks (`multinode.rs` `startup_error`), and crash-loops.
        let engine = super::dataplane::sim_config(pod);
        let sim_error = engine.as_ref().and_then(|s| s.multinode.startup_error());
        let crashing = image_crash || sim_error.is_some();
        let crash_message = match &sim_error {
            Some(e) if !image_crash => format!("simulated vLLM exit: {e}"),
            _ => "simulated crash: the image matches a crashing-image pattern of the emulator"
                .to_string(),
        };
        let awaiting_workers = sim_error.is_none()
            && engine.as_ref().is_some_and(|s| {
                s.multinode.leads_group()
                    && !super::dataplane::multinode::group_complete(&sim.store, pod, &s.multinode)
            });
        PodSpecView {
            crash_message,
            awaiting_workers,
            failing,
            failing_init,
            init,
            crashing,
            config_err: config_error(sim, pod, ns),
            mount_err: mount_error(sim, pod, ns),
            probe: probe_delay(pod),
            pod_ref: format!("{name}_{ns}({})", uid(pod)),
            containers,
            images,
        }
    }
}

/// Advances one pod and writes its status.
fn step(sim: &mut Sim, pod: &Value, node_idx: usize, ns: &str, name: &str) {
    let spec = PodSpecView::read(sim, pod, ns, name);
    let mut events: Vec<PendingEvent> = Vec::new();
    // Taken out of the map while it changes, so the config is borrowed, not cloned.
    let mut runtime = sim.pods.remove(uid(pod)).expect("inserted by run");
    let rt = &mut runtime;
    let cfg = &sim.config;
    let elapsed = since(rt.bound);

    // One waiting reason for every container, or running.
    let waiting = if let Some(m) = &spec.mount_err {
        events.push(("Warning", "FailedMount", m.clone(), format!("mount:{m}")));
        container_creating()
    } else if let Some(image) = &spec.failing {
        pull_failure(image, elapsed, cfg, &mut events)
    } else if let Some(m) = &spec.config_err {
        config_failure(m, elapsed, cfg, &mut events)
    } else if elapsed >= cfg.start_delay {
        run_containers(rt, &spec, cfg, &mut events)
    } else {
        container_creating()
    };
    let ready = waiting.is_none()
        && !spec.crashing
        && !spec.awaiting_workers
        && rt
            .running
            .as_ref()
            .is_some_and(|(t, _)| since(*t) >= spec.probe);
    if ready && rt.ready_at.is_none() {
        rt.ready_at = Some(ops::now());
    }
    if !ready {
        rt.ready_at = None;
    }
    let started = waiting.is_none()
        && rt
            .running
            .as_ref()
            .is_some_and(|(t, _)| since(*t) >= spec.probe);
    // Timers still to fire: the start delay, the probes, crash loops.
    let settled = ready
        || spec.mount_err.is_some()
        || (elapsed >= cfg.start_delay && (spec.failing.is_some() || spec.config_err.is_some()));
    // A head waiting for its workers looks again on every pass (they join as other pods
    // change, which does not mark it dirty).
    let busy = !settled || spec.crashing || spec.awaiting_workers;

    let status = pod_status(pod, rt, &spec, node_idx, &waiting, ready, started);
    let fresh: Vec<(&str, &str, String)> = events
        .into_iter()
        .filter(|(_, _, _, key)| rt.sent.insert(key.clone()))
        .map(|(t, r, m, _)| (t, r, m))
        .collect();
    sim.pods.insert(uid(pod).to_string(), runtime);
    sim.busy |= busy;
    if busy {
        sim.busy_pods.insert((ns.to_string(), name.to_string()));
    }
    write_status(&sim.store, sim.k.pod, pod, status, KUBELET);
    for (ty, reason, msg) in fresh {
        sim.event(pod, sim.k.pod, ty, reason, &msg, KUBELET);
    }
}

/// A failing image: ErrImagePull after half the start delay, ImagePullBackOff after it.
/// As the kubelet's image manager does since v1.32 (pkg/kubelet/images/image_manager.go
/// `pullImage`), the back-off's waiting message keeps the failed pull's error after the
/// `Back-off pulling image "x"` of the BackOff event: `prevPullErrMsg` stores
/// `"<err>: <msg>"` (`ErrImagePull: <the registry's error>`) and the back-off appends it.
fn pull_failure(
    image: &str,
    elapsed: Duration,
    cfg: &ClusterConfig,
    events: &mut Vec<PendingEvent>,
) -> Waiting {
    if elapsed < cfg.start_delay / 2 {
        return container_creating();
    }
    events.push((
        "Normal",
        "Pulling",
        format!("Pulling image \"{image}\""),
        "pulling".into(),
    ));
    let why = format!(
        "rpc error: code = NotFound desc = failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
    );
    events.push((
        "Warning",
        "Failed",
        format!("Failed to pull image \"{image}\": {why}"),
        "pullfail".into(),
    ));
    events.push((
        "Warning",
        "Failed",
        "Error: ErrImagePull".into(),
        "errimagepull".into(),
    ));
    if elapsed < cfg.start_delay {
        return Some(("ErrImagePull".into(), why));
    }
    let back_off = format!("Back-off pulling image \"{image}\"");
    events.push(("Normal", "BackOff", back_off.clone(), "pullbackoff".into()));
    events.push((
        "Warning",
        "Failed",
        "Error: ImagePullBackOff".into(),
        "imagepullbackoff".into(),
    ));
    Some((
        "ImagePullBackOff".into(),
        format!("{back_off}: ErrImagePull: {why}"),
    ))
}

/// A missing env reference: CreateContainerConfigError after half the start delay.
fn config_failure(
    m: &str,
    elapsed: Duration,
    cfg: &ClusterConfig,
    events: &mut Vec<PendingEvent>,
) -> Waiting {
    if elapsed < cfg.start_delay / 2 {
        return container_creating();
    }
    events.push((
        "Warning",
        "Failed",
        format!("Error: {m}"),
        format!("config:{m}"),
    ));
    Some(("CreateContainerConfigError".into(), m.to_string()))
}

/// After the start delay: containers run, and crashing ones exit and back off.
fn run_containers(
    rt: &mut PodRuntime,
    spec: &PodSpecView,
    cfg: &ClusterConfig,
    events: &mut Vec<PendingEvent>,
) -> Waiting {
    // Crash-looping containers exit after running for the start delay.
    if let Some((started, started_at)) = rt.running.clone()
        && spec.crashing
        && since(started) >= cfg.start_delay.max(Duration::from_millis(50))
    {
        rt.restarts += 1;
        rt.last_terminated = Some(json!({"terminated": {
            "exitCode": 1, "reason": "Error",
            "message": spec.crash_message,
            "startedAt": started_at, "finishedAt": ops::now(),
            "containerID": format!("containerd://{}", hex(64)),
        }}));
        rt.running = None;
        rt.ready_at = None;
        rt.backoff_until = Some(Instant::now() + rt.backoff);
    }
    let waiting = match rt.backoff_until {
        Some(until) if Instant::now() < until => {
            let msg = format!(
                "back-off {} restarting failed container={} pod={}",
                go_duration(rt.backoff),
                spec.containers
                    .first()
                    .and_then(|c| c["name"].as_str())
                    .unwrap_or(""),
                spec.pod_ref
            );
            for c in &spec.containers {
                let cname = c["name"].as_str().unwrap_or("");
                events.push((
                    "Warning",
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {cname} in pod {}",
                        spec.pod_ref
                    ),
                    format!("backoff:{}", rt.restarts),
                ));
            }
            Some(("CrashLoopBackOff".into(), msg))
        }
        Some(_) => {
            // Back-off over: restart, with a doubled back-off next time (capped at 30x).
            rt.backoff_until = None;
            rt.backoff = (rt.backoff * 2).min(cfg.restart_backoff * 30);
            rt.running = Some((Instant::now(), ops::now()));
            None
        }
        None => {
            if rt.running.is_none() {
                rt.running = Some((Instant::now(), ops::now()));
            }
            None
        }
    };
    if waiting.is_none() {
        start_events(rt.restarts, spec, events);
    }
    waiting
}

/// Pulled (first start only), Created and Started, once per container instance.
fn start_events(restarts: i64, spec: &PodSpecView, events: &mut Vec<PendingEvent>) {
    for (c, image) in spec.containers.iter().zip(&spec.images) {
        let cname = c["name"].as_str().unwrap_or("");
        let n = restarts;
        if n == 0 {
            events.push((
                "Normal",
                "Pulled",
                format!("Container image \"{image}\" already present on machine"),
                format!("pulled:{cname}"),
            ));
        }
        events.push((
            "Normal",
            "Created",
            format!("Created container: {cname}"),
            format!("created:{cname}:{n}"),
        ));
        events.push((
            "Normal",
            "Started",
            format!("Started container {cname}"),
            format!("started:{cname}:{n}"),
        ));
    }
}

/// Pod status, as the kubelet's status manager writes it.
fn pod_status(
    pod: &Value,
    rt: &PodRuntime,
    spec: &PodSpecView,
    node_idx: usize,
    waiting: &Waiting,
    ready: bool,
    started: bool,
) -> Value {
    let old = pod.get("status").cloned().unwrap_or(json!({}));
    let generation = pod
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let sandbox = spec.mount_err.is_none();
    let gates = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let initialized = !(spec.failing_init && waiting.is_some());
    let conditions = pod_conditions(
        &old,
        generation,
        &spec.containers,
        &gates,
        ready,
        sandbox,
        (!initialized).then_some(&spec.init),
    );
    let statuses = if initialized {
        container_statuses(pod, rt, spec, waiting, ready, started)
    } else {
        // The containers wait for the init containers (`PodInitializing`).
        let initializing = Some(("PodInitializing".to_owned(), String::new()));
        container_statuses(pod, rt, spec, &initializing, false, false)
    };
    let init_statuses = init_container_statuses(rt, spec, waiting, ready, started);
    let phase = if rt.running.is_some() || rt.restarts > 0 {
        "Running"
    } else {
        "Pending"
    };
    let node_ip = format!("172.18.0.{}", node_idx + 2);
    let mut status = json!({
        "observedGeneration": generation,
        "phase": phase,
        "conditions": conditions,
        "hostIP": node_ip, "hostIPs": [{"ip": node_ip}],
        "startTime": rt.start_time,
        "containerStatuses": statuses,
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    if sandbox {
        status["podIP"] = json!(rt.ip);
        status["podIPs"] = json!([{"ip": rt.ip}]);
    }
    if let Some(q) = old.get("qosClass") {
        status["qosClass"] = q.clone();
    }
    status
}

/// The condition types the kubelet owns (`PodConditionsByKubelet`, kubernetes
/// pkg/kubelet/types/pod_status.go). The status manager keeps every other type as it finds
/// it (`mergePodStatus`, pkg/kubelet/status/status_manager.go): a readiness gate's
/// condition is a controller's to set.
const KUBELET_CONDITIONS: [&str; 5] = [
    "PodScheduled",
    "Ready",
    "Initialized",
    "ContainersReady",
    "PodReadyToStartContainers",
];

/// Why the readiness gates hold the pod back, as `generatePodReadyCondition` says it
/// (kubernetes pkg/kubelet/status/generate.go): one message per gate whose condition is
/// missing or not True, joined by ", "; empty when every gate is open.
fn readiness_gates_unready(old: &Value, gates: &[Value]) -> Vec<String> {
    let conditions = old.get("conditions").and_then(Value::as_array);
    gates
        .iter()
        .filter_map(|g| g.get("conditionType").and_then(Value::as_str))
        .filter_map(|ty| {
            let found = conditions.and_then(|cs| cs.iter().find(|c| c["type"] == ty));
            match found.and_then(|c| c["status"].as_str()) {
                None => Some(format!(
                    "corresponding condition of pod readiness gate \"{ty}\" does not exist."
                )),
                Some("True") => None,
                Some(status) => Some(format!(
                    "the status of pod readiness gate \"{ty}\" is not \"True\", but {status}"
                )),
            }
        })
        .collect()
}

/// The pod conditions; transition times carry over while a condition keeps its status.
fn pod_conditions(
    old: &Value,
    generation: i64,
    containers: &[Value],
    gates: &[Value],
    ready: bool,
    sandbox: bool,
    // The init containers while they have not all started or completed.
    initializing: Option<&Vec<Value>>,
) -> Value {
    let now = ops::now();
    let keep_time = |ty: &str, status: &str| -> String {
        old.get("conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == ty && c["status"] == status))
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(String::from)
            .unwrap_or_else(|| now.clone())
    };
    let names: Vec<&str> = containers
        .iter()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect();
    let cond = |ty: &str, ok: bool, reason: Option<&str>, msg: Option<String>| {
        let s = if ok { "True" } else { "False" };
        // PodObservedGenerationTracking (on by default since 1.34): conditions and the
        // status say which pod generation they describe.
        let mut c = json!({"type": ty, "status": s, "lastProbeTime": null, "lastTransitionTime": keep_time(ty, s),
                           "observedGeneration": generation});
        if !ok && let Some(r) = reason {
            c["reason"] = json!(r);
            c["message"] = json!(msg.unwrap_or_default());
        }
        c
    };
    let unready = format!("containers with unready status: [{}]", names.join(" "));
    let scheduled = old
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "PodScheduled").cloned())
        .unwrap_or_else(|| cond("PodScheduled", true, None, None));
    let gated = if ready {
        readiness_gates_unready(old, gates)
    } else {
        vec![]
    };
    let pod_ready = if gated.is_empty() {
        cond(
            "Ready",
            ready,
            Some("ContainersNotReady"),
            Some(unready.clone()),
        )
    } else {
        cond(
            "Ready",
            false,
            Some("ReadinessGatesNotReady"),
            Some(gated.join(", ")),
        )
    };
    let mut all = vec![
        cond("PodReadyToStartContainers", sandbox, None, None),
        match initializing {
            // pkg/kubelet/status/generate.go `GeneratePodInitializedCondition`.
            Some(init) => cond(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: [{}]",
                    init.iter()
                        .map(|c| c["name"].as_str().unwrap_or(""))
                        .collect::<Vec<_>>()
                        .join(" ")
                )),
            ),
            None => cond("Initialized", true, None, None),
        },
        pod_ready,
        cond(
            "ContainersReady",
            ready,
            Some("ContainersNotReady"),
            Some(unready),
        ),
        scheduled,
    ];
    all.extend(
        old.get("conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|c| {
                c["type"]
                    .as_str()
                    .is_some_and(|ty| !KUBELET_CONDITIONS.contains(&ty))
            })
            .cloned(),
    );
    Value::Array(all)
}

fn container_statuses(
    pod: &Value,
    rt: &PodRuntime,
    spec: &PodSpecView,
    waiting: &Waiting,
    ready: bool,
    started: bool,
) -> Vec<Value> {
    spec.containers
        .iter()
        .zip(&spec.images)
        .map(|(c, image)| {
            let mut s = json!({
                "name": c["name"], "image": image, "imageID": "", "ready": ready,
                "restartCount": rt.restarts, "started": started,
                "lastState": rt.last_terminated.clone().unwrap_or(json!({})),
            });
            match (waiting, &rt.running) {
                (None, Some((_, at))) => {
                    s["state"] = json!({"running": {"startedAt": at}});
                    s["imageID"] = json!(format!("{image}@sha256:{}", "0".repeat(64)));
                    s["containerID"] = json!(format!("containerd://{}", uid(pod).replace('-', "")));
                }
                (Some((reason, msg)), _) => {
                    let mut w = json!({"reason": reason});
                    if !msg.is_empty() {
                        w["message"] = json!(msg);
                    }
                    s["state"] = json!({"waiting": w});
                }
                (None, None) => s["state"] = json!({"waiting": {"reason": "ContainerCreating"}}),
            }
            s
        })
        .collect()
}

/// The init containers' statuses: a failing pull holds them (and the pod) back; once the
/// pod runs, a regular init container has completed (exit 0), and a sidecar
/// (`restartPolicy: Always`) runs, started and ready with the pod's containers.
fn init_container_statuses(
    rt: &PodRuntime,
    spec: &PodSpecView,
    waiting: &Waiting,
    ready: bool,
    started: bool,
) -> Vec<Value> {
    spec.init
        .iter()
        .map(|c| {
            let image = c["image"].as_str().unwrap_or("");
            let sidecar = c["restartPolicy"] == "Always";
            let mut s = json!({
                "name": c["name"], "image": image, "imageID": "", "ready": false,
                "restartCount": 0, "started": false, "lastState": {},
            });
            let pulled = || format!("{image}@sha256:{}", "0".repeat(64));
            match (waiting, &rt.running) {
                (None, Some((_, at_text))) => {
                    s["imageID"] = json!(pulled());
                    s["containerID"] = json!(format!("containerd://{}", hex(64)));
                    if sidecar {
                        s["state"] = json!({"running": {"startedAt": at_text}});
                        s["started"] = json!(started);
                        s["ready"] = json!(ready);
                    } else {
                        s["state"] = json!({"terminated": {
                            "exitCode": 0, "reason": "Completed",
                            "startedAt": rt.start_time, "finishedAt": at_text,
                        }});
                    }
                }
                (Some((reason, msg)), _) if spec.failing.as_deref() == Some(image) => {
                    let mut w = json!({"reason": reason});
                    if !msg.is_empty() {
                        w["message"] = json!(msg);
                    }
                    s["state"] = json!({"waiting": w});
                }
                _ => s["state"] = json!({"waiting": {"reason": "PodInitializing"}}),
            }
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::pod_conditions;

    fn ready(conditions: &Value) -> Value {
        conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap()
    }

    // `generatePodReadyCondition` (kubernetes pkg/kubelet/status/generate.go): ready
    // containers make the pod Ready only once every readiness gate's condition is True;
    // otherwise Ready is False with reason ReadinessGatesNotReady and one message per gate.
    // Conditions of other types are the status manager's to keep (`mergePodStatus`).
    #[test]
    fn readiness_gates_hold_a_pod_with_ready_containers_back() {
        let containers = [json!({"name": "server"})];
        let gates = [
            json!({"conditionType": "example.com/a"}),
            json!({"conditionType": "example.com/b"}),
        ];
        let none = json!({});
        let c = pod_conditions(&none, 1, &containers, &gates, true, true, None);
        let r = ready(&c);
        assert_eq!(r["status"], "False");
        assert_eq!(r["reason"], "ReadinessGatesNotReady");
        assert_eq!(
            r["message"],
            "corresponding condition of pod readiness gate \"example.com/a\" does not exist., corresponding condition of pod readiness gate \"example.com/b\" does not exist."
        );

        let old = json!({"conditions": [
            {"type": "example.com/a", "status": "True"},
            {"type": "example.com/b", "status": "False"},
        ]});
        let c = pod_conditions(&old, 1, &containers, &gates, true, true, None);
        let r = ready(&c);
        assert_eq!(
            r["message"],
            "the status of pod readiness gate \"example.com/b\" is not \"True\", but False"
        );
        // The controller's conditions are kept as they were.
        assert!(
            c.as_array()
                .unwrap()
                .contains(&json!({"type": "example.com/b", "status": "False"}))
        );

        let open = json!({"conditions": [
            {"type": "example.com/a", "status": "True"},
            {"type": "example.com/b", "status": "True"},
        ]});
        let c = pod_conditions(&open, 1, &containers, &gates, true, true, None);
        assert_eq!(ready(&c)["status"], "True");

        // Unready containers are the reason first, whatever the gates say.
        let c = pod_conditions(&open, 1, &containers, &gates, false, true, None);
        assert_eq!(ready(&c)["reason"], "ContainersNotReady");
    }
}
