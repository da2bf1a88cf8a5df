//! A stored spec with its defaults resolved: what the worker builds objects from and
//! reports status against.
//!
//! [`DeploymentSpec`] keeps the user's JSON as written (with the context-free defaults
//! filled in, so the API shows them). Everything that reads a spec to act on it reads a
//! [`ServingSpec`] instead: concrete values, parsed sources and quantities, built once by
//! [`DeploymentSpec::serving`]. No consumer applies a default of its own.

use super::errors::FieldErrors;
use super::quantity::Quantity;
use super::spec::{
    Access, CURRENT_SPEC_VERSION, DEFAULT_PORT, DEFAULT_REPLICAS, DeploymentSpec, EngineKind,
    EnvVar, MAX_SPEC_BYTES, ModelSource, RoleSpec, SecurityProfile, SpecLimits,
    find_nul_characters, validate_user_map,
};

/// `/dev/shm` of GPU engines when the spec names no size: engines exchange tensors there,
/// and the container runtime's default (64 MiB) is too small.
pub const DEFAULT_SHARED_MEMORY: &str = "2Gi";
const DEFAULT_HEALTH_PATH: &str = "/health";
const ROLLOUT_COUNT: &str = "must be a count of 0 or more, or a percentage from \"0%\" to \"100%\"";

/// A valid spec with every default that needs no server configuration resolved.
/// (Defaults that do — the engine image, the startup budget, the GPU resource name, pod
/// requests and grace periods — come from [`super::EngineDefaults`] where objects are built.)
#[derive(Debug, Clone, PartialEq)]
pub struct ServingSpec {
    /// The spec as stored, for what has no default (labels, args, env, scheduling, …).
    pub spec: DeploymentSpec,
    pub replicas: i32,
    pub port: i32,
    pub model: ModelSource,
    /// The name clients send as `model`.
    pub served_name: String,
    /// GPUs per pod: the spec's count, else tensor × pipeline parallel size (over the
    /// nodes of a group), else one when a GPU is asked for at all, else none.
    pub gpus: i32,
    /// Pods per replica: 1, or a LeaderWorkerSet group's size (`spec.nodesPerReplica`).
    pub nodes: i32,
    pub health_path: String,
    /// CPU and memory: requests and limits both when set.
    pub cpu: Option<Quantity>,
    pub memory: Option<Quantity>,
    /// The size of `/dev/shm`: the spec's, else [`DEFAULT_SHARED_MEMORY`] for every engine
    /// but `sim`.
    pub shared_memory: Option<Quantity>,
    /// Where the download cache lives, if anywhere.
    pub cache: Option<CacheStorage>,
    /// Pods meet PodSecurity `restricted`.
    pub restricted: bool,
    /// Pods a rollout may add above `replicas`, and take away below it. GPU pods go one at
    /// a time without surge (a spare GPU is rare); others 25% each way.
    pub max_surge: PodCount,
    pub max_unavailable: PodCount,
    /// The LoRA adapters, their sources parsed (hf://, pvc:// or s3://).
    pub adapters: Vec<Adapter>,
    /// Prefill/decode disaggregation: each role's pods (`replicas` is their sum).
    pub roles: Option<Roles>,
}

/// A role of a disaggregated deployment, as the upstream endpoint picker's role label
/// (`llm-d.ai/role`) names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ServingRole {
    Prefill,
    Decode,
}

impl ServingRole {
    pub const ALL: [ServingRole; 2] = [ServingRole::Prefill, ServingRole::Decode];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prefill => "prefill",
            Self::Decode => "decode",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// Both roles' pods.
#[derive(Debug, Clone, PartialEq)]
pub struct Roles {
    pub prefill: RoleServing,
    pub decode: RoleServing,
}

impl Roles {
    pub fn get(&self, role: ServingRole) -> &RoleServing {
        match role {
            ServingRole::Prefill => &self.prefill,
            ServingRole::Decode => &self.decode,
        }
    }
}

/// One role's pods, its defaults resolved from the spec's.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleServing {
    pub replicas: i32,
    pub gpus: i32,
    pub cpu: Option<Quantity>,
    pub memory: Option<Quantity>,
    pub shared_memory: Option<Quantity>,
    /// Appended to the engine's arguments.
    pub args: Vec<String>,
    /// Added to the engine's environment (replacing a variable of the same name).
    pub env: Vec<EnvVar>,
}

impl ServingSpec {
    /// The spec one role's pods run: its counts and resources, and the engine's
    /// arguments and environment with the role's. `self` without roles is returned as is.
    pub fn for_role(&self, role: ServingRole) -> ServingSpec {
        let Some(roles) = &self.roles else {
            return self.clone();
        };
        let r = roles.get(role);
        let mut out = self.clone();
        out.replicas = r.replicas;
        out.gpus = r.gpus;
        out.cpu = r.cpu.clone();
        out.memory = r.memory.clone();
        out.shared_memory = r.shared_memory.clone();
        out.spec.engine.args.extend(r.args.iter().cloned());
        let env = &mut out.spec.engine.env;
        env.retain(|v| !r.env.iter().any(|o| o.name == v.name));
        env.extend(r.env.iter().cloned());
        let (surge, unavailable) = self
            .spec
            .rollout_bounds(Some(r.gpus), &mut FieldErrors::new());
        out.max_surge = surge;
        out.max_unavailable = unavailable;
        out.roles = None;
        out
    }

    /// The role pods of `role`, or the whole deployment's without roles.
    pub fn role_replicas(&self, role: ServingRole) -> Option<i32> {
        self.roles.as_ref().map(|r| r.get(role).replicas)
    }
}

/// A LoRA adapter the engine serves under `name`.
#[derive(Debug, Clone, PartialEq)]
pub struct Adapter {
    pub name: String,
    pub source: ModelSource,
    /// The Secret an s3:// adapter is fetched with.
    pub secret: Option<String>,
}

/// A number of pods: a count, or a percentage of `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodCount {
    Count(i32),
    Percent(u8),
}

impl PodCount {
    /// A count of 0 or more, or a percentage from `"0%"` to `"100%"`.
    pub fn parse(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::Number(n) => n
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .filter(|n| *n >= 0)
                .map(Self::Count),
            serde_json::Value::String(s) => s
                .strip_suffix('%')
                .and_then(|p| p.parse::<u8>().ok())
                .filter(|p| *p <= 100)
                .map(Self::Percent),
            _ => None,
        }
    }

    pub fn is_zero(self) -> bool {
        matches!(self, Self::Count(0) | Self::Percent(0))
    }
}

/// The download cache's volume.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheStorage {
    /// A PersistentVolumeClaim, shared by the pods.
    Claim(String),
    /// A pod-local emptyDir, of at most this size.
    EmptyDir(Option<Quantity>),
}

impl DeploymentSpec {
    /// Resolves this spec's defaults. Every spec [`DeploymentSpec::parse`] accepted resolves;
    /// one that does not (written by hand into the database, or by an older schema) is
    /// refused with the fields at fault, never assumed valid.
    pub fn serving(&self, served_name_default: &str) -> Result<ServingSpec, FieldErrors> {
        let mut errors = FieldErrors::new();
        let replicas = errors.check(
            "spec.replicas",
            in_range(
                self.replicas.unwrap_or(DEFAULT_REPLICAS),
                0,
                i64::from(i32::MAX),
            ),
        );
        let port = errors.check(
            "spec.engine.port",
            in_range(self.engine.port.unwrap_or(DEFAULT_PORT), 1, 65535),
        );
        let model = errors.check("spec.model.source", ModelSource::parse(&self.model.source));
        let gpu = self.resources.gpu.as_ref();
        // Parallel GPUs are split evenly over a group's nodes (`validate_multinode`).
        let nodes = self.nodes().max(1);
        let gpus = gpu
            .and_then(|g| g.count)
            .or(self.parallel_gpus().map(|n| n / nodes))
            .unwrap_or(if gpu.is_some() { 1 } else { 0 });
        let gpus = errors.check("spec.resources.gpu.count", in_range(gpus, 0, 1024));
        let quantity = |errors: &mut FieldErrors, field: &str, value: &Option<String>| {
            value
                .as_deref()
                .and_then(|v| errors.check(field, Quantity::parse(v)))
        };
        let cpu = quantity(&mut errors, "spec.resources.cpu", &self.resources.cpu);
        let memory = quantity(&mut errors, "spec.resources.memory", &self.resources.memory);
        let shared_memory = match &self.resources.shared_memory {
            Some(_) => quantity(
                &mut errors,
                "spec.resources.sharedMemory",
                &self.resources.shared_memory,
            ),
            None if self.engine.kind == EngineKind::Sim => None,
            None => Quantity::parse(DEFAULT_SHARED_MEMORY).ok(),
        };
        let (max_surge, max_unavailable) = self.rollout_bounds(gpus, &mut errors);
        let restricted = self.security.profile == SecurityProfile::Restricted;
        let cache = self.cache_storage(restricted, &mut errors);
        let adapters: Vec<Adapter> = self
            .adapters
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let source = errors.check(
                    &format!("spec.adapters[{i}].source"),
                    ModelSource::parse(&a.source),
                )?;
                Some(Adapter {
                    name: a.name.clone(),
                    source,
                    secret: a.secret_ref.as_ref().map(|s| s.name.clone()),
                })
            })
            .collect();
        let roles = self.disaggregation.as_ref().map(|d| Roles {
            prefill: self.role_serving(
                &d.prefill,
                "prefill",
                gpus,
                &cpu,
                &memory,
                &shared_memory,
                &mut errors,
            ),
            decode: self.role_serving(
                &d.decode,
                "decode",
                gpus,
                &cpu,
                &memory,
                &shared_memory,
                &mut errors,
            ),
        });
        let replicas = match &roles {
            Some(r) => Some(r.prefill.replicas + r.decode.replicas),
            None => replicas,
        };
        errors.finish(|| ServingSpec {
            spec: self.clone(),
            replicas: replicas.expect("checked"),
            port: port.expect("checked"),
            model: model.expect("checked"),
            served_name: self
                .model
                .served_name
                .clone()
                .unwrap_or_else(|| served_name_default.to_owned()),
            gpus: gpus.expect("checked"),
            nodes: i32::try_from(nodes).unwrap_or(1),
            health_path: self
                .probes
                .health_path
                .clone()
                .unwrap_or_else(|| DEFAULT_HEALTH_PATH.to_owned()),
            cpu,
            memory,
            shared_memory,
            cache,
            restricted,
            max_surge,
            max_unavailable,
            adapters,
            roles,
        })
    }

    /// One role's counts and resources: its own where it names them, else the spec's.
    #[allow(clippy::too_many_arguments)]
    fn role_serving(
        &self,
        role: &RoleSpec,
        name: &str,
        gpus: Option<i32>,
        cpu: &Option<Quantity>,
        memory: &Option<Quantity>,
        shared_memory: &Option<Quantity>,
        errors: &mut FieldErrors,
    ) -> RoleServing {
        let path = format!("spec.disaggregation.{name}");
        let replicas = errors
            .check(
                &format!("{path}.replicas"),
                in_range(
                    role.replicas.unwrap_or(DEFAULT_REPLICAS),
                    0,
                    i64::from(i32::MAX),
                ),
            )
            .unwrap_or(0);
        let Some(res) = &role.resources else {
            return RoleServing {
                replicas,
                gpus: gpus.unwrap_or(0),
                cpu: cpu.clone(),
                memory: memory.clone(),
                shared_memory: shared_memory.clone(),
                args: role.args.clone(),
                env: role.env.clone(),
            };
        };
        let quantity = |errors: &mut FieldErrors, field: &str, value: &Option<String>| {
            value.as_deref().and_then(|v| {
                errors.check(&format!("{path}.resources.{field}"), Quantity::parse(v))
            })
        };
        let role_gpus = res
            .gpu
            .as_ref()
            .and_then(|g| g.count)
            .map(|n| in_range(n, 0, 1024))
            .transpose();
        let role_gpus = errors
            .check(&format!("{path}.resources.gpu.count"), role_gpus)
            .flatten();
        RoleServing {
            replicas,
            gpus: role_gpus.or(gpus).unwrap_or(0),
            cpu: quantity(errors, "cpu", &res.cpu),
            memory: quantity(errors, "memory", &res.memory),
            shared_memory: quantity(errors, "sharedMemory", &res.shared_memory)
                .or_else(|| shared_memory.clone()),
            args: role.args.clone(),
            env: role.env.clone(),
        }
    }

    /// `maxSurge` and `maxUnavailable`, or their defaults: a GPU model surges no pod (there
    /// may be no spare GPU for one) and takes one down at a time.
    fn rollout_bounds(&self, gpus: Option<i32>, errors: &mut FieldErrors) -> (PodCount, PodCount) {
        let pod_count =
            |errors: &mut FieldErrors, field: &str, value: &Option<serde_json::Value>| {
                let value = value.as_ref()?;
                let parsed = PodCount::parse(value);
                if parsed.is_none() {
                    errors.push(field, ROLLOUT_COUNT);
                }
                parsed
            };
        let (default_surge, default_unavailable) = match gpus {
            Some(n) if n > 0 => (PodCount::Count(0), PodCount::Count(1)),
            _ => (PodCount::Percent(25), PodCount::Percent(25)),
        };
        let max_unavailable = pod_count(
            errors,
            "spec.rollout.maxUnavailable",
            &self.rollout.max_unavailable,
        )
        .unwrap_or(default_unavailable);
        let max_surge = pod_count(errors, "spec.rollout.maxSurge", &self.rollout.max_surge)
            .unwrap_or(
                // Asked never to go below `replicas`: the rollout then needs a pod of surge.
                if max_unavailable.is_zero() && default_surge.is_zero() {
                    PodCount::Count(1)
                } else {
                    default_surge
                },
            );
        if max_surge.is_zero() && max_unavailable.is_zero() {
            errors.push(
                "spec.rollout.maxUnavailable",
                "may not be 0 when maxSurge is 0: the rollout could never start",
            );
        }
        (max_surge, max_unavailable)
    }

    /// Where the download cache lives.
    fn cache_storage(&self, restricted: bool, errors: &mut FieldErrors) -> Option<CacheStorage> {
        let quantity = |errors: &mut FieldErrors, field: &str, value: &Option<String>| {
            value
                .as_deref()
                .and_then(|v| errors.check(field, Quantity::parse(v)))
        };
        match &self.storage.cache {
            Some(cache) => match &cache.claim_name {
                Some(claim) => Some(CacheStorage::Claim(claim.clone())),
                None => Some(CacheStorage::EmptyDir(quantity(
                    errors,
                    "spec.storage.cache.sizeLimit",
                    &cache.size_limit,
                ))),
            },
            // Under `restricted` the server is not root and cannot write to the image's
            // home: the download cache needs a writable place even when the spec names none.
            None if restricted => Some(CacheStorage::EmptyDir(None)),
            None => None,
        }
    }
}

fn in_range(value: i64, min: i64, max: i64) -> Result<i32, String> {
    if (min..=max).contains(&value) {
        Ok(i32::try_from(value).expect("within i32"))
    } else {
        Err(format!("must be between {min} and {max}"))
    }
}

/// Parsing lives beside what it yields (the spec knows nothing of [`ServingSpec`]).
impl DeploymentSpec {
    /// Validates a spec deserialised from user input, fills context-free defaults into it
    /// (they are stored, so the API shows them), and returns it with its defaults resolved,
    /// or every problem with its field path (prefixed `spec.`). `served_name_default` is the
    /// deployment's name, used when `model.servedName` is unset.
    pub fn parse(
        mut self,
        served_name_default: &str,
        limits: &SpecLimits,
    ) -> Result<ServingSpec, FieldErrors> {
        let mut errors = FieldErrors::new();
        if self.spec_version == 0 {
            self.spec_version = CURRENT_SPEC_VERSION;
        } else if self.spec_version != CURRENT_SPEC_VERSION {
            errors.push(
                "spec.specVersion",
                format!("must be {CURRENT_SPEC_VERSION} (or omitted)"),
            );
        }
        if let Some(autoscaling) = &self.autoscaling {
            autoscaling.validate(self.replicas, limits.max_replicas, &mut errors);
            if autoscaling.min_replicas == 0 && !limits.scale_to_zero {
                // A deployment at zero answers its first request only through the
                // activator: without one it would answer 503, so it is refused.
                errors.push(
                    "spec.autoscaling.minReplicas",
                    "must be at least 1: scaling to zero needs modelplane's activator, which this installation does not run (MODELPLANE_ACTIVATOR_PORT and MODELPLANE_ACTIVATOR_ADDRESSES)",
                );
            }
            self.replicas
                .get_or_insert(autoscaling.starting_replicas(None));
        }
        if self.access == Some(Access::Keys) && !limits.model_keys {
            errors.push(
                "spec.access",
                "cannot be keys: this installation does not run modelplane's key check (MODELPLANE_AUTHZ_PORT and MODELPLANE_ACTIVATOR_ADDRESSES or _SERVICE); use public",
            );
        }
        if let Some(roles) = &self.disaggregation {
            // The roles' counts are the deployment's; `replicas` is kept as their sum.
            let count = |r: &RoleSpec| r.replicas.unwrap_or(DEFAULT_REPLICAS);
            self.replicas = Some(count(&roles.prefill) + count(&roles.decode));
        }
        self.replicas.get_or_insert(DEFAULT_REPLICAS);
        self.engine.port.get_or_insert(DEFAULT_PORT);
        if self.model.served_name.is_none() {
            self.model.served_name = Some(served_name_default.to_owned());
        }

        self.validate_model(&mut errors);
        self.validate_engine(&mut errors);
        self.validate_adapters(&mut errors);
        self.validate_disaggregation(limits, &mut errors);
        self.validate_multinode(&mut errors);
        self.validate_contradictions(limits, &mut errors);
        let replicas = self.replicas.unwrap_or(DEFAULT_REPLICAS);
        if !(0..=limits.max_replicas).contains(&replicas) {
            errors.push(
                "spec.replicas",
                format!("must be between 0 and {}", limits.max_replicas),
            );
        }
        self.validate_resources(&mut errors);
        self.validate_scheduling(&mut errors);
        self.validate_storage(&mut errors);
        self.validate_routing(&mut errors);
        self.validate_probes(&mut errors);
        self.validate_rollout_and_shutdown(&mut errors);
        validate_user_map(&mut errors, "spec.labels", &self.labels, true);
        validate_user_map(&mut errors, "spec.podLabels", &self.pod_labels, true);
        validate_user_map(&mut errors, "spec.annotations", &self.annotations, false);
        // Postgres cannot store NUL in text or JSONB, and no Kubernetes field wants one.
        let json = serde_json::to_value(&self).expect("a spec serialises");
        find_nul_characters(&json, "spec", &mut errors);
        let size = json.to_string().len();
        if errors.is_empty() && size > MAX_SPEC_BYTES {
            errors.push(
                "spec",
                format!("must be at most {MAX_SPEC_BYTES} bytes as JSON (this one is {size})"),
            );
        }
        // Resolving checks what only it reads (the rollout counts); a field is named once.
        match self.serving(served_name_default) {
            Ok(serving) => errors.finish(|| serving),
            Err(resolving) => {
                for error in resolving.into_vec() {
                    if !errors.as_slice().iter().any(|e| e.field == error.field) {
                        errors.push(error.field, error.message);
                    }
                }
                Err(errors)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::SpecLimits;

    fn serving(spec: serde_json::Value) -> ServingSpec {
        let spec: DeploymentSpec = serde_json::from_value(spec).unwrap();
        spec.parse("qwen", &SpecLimits::default()).unwrap()
    }

    #[test]
    fn defaults_are_resolved_once_to_concrete_values() {
        let s = serving(json!({"model": {"source": "hf://a/b"}}));
        assert_eq!((s.replicas, s.port, s.gpus), (1, 8000, 0));
        assert_eq!(s.served_name, "qwen");
        assert_eq!(s.health_path, "/health");
        assert_eq!(s.model, ModelSource::HuggingFace { repo: "a/b".into() });
        assert_eq!(s.shared_memory.as_ref().map(Quantity::as_str), Some("2Gi"));
        // `restricted` is the default profile: the cache gets a writable place.
        assert_eq!(s.cache, Some(CacheStorage::EmptyDir(None)));
        let sim = serving(
            json!({"model": {"source": "hf://a/b"}, "engine": {"kind": "sim"}, "security": {"profile": "image-default"}}),
        );
        assert_eq!((sim.shared_memory, sim.cache), (None, None));
        let tp =
            serving(json!({"model": {"source": "hf://a/b"}, "engine": {"tensorParallelSize": 4}}));
        assert_eq!(tp.gpus, 4);
        let one = serving(json!({"model": {"source": "hf://a/b"}, "resources": {"gpu": {}}}));
        assert_eq!(one.gpus, 1);
    }

    #[test]
    fn a_stored_spec_that_is_not_valid_is_refused_with_its_fields_not_assumed() {
        let spec: DeploymentSpec = serde_json::from_value(
            json!({"model": {"source": "ftp://x"}, "replicas": -1, "engine": {"port": 70000}}),
        )
        .unwrap();
        let errors = spec.serving("qwen").unwrap_err();
        let fields: Vec<_> = errors.into_vec().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["spec.replicas", "spec.engine.port", "spec.model.source"]
        );
    }
}
