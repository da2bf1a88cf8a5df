//! Create- and update-time work that the real server's registry strategies and admission
//! plugins do for particular kinds: initial status, ServiceAccount/Priority/
//! DefaultTolerationSeconds pod admission, Service IP allocation, Namespace finalizers.

use serde_json::{Value, json};

use crate::resources::{ResourceKind, meta_str};
use crate::status::{ApiError, ApiResult};
use crate::store::{State, Store};

/// The status an object starts with on create (status subresources reset it).
pub(crate) fn initial_status(kind: &ResourceKind, obj: &Value) -> Option<Value> {
    match kind.kind {
        "Pod" => Some(json!({"phase": "Pending", "qosClass": qos_class(obj)})),
        "Service" => Some(json!({"loadBalancer": {}})),
        "Namespace" => Some(json!({"phase": "Active"})),
        "PersistentVolumeClaim" => Some(json!({"phase": "Pending"})),
        // Non-pointer Go status structs always serialise, if only as `{}`.
        "Deployment" | "ReplicaSet" => Some(json!({})),
        _ => None,
    }
}

/// QoS class of a pod: Guaranteed, Burstable or BestEffort.
fn qos_class(pod: &Value) -> &'static str {
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut any = false;
    let mut guaranteed = !containers.is_empty();
    for c in &containers {
        let req = c.pointer("/resources/requests").and_then(Value::as_object);
        let lim = c.pointer("/resources/limits").and_then(Value::as_object);
        any |= req.is_some_and(|r| !r.is_empty()) || lim.is_some_and(|l| !l.is_empty());
        let full = ["cpu", "memory"].iter().all(|r| {
            let l = lim.and_then(|l| l.get(*r));
            l.is_some() && req.and_then(|q| q.get(*r)).is_none_or(|q| Some(q) == l)
        });
        guaranteed &= full;
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Create-time work the real registries and admission plugins do for some kinds.
pub(crate) fn prepare_create(
    st: &State,
    store: &Store,
    kind: &ResourceKind,
    obj: &mut Value,
) -> ApiResult<()> {
    match kind.kind {
        "Namespace" => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        "Service" => {
            let spec = obj.get_mut("spec").and_then(Value::as_object_mut);
            if let Some(spec) = spec {
                let ty = spec
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("ClusterIP")
                    .to_string();
                if ty != "ExternalName" {
                    if spec
                        .get("clusterIP")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
                    {
                        let ip = allocate_cluster_ip(st);
                        spec.insert("clusterIP".into(), json!(ip));
                    }
                    let ip = spec["clusterIP"].clone();
                    spec.entry("clusterIPs").or_insert_with(|| json!([ip]));
                    spec.entry("ipFamilies").or_insert_with(|| json!(["IPv4"]));
                    spec.entry("ipFamilyPolicy")
                        .or_insert_with(|| json!("SingleStack"));
                }
                if (ty == "NodePort" || ty == "LoadBalancer")
                    && let Some(Value::Array(ports)) = spec.get_mut("ports")
                {
                    let mut used: Vec<i64> = Vec::new();
                    for p in ports.iter_mut() {
                        if p.get("nodePort").is_none() {
                            // The lowest free port of the default 30000-32767 range.
                            if let Some(free) = (30000..=32767)
                                .find(|n| !st.node_port_used(*n) && !used.contains(n))
                            {
                                used.push(free);
                                p["nodePort"] = json!(free);
                            }
                        }
                    }
                }
            }
        }
        "Pod" => {
            // Admission: ServiceAccount, Priority and DefaultTolerationSeconds plugins.
            let ns = meta_str(obj, "namespace").unwrap_or("").to_string();
            let name = meta_str(obj, "name").unwrap_or("").to_string();
            if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
                let sa = spec
                    .get("serviceAccountName")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or("default")
                    .to_string();
                let sa_kind = store.kinds().by_resource("", "v1", "serviceaccounts");
                let account = sa_kind.and_then(|k| st.get(k, &ns, &sa));
                if sa_kind.is_some() && account.is_none() {
                    return Err(ApiError::forbidden(
                        kind,
                        &name,
                        &format!(
                            "error looking up service account {ns}/{sa}: serviceaccount {sa:?} not found"
                        ),
                    ));
                }
                spec.insert("serviceAccountName".into(), json!(sa));
                spec.insert("serviceAccount".into(), json!(sa));
                let automount = spec
                    .get("automountServiceAccountToken")
                    .and_then(Value::as_bool)
                    .or_else(|| {
                        account
                            .as_ref()
                            .and_then(|a| a.get("automountServiceAccountToken"))
                            .and_then(Value::as_bool)
                    })
                    .unwrap_or(true);
                if automount {
                    mount_service_account_token(spec);
                }
                pod_priority(st, store, kind, &name, spec)?;
                let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
                if let Some(t) = tolerations.as_array_mut() {
                    for key in [
                        "node.kubernetes.io/not-ready",
                        "node.kubernetes.io/unreachable",
                    ] {
                        if !t
                            .iter()
                            .any(|x| x.get("key").and_then(Value::as_str) == Some(key))
                        {
                            t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn allocate_cluster_ip(st: &State) -> String {
    // 10.96.0.0/12 like kubeadm; .1 is the kubernetes service. The lowest free address,
    // from the store's index of allocated ones.
    st.free_cluster_ip().unwrap_or_else(|| "10.96.0.254".into())
}

/// Service updates keep allocated values the client did not send (patchAllocatedValues).
pub(crate) fn keep_allocated(kind: &ResourceKind, old: &Value, new: &mut Value) {
    if kind.kind != "Service" {
        return;
    }
    for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        if let Some(v) = old.pointer(&format!("/spec/{f}"))
            && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
            && spec
                .get(f)
                .is_none_or(|x| x.is_null() || x.as_str() == Some(""))
        {
            spec.insert(f.into(), v.clone());
        }
    }
}

/// The Priority admission plugin: `priorityClassName` must name an existing PriorityClass
/// (or the global default applies), and sets `priority` and `preemptionPolicy` from it.
fn pod_priority(
    st: &State,
    store: &Store,
    kind: &ResourceKind,
    name: &str,
    spec: &mut serde_json::Map<String, Value>,
) -> ApiResult<()> {
    let pc_kind = store
        .kinds()
        .by_resource("scheduling.k8s.io", "v1", "priorityclasses");
    let requested = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(String::from);
    let class = match (&requested, pc_kind) {
        (Some(pcn), Some(k)) => match st.get(k, "", pcn) {
            Some(pc) => Some((*pc).clone()),
            None => {
                return Err(ApiError::forbidden(
                    kind,
                    name,
                    &format!("no PriorityClass with name {pcn} was found"),
                ));
            }
        },
        (None, Some(k)) => st
            .list(k, None)
            .into_iter()
            .find(|pc| pc.get("globalDefault") == Some(&json!(true)))
            .map(|pc| (*pc).clone()),
        _ => None,
    };
    let value = class
        .as_ref()
        .and_then(|c| c.get("value"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != value
    {
        return Err(ApiError::forbidden(
            kind,
            name,
            &format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {value} from the given PriorityClass name"
            ),
        ));
    }
    spec.insert("priority".into(), json!(value));
    if let Some(c) = &class {
        spec.insert("priorityClassName".into(), c["metadata"]["name"].clone());
    }
    let policy = class
        .as_ref()
        .and_then(|c| c.get("preemptionPolicy"))
        .cloned()
        .unwrap_or(json!("PreemptLowerPriority"));
    spec.entry("preemptionPolicy").or_insert(policy);
    Ok(())
}

/// The CA bundle of `kube-root-ca.crt`: a self-signed `CN=kubernetes` CA made for the
/// emulator (which serves plain HTTP, so nothing is ever verified with it).
const ROOT_CA_CRT: &str = "-----BEGIN CERTIFICATE-----\nMIIBjzCCATWgAwIBAgIUTSbdEfajduUqrgA0UZcH6gqHolwwCgYIKoZIzj0EAwIw\nFTETMBEGA1UEAwwKa3ViZXJuZXRlczAeFw0yNjExMjQyMjA2MDVaFw0zNjExMjEy\nMjA2MDVaMBUxEzARBgNVBAMMCmt1YmVybmV0ZXMwWTATBgcqhkjOPQIBBggqhkjO\nPQMBBwNCAASIJ24MEzajA5J7Y4TDFYdk9C39uT+Oy6jL1DqzQ+cFoOEcg0nJ1AmY\nvXJulUKpeohON6oUfDwqE/9rq4+qdgNko2MwYTAdBgNVHQ4EFgQUFcWF0p7ZDPtT\nKsfKvUSDTX5FnJcwHwYDVR0jBBgwFoAUFcWF0p7ZDPtTKsfKvUSDTX5FnJcwDwYD\nVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAqQwCgYIKoZIzj0EAwIDSAAwRQIh\nAIv6b/qbP+vDYh03De5zUfD7X3DXt2ejpcTPJsMbT4fiAiBwjR0iJ4kDWiXUpHL6\ndolNZupbki4mJTAvi93ywX75Jg==\n-----END CERTIFICATE-----\n";

/// `kube-root-ca.crt` as the root CA publisher writes it
/// (pkg/controller/certificates/rootcacertpublisher/publisher.go).
pub(crate) fn root_ca_config_map() -> Value {
    json!({
        "metadata": {
            "name": "kube-root-ca.crt",
            "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."},
        },
        "data": {"ca.crt": ROOT_CA_CRT},
    })
}

/// The ServiceAccount admission plugin's `mountServiceAccountToken`
/// (plugin/pkg/admission/serviceaccount/admission.go): every container and init container
/// without a mount at the token path mounts a `kube-api-access-xxxxx` projected volume
/// (`TokenVolumeSource`: the bound token, kube-root-ca.crt's ca.crt and the namespace).
fn mount_service_account_token(spec: &mut serde_json::Map<String, Value>) {
    const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .find(|n| n.starts_with("kube-api-access-"))
                .map(String::from)
        });
    let volume_name = existing
        .clone()
        .unwrap_or_else(|| format!("kube-api-access-{}", crate::ops::generate_suffix()));
    let mut needs_volume = false;
    for list in ["initContainers", "containers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let mounts = c
                .as_object_mut()
                .map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            if let Some(Value::Array(mounts)) = mounts {
                if mounts
                    .iter()
                    .any(|m| m.get("mountPath").and_then(Value::as_str) == Some(MOUNT_PATH))
                {
                    continue;
                }
                mounts
                    .push(json!({"name": volume_name, "readOnly": true, "mountPath": MOUNT_PATH}));
                needs_volume = true;
            }
        }
    }
    if existing.is_none() && needs_volume {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if let Some(vs) = volumes.as_array_mut() {
            vs.push(json!({"name": volume_name, "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
            }}));
        }
    }
}
