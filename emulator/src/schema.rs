//! The slice of the OpenAPI schema that merging needs: how each list is merged.
//!
//! Server-side apply uses `x-kubernetes-list-type`/`list-map-keys`; strategic merge
//! patch uses `patchStrategy`/`patchMergeKey`. They differ for a few lists (e.g.
//! container ports are keyed by containerPort+protocol for apply, containerPort for SMP).
//! The table follows the `+listType`/`+listMapKey` markers and `patchStrategy` tags of
//! k8s.io/api's core/v1 and apps/v1 types for the fields these kinds use; `hostIPs`
//! (atomic for apply, merged by ip in SMP) is treated as atomic for both.

use serde_json::{Map, Value, json};

use crate::resources::ResourceKind;

/// How a list is merged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole (the default).
    Atomic,
    /// A set of scalars (`listType=set`, SMP `patchStrategy=merge` on scalars).
    Set,
    /// A map keyed by fields of its items.
    Map {
        /// The apply (structured merge) keys.
        keys: &'static [&'static str],
        /// The strategic-merge-patch merge key, when SMP merges this list.
        smp_key: Option<&'static str>,
    },
}

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// The list type for the list at `path` (field names from the object root; list items are skipped).
pub fn list_type(kind: &ResourceKind, path: &[&str]) -> ListType {
    let Some(&last) = path.last() else {
        return ListType::Atomic;
    };
    let parent = if path.len() >= 2 {
        path[path.len() - 2]
    } else {
        ""
    };
    // Metadata lists are the same for every kind, custom or not.
    if parent == "metadata" && path.len() == 2 {
        return match last {
            "finalizers" => ListType::Set,
            "ownerReferences" => ListType::Map {
                keys: &["uid"],
                smp_key: Some("uid"),
            },
            _ => ListType::Atomic,
        };
    }
    if let Some(v) = kind.crd {
        // An installed CRD's lists merge as its schema says (atomic when it says nothing).
        return v
            .lists
            .get(&path.join("."))
            .copied()
            .unwrap_or(ListType::Atomic);
    }
    if kind.custom {
        // The built-in fallback definitions: what the published schemas say for the
        // lists the emulator's own controllers write.
        return match (kind.kind, last) {
            (_, "conditions") => ListType::Map {
                keys: &["type"],
                smp_key: None,
            },
            ("Gateway", "listeners") if path.len() == 2 => ListType::Map {
                keys: &["name"],
                smp_key: None,
            },
            _ => ListType::Atomic,
        };
    }
    let map = |keys: &'static [&'static str], smp: &'static str| ListType::Map {
        keys,
        smp_key: Some(smp),
    };
    match last {
        l if CONTAINER_LISTS.contains(&l) => map(&["name"], "name"),
        "ports" if CONTAINER_LISTS.contains(&parent) => {
            map(&["containerPort", "protocol"], "containerPort")
        }
        "ports" if kind.kind == "Service" && path == ["spec", "ports"] => {
            map(&["port", "protocol"], "port")
        }
        "env" => map(&["name"], "name"),
        "volumes" => map(&["name"], "name"),
        "volumeMounts" => map(&["mountPath"], "mountPath"),
        "volumeDevices" => map(&["devicePath"], "devicePath"),
        "imagePullSecrets" => map(&["name"], "name"),
        "hostAliases" => map(&["ip"], "ip"),
        "topologySpreadConstraints" => map(&["topologyKey", "whenUnsatisfiable"], "topologyKey"),
        "resourceClaims" if parent == "spec" => map(&["name"], "name"),
        "conditions" => map(&["type"], "type"),
        "podIPs" => map(&["ip"], "ip"),
        "schedulingGates" => map(&["name"], "name"),
        // ServiceAccount.secrets; ResourceRequirements.claims (no SMP strategy).
        "secrets" if kind.kind == "ServiceAccount" => map(&["name"], "name"),
        "claims" if parent == "resources" => ListType::Map {
            keys: &["name"],
            smp_key: None,
        },
        "podCIDRs" => ListType::Set,
        "addresses" if kind.kind == "Node" => ListType::Map {
            keys: &["type"],
            smp_key: Some("type"),
        },
        "taints" => ListType::Atomic,
        "finalizers" if kind.kind == "Namespace" => ListType::Atomic,
        _ => ListType::Atomic,
    }
}

/// The apply key of a list-map item. Missing key fields take their schema default
/// (protocol defaults to TCP), as structured-merge-diff does.
pub fn item_key(item: &Value, keys: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    for k in keys {
        match item.get(*k) {
            Some(v) if !v.is_null() => {
                out.insert((*k).to_string(), v.clone());
            }
            _ if *k == "protocol" => {
                out.insert((*k).to_string(), Value::String("TCP".into()));
            }
            _ => {}
        }
    }
    out
}

/// Maps and structs the schema marks atomic (`mapType=atomic`, `structType=atomic`):
/// apply owns them as one field and merges replace them whole.
pub fn is_atomic_map(kind: &ResourceKind, path: &[&str]) -> bool {
    if let Some(v) = kind.crd {
        return v.atomic_maps.contains(&path.join("."));
    }
    if kind.custom {
        return false;
    }
    // Service selectors are atomic maps; metav1.LabelSelector is an atomic struct; so is
    // metav1.OwnerReference (`+structType=atomic`, apimachinery pkg/apis/meta/v1/types.go),
    // the items of `metadata.ownerReferences` (a list's items are walked with its path).
    if path == ["metadata", "ownerReferences"] {
        return true;
    }
    matches!(
        path.last(),
        Some(
            &("selector"
                | "nodeSelector"
                | "labelSelector"
                | "namespaceSelector"
                | "fieldRef"
                | "resourceFieldRef"
                | "configMapKeyRef"
                | "secretKeyRef"
                | "involvedObject"
                // rbac/v1 RoleRef (`x-kubernetes-map-type: atomic`).
                | "roleRef")
        )
    )
}

/// The object `Creater.New(kind)` gives, as `runtime.DefaultUnstructuredConverter` renders
/// it: the live object a create is compared with (the create handler in k8s.io/apiserver
/// `pkg/endpoints/handlers/create.go` passes it to the field manager). Struct fields that
/// are not pointers are always rendered (`{}`), and so are fields without `omitempty`
/// (`null` for nil slices and pointers, zero for scalars); metav1.Time renders `null`.
/// The json tags are those of k8s.io/api core/v1, apps/v1, discovery/v1, coordination/v1,
/// policy/v1, rbac/v1 and scheduling/v1 (status is left out: the main endpoint ignores it).
/// Custom resources start from an empty Unstructured object.
pub fn empty_object(kind: &ResourceKind) -> Value {
    if kind.custom {
        return Value::Object(Map::new());
    }
    let pod_template =
        || json!({"metadata": {"creationTimestamp": null}, "spec": {"containers": null}});
    let body = match (kind.group, kind.kind) {
        ("", "Namespace" | "Node" | "Service") => json!({"spec": {}}),
        ("", "Pod") => json!({"spec": {"containers": null}}),
        ("", "PersistentVolumeClaim") => json!({"spec": {"resources": {}}}),
        ("", "Event") => json!({
            "involvedObject": {}, "source": {}, "firstTimestamp": null, "lastTimestamp": null,
            "eventTime": null, "reportingComponent": "", "reportingInstance": ""
        }),
        ("apps", "Deployment") => json!({"spec": {
            "selector": null, "template": pod_template(), "strategy": {}
        }}),
        ("apps", "ReplicaSet") => json!({"spec": {"selector": null, "template": pod_template()}}),
        ("events.k8s.io", "Event") => {
            json!({"eventTime": null, "regarding": {}, "deprecatedSource": {},
            "deprecatedFirstTimestamp": null, "deprecatedLastTimestamp": null})
        }
        ("discovery.k8s.io", "EndpointSlice") => {
            json!({"addressType": "", "endpoints": null, "ports": null})
        }
        ("coordination.k8s.io", "Lease") | ("policy", "PodDisruptionBudget") => json!({"spec": {}}),
        ("scheduling.k8s.io", "PriorityClass") => json!({"value": 0}),
        // k8s.io/api rbac/v1: `rules` and the RoleRef fields have no omitempty.
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => json!({"rules": null}),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            json!({"roleRef": {"apiGroup": "", "kind": "", "name": ""}})
        }
        _ => json!({}),
    };
    let mut obj = body;
    obj.as_object_mut()
        .expect("an object")
        .insert("metadata".into(), json!({"creationTimestamp": null}));
    obj
}
