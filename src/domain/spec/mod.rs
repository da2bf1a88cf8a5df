//! The model deployment spec: what a user asks for, validated as a whole.
//!
//! The spec is stored as the user expressed it (JSON, camelCase), with only
//! context-free defaults filled in (`specVersion`, `replicas`, `engine.port`,
//! `model.servedName`). Engine-dependent defaults (image, health path, startup
//! budget, GPU resource name) stay `null` and are resolved from server
//! configuration when objects are built, so changing `engine.kind` never keeps
//! a stale image from the previous engine.

mod disaggregation;
mod multinode;
mod validate;

pub use disaggregation::{DisaggregationSpec, RoleSpec};
pub use multinode::{MAX_NODES_PER_REPLICA, group_object_name};

pub use validate::parse_gateway_ref;
pub(crate) use validate::{find_nul_characters, validate_user_map};

use std::collections::{BTreeMap, HashSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::autoscaling::AutoscalingSpec;
use super::errors::FieldErrors;
use super::names::{
    is_dns1123_label, is_dns1123_subdomain, validate_label_key, validate_label_value,
};
use super::quantity::Quantity;

/// The schema version written into every new spec; older revisions keep theirs.
/// Model server pods when the spec names no count.
pub const DEFAULT_REPLICAS: i64 = 1;
/// The engine's HTTP port when the spec names none.
pub const DEFAULT_PORT: i64 = 8000;

pub const CURRENT_SPEC_VERSION: u32 = 1;
const MAX_GPUS: i64 = 64;
const MAX_TENSOR_PARALLEL: i64 = 64;
const MAX_STARTUP_SECONDS: i64 = 86_400;

/// Limits on lists and sizes. Each record's objects are copied to the cluster and read by
/// one shared worker, so no single spec may be large enough to slow either for everyone.
/// They sit well inside what the API server accepts (an object of at most 1.5 MiB in etcd,
/// annotations of at most 256 KiB per object, which also hold modelplane's own).
pub const MAX_LABELS: usize = 64;
pub const MAX_ANNOTATIONS: usize = 64;
pub const MAX_ANNOTATION_BYTES: usize = 64 * 1024;
pub const MAX_ARGS: usize = 128;
pub const MAX_ARG_BYTES: usize = 4096;
pub const MAX_ENV: usize = 128;
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
pub const MAX_TOLERATIONS: usize = 32;
pub const MAX_NODE_SELECTOR: usize = 32;
/// The whole spec as stored (JSON), after every other rule.
/// The vLLM variable that turns on the runtime adapter API; modelplane's to set.
pub const RUNTIME_LORA_ENV: &str = "VLLM_ALLOW_RUNTIME_LORA_UPDATING";
/// LoRA adapters one deployment may list.
pub const MAX_ADAPTERS: usize = 64;
pub const MAX_SPEC_BYTES: usize = 256 * 1024;

/// Label keys modelplane sets itself; users may not set them.
const RESERVED_LABEL_KEYS: &[&str] = &[
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/part-of",
];
const RESERVED_DOMAIN: &str = "modelplane.io";

static IMAGE_REFERENCE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        // An optional registry: it holds a '.' or a port, or is `localhost`.
        r"^(?:(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)(?::[0-9]+)?/|[A-Za-z0-9-]+:[0-9]+/)?",
        r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*",
        r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*",
        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?",
        r"(?:@sha256:[a-f0-9]{64})?$"
    ))
    .expect("valid regex")
});
static ENV_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$").expect("valid regex"));
static HF_REPO_PART: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$").expect("valid regex"));
/// An adapter's name: the `model` clients send, so a plain token (letters, digits, `.`,
/// `_`, `-`; a letter or digit first), at most 64 characters.
pub static ADAPTER_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$").expect("a valid regex"));
static SECRET_KEY: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^[-._a-zA-Z0-9]{1,253}$").expect("valid regex"));

/// Who may call a deployment's Gateway URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Anyone who reaches the Gateway.
    Public,
    /// Callers presenting a model key of the project that may call this deployment: the
    /// route's `ExternalAuth` filter asks modelplane's key check.
    Keys,
}

/// Limits that come from server configuration.
#[derive(Debug, Clone)]
pub struct SpecLimits {
    pub max_replicas: i64,
    /// Accept literal values in env vars named like credentials (`HF_TOKEN`, `*_KEY`, …).
    pub allow_plaintext_credentials: bool,
    /// Whether `autoscaling.minReplicas: 0` is allowed: the installation runs the activator
    /// that holds the first request while a replica starts.
    pub scale_to_zero: bool,
    /// Whether `access: keys` is allowed: the installation runs the key check the routes'
    /// `ExternalAuth` filter calls. New deployments default to it then.
    pub model_keys: bool,
}

impl Default for SpecLimits {
    fn default() -> Self {
        Self {
            max_replicas: 100,
            allow_plaintext_credentials: false,
            scale_to_zero: false,
            model_keys: false,
        }
    }
}

/// Per-engine defaults from server configuration, used when objects are built.
#[derive(Debug, Clone)]
pub struct EngineDefaults {
    pub vllm_image: String,
    pub sglang_image: String,
    pub tgi_image: String,
    pub sim_image: String,
    /// vllm's for a replica that spans nodes (a release with multi-node `--nnodes`).
    pub vllm_multinode_image: String,
    pub gpu_resource_name: String,
    pub startup_timeout_seconds: i64,
    pub pods: PodDefaults,
}

/// Server defaults for what a spec leaves unsaid about its pods.
#[derive(Debug, Clone)]
pub struct PodDefaults {
    /// CPU and memory requested by a GPU engine's pod (`vllm`, `sglang`, `tgi`) when the spec
    /// names none, so it is not scheduled as if it needed nothing but GPUs.
    pub cpu_request: String,
    pub memory_request: String,
    /// Seconds a pod may take to shut down (in-flight and streaming requests finish).
    pub termination_grace_seconds: i64,
    /// Seconds a stopping pod keeps serving before the server is told to stop, while
    /// endpoints and the Gateway stop sending it new requests.
    pub drain_seconds: i64,
}

impl Default for PodDefaults {
    fn default() -> Self {
        Self {
            cpu_request: "2".into(),
            memory_request: "8Gi".into(),
            termination_grace_seconds: 120,
            drain_seconds: 10,
        }
    }
}

/// What a user asks for. Build it with [`DeploymentSpec::parse`]; a stored one is valid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeploymentSpec {
    /// Schema version of this spec; filled in by the server.
    #[serde(default)]
    pub spec_version: u32,
    pub model: ModelSpec,
    #[serde(default)]
    pub engine: EngineSpec,
    /// Number of model server pods; 0 scales to zero and keeps the objects. Default 1.
    #[serde(default)]
    pub replicas: Option<i64>,
    #[serde(default)]
    pub resources: ResourceSpec,
    #[serde(default)]
    pub scheduling: SchedulingSpec,
    #[serde(default)]
    pub storage: StorageSpec,
    #[serde(default)]
    pub routing: RoutingSpec,
    #[serde(default)]
    pub probes: ProbeSpec,
    #[serde(default)]
    pub security: SecuritySpec,
    #[serde(default)]
    pub rollout: RolloutSpec,
    #[serde(default)]
    pub shutdown: ShutdownSpec,
    /// Replicas that follow the load (`replicas` is then where they start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<AutoscalingSpec>,
    /// Who may call the Gateway URL: `keys` (a model key of the project, checked by the
    /// Gateway) or `public` (anyone who reaches the Gateway). New deployments get `keys`
    /// where the installation runs the key check; a record without it is `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
    /// LoRA adapters of the base model, each served under its own `model` name. Adding or
    /// removing one on a running deployment loads or unloads it on every ready pod through
    /// the engine's runtime adapter API, without a restart; going from none to some (or
    /// back) restarts the pods, since the engine enables LoRA when it starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<AdapterSpec>,
    /// Prefill/decode disaggregation: two sets of pods behind the InferencePool, whose
    /// endpoint picker sends a long prompt's prefill to a prefill pod and its decode to a
    /// decode pod (which pulls the KV cache from it). `replicas` is then the sum of the
    /// roles'. Set when the deployment is created; needs `routing.mode: InferencePool`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggregationSpec>,
    /// Nodes each replica spans, for a model larger than one node: every replica runs as a
    /// LeaderWorkerSet group of one leader pod (which serves the API) and
    /// `nodesPerReplica - 1` workers, each pod with `resources.gpu.count` GPUs (default:
    /// tensor × pipeline parallel size over the nodes). Needs the LeaderWorkerSet CRD in
    /// the cluster. Set when the deployment is created; default 1 (a plain Deployment).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_per_replica: Option<i64>,
    /// Labels carried onto the Kubernetes objects (never into selectors). They are not put
    /// on the pods, so changing them never restarts a model server.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Labels for the pods themselves (for NetworkPolicies, meshes, cost tools); changing
    /// them rolls the pods.
    #[serde(default)]
    pub pod_labels: BTreeMap<String, String>,
    /// Annotations carried onto the Kubernetes objects.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelSpec {
    /// Where the weights come from: `hf://org/name`, `pvc://claim/path`, `oci://registry/repo:tag`, `s3://bucket/key`.
    pub source: String,
    /// The OpenAI `model` id clients use; defaults to the deployment name.
    #[serde(default)]
    pub served_name: Option<String>,
    /// A branch, tag or commit of the model repository.
    #[serde(default)]
    pub revision: Option<String>,
    /// A Secret in the project's namespace holding a hub or registry token (never the token itself).
    #[serde(default)]
    pub secret_ref: Option<SecretKeyRef>,
}

/// A LoRA adapter: the name clients send as `model`, and where its weights are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdapterSpec {
    /// The OpenAI `model` id of the adapter: letters, digits, `.`, `_`, `-`, at most 64.
    pub name: String,
    /// Where its weights are: `hf://org/name` (the engine downloads it, with the model's
    /// `secretRef` token), `pvc://claim/path` (the claim is mounted read-only) or
    /// `s3://bucket/prefix` (a fetcher beside the engine copies it into the pod).
    pub source: String,
    /// For `s3://` only: a Secret in the project's namespace whose keys
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT_URL`, …)
    /// become the fetcher's environment. The s3:// adapters of a deployment that name a
    /// Secret name the same one (the fetcher has one environment); without one, the
    /// fetcher uses the node's AWS identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretRef>,
}

/// A Secret by name, all of whose keys are used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretRef {
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretKeyRef {
    pub name: String,
    pub key: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    #[default]
    Vllm,
    Sglang,
    Tgi,
    /// An OpenAI-compatible simulator for demos and tests.
    Sim,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Vllm => "vllm",
            Self::Sglang => "sglang",
            Self::Tgi => "tgi",
            Self::Sim => "sim",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[derive(Default)]
pub struct EngineSpec {
    #[serde(default)]
    pub kind: EngineKind,
    /// Container image; `null` uses the server's default image for the engine kind.
    #[serde(default)]
    pub image: Option<String>,
    /// Port the engine listens on. Default 8000.
    #[serde(default)]
    pub port: Option<i64>,
    /// Extra command-line arguments appended to the engine's own.
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: Vec<EnvVar>,
    #[serde(default)]
    pub max_model_len: Option<i64>,
    #[serde(default)]
    pub tensor_parallel_size: Option<i64>,
    /// Pipeline stages (vLLM's `--pipeline-parallel-size`): with `tensorParallelSize`, the
    /// GPUs one replica uses in all (their product), on one node or over `nodesPerReplica`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel_size: Option<i64>,
}

/// An environment variable: a literal `value` or a `secretRef`, not both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub secret_ref: Option<SecretKeyRef>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    /// CPU request and limit, e.g. `4` or `500m`.
    #[serde(default)]
    pub cpu: Option<String>,
    /// Memory request and limit, e.g. `16Gi`.
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub gpu: Option<GpuSpec>,
    /// Size of the shared-memory volume (`/dev/shm`), e.g. `2Gi`.
    #[serde(default)]
    pub shared_memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuSpec {
    /// GPUs per pod; defaults to the tensor-parallel size, else 1.
    #[serde(default)]
    pub count: Option<i64>,
    /// Extended resource name, e.g. `nvidia.com/gpu` (the server's default when `null`).
    #[serde(default)]
    pub resource_name: Option<String>,
    /// GPU product for node affinity, e.g. `NVIDIA-A100-SXM4-80GB`.
    #[serde(default)]
    pub product: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SchedulingSpec {
    #[serde(default)]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default)]
    pub tolerations: Vec<Toleration>,
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub priority_class_name: Option<String>,
}

/// An extended resource name as Kubernetes takes one: domain-qualified, outside
/// `kubernetes.io` (e.g. `nvidia.com/gpu`).
pub fn check_extended_resource_name(name: &str) -> Result<(), String> {
    let qualified = name.contains('/') && validate_label_key(name).is_ok();
    let reserved_domain = name
        .split_once('/')
        .is_some_and(|(d, _)| d == "kubernetes.io" || d.ends_with(".kubernetes.io"));
    if qualified && !reserved_domain {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not an extended resource name (e.g. `nvidia.com/gpu`, `amd.com/gpu`)"
        ))
    }
}

/// A Kubernetes toleration, with the same rules as the API server's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    #[serde(default)]
    pub key: Option<String>,
    /// `Equal` (default) or `Exists`.
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule`, `NoExecute`, or empty for all.
    #[serde(default)]
    pub effect: Option<String>,
    #[serde(default)]
    pub toleration_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageSpec {
    /// Where downloaded weights are cached; none means the container's own disk.
    #[serde(default)]
    pub cache: Option<CacheVolume>,
}

/// A cache volume: an existing PVC (`claimName`), or an emptyDir with an optional `sizeLimit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CacheVolume {
    #[serde(default)]
    pub claim_name: Option<String>,
    #[serde(default)]
    pub size_limit: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RoutingSpec {
    /// `namespace/name[/section]` of the Gateway; `null` uses the server's default.
    #[serde(default)]
    pub gateway: Option<String>,
    /// Hostname the route matches, e.g. `qwen.models.example.com`.
    #[serde(default)]
    pub hostname: Option<String>,
    /// Path prefix the route matches, e.g. `/team-a/qwen`; rewritten to `/` for the engine.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// How the Gateway reaches the model servers: `Service` (the default: the route's
    /// backend is the deployment's Service) or `InferencePool` (an InferencePool with an
    /// endpoint picker that routes by queue depth and KV-cache use).
    #[serde(default)]
    pub mode: Option<RoutingMode>,
    /// The endpoint picker's settings; only with `mode: InferencePool`.
    #[serde(default)]
    pub inference_pool: Option<InferencePoolSpec>,
}

/// How the Gateway reaches a deployment's model servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum RoutingMode {
    #[default]
    Service,
    InferencePool,
}

/// What to do where the cluster has no InferencePool CRD (inference.networking.k8s.io/v1).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum PoolFallback {
    /// Make nothing of the mode and say why (the default).
    #[default]
    Fail,
    /// Route through the deployment's Service instead, and say so.
    Service,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InferencePoolSpec {
    /// Where the cluster does not serve InferencePools: `Fail` (default) or `Service`.
    #[serde(default)]
    pub when_unavailable: Option<PoolFallback>,
    /// Weights (0–100) of the picker's scorers; the upstream default profile's when
    /// omitted (queue 2, kvCache 2, prefixCache 3).
    #[serde(default)]
    pub scorers: Option<ScorerWeights>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScorerWeights {
    /// Prefers servers with fewer waiting requests (`queue-scorer`).
    #[serde(default)]
    pub queue: Option<i64>,
    /// Prefers servers with more free KV cache (`kv-cache-utilization-scorer`).
    #[serde(default)]
    pub kv_cache: Option<i64>,
    /// Prefers servers likely to hold the prompt's prefix in cache (`prefix-cache-scorer`).
    #[serde(default)]
    pub prefix_cache: Option<i64>,
}

impl ScorerWeights {
    pub const DEFAULT_QUEUE: i64 = 2;
    pub const DEFAULT_KV_CACHE: i64 = 2;
    pub const DEFAULT_PREFIX_CACHE: i64 = 3;

    /// `(queue, kvCache, prefixCache)` with the defaults filled in.
    pub fn resolved(&self) -> (i64, i64, i64) {
        (
            self.queue.unwrap_or(Self::DEFAULT_QUEUE),
            self.kv_cache.unwrap_or(Self::DEFAULT_KV_CACHE),
            self.prefix_cache.unwrap_or(Self::DEFAULT_PREFIX_CACHE),
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProbeSpec {
    /// How long the model may take to load before the pod is restarted; engine default when `null`.
    #[serde(default)]
    pub startup_timeout_seconds: Option<i64>,
    /// HTTP path answering 200 when the engine is ready; engine default when `null`.
    #[serde(default)]
    pub health_path: Option<String>,
}

/// How a new generation replaces the old pods (a Deployment's rolling update). GPU pods
/// default to one at a time with no surge (`maxSurge: 0`, `maxUnavailable: 1`): a surge pod
/// needs spare GPUs, which a full node pool does not have. Others take Kubernetes' 25%/25%.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    /// Pods above `replicas` during a rollout: a count or a percentage (`"25%"`).
    #[serde(default)]
    pub max_surge: Option<serde_json::Value>,
    /// Pods below `replicas` during a rollout: a count or a percentage.
    #[serde(default)]
    pub max_unavailable: Option<serde_json::Value>,
}

/// How a pod stops.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShutdownSpec {
    /// Seconds a stopping pod keeps serving before the engine is told to stop, while the
    /// Service and Gateway stop sending it requests (0 to 600; server default when `null`).
    #[serde(default)]
    pub drain_seconds: Option<i64>,
    /// Seconds the whole shutdown may take, drain included, so streams can finish
    /// (1 to 3600; server default when `null`).
    #[serde(default)]
    pub grace_period_seconds: Option<i64>,
}

/// How the model server's pods run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecuritySpec {
    /// `restricted` (default) or `image-default`.
    #[serde(default)]
    pub profile: SecurityProfile,
}

/// The pods' security context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SecurityProfile {
    /// Passes PodSecurity `restricted`: not root, no privilege escalation, every capability
    /// dropped, the runtime's default seccomp profile, writable volumes owned by the user.
    #[default]
    Restricted,
    /// No security context: the image's own user (often root). For engines or images that
    /// need it, in namespaces that allow it.
    ImageDefault,
}

/// The user and group id pods run as under [`SecurityProfile::Restricted`]. Not a spec field:
/// choosing users on the node is the platform's business, not a deployment's.
pub const RUN_AS_USER: i64 = 1000;

/// A parsed `model.source`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    HuggingFace { repo: String },
    Pvc { claim: String, path: String },
    Oci { reference: String },
    S3 { bucket: String, key: String },
}

impl ModelSource {
    pub fn parse(s: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = s.split_once("://") else {
            return Err(format!(
                "`{s}` must be a URI: hf://org/name, pvc://claim/path, oci://registry/repo:tag or s3://bucket/key"
            ));
        };
        match scheme {
            "hf" => {
                let parts: Vec<&str> = rest.split('/').collect();
                if parts.is_empty()
                    || parts.len() > 2
                    || !parts.iter().all(|p| HF_REPO_PART.is_match(p))
                {
                    return Err(format!("`{s}`: expected hf://org/name"));
                }
                Ok(Self::HuggingFace {
                    repo: rest.to_owned(),
                })
            }
            "pvc" => {
                let (claim, path) = rest.split_once('/').unwrap_or((rest, ""));
                if !is_dns1123_subdomain(claim) {
                    return Err(format!(
                        "`{s}`: the claim name `{claim}` is not a valid PVC name"
                    ));
                }
                if path.split('/').any(|seg| seg == "..") {
                    return Err(format!("`{s}`: the path must not contain `..`"));
                }
                Ok(Self::Pvc {
                    claim: claim.to_owned(),
                    path: path.trim_end_matches('/').to_owned(),
                })
            }
            "oci" => {
                if !IMAGE_REFERENCE.is_match(rest) {
                    return Err(format!("`{s}`: expected oci://registry/repository[:tag]"));
                }
                Ok(Self::Oci {
                    reference: rest.to_owned(),
                })
            }
            "s3" => {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                let bucket_ok = (3..=63).contains(&bucket.len())
                    && bucket.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-'
                    });
                if !bucket_ok {
                    return Err(format!("`{s}`: `{bucket}` is not a valid S3 bucket name"));
                }
                Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                })
            }
            other => Err(format!(
                "unsupported scheme `{other}://`; use hf://, pvc://, oci:// or s3://"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(spec: serde_json::Value) -> Result<DeploymentSpec, FieldErrors> {
        let spec: DeploymentSpec = serde_json::from_value(spec).expect("deserialises");
        spec.parse("qwen", &SpecLimits::default()).map(|s| s.spec)
    }

    fn fields(result: Result<DeploymentSpec, FieldErrors>) -> Vec<String> {
        result
            .expect_err("should be invalid")
            .into_vec()
            .into_iter()
            .map(|e| e.field)
            .collect()
    }

    #[test]
    fn a_minimal_spec_gets_context_free_defaults() {
        let spec = parse(json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}})).unwrap();
        assert_eq!(spec.spec_version, CURRENT_SPEC_VERSION);
        assert_eq!(spec.replicas, Some(1));
        assert_eq!(spec.engine.port, Some(8000));
        assert_eq!(spec.model.served_name.as_deref(), Some("qwen"));
        assert_eq!(
            spec.engine.image, None,
            "engine defaults are resolved later"
        );
    }

    #[test]
    fn model_sources_are_checked_per_scheme() {
        for ok in [
            "hf://Qwen/Qwen2.5-0.5B",
            "hf://gpt2",
            "pvc://models/llama/8b",
            "pvc://models",
            "oci://registry.example.com/models/llama:8b",
            "s3://my-bucket/llama/8b",
        ] {
            assert!(ModelSource::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "Qwen/Qwen2.5",
            "ftp://x/y",
            "hf://a/b/c",
            "pvc://Bad_Claim/x",
            "pvc://c/../etc",
            "s3://ab",
            "oci://UPPER/case",
        ] {
            assert!(ModelSource::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_problem_is_reported_with_its_path() {
        let result = parse(json!({
            "model": {"source": "nope"},
            "engine": {"image": "Not An Image", "port": 70000, "env": [{"name": "1BAD", "value": "x"}], "tensorParallelSize": 2},
            "replicas": -1,
            "resources": {"cpu": "lots", "gpu": {"count": 1, "resourceName": "gpu"}},
            "scheduling": {"tolerations": [{"operator": "Exists", "value": "x"}]},
            "routing": {"gateway": "just-a-name", "pathPrefix": "no-slash"},
            "labels": {"modelplane.io/owner": "me", "app.kubernetes.io/name": "x", "ok": "has space"}
        }));
        let mut got = fields(result);
        got.sort();
        let mut want = vec![
            "spec.model.source",
            "spec.engine.image",
            "spec.engine.port",
            "spec.engine.env[0].name",
            "spec.replicas",
            "spec.resources.cpu",
            "spec.resources.gpu.count",
            "spec.resources.gpu.resourceName",
            "spec.scheduling.tolerations[0].value",
            "spec.routing.gateway",
            "spec.routing.pathPrefix",
            "spec.labels.modelplane.io/owner",
            "spec.labels.app.kubernetes.io/name",
            "spec.labels.ok",
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn replicas_respect_the_configured_maximum() {
        let spec: DeploymentSpec =
            serde_json::from_value(json!({"model": {"source": "hf://a/b"}, "replicas": 5}))
                .unwrap();
        assert!(
            spec.clone()
                .parse(
                    "qwen",
                    &SpecLimits {
                        max_replicas: 5,
                        ..SpecLimits::default()
                    }
                )
                .is_ok()
        );
        let errors = spec
            .parse(
                "qwen",
                &SpecLimits {
                    max_replicas: 4,
                    ..SpecLimits::default()
                },
            )
            .unwrap_err();
        assert_eq!(errors.as_slice()[0].field, "spec.replicas");
    }

    #[test]
    fn gateway_references_parse_with_an_optional_section() {
        assert_eq!(
            parse_gateway_ref("gw/inference/http").unwrap(),
            ("gw".into(), "inference".into(), Some("http".into()))
        );
        assert!(parse_gateway_ref("gw/inference").unwrap().2.is_none());
        assert!(parse_gateway_ref("gw").is_err());
        assert!(parse_gateway_ref("a/b/c/d").is_err());
    }

    #[test]
    fn image_references_follow_the_docker_grammar() {
        for ok in [
            "vllm/vllm-openai:v0.11.0",
            "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1",
            "localhost:5000/x",
            "nginx",
            "registry.example.com/a/b@sha256:0123456789012345678901234567890123456789012345678901234567890123",
        ] {
            assert!(IMAGE_REFERENCE.is_match(ok), "{ok}");
        }
        for bad in ["", "UPPER", "a b", "x:", ":tag"] {
            assert!(!IMAGE_REFERENCE.is_match(bad), "{bad}");
        }
    }
}
