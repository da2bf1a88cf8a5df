//! Validated domain types and rules: names, specs, phases. No axum, sqlx or kube here.
//!
//! Every type is built by a `parse` function that collects *all* problems as
//! [`FieldError`]s with a JSON path, so a value that exists is valid.

mod access;
mod autoscaling;
mod canary;
mod capacity;
mod errors;
mod health;
mod json;
mod load;
mod names;
mod quantity;
mod records;
mod routing;
mod selector;
mod serving;
mod spec;
mod status;

pub use access::{ProjectAccess, Role, RoleSource, SubjectKind, TokenRole};
pub use autoscaling::{
    AutoscalingSpec, AutoscalingStatus, Decision, Observation, ScalingChange, ScalingLimit,
    ScalingMemory, ScalingMetric, ScalingTarget, decide,
};
pub use canary::{
    ACTIVATOR_SUFFIX, CANARY_SUFFIX, Canary, CanaryHeader, DEFAULT_CANARY_HEADER,
    KEY_CHECK_SERVICE, MAX_CANARY_WEIGHT, canary_object_name, check_canary_weight,
    check_not_canary_name,
};
pub use capacity::{
    CapacityReport, DailyUsage, Demand, DeploymentUsage, Fit, GpuCapacity, GpuNode, GpuQuota,
    GpuQuotaUse, GpuRequested, GpuShape, ProjectQuota, QuotaExceeded, QuotaSpec, QuotaUse,
    TrackDemand, UnavailableNode, UsageReport, check_quota, fit, gpu_quota_name,
};
pub use errors::{FieldError, FieldErrors, from_json_value, from_json_value_at};
pub use health::{CheckResult, ReadinessCheck};
pub use json::{canonical_json, parse_strict as parse_json_strict};
pub use load::{
    Load, LoadFigures, LoadSample, LoadUpdate, Metrics, MetricsDialect, Series, SeriesName, Track,
};
pub use names::{
    DeploymentName, ProjectName, is_dns1123_label, is_dns1123_subdomain, is_ip_literal,
    validate_label_key, validate_label_value, validate_path_prefix,
};
pub use quantity::Quantity;
pub use records::{
    ApiToken, AuditEvent, Change, ChangeKind, Deployment, EventKind, KeyUsage, KeyUsageDay,
    KeyUsageDeployment, ModelKey, Project, Revision, RoleBinding, TimelineEvent, entity_tag,
};
pub use routing::{RouteClaim, check_shared_gateway_rules, effective_path_prefix, is_path_prefix};
pub use selector::{LabelRequirement, LabelSelector};
pub use serving::{Adapter, CacheStorage, PodCount, RoleServing, Roles, ServingRole, ServingSpec};
pub use spec::{
    ADAPTER_NAME, Access, AdapterSpec, CURRENT_SPEC_VERSION, CacheVolume, DeploymentSpec,
    DisaggregationSpec, EngineDefaults, EngineKind, EngineSpec, EnvVar, GpuSpec, InferencePoolSpec,
    MAX_ADAPTERS, MAX_NODES_PER_REPLICA, ModelSource, ModelSpec, PodDefaults, PoolFallback,
    ProbeSpec, RUN_AS_USER, RUNTIME_LORA_ENV, ResourceSpec, RoleSpec, RolloutSpec, RoutingMode,
    RoutingSpec, SchedulingSpec, ScorerWeights, SecretKeyRef, SecretRef, SecurityProfile,
    SecuritySpec, ShutdownSpec, SpecLimits, StorageSpec, Toleration, check_extended_resource_name,
    group_object_name, parse_gateway_ref,
};
pub use status::{
    AdapterStatus, CanaryStatus, Condition, ConditionStatus, DeploymentStatus, Endpoints, Phase,
    ReplicaCounts, RoleStatus,
};
