//! The adapter loader: gives each model server pod the LoRA adapters its Deployment lists
//! (the `modelplane.io/adapters` annotation), through the engine's runtime adapter API —
//! `GET /v1/models` to see what it serves, `POST /v1/load_lora_adapter` and
//! `/v1/unload_lora_adapter` to change it (vLLM's "Dynamically serving LoRA Adapters";
//! llm-d-inference-sim answers the same) — so a change of the list never rolls the pods.
//!
//! Per pod it writes what the engine answered as the pod's `modelplane.io/adapters-state`
//! annotation (status reads it from the worker's pod cache, in whichever worker reconciles),
//! and opens the pod's readiness gate once a new engine process has been offered every
//! adapter: until then the pod gets no traffic, so a request naming an adapter never meets a
//! pod that has not loaded it yet. A restarted engine has lost its adapters: the gate closes
//! until they are loaded again.
//!
//! One worker loads at a time (a Postgres advisory lock, like the serving metrics
//! collector): two loading the same adapter onto one engine would see each other's work
//! as a refusal. Within it, each pod is synced on a task of its own, so one engine's slow
//! download never holds the others.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use sqlx::{Connection, PgConnection, PgPool};
use tokio_util::sync::CancellationToken;

use super::desired::{
    ADAPTERS_GATE, ANNOTATION_ADAPTERS, ANNOTATION_POD_ADAPTERS, ANNOTATION_POD_S3_ADAPTERS,
    AdapterRef, LABEL_DEPLOYMENT_ID, PodAdapters, parse_adapters_annotation, s3_fetch_list,
    server_restarts,
};
use super::load::{PodCall, Via, call, metrics_port};
use super::seen::SeenKinds;

/// The advisory lock the loading worker holds.
const LOADER_LOCK: i64 = 7254017193843;
/// How often the pods are looked at.
const TICK: Duration = Duration::from_secs(1);
/// How often a pod whose list has not changed is asked again what it serves (an engine
/// can lose an adapter without restarting, e.g. when someone unloads it by hand).
const RECHECK: Duration = Duration::from_secs(60);
/// Pods worked on at once.
const CONCURRENCY: usize = 8;
/// `GET /v1/models` and unloading answer at once; loading may download the adapter first.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);
const LOAD_TIMEOUT: Duration = Duration::from_secs(300);
const MAX_ANSWER: usize = 1024 * 1024;
/// An engine's refusal is kept to this many characters in the status.
const MAX_CAUSE: usize = 300;

/// The loader: see the module documentation.
pub struct AdapterLoader {
    loader: Arc<Loader>,
    /// What each pod was last given: by pod uid, the list and restart count it was synced
    /// for, and when.
    synced: HashMap<String, (String, i32, Instant)>,
    /// Pods being synced, each on a task of its own: one engine's slow download (up to
    /// [`LOAD_TIMEOUT`]) holds only its own pod.
    running: HashMap<String, Running>,
}

/// What the pod syncs talk to.
struct Loader {
    pool: PgPool,
    client: kube::Client,
    via: Via,
    seen: Arc<SeenKinds>,
}

/// One pod's sync in progress: for which list and engine process.
struct Running {
    key: String,
    restarts: i32,
    task: tokio::task::JoinHandle<bool>,
}

/// A Deployment's adapters: parsed, and as written (a change of the text is a new list).
type Wanted = (Vec<AdapterRef>, String);

/// A pod and the list its Deployment wants on it.
struct Work {
    pod: Pod,
    wanted: Vec<AdapterRef>,
    key: String,
}

impl AdapterLoader {
    pub fn new(pool: PgPool, client: kube::Client, via: Via, seen: Arc<SeenKinds>) -> Self {
        Self {
            loader: Arc::new(Loader {
                pool,
                client,
                via,
                seen,
            }),
            synced: HashMap::new(),
            running: HashMap::new(),
        }
    }

    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut lock: Option<PgConnection> = None;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => {
                    // No sync may outlive the lock that makes it this worker's alone.
                    for (_, running) in self.running.drain() {
                        running.task.abort();
                    }
                    return;
                }
                () = tokio::time::sleep(TICK) => {}
            }
            if !self.holds_lock(&mut lock).await {
                self.synced.clear();
                for (_, running) in self.running.drain() {
                    running.task.abort();
                }
                continue;
            }
            self.round().await;
        }
    }

    async fn holds_lock(&self, lock: &mut Option<PgConnection>) -> bool {
        if let Some(conn) = lock.as_mut() {
            if conn.ping().await.is_ok() {
                return true;
            }
            *lock = None;
        }
        let Ok(mut conn) = PgConnection::connect_with(&self.loader.pool.connect_options()).await
        else {
            return false;
        };
        let taken: Result<bool, _> = sqlx::query_scalar("select pg_try_advisory_lock($1)")
            .bind(LOADER_LOCK)
            .fetch_one(&mut conn)
            .await;
        if matches!(taken, Ok(true)) {
            tracing::info!("this worker loads the model servers' LoRA adapters");
            *lock = Some(conn);
            true
        } else {
            false
        }
    }

    /// One look at every pod of a Deployment with adapters: the syncs that finished are
    /// noted, and each pod that is due and not being synced starts one (at most
    /// [`CONCURRENCY`] at once), without waiting for any.
    async fn round(&mut self) {
        let finished: Vec<String> = self
            .running
            .iter()
            .filter(|(_, r)| r.task.is_finished())
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in finished {
            let Some(running) = self.running.remove(&uid) else {
                continue;
            };
            if let Ok(true) = running.task.await {
                self.synced
                    .insert(uid, (running.key, running.restarts, Instant::now()));
            }
        }
        let work = self.loader.work();
        let live: BTreeSet<String> = work.iter().map(|w| uid(&w.pod)).collect();
        self.synced.retain(|uid, _| live.contains(uid));
        self.running.retain(|uid, running| {
            let keep = live.contains(uid);
            if !keep {
                running.task.abort();
            }
            keep
        });
        for w in work {
            if self.running.len() >= CONCURRENCY {
                break;
            }
            let id = uid(&w.pod);
            let restarts = server_restarts(&w.pod);
            let closed = gate(&w.pod) != Some(true);
            let due = match self.synced.get(&id) {
                Some((key, r, at)) => {
                    *key != w.key || *r != restarts || at.elapsed() >= RECHECK || closed
                }
                None => true,
            };
            if !due || self.running.contains_key(&id) {
                continue;
            }
            let loader = self.loader.clone();
            let key = w.key.clone();
            let task = tokio::spawn(async move { loader.sync(&w).await });
            self.running.insert(
                id,
                Running {
                    key,
                    restarts,
                    task,
                },
            );
        }
    }
}

impl Loader {
    /// Every model server pod whose Deployment lists adapters, with that list. A canary
    /// track's pods also match the stable track's selector (it is the canary's without the
    /// track label): a pod belongs to the Deployment whose selector names the most labels.
    fn work(&self) -> Vec<Work> {
        // Only the Deployments that mention the adapters annotation are decoded: this runs
        // every second over the whole cache.
        let (Some(deployments), Some(pods)) = (
            self.seen
                .of::<K8sDeployment>()
                .and_then(|s| s.all_mentioning(ANNOTATION_ADAPTERS)),
            self.seen.of::<Pod>(),
        ) else {
            return Vec::new();
        };
        // By pod uid: the selector's size, and the list (none: that Deployment has none).
        let mut owners: HashMap<String, (usize, Option<Wanted>, Pod)> = HashMap::new();
        for deployment in deployments {
            let meta = &deployment.metadata;
            let wanted = meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_ADAPTERS))
                .and_then(|raw| Some((parse_adapters_annotation(raw)?, raw.clone())));
            let record = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_DEPLOYMENT_ID))
                .and_then(|id| id.parse().ok());
            let selector = deployment
                .spec
                .as_ref()
                .and_then(|s| s.selector.match_labels.clone())
                .unwrap_or_default();
            let Some(mine) = record.and_then(|id| pods.of_record(id)) else {
                continue;
            };
            for pod in mine {
                let labels = pod.metadata.labels.clone().unwrap_or_default();
                // Pods of a template without the gate (before the first adapter's rollout
                // replaced them) run an engine without LoRA: nothing to load there.
                let selected = gated(&pod)
                    && !selector.is_empty()
                    && pod.metadata.namespace == meta.namespace
                    && selector.iter().all(|(k, v)| labels.get(k) == Some(v));
                let better = owners
                    .get(&uid(&pod))
                    .is_none_or(|(size, _, _)| selector.len() > *size);
                if selected && better {
                    owners.insert(uid(&pod), (selector.len(), wanted.clone(), pod));
                }
            }
        }
        owners
            .into_values()
            .filter_map(|(_, wanted, pod)| {
                let (wanted, key) = wanted?;
                Some(Work { pod, wanted, key })
            })
            .collect()
    }

    /// Syncs one pod; true when it is done for its current list and engine process.
    async fn sync(&self, w: &Work) -> bool {
        let pod = &w.pod;
        if pod.metadata.deletion_timestamp.is_some() {
            return true;
        }
        let restarts = server_restarts(pod);
        if !containers_ready(pod) {
            // A restarted engine lost what it had: keep the pod out of service until
            // it has its adapters again.
            if gate(pod) == Some(true)
                && PodAdapters::of(pod).is_none()
                && let Err(err) = self
                    .set_gate(
                        pod,
                        false,
                        "EngineRestarted",
                        "the model server restarted; its adapters will be loaded again",
                    )
                    .await
            {
                tracing::debug!(pod = ?pod.metadata.name, error = %err, "cannot close the adapters gate");
            }
            return false;
        }
        let Some(port) = metrics_port(pod) else {
            return false;
        };
        // Back already, with the gate still open from before the restart (the loader did
        // not look while it was down): close it while the adapters are loaded again.
        let restarted = gate(pod) == Some(true) && recorded(pod) && PodAdapters::of(pod).is_none();
        if restarted
            && let Err(err) = self
                .set_gate(
                    pod,
                    false,
                    "EngineRestarted",
                    "the model server restarted; its adapters are being loaded again",
                )
                .await
        {
            tracing::debug!(pod = ?pod.metadata.name, error = %err, "cannot close the adapters gate");
            return false;
        }
        // The fetcher's list first: an s3:// adapter is loadable once it has copied it.
        if let Err(err) = self.give_fetch_list(pod, &w.wanted).await {
            tracing::debug!(pod = ?pod.metadata.name, error = %err, "cannot give the fetcher its list");
            return false;
        }
        let served = match self.served(pod, port).await {
            Ok(served) => served,
            Err(why) => {
                tracing::debug!(pod = ?pod.metadata.name, %why, "cannot ask the model server what it serves");
                return false;
            }
        };
        let wanted: BTreeMap<&str, &str> = w
            .wanted
            .iter()
            .map(|a| (a.name.as_str(), a.path.as_str()))
            .collect();
        let mut failed = BTreeMap::new();
        let fetched_from: BTreeMap<&str, &str> = w
            .wanted
            .iter()
            .filter_map(|a| Some((a.name.as_str(), a.fetch.as_deref()?)))
            .collect();
        // What this engine was given before, by name: an adapter whose source changed since
        // is served under its old weights and is unloaded first.
        let before = PodAdapters::of(pod).map(|p| p.paths).unwrap_or_default();
        let mut loaded: BTreeSet<String> = served
            .iter()
            .filter(|n| {
                wanted.get(n.as_str()).is_some_and(|path| {
                    before
                        .get(n.as_str())
                        .is_none_or(|was| was.as_str() == *path)
                })
            })
            .cloned()
            .collect();
        for (name, path) in &wanted {
            if loaded.contains(*name) {
                continue;
            }
            if served.iter().any(|n| n.as_str() == *name) {
                let body = json!({"lora_name": name});
                if let Err(why) = self
                    .post(pod, port, "/v1/unload_lora_adapter", &body, ASK_TIMEOUT)
                    .await
                {
                    failed.insert((*name).to_owned(), why);
                    continue;
                }
            }
            let body = json!({"lora_name": name, "lora_path": path});
            match self
                .post(pod, port, "/v1/load_lora_adapter", &body, LOAD_TIMEOUT)
                .await
            {
                Ok(()) => {
                    tracing::info!(pod = ?pod.metadata.name, adapter = %name, "loaded a LoRA adapter");
                    loaded.insert((*name).to_owned());
                }
                Err(why) => match fetched_from.get(name) {
                    Some(source) => {
                        tracing::debug!(pod = ?pod.metadata.name, adapter = %name, %why, "an s3:// adapter is not loadable yet");
                        failed.insert(
                            (*name).to_owned(),
                            format!("not loadable from {path} yet; the pod's fetcher copies it from {source} ({why})"),
                        );
                    }
                    None => {
                        tracing::warn!(pod = ?pod.metadata.name, adapter = %name, %why, "the model server did not load a LoRA adapter");
                        failed.insert((*name).to_owned(), why);
                    }
                },
            }
        }
        for name in served.iter().filter(|n| !wanted.contains_key(n.as_str())) {
            let body = json!({"lora_name": name});
            match self
                .post(pod, port, "/v1/unload_lora_adapter", &body, ASK_TIMEOUT)
                .await
            {
                Ok(()) => {
                    tracing::info!(pod = ?pod.metadata.name, adapter = %name, "unloaded a LoRA adapter")
                }
                Err(why) => {
                    tracing::warn!(pod = ?pod.metadata.name, adapter = %name, %why, "the model server did not unload a LoRA adapter")
                }
            }
        }
        let paths = loaded
            .iter()
            .filter_map(|n| Some((n.clone(), (*wanted.get(n.as_str())?).to_owned())))
            .collect();
        // An s3:// adapter the engine cannot load is most likely still being copied (vLLM
        // answers a load from a path that is not there yet with an error, 404 "No adapter
        // found" in its `load_lora_adapter`): the pod is synced again next round, and one that has not served yet stays out of
        // service until it has it (like a model that is still downloading).
        let fetching = failed.keys().any(|n| fetched_from.contains_key(n.as_str()));
        let state = PodAdapters {
            restarts,
            loaded: loaded.into_iter().collect(),
            paths,
            failed,
        };
        let open = !fetching || (gate(pod) == Some(true) && !restarted);
        if let Err(err) = self.record(pod, &state, restarted, open).await {
            tracing::debug!(pod = ?pod.metadata.name, error = %err, "cannot record the adapters on the pod");
            return false;
        }
        !fetching
    }

    /// Writes the s3:// adapters the pod's fetcher is to copy as its annotation, when it
    /// changes.
    async fn give_fetch_list(&self, pod: &Pod, wanted: &[AdapterRef]) -> Result<(), kube::Error> {
        let list = s3_fetch_list(wanted);
        let current = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_POD_S3_ADAPTERS))
            .map_or("", String::as_str);
        if current == list {
            return Ok(());
        }
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let patch = json!({"metadata": {"annotations": {ANNOTATION_POD_S3_ADAPTERS: list}}});
        api.patch(
            pod.metadata.name.as_deref().unwrap_or_default(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
    }

    /// The adapters the engine serves: the entries of `GET /v1/models` with a parent.
    async fn served(&self, pod: &Pod, port: i32) -> Result<Vec<String>, String> {
        let request = PodCall {
            method: http::Method::GET,
            path: "/v1/models",
            body: None,
            timeout: ASK_TIMEOUT,
            max_bytes: MAX_ANSWER,
        };
        let answer = call(&self.via, pod, port, request)
            .await
            .map_err(|e| e.to_string())?;
        if !(200..300).contains(&answer.status) {
            return Err(cause(answer.status, &answer.body));
        }
        let models: Value = serde_json::from_slice(&answer.body)
            .map_err(|_| "GET /v1/models did not answer JSON".to_owned())?;
        Ok(models["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["parent"].is_string())
            .filter_map(|m| m["id"].as_str().map(str::to_owned))
            .collect())
    }

    async fn post(
        &self,
        pod: &Pod,
        port: i32,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<(), String> {
        let body = serde_json::to_vec(body).expect("serialises");
        let request = PodCall {
            method: http::Method::POST,
            path,
            body: Some(body),
            timeout,
            max_bytes: MAX_ANSWER,
        };
        let answer = call(&self.via, pod, port, request)
            .await
            .map_err(|e| e.to_string())?;
        if (200..300).contains(&answer.status) {
            Ok(())
        } else {
            Err(cause(answer.status, &answer.body))
        }
    }

    /// Writes the pod's state annotation and, when `open`, opens its gate, each only when
    /// it changes.
    async fn record(
        &self,
        pod: &Pod,
        state: &PodAdapters,
        closed: bool,
        open: bool,
    ) -> Result<(), kube::Error> {
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let value = serde_json::to_string(state).expect("serialises");
        let current = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_POD_ADAPTERS));
        if current != Some(&value) {
            let patch = json!({"metadata": {"annotations": {ANNOTATION_POD_ADAPTERS: value}}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        if open && (closed || gate(pod) != Some(true)) {
            let message = if state.failed.is_empty() {
                format!("{} adapter(s) loaded", state.loaded.len())
            } else {
                format!(
                    "{} adapter(s) loaded; refused: {}",
                    state.loaded.len(),
                    state.failed.keys().cloned().collect::<Vec<_>>().join(", ")
                )
            };
            self.set_gate(pod, true, "AdaptersOffered", &message)
                .await?;
        }
        Ok(())
    }

    /// Sets the pod's readiness gate condition (strategic merge on `pods/status`: conditions
    /// merge by `type`).
    async fn set_gate(
        &self,
        pod: &Pod,
        open: bool,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let api: Api<Pod> = Api::namespaced(
            self.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or("default"),
        );
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let patch = json!({"status": {"conditions": [{
            "type": ADAPTERS_GATE,
            "status": if open { "True" } else { "False" },
            "reason": reason,
            "message": message,
            "lastTransitionTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        }]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map(|_| ())
    }
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The pod's adapters gate condition: open, closed, or not set.
fn gate(pod: &Pod) -> Option<bool> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == ADAPTERS_GATE)
        .map(|c| c.status == "True")
}

/// Whether the loader has written on the pod before (for any engine process).
fn recorded(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANNOTATION_POD_ADAPTERS))
}

/// Whether the pod's template has the adapters gate (it was made for a list of adapters).
pub(crate) fn gated(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|gates| gates.iter().any(|g| g.condition_type == ADAPTERS_GATE))
}

fn containers_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "ContainersReady" && c.status == "True")
        })
}

/// An engine's refusal in one line: its OpenAI-style `error.message` (vLLM), else its
/// text (llm-d-inference-sim answers plain text), shortened.
fn cause(status: u16, body: &[u8]) -> String {
    let text = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_owned());
    let text: String = text.chars().take(MAX_CAUSE).collect();
    if text.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {text}")
    }
}
