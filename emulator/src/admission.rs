//! Create- and update-time work that the real server's registry strategies and admission
//! plugins do for particular kinds: initial status, ServiceAccount/Priority/
//! DefaultTolerationSeconds pod admission, LimitRanger and ResourceQuota pod admission,
//! Service IP allocation, Namespace finalizers.

use std::collections::{BTreeMap, BTreeSet};

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
        "ResourceQuota" => {
            // The quota controller computes the first status at once (the real one does so
            // within its sync period); admission reads the usage live anyway.
            let ns = meta_str(obj, "namespace").unwrap_or("").to_string();
            obj["status"] = quota_status(st, store, &ns, obj);
        }
        _ => {}
    }
    if kind.kind == "Pod" && kind.group.is_empty() {
        pod_resource_admission(st, store, kind, obj)?;
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

// ---------------------------------------------------------------------------------------
// LimitRanger and ResourceQuota admission of pods, and the quota controller's status.
//
// After kubernetes plugin/pkg/admission/limitranger/admission.go (Admit: defaults;
// Validate: min, max and maxLimitRequestRatio per Container and Pod),
// staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go
// (CheckRequest: "failed quota", "exceeded quota") and pkg/quota/v1/evaluator/core/pods.go
// (Constraints, podComputeUsageHelper, PodUsageFunc, the pod scopes).

const NANO: i128 = 1_000_000_000;

/// A quantity: its value in nano-units, and whether it prints in binary SI (`Mi`, `Gi`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Qty {
    nano: i128,
    binary: bool,
}

type ResourceList = BTreeMap<String, Qty>;

fn qty(v: &Value) -> Option<Qty> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some(Qty {
        nano: crate::quantity::nano_value(&text)?,
        binary: text.trim().ends_with('i'),
    })
}

/// `Quantity.String()`: the canonical form.
fn show(q: Qty) -> String {
    let text = if q.binary && q.nano > 0 && q.nano % NANO == 0 {
        // Bytes as an exact decimal number of Ki (1024 divides 10^10), so it keeps its format.
        let bytes = q.nano / NANO;
        format!(
            "{}.{:010}Ki",
            bytes / 1024,
            (bytes % 1024) * 10_000_000_000 / 1024
        )
    } else {
        format!("{}n", q.nano)
    };
    crate::quantity::canonical(&text).unwrap_or(text)
}

fn resource_list(v: Option<&Value>) -> ResourceList {
    v.and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), qty(v)?)))
        .collect()
}

/// `quota.Add` / the helpers' `addResourceList`: the first operand keeps its format.
fn add(into: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        into.entry(k.clone())
            .and_modify(|q| q.nano += v.nano)
            .or_insert(*v);
    }
}

/// The helpers' `maxResourceList`.
fn max_into(into: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        if into.get(k).is_none_or(|q| v.nano > q.nano) {
            into.insert(k.clone(), *v);
        }
    }
}

/// `utilerrors.NewAggregate(errs).Error()`: one message alone, several deduplicated in brackets.
fn aggregate(errs: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for e in errs {
        if !seen.contains(&e.as_str()) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen[0].to_string()
    } else {
        format!("[{}]", seen.join(", "))
    }
}

fn containers(spec: &Value, list: &str) -> Vec<Value> {
    spec.get(list)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn container_list(c: &Value, which: &str) -> ResourceList {
    resource_list(c.pointer(&format!("/resources/{which}")))
}

/// component-helpers `PodRequests`/`PodLimits` (`which`: `requests` or `limits`): the
/// containers' sum with restartable init containers (sidecars), or the largest init
/// container (with the sidecars started before it) if more; the pod overhead unless
/// excluded (added to limits only where a limit is set).
fn pod_total(spec: &Value, which: &str, overhead: bool) -> ResourceList {
    let mut total = ResourceList::new();
    for c in containers(spec, "containers") {
        add(&mut total, &container_list(&c, which));
    }
    let mut sidecars = ResourceList::new();
    let mut init = ResourceList::new();
    for c in containers(spec, "initContainers") {
        let own = container_list(&c, which);
        let peak = if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            add(&mut total, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut peak = own;
            add(&mut peak, &sidecars);
            peak
        };
        max_into(&mut init, &peak);
    }
    max_into(&mut total, &init);
    if overhead {
        let extra = resource_list(spec.get("overhead"));
        if which == "requests" {
            add(&mut total, &extra);
        } else {
            for (k, v) in extra {
                if let Some(q) = total.get_mut(&k) {
                    q.nano += v.nano;
                }
            }
        }
    }
    total
}

fn is_extended(name: &str) -> bool {
    name.split_once('/').is_some_and(|(domain, _)| {
        !domain.is_empty() && domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io")
    }) && !name.starts_with("requests.")
}

/// pods.go `podComputeUsageHelper`.
fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let one = Qty {
        nano: NANO,
        binary: false,
    };
    let mut out = ResourceList::from([("pods".to_string(), one)]);
    for r in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(q) = requests.get(r) {
            out.insert(r.into(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if let Some(q) = limits.get(r) {
            out.insert(format!("limits.{r}"), *q);
        }
    }
    for (r, q) in requests {
        if r.starts_with("hugepages-") {
            out.insert(r.clone(), *q);
            out.insert(format!("requests.{r}"), *q);
        }
        if is_extended(r) {
            out.insert(format!("requests.{r}"), *q);
        }
    }
    out
}

/// pods.go `PodUsageFunc`: `count/pods` always; the rest unless the pod is finished or
/// past its deletion grace period.
fn pod_usage(pod: &Value) -> ResourceList {
    let one = Qty {
        nano: NANO,
        binary: false,
    };
    let mut out = ResourceList::from([("count/pods".to_string(), one)]);
    let phase = pod.pointer("/status/phase").and_then(Value::as_str);
    let gone = pod.pointer("/metadata/deletionTimestamp").is_some()
        && pod.pointer("/metadata/deletionGracePeriodSeconds") == Some(&json!(0));
    if matches!(phase, Some("Failed" | "Succeeded")) || gone {
        return out;
    }
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    add(
        &mut out,
        &compute_usage(
            &pod_total(&spec, "requests", true),
            &pod_total(&spec, "limits", true),
        ),
    );
    out
}

/// pods.go `podResources`, `podResourcePrefixes` and extended `requests.*` names.
fn pod_matching_resources<'a>(names: impl Iterator<Item = &'a String>) -> BTreeSet<String> {
    const POD_RESOURCES: &[&str] = &[
        "count/pods",
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
    ];
    names
        .filter(|n| {
            POD_RESOURCES.contains(&n.as_str())
                || n.starts_with("hugepages-")
                || n.starts_with("requests.hugepages-")
                || n.strip_prefix("requests.").is_some_and(is_extended)
        })
        .cloned()
        .collect()
}

/// pods.go `podMatchesScopeFunc` for one scope selector requirement.
fn pod_matches_scope(pod: &Value, scope: &str, operator: &str, values: &[&str]) -> bool {
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    match scope {
        "Terminating" => spec
            .get("activeDeadlineSeconds")
            .and_then(Value::as_i64)
            .is_some_and(|s| s >= 0),
        "NotTerminating" => !pod_matches_scope(pod, "Terminating", operator, values),
        "BestEffort" => qos_class(pod) == "BestEffort",
        "NotBestEffort" => qos_class(pod) != "BestEffort",
        "PriorityClass" => {
            let class = spec
                .get("priorityClassName")
                .and_then(Value::as_str)
                .unwrap_or("");
            match operator {
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                "In" => !class.is_empty() && values.contains(&class),
                "NotIn" => class.is_empty() || !values.contains(&class),
                _ => false,
            }
        }
        "CrossNamespacePodAffinity" => ["podAffinity", "podAntiAffinity"].iter().any(|a| {
            let terms = |p: &str| {
                spec.pointer(&format!("/affinity/{a}/{p}"))
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            let cross = |t: &Value| {
                t.get("namespaces")
                    .and_then(Value::as_array)
                    .is_some_and(|n| !n.is_empty())
                    || t.get("namespaceSelector").is_some()
            };
            terms("requiredDuringSchedulingIgnoredDuringExecution")
                .iter()
                .any(cross)
                || terms("preferredDuringSchedulingIgnoredDuringExecution")
                    .iter()
                    .any(|w| w.get("podAffinityTerm").is_some_and(cross))
        }),
        _ => false,
    }
}

/// Does the quota's scope (spec.scopes and spec.scopeSelector) take in the pod?
fn quota_scopes_match(quota: &Value, pod: &Value) -> bool {
    let scopes = quota
        .pointer("/spec/scopes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .all(|s| pod_matches_scope(pod, s, "Exists", &[]));
    let selector = quota
        .pointer("/spec/scopeSelector/matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|e| {
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            pod_matches_scope(
                pod,
                e.get("scopeName").and_then(Value::as_str).unwrap_or(""),
                e.get("operator").and_then(Value::as_str).unwrap_or(""),
                &values,
            )
        });
    scopes && selector
}

/// The pods in `ns` that a quota counts, summed and masked to its hard resources, each of
/// them present (0 when unused), as the quota controller writes `status.used`.
fn quota_used(st: &State, store: &Store, ns: &str, quota: &Value) -> ResourceList {
    let hard = resource_list(quota.pointer("/spec/hard"));
    let matching = pod_matching_resources(hard.keys());
    let mut used = ResourceList::new();
    if let Some(pods) = store.kinds().by_resource("", "v1", "pods") {
        for pod in st.list(pods, Some(ns)) {
            if quota_scopes_match(quota, &pod) {
                add(&mut used, &pod_usage(&pod));
            }
        }
    }
    used.retain(|k, _| matching.contains(k));
    for k in &matching {
        used.entry(k.clone()).or_insert(Qty {
            nano: 0,
            binary: hard[k].binary,
        });
    }
    used
}

fn to_json(list: &ResourceList) -> Value {
    Value::Object(
        list.iter()
            .map(|(k, q)| (k.clone(), json!(show(*q))))
            .collect(),
    )
}

/// A ResourceQuota's status as the resource quota controller computes it
/// (pkg/controller/resourcequota/resource_quota_controller.go `syncResourceQuota`): `hard`
/// from the spec, `used` of the pods it counts (object counts of other kinds are not kept).
pub(crate) fn quota_status(st: &State, store: &Store, ns: &str, quota: &Value) -> Value {
    let hard = resource_list(quota.pointer("/spec/hard"));
    let used = quota_used(st, store, ns, quota);
    let mut status = serde_json::Map::new();
    if !hard.is_empty() {
        status.insert("hard".into(), to_json(&hard));
    }
    if !used.is_empty() {
        status.insert("used".into(), to_json(&used));
    }
    Value::Object(status)
}

/// One LimitRange item of type Container with its `SetDefaults_LimitRangeItem` defaults
/// (pkg/apis/core/v1/defaults.go): a missing default limit is the max, a missing default
/// request the default limit, else the min.
fn container_defaults(
    item: &Value,
) -> (
    serde_json::Map<String, Value>,
    serde_json::Map<String, Value>,
) {
    let map = |f: &str| {
        item.get(f)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut limits = map("default");
    for (k, v) in map("max") {
        limits.entry(k).or_insert(v);
    }
    let mut requests = map("defaultRequest");
    for (k, v) in limits.iter().chain(map("min").iter()) {
        requests.entry(k.clone()).or_insert(v.clone());
    }
    (requests, limits)
}

/// LimitRanger `PodMutateLimitFunc` for one LimitRange: its Container defaults go to every
/// container and init container without them, with the `kubernetes.io/limit-ranger`
/// annotation saying what was set.
fn limit_range_defaults(range: &Value, pod: &mut Value) {
    let mut requests = serde_json::Map::new();
    let mut limits = serde_json::Map::new();
    for item in range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|i| i.get("type").and_then(Value::as_str) == Some("Container"))
    {
        let (r, l) = container_defaults(item);
        requests.extend(r);
        limits.extend(l);
    }
    let mut notes: Vec<String> = Vec::new();
    for (list, prefix) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        let Some(cs) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in cs {
            let name = c
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let mut set = |which: &str, defaults: &serde_json::Map<String, Value>| {
                let mut names: Vec<String> = Vec::new();
                let resources = c
                    .as_object_mut()
                    .map(|c| c.entry("resources").or_insert_with(|| json!({})));
                let Some(Value::Object(resources)) = resources else {
                    return names;
                };
                let list = resources.entry(which).or_insert_with(|| json!({}));
                if let Some(list) = list.as_object_mut() {
                    for (k, v) in defaults {
                        if !list.contains_key(k) {
                            list.insert(k.clone(), v.clone());
                            names.push(k.clone());
                        }
                    }
                }
                if resources
                    .get(which)
                    .and_then(Value::as_object)
                    .is_some_and(|m| m.is_empty())
                {
                    resources.remove(which);
                }
                names.sort();
                names
            };
            let set_requests = set("requests", &requests);
            let set_limits = set("limits", &limits);
            if !set_requests.is_empty() {
                notes.push(format!(
                    "{} request for {prefix} {name}",
                    set_requests.join(", ")
                ));
            }
            if !set_limits.is_empty() {
                notes.push(format!(
                    "{} limit for {prefix} {name}",
                    set_limits.join(", ")
                ));
            }
        }
    }
    if !notes.is_empty() {
        let meta = crate::resources::meta_mut(pod);
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        annotations["kubernetes.io/limit-ranger"] =
            json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

/// limitranger `minConstraint`, `maxConstraint` and `limitRequestRatioConstraint` of one
/// item (`ty`: Container or Pod) over requests and limits.
fn limit_errors(
    item: &Value,
    ty: &str,
    requests: &ResourceList,
    limits: &ResourceList,
    errs: &mut Vec<String>,
) {
    let bound = |f: &str| resource_list(item.get(f));
    for (r, min) in bound("min") {
        let (req, lim) = (requests.get(&r), limits.get(&r));
        let min_s = show(min);
        match req {
            None => errs.push(format!(
                "minimum {r} usage per {ty} is {min_s}.  No request is specified"
            )),
            Some(q) if q.nano < min.nano => errs.push(format!(
                "minimum {r} usage per {ty} is {min_s}, but request is {}",
                show(*q)
            )),
            _ => {
                if let Some(l) = lim.filter(|l| l.nano < min.nano) {
                    errs.push(format!(
                        "minimum {r} usage per {ty} is {min_s}, but limit is {}",
                        show(*l)
                    ));
                }
            }
        }
    }
    for (r, max) in bound("max") {
        let (req, lim) = (requests.get(&r), limits.get(&r));
        let max_s = show(max);
        match lim {
            None => errs.push(format!(
                "maximum {r} usage per {ty} is {max_s}.  No limit is specified"
            )),
            Some(l) if l.nano > max.nano => errs.push(format!(
                "maximum {r} usage per {ty} is {max_s}, but limit is {}",
                show(*l)
            )),
            _ => {
                if let Some(q) = req.filter(|q| q.nano > max.nano) {
                    errs.push(format!(
                        "maximum {r} usage per {ty} is {max_s}, but request is {}",
                        show(*q)
                    ));
                }
            }
        }
    }
    for (r, ratio) in bound("maxLimitRequestRatio") {
        let req = requests.get(&r).map_or(0, |q| q.nano);
        let lim = limits.get(&r).map_or(0, |q| q.nano);
        let ratio_s = show(ratio);
        if req == 0 {
            errs.push(format!("{r} max limit to request ratio per {ty} is {ratio_s}, but no request is specified or request is 0"));
        } else if lim == 0 {
            errs.push(format!("{r} max limit to request ratio per {ty} is {ratio_s}, but no limit is specified or limit is 0"));
        } else {
            let observed = lim as f64 / req as f64;
            if observed * NANO as f64 > ratio.nano as f64 {
                errs.push(format!("{r} max limit to request ratio per {ty} is {ratio_s}, but provided ratio is {observed:.6}"));
            }
        }
    }
}

/// LimitRanger `PodValidateLimitFunc` for one LimitRange: every error of its items.
fn limit_range_errors(range: &Value, pod: &Value) -> Vec<String> {
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    let mut errs = Vec::new();
    for item in range
        .pointer("/spec/limits")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("Container") => {
                for c in containers(&spec, "containers")
                    .iter()
                    .chain(&containers(&spec, "initContainers"))
                {
                    let (requests, limits) =
                        (container_list(c, "requests"), container_list(c, "limits"));
                    limit_errors(item, "Container", &requests, &limits, &mut errs);
                }
            }
            Some("Pod") => {
                let requests = pod_total(&spec, "requests", false);
                let limits = pod_total(&spec, "limits", false);
                limit_errors(item, "Pod", &requests, &limits, &mut errs);
            }
            _ => {}
        }
    }
    errs
}

/// pods.go `Constraints`: with a quota on cpu or memory (requests, limits or plain), every
/// container and init container must set it.
fn quota_constraints(required: &BTreeSet<String>, pod: &Value) -> Option<String> {
    const VALIDATION: &[&str] = &[
        "cpu",
        "memory",
        "requests.cpu",
        "requests.memory",
        "limits.cpu",
        "limits.memory",
    ];
    let spec = pod.get("spec").cloned().unwrap_or(json!({}));
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for c in containers(&spec, "containers")
        .iter()
        .chain(&containers(&spec, "initContainers"))
    {
        let usage = compute_usage(&container_list(c, "requests"), &container_list(c, "limits"));
        for r in VALIDATION {
            if required.contains(*r) && !usage.contains_key(*r) {
                let name = c.get("name").and_then(Value::as_str).unwrap_or("");
                missing.entry(r).or_default().insert(name.to_string());
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// `prettyPrint`: `name=quantity` pairs, sorted, comma-separated.
fn pretty(list: &ResourceList, keys: &BTreeSet<String>) -> String {
    keys.iter()
        .filter_map(|k| list.get(k).map(|q| format!("{k}={}", show(*q))))
        .collect::<Vec<_>>()
        .join(",")
}

/// LimitRanger (mutating, then validating) and ResourceQuota (validating) admission of a
/// pod create. As on the real server, the pod is defaulted before admission, and an
/// invalid pod is refused by validation (422) before the validating plugins run; the
/// name in a refusal is the generated one (rest.AdmissionToValidateObjectFunc).
fn pod_resource_admission(
    st: &State,
    store: &Store,
    kind: &ResourceKind,
    obj: &mut Value,
) -> ApiResult<()> {
    let ns = meta_str(obj, "namespace").unwrap_or("").to_string();
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    let ranges = store
        .kinds()
        .by_resource("", "v1", "limitranges")
        .map(|k| st.list(k, Some(&ns)))
        .unwrap_or_default();
    let quotas = store
        .kinds()
        .by_resource("", "v1", "resourcequotas")
        .map(|k| st.list(k, Some(&ns)))
        .unwrap_or_default();
    if ranges.is_empty() && quotas.is_empty() {
        return Ok(());
    }
    crate::defaults::apply_defaults(kind, obj);
    for range in &ranges {
        limit_range_defaults(range, obj);
    }
    if !crate::validation::validate(kind, obj, None).is_empty() {
        return Ok(());
    }
    for range in &ranges {
        let errs = limit_range_errors(range, obj);
        if !errs.is_empty() {
            return Err(ApiError::forbidden(kind, &name, &aggregate(&errs)));
        }
    }
    // CheckRequest: the constraints of every quota that takes the pod in, then the usage.
    let mut interesting = Vec::new();
    for quota in &quotas {
        let hard = resource_list(quota.pointer("/spec/hard"));
        let required = pod_matching_resources(hard.keys());
        if required.is_empty() || !quota_scopes_match(quota, obj) {
            continue;
        }
        let quota_name = meta_str(quota, "name").unwrap_or("");
        if let Some(why) = quota_constraints(&required, obj) {
            return Err(ApiError::forbidden(
                kind,
                &name,
                &format!("failed quota: {quota_name}: {why}"),
            ));
        }
        interesting.push((quota, hard));
    }
    let delta = pod_usage(obj);
    for (quota, hard) in interesting {
        let requested: ResourceList = delta
            .iter()
            .filter(|(k, _)| hard.contains_key(*k))
            .map(|(k, q)| (k.clone(), *q))
            .collect();
        let used = quota_used(st, store, &ns, quota);
        let exceeded: BTreeSet<String> = requested
            .iter()
            .filter(|(k, q)| used.get(*k).map_or(0, |u| u.nano) + q.nano > hard[*k].nano)
            .map(|(k, _)| k.clone())
            .collect();
        if !exceeded.is_empty() {
            let quota_name = meta_str(quota, "name").unwrap_or("");
            return Err(ApiError::forbidden(
                kind,
                &name,
                &format!(
                    "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                    pretty(&requested, &exceeded),
                    pretty(&used, &exceeded),
                    pretty(&hard, &exceeded)
                ),
            ));
        }
    }
    Ok(())
}
