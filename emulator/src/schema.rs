//! The slice of the OpenAPI schema that merging needs: how each list is merged.
//!
//! Server-side apply uses `x-kubernetes-list-type`/`list-map-keys`; strategic merge
//! patch uses `patchStrategy`/`patchMergeKey`. They differ for a few lists (e.g.
//! container ports are keyed by containerPort+protocol for apply, containerPort for SMP).
//! The table follows the `+listType`/`+listMapKey` markers and `patchStrategy` tags of
//! k8s.io/api's core/v1 and apps/v1 types for the fields these kinds use; `hostIPs`
//! (atomic for apply, merged by ip in SMP) is treated as atomic for both.

use serde_json::{Map, Value};

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
    if kind.custom {
        // CRD lists are atomic unless the schema says listType=map.
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
    if kind.custom {
        return false;
    }
    // Service selectors are atomic maps; metav1.LabelSelector is an atomic struct.
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
                | "involvedObject")
        )
    )
}
