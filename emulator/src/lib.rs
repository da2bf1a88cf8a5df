//! A Kubernetes API server emulator for modelplane's tests and demos.
//!
//! It speaks the real Kubernetes HTTP protocol (discovery, CRUD, list/watch, patches,
//! server-side apply, status subresources, garbage collection) for the kinds modelplane
//! uses, so that the real `kube` client and `kubectl` work against it unchanged. See the
//! crate README for what is emulated and every known difference from a real API server.
//!
//! Any of the cluster knobs on the builder (`nodes`, `gpus_per_node`, `start_delay`,
//! `fail_images`, `crash_images`, `gateway`, ...) also runs a simulated cluster:
//! controllers, scheduler, kubelets, Gateway status and a Gateway data plane
//! ([`RunningEmulator::gateway_url`]); [`RunningEmulator::faults`] injects API faults.
//!
//! Over HTTP, point a client at [`RunningEmulator::url`] (or write
//! [`RunningEmulator::kubeconfig_yaml`] to a file); in process, use the [`Store`] and the
//! [`ops`] functions, which have exactly the HTTP semantics:
//!
//! ```
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! use modelplane_emulator::{Emulator, ops};
//! use serde_json::json;
//!
//! let emu = Emulator::builder().start().await.unwrap();
//! let store = emu.store();
//! let configmaps = store.kinds().by_resource("", "v1", "configmaps").unwrap();
//! let opts = ops::WriteOptions { field_manager: Some("my-controller".into()), ..Default::default() };
//! let created = ops::create(store, configmaps, "default", json!({"metadata": {"name": "cfg"}, "data": {"k": "v"}}), &opts).unwrap();
//! assert_eq!(created.object["metadata"]["managedFields"][0]["manager"], "my-controller");
//!
//! let mut changes = store.subscribe(); // every later change, in resourceVersion order
//! ops::delete(store, configmaps, "default", "cfg", &Default::default()).unwrap();
//! assert_eq!(changes.recv().await.unwrap().event, modelplane_emulator::EventType::Deleted);
//! assert!(emu.requests().snapshot().is_empty()); // only HTTP requests are recorded
//! emu.shutdown().await;
//! # });
//! ```

// The public surface: the operations with the real server's semantics, the store, the
// kind table, errors and selectors. Everything else is an implementation detail.
pub mod ops;
pub mod resources;
pub mod selectors;
pub mod status;
pub mod store;

mod admission;
mod apply;
mod cluster;
mod conversion;
mod crd;
mod defaults;
mod discovery;
mod fields;
mod gc;
mod http;
mod metrics;
mod patch;
mod protobuf;
mod quantity;
mod schema;
mod subresources;
mod table;
mod validation;
mod watch;
mod wire;
mod yaml;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinHandle;

pub use cluster::{ClusterConfig, Faults, GATEWAY_CLASS, GATEWAY_CONTROLLER, NodeConfig};
pub use discovery::GIT_VERSION as KUBERNETES_VERSION;
pub use http::{REQUEST_LOG_LIMIT, RecordedRequest, RequestLog};
pub use patch::PatchType;
pub use resources::{Kinds, ResourceKind};
pub use status::ApiError;
pub use store::{Change, EventType, Store};

/// Entry point: `Emulator::builder()`.
pub struct Emulator;

impl Emulator {
    pub fn builder() -> EmulatorBuilder {
        EmulatorBuilder::default()
    }
}

/// Where the custom kinds modelplane writes (Gateway API, InferencePool, ...) come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Crds {
    /// The built-in fallback definitions of the Gateway API and InferencePool kinds,
    /// served without a schema: objects are stored as sent, nothing validated or defaulted.
    BuiltIn,
    /// The CustomResourceDefinition manifests in this folder (`scripts/crds.sh` fills
    /// one), installed at start as `kubectl apply -f DIR` would: each kind is then
    /// validated, defaulted and pruned from its published schema and CEL rules.
    Manifests(PathBuf),
}

impl Crds {
    /// `Manifests` from the `MODELPLANE_CRDS` environment variable when it names a folder
    /// (the test command and `scripts/run.sh` set it), else `BuiltIn`.
    pub fn from_env() -> Crds {
        match std::env::var_os("MODELPLANE_CRDS") {
            Some(dir) if !dir.is_empty() => Crds::Manifests(PathBuf::from(dir)),
            _ => Crds::BuiltIn,
        }
    }
}

/// The folder of published CRD manifests for tests: `MODELPLANE_CRDS`, else the folder
/// `scripts/crds.sh` fills by default (`target/crds` in this repository). An error names
/// the script when the manifests are not there.
pub fn published_crds_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("MODELPLANE_CRDS")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/crds"));
    if dir
        .join("gateway.networking.k8s.io_httproutes.yaml")
        .is_file()
    {
        Ok(dir)
    } else {
        Err(format!(
            "no CRD manifests in {}: run scripts/crds.sh (scripts/test.sh does) or set MODELPLANE_CRDS",
            dir.display()
        ))
    }
}

/// The folder of the same manifests with the Gateway API's experimental channel (whose
/// HTTPRoute has the `ExternalAuth` filter): `MODELPLANE_CRDS_EXPERIMENTAL`, else
/// `target/crds-experimental` (`MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh
/// target/crds-experimental` fills it; the test command does).
pub fn experimental_crds_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("MODELPLANE_CRDS_EXPERIMENTAL")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/crds-experimental")
        });
    let route = dir.join("gateway.networking.k8s.io_httproutes.yaml");
    match std::fs::read_to_string(&route) {
        Ok(text) if text.contains("externalAuth") => Ok(dir),
        _ => Err(format!(
            "no experimental-channel CRD manifests in {}: run MODELPLANE_GATEWAY_API_CHANNEL=experimental scripts/crds.sh target/crds-experimental (scripts/test.sh does) or set MODELPLANE_CRDS_EXPERIMENTAL",
            dir.display()
        )),
    }
}

/// Configures an emulator before it starts.
#[derive(Debug, Clone)]
pub struct EmulatorBuilder {
    listen: SocketAddr,
    gateway_api: bool,
    inference_api: bool,
    crds: Crds,
    history: usize,
    bookmark_interval: Duration,
    /// The simulated cluster; `None` serves the bare API server.
    cluster: Option<ClusterConfig>,
}

impl Default for EmulatorBuilder {
    fn default() -> Self {
        EmulatorBuilder {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            gateway_api: true,
            inference_api: true,
            crds: Crds::from_env(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            cluster: None,
        }
    }
}

impl EmulatorBuilder {
    /// Address to listen on; the default `127.0.0.1:0` picks a free port.
    pub fn listen(mut self, addr: SocketAddr) -> Self {
        self.listen = addr;
        self
    }

    /// Serve the Gateway API group (gateway.networking.k8s.io); on by default.
    pub fn gateway_api(mut self, on: bool) -> Self {
        self.gateway_api = on;
        self
    }

    /// Serve the InferencePool group (inference.networking.k8s.io); on by default.
    pub fn inference_api(mut self, on: bool) -> Self {
        self.inference_api = on;
        self
    }

    /// Where the custom kinds come from; the default is [`Crds::from_env`]. With
    /// `gateway_api(false)` or `inference_api(false)` those groups' CRDs are left out.
    pub fn crds(mut self, crds: Crds) -> Self {
        self.crds = crds;
        self
    }

    /// How many changes are kept for watch resumption (older resourceVersions get 410 Expired).
    pub fn watch_history(mut self, n: usize) -> Self {
        self.history = n;
        self
    }

    /// How often watches that allow bookmarks receive one (the real server: about a minute).
    pub fn bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Binds, seeds the default namespaces and starts serving.
    pub async fn start(self) -> std::io::Result<RunningEmulator> {
        let builtin = self.crds == Crds::BuiltIn;
        let store = Store::new(
            Kinds::new(builtin && self.gateway_api, builtin && self.inference_api),
            self.history,
        );
        seed(&store);
        if let Crds::Manifests(dir) = &self.crds {
            let skipped = |crd: &serde_json::Value| match crd["spec"]["group"].as_str() {
                Some("gateway.networking.k8s.io") => !self.gateway_api,
                Some("inference.networking.k8s.io") => !self.inference_api,
                _ => false,
            };
            let manifests = crd::load_manifests(dir).map_err(std::io::Error::other)?;
            crd::install(
                &store,
                manifests.into_iter().filter(|c| !skipped(c)).collect(),
            )
            .map_err(std::io::Error::other)?;
        }
        // Settle the built-in controllers (default ServiceAccounts) before serving.
        gc::settle(&store);
        let listener = tokio::net::TcpListener::bind(self.listen).await?;
        let addr = listener.local_addr()?;
        let log = RequestLog::default();
        let faults = Faults::default();
        let metrics = metrics::Metrics::default();
        // The Gateway data plane's state, shared with the API server's service proxy.
        let plane = cluster::dataplane::Plane::new(store.clone());
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let state = http::AppState {
            store: store.clone(),
            log: log.clone(),
            server_address: addr.to_string().into(),
            watches: watch::WatchSettings {
                bookmark_interval: self.bookmark_interval,
                closing: stop_rx.clone(),
            },
            faults: faults.clone(),
            metrics: metrics.clone(),
            plane: plane.clone(),
        };
        let app = http::router(state);
        let server_faults = faults.clone();
        let server = tokio::spawn(async move {
            let listener = cluster::faults::RefusingListener::new(listener, server_faults);
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop_rx.wait_for(|c| *c).await;
                })
                .await;
        });
        let gc = tokio::spawn(gc::run(store.clone()));
        let cluster = match self.cluster {
            Some(c) => Some(cluster::start(store.clone(), c, plane).await?),
            None => None,
        };
        tracing::info!(%addr, "kubernetes api emulator listening");
        Ok(RunningEmulator {
            addr,
            store,
            log,
            stop: Some(stop_tx),
            server: Some(server),
            gc,
            cluster,
            faults,
        })
    }
}

/// Objects every cluster starts with.
fn seed(store: &Store) {
    let opts = ops::WriteOptions {
        default_manager: "kube-apiserver".into(),
        ..Default::default()
    };
    let ns = store
        .kinds()
        .by_resource("", "v1", "namespaces")
        .expect("namespaces are served");
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let _ = ops::create(store, ns, "", json!({"metadata": {"name": name}}), &opts);
    }
    let svc = store
        .kinds()
        .by_resource("", "v1", "services")
        .expect("services are served");
    let kubernetes = json!({
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {"clusterIP": "10.96.0.1", "ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
    });
    let _ = ops::create(store, svc, "default", kubernetes, &opts);
    // The scheduling storage's post-start hook creates the system priority classes.
    let pc = store
        .kinds()
        .by_resource("scheduling.k8s.io", "v1", "priorityclasses")
        .expect("priorityclasses are served");
    for (name, value, description) in [
        (
            "system-node-critical",
            2_000_001_000,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ] {
        let class = json!({"metadata": {"name": name}, "value": value, "description": description});
        let _ = ops::create(store, pc, "", class, &opts);
    }
}

/// A running emulator. Dropping it stops serving (prefer [`RunningEmulator::shutdown`]).
pub struct RunningEmulator {
    addr: SocketAddr,
    store: Store,
    log: RequestLog,
    stop: Option<tokio::sync::watch::Sender<bool>>,
    server: Option<JoinHandle<()>>,
    gc: JoinHandle<()>,
    cluster: Option<cluster::Running>,
    faults: Faults,
}

impl RunningEmulator {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The in-process store (read objects, subscribe to changes).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Every request served so far (method, path, query, fieldManager, client id, status).
    pub fn requests(&self) -> &RequestLog {
        &self.log
    }

    /// A kubeconfig for this emulator (context `modelplane-emulator`, namespace `default`).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    /// Stops serving and waits for the server task (open watches are cut).
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(true);
        }
        if let Some(server) = self.server.take() {
            // Watches end on the signal; still bound the wait for slow clients.
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
        self.gc.abort();
        self.stop_cluster();
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Some(server) = &self.server {
            server.abort();
        }
        self.gc.abort();
        self.stop_cluster();
    }
}

/// A kubeconfig pointing at `url` (no credentials: the emulator does no authentication).
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: modelplane-emulator
  cluster:
    server: {url}
contexts:
- name: modelplane-emulator
  context:
    cluster: modelplane-emulator
    user: modelplane-emulator
    namespace: default
current-context: modelplane-emulator
users:
- name: modelplane-emulator
  user:
    token: emulator
preferences: {{}}
"
    )
}
