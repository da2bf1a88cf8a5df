//! The kind table: every served resource is one [`ResourceKind`] entry.
//!
//! Adding a kind is a table entry; all request handling is generic over it.

use serde_json::Value;

/// Which optional API group family a kind belongs to (so it can be switched off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Built into every Kubernetes API server.
    Builtin,
    /// Gateway API CRDs (gateway.networking.k8s.io).
    GatewayApi,
    /// Gateway API Inference Extension CRDs (inference.networking.k8s.io).
    Inference,
    /// Served from a CustomResourceDefinition installed at run time.
    Installed,
}

/// When `metadata.generation` is bumped on update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// The kind does not track generation.
    None,
    /// Bumped when `.spec` changes.
    Spec,
    /// Bumped when `.spec` or `metadata.annotations` change (Deployments, for legacy rollback).
    SpecAndAnnotations,
    /// Bumped when anything but `.metadata` and `.status` changes (custom resources).
    AllButMetadataStatus,
}

/// The naming rule enforced on `metadata.name`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// RFC 1123 subdomain (most kinds).
    Subdomain,
    /// RFC 1123 label (namespaces; Services too, since the RelaxedServiceNameValidation
    /// feature (KEP-5311) let their names start with a digit).
    Label1123,
    /// Path segment: anything without '/' or '%' and not '.' or '..' (events, RBAC kinds).
    PathSegment,
}

/// One served resource type.
#[derive(Debug)]
pub struct ResourceKind {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub namespaced: bool,
    /// Has a `/status` subresource (status is ignored on the main endpoint).
    pub status_subresource: bool,
    /// Served from a CustomResourceDefinition (no strategic merge patch, atomic lists).
    pub custom: bool,
    pub generation: Generation,
    pub name_rule: NameRule,
    pub family: Family,
    /// Field selector labels supported besides metadata.name / metadata.namespace.
    pub field_labels: &'static [&'static str],
    /// The served version of an installed CustomResourceDefinition this kind comes from:
    /// its schema, rules, printer columns and subresources. `None` for built-in kinds and
    /// for the built-in fallback definitions of the Gateway API and InferencePool kinds
    /// (served without a schema when no CRD is installed).
    pub(crate) crd: Option<&'static crate::crd::Version>,
}

impl ResourceKind {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` or `deployments.apps`, as used in error messages.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Pod` or `Deployment.apps`, as used in Invalid error messages.
    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.to_string()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        match self.crd {
            Some(v) => v.list_kind.clone(),
            None => format!("{}List", self.kind),
        }
    }

    /// The storage key's group and resource: every version of a kind shares them.
    pub fn storage_key(&self) -> (&'static str, &'static str) {
        (self.group, self.plural)
    }

    /// Does the main endpoint of this kind carry a status that a subresource owns?
    pub fn has_status(&self) -> bool {
        self.status_subresource
    }

    /// Whether an immediate DELETE answers with the deleted object (the registry's
    /// `ReturnDeletedObject`) rather than a success Status.
    pub fn returns_deleted_object(&self) -> bool {
        matches!(
            (self.group, self.plural),
            (
                "",
                "pods" | "services" | "serviceaccounts" | "persistentvolumeclaims" | "namespaces"
            )
        )
    }

    /// Extra subresources besides `status` (served for these kinds only).
    pub fn extra_subresources(&self) -> &'static [&'static str] {
        if let Some(v) = self.crd {
            return if v.scale.is_some() { &["scale"] } else { &[] };
        }
        match (self.group, self.plural) {
            ("", "pods") => &["binding", "proxy"],
            ("", "services") => &["proxy"],
            ("", "namespaces") => &["finalize"],
            ("apps", "deployments") | ("apps", "replicasets") => &["scale"],
            _ => &[],
        }
    }
}

const POD_FIELDS: &[&str] = &[
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
];
const EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

macro_rules! kind {
    ($group:expr, $version:expr, $kind:expr, $plural:expr, $singular:expr, namespaced: $ns:expr,
     status: $status:expr, custom: $custom:expr, generation: $gen:expr, names: $names:expr,
     family: $family:expr, short: $short:expr, categories: $cats:expr, fields: $fields:expr) => {
        ResourceKind {
            group: $group,
            version: $version,
            kind: $kind,
            plural: $plural,
            singular: $singular,
            short_names: $short,
            categories: $cats,
            namespaced: $ns,
            status_subresource: $status,
            custom: $custom,
            generation: $gen,
            name_rule: $names,
            family: $family,
            field_labels: $fields,
            crd: None,
        }
    };
}

use Family::*;
use Generation as G;
use NameRule as N;

/// Every kind the emulator knows. Order matters only for discovery output.
pub static KINDS: &[ResourceKind] = &[
    kind!("", "v1", "Namespace", "namespaces", "namespace", namespaced: false, status: true, custom: false,
          generation: G::None, names: N::Label1123, family: Builtin, short: &["ns"], categories: &[], fields: &["status.phase"]),
    kind!("", "v1", "Node", "nodes", "node", namespaced: false, status: true, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["no"], categories: &[], fields: &["spec.unschedulable"]),
    kind!("", "v1", "Pod", "pods", "pod", namespaced: true, status: true, custom: false,
          generation: G::Spec, names: N::Subdomain, family: Builtin, short: &["po"], categories: &["all"], fields: POD_FIELDS),
    kind!("", "v1", "Service", "services", "service", namespaced: true, status: true, custom: false,
          generation: G::None, names: N::Label1123, family: Builtin, short: &["svc"], categories: &["all"], fields: &[]),
    kind!("", "v1", "Event", "events", "event", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &["ev"], categories: &[], fields: EVENT_FIELDS),
    kind!("", "v1", "Secret", "secrets", "secret", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &[], categories: &[], fields: &["type"]),
    kind!("", "v1", "ConfigMap", "configmaps", "configmap", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["cm"], categories: &[], fields: &[]),
    kind!("", "v1", "ServiceAccount", "serviceaccounts", "serviceaccount", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["sa"], categories: &[], fields: &[]),
    kind!("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim", namespaced: true, status: true, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["pvc"], categories: &[], fields: &[]),
    // Admission reads them for pods (src/admission.rs: LimitRanger and ResourceQuota);
    // the simulated cluster's quota controller keeps a ResourceQuota's status.
    kind!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", namespaced: true, status: true, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["quota"], categories: &[], fields: &[]),
    kind!("", "v1", "LimitRange", "limitranges", "limitrange", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["limits"], categories: &[], fields: &[]),
    kind!("apps", "v1", "Deployment", "deployments", "deployment", namespaced: true, status: true, custom: false,
          generation: G::SpecAndAnnotations, names: N::Subdomain, family: Builtin, short: &["deploy"], categories: &["all"], fields: &[]),
    kind!("apps", "v1", "ReplicaSet", "replicasets", "replicaset", namespaced: true, status: true, custom: false,
          generation: G::Spec, names: N::Subdomain, family: Builtin, short: &["rs"], categories: &["all"], fields: &[]),
    // Served from core/v1 Event storage (see conversion.rs).
    kind!("events.k8s.io", "v1", "Event", "events", "event", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &["ev"], categories: &[], fields: &[]),
    // Service endpoints (written by the simulated cluster's EndpointSlice controller).
    kind!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", namespaced: true, status: false, custom: false,
          generation: G::AllButMetadataStatus, names: N::Subdomain, family: Builtin, short: &[], categories: &[], fields: &["addressType"]),
    // Leader election (kube-runtime / client-go leases).
    kind!("coordination.k8s.io", "v1", "Lease", "leases", "lease", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &[], categories: &[], fields: &[]),
    kind!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", namespaced: true, status: true, custom: false,
          generation: G::Spec, names: N::Subdomain, family: Builtin, short: &["pdb"], categories: &[], fields: &[]),
    // RBAC objects are stored and validated; nothing enforces them (no authorization).
    kind!("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", "clusterrolebinding", namespaced: false, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &[], categories: &[], fields: &[]),
    kind!("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", "clusterrole", namespaced: false, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &[], categories: &[], fields: &[]),
    kind!("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", "rolebinding", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &[], categories: &[], fields: &[]),
    kind!("rbac.authorization.k8s.io", "v1", "Role", "roles", "role", namespaced: true, status: false, custom: false,
          generation: G::None, names: N::PathSegment, family: Builtin, short: &[], categories: &[], fields: &[]),
    kind!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", namespaced: false, status: false, custom: false,
          generation: G::None, names: N::Subdomain, family: Builtin, short: &["pc"], categories: &[], fields: &[]),
    kind!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", namespaced: false, status: true, custom: false,
          generation: G::Spec, names: N::Subdomain, family: Builtin, short: &["crd", "crds"], categories: &["api-extensions"], fields: &[]),
    // The built-in fallback definitions of the custom kinds modelplane writes: served
    // without a schema until their CustomResourceDefinitions are installed, which then
    // replace them (see crd/mod.rs).
    kind!("gateway.networking.k8s.io", "v1", "GatewayClass", "gatewayclasses", "gatewayclass", namespaced: false, status: true, custom: true,
          generation: G::AllButMetadataStatus, names: N::Subdomain, family: GatewayApi, short: &["gc"], categories: &["gateway-api"], fields: &[]),
    kind!("gateway.networking.k8s.io", "v1", "Gateway", "gateways", "gateway", namespaced: true, status: true, custom: true,
          generation: G::AllButMetadataStatus, names: N::Subdomain, family: GatewayApi, short: &["gtw"], categories: &["gateway-api"], fields: &[]),
    kind!("gateway.networking.k8s.io", "v1", "HTTPRoute", "httproutes", "httproute", namespaced: true, status: true, custom: true,
          generation: G::AllButMetadataStatus, names: N::Subdomain, family: GatewayApi, short: &[], categories: &["gateway-api"], fields: &[]),
    kind!("inference.networking.k8s.io", "v1", "InferencePool", "inferencepools", "inferencepool", namespaced: true, status: true, custom: true,
          generation: G::AllButMetadataStatus, names: N::Subdomain, family: Inference, short: &["infpool"], categories: &[], fields: &[]),
];

/// The set of kinds one emulator serves (optional families may be switched off).
#[derive(Debug, Clone)]
pub struct Kinds {
    enabled: Vec<&'static ResourceKind>,
    /// The enabled kinds by `kind` (the garbage collector looks owners up by it).
    by_kind: std::collections::HashMap<&'static str, Vec<&'static ResourceKind>>,
}

impl Kinds {
    pub fn new(gateway_api: bool, inference: bool) -> Self {
        Self::from_list(
            KINDS
                .iter()
                .filter(|k| match k.family {
                    Builtin => true,
                    GatewayApi => gateway_api,
                    Inference => inference,
                    Installed => true,
                })
                .collect(),
        )
    }

    fn from_list(enabled: Vec<&'static ResourceKind>) -> Self {
        let mut by_kind: std::collections::HashMap<&'static str, Vec<&'static ResourceKind>> =
            std::collections::HashMap::new();
        for k in &enabled {
            by_kind.entry(k.kind).or_default().push(k);
        }
        Kinds { enabled, by_kind }
    }

    /// This set with every version of `group`/`plural` replaced by `versions` (a CRD was
    /// established or changed; an empty list stops serving the resource).
    pub(crate) fn replacing(
        &self,
        group: &str,
        plural: &str,
        versions: &[&'static ResourceKind],
    ) -> Kinds {
        let mut enabled: Vec<&'static ResourceKind> = self
            .enabled
            .iter()
            .copied()
            .filter(|k| (k.group, k.plural) != (group, plural))
            .collect();
        enabled.extend_from_slice(versions);
        Self::from_list(enabled)
    }

    /// The version whose objects are stored (a CRD's `storage: true` version; the only
    /// version of anything else).
    pub fn storage_version(&self, group: &str, plural: &str) -> Option<&'static ResourceKind> {
        let mut versions = self
            .enabled
            .iter()
            .copied()
            .filter(|k| k.group == group && k.plural == plural);
        let first = versions.next()?;
        Some(
            std::iter::once(first)
                .chain(versions)
                .find(|k| k.crd.is_none_or(|v| v.storage))
                .unwrap_or(first),
        )
    }

    /// The versions served in `group`, highest priority first (the preferred one).
    pub fn versions(&self, group: &str) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for k in &self.enabled {
            if k.group == group && !out.contains(&k.version) {
                out.push(k.version);
            }
        }
        out.sort_by_key(|v| version_priority(v));
        out
    }

    pub fn all(&self) -> &[&'static ResourceKind] {
        &self.enabled
    }

    /// Looks a kind up by its URL coordinates.
    pub fn by_resource(
        &self,
        group: &str,
        version: &str,
        plural: &str,
    ) -> Option<&'static ResourceKind> {
        self.enabled
            .iter()
            .copied()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
    }

    /// Looks a kind up by apiVersion and kind (as found in object bodies).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&'static ResourceKind> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.by_kind
            .get(kind)?
            .iter()
            .copied()
            .find(|k| k.group == group && k.version == version)
    }

    /// Groups served (excluding the legacy core group), in discovery order.
    pub fn groups(&self) -> Vec<&'static str> {
        let mut out: Vec<&'static str> = Vec::new();
        for k in &self.enabled {
            if !k.group.is_empty() && !out.contains(&k.group) {
                out.push(k.group);
            }
        }
        out
    }

    pub fn in_group_version(&self, group: &str, version: &str) -> Vec<&'static ResourceKind> {
        self.enabled
            .iter()
            .copied()
            .filter(|k| k.group == group && k.version == version)
            .collect()
    }

    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.enabled
            .iter()
            .any(|k| k.group == group && k.version == version)
    }
}

/// Kubernetes version ordering (apimachinery `version.CompareKubeAwareVersionStrings`):
/// GA before beta before alpha, higher numbers first, anything else last, by name.
fn version_priority(v: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = v.strip_prefix('v').and_then(|rest| {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: u64 = rest[..digits].parse().ok()?;
        let tail = &rest[digits..];
        let (level, minor) = match tail {
            "" => (0, 0),
            t if t.starts_with("beta") => (1, t[4..].parse().ok()?),
            t if t.starts_with("alpha") => (2, t[5..].parse().ok()?),
            _ => return None,
        };
        Some((level, major, minor))
    });
    match parsed {
        Some((level, major, minor)) => (
            level,
            std::cmp::Reverse(major),
            std::cmp::Reverse(minor),
            String::new(),
        ),
        None => (3, std::cmp::Reverse(0), std::cmp::Reverse(0), v.to_string()),
    }
}

/// Reads `metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// Mutable access to `metadata`, creating it when absent.
pub fn meta_mut(obj: &mut Value) -> &mut serde_json::Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = Value::Object(Default::default());
    }
    obj["metadata"]
        .as_object_mut()
        .expect("metadata is an object")
}
