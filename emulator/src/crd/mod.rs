//! CustomResourceDefinitions: custom kinds served from their published manifests.
//!
//! A CRD is a resource like any other (`apiextensions.k8s.io/v1`); [`reconcile`], run with
//! the garbage collector after every write, plays the apiextensions-apiserver's
//! controllers: it accepts the names, starts serving every `served` version (discovery,
//! OpenAPI, CRUD, watch) and sets the `NamesAccepted` and `Established` conditions; when
//! the CRD is deleted it removes every instance, stops serving and releases the CRD.
//! Instances are pruned, defaulted and validated from the version's schema
//! (`structural`) and its CEL rules (`cel`).

pub(crate) mod cel;
mod duration;
pub(crate) mod structural;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};

use crate::resources::{Family, Generation, NameRule, ResourceKind, meta_str};
use crate::schema::ListType;
use crate::status::Cause;
use crate::store::Store;

/// The finalizer the CRD registry adds on delete, so instances go before the CRD does
/// (apiextensions-apiserver `pkg/registry/customresourcedefinition/etcd.go`).
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// One served version of an installed CRD.
pub(crate) struct Version {
    pub(crate) storage: bool,
    pub(crate) list_kind: String,
    /// `schema.openAPIV3Schema`.
    pub(crate) schema: Value,
    /// `None` only if the rules stopped compiling (definitions are validated first).
    pub(crate) rules: Option<cel::Rules>,
    pub(crate) columns: Vec<Column>,
    pub(crate) scale: Option<Scale>,
    /// Server-side apply's merge of lists and maps, from the schema's
    /// `x-kubernetes-list-type`/`-list-map-keys` and `x-kubernetes-map-type`, by field
    /// path from the root (list items skipped, as `schema::list_type` walks).
    pub(crate) lists: HashMap<String, ListType>,
    pub(crate) atomic_maps: std::collections::HashSet<String>,
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version")
            .field("storage", &self.storage)
            .field("list_kind", &self.list_kind)
            .finish_non_exhaustive()
    }
}

/// An `additionalPrinterColumns` entry.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    pub(crate) name: String,
    pub(crate) type_: String,
    pub(crate) format: String,
    pub(crate) description: String,
    pub(crate) priority: i64,
    pub(crate) json_path: String,
}

/// `subresources.scale`: where replicas live in the custom resource.
#[derive(Debug, Clone)]
pub(crate) struct Scale {
    pub(crate) spec_replicas_path: String,
    pub(crate) status_replicas_path: String,
    pub(crate) label_selector_path: Option<String>,
}

impl Version {
    /// The schema of `status`, for the status subresource's validation.
    pub(crate) fn has_schema(&self) -> bool {
        !self.schema.is_null()
    }
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_string().into_boxed_str())
}

fn leak_list(v: Option<&Value>) -> &'static [&'static str] {
    let list: Vec<&'static str> = v
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(leak)
        .collect();
    Box::leak(list.into_boxed_slice())
}

/// Kinds are `&'static` (the kind table is shared by every request without reference
/// counting), so a CRD's kinds are leaked once per distinct definition and reused when
/// the same definition is established again (another emulator in the same process, a
/// re-apply): memory grows only with the number of different definitions.
fn interned(
    fingerprint: String,
    build: impl FnOnce() -> Vec<&'static ResourceKind>,
) -> Vec<&'static ResourceKind> {
    static KINDS: OnceLock<Mutex<HashMap<String, Vec<&'static ResourceKind>>>> = OnceLock::new();
    let mut table = KINDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    table.entry(fingerprint).or_insert_with(build).clone()
}

/// The kinds a CRD serves: one per `served` version.
pub(crate) fn served_kinds(crd: &Value) -> Vec<&'static ResourceKind> {
    let Some(spec) = crd.get("spec") else {
        return Vec::new();
    };
    interned(spec.to_string(), || {
        let names = &spec["names"];
        let kind = leak(names["kind"].as_str().unwrap_or_default());
        let group = leak(spec["group"].as_str().unwrap_or_default());
        let plural = leak(names["plural"].as_str().unwrap_or_default());
        let singular = match names["singular"].as_str() {
            Some(s) if !s.is_empty() => leak(s),
            _ => leak(&kind.to_lowercase()),
        };
        let list_kind = names["listKind"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("{kind}List"), String::from);
        let short_names = leak_list(names.get("shortNames"));
        let categories = leak_list(names.get("categories"));
        let namespaced = spec["scope"].as_str() != Some("Cluster");
        versions(spec)
            .filter(|v| v["served"].as_bool() == Some(true))
            .map(|v| {
                let version = Box::leak(Box::new(version_of(v, &list_kind)));
                &*Box::leak(Box::new(ResourceKind {
                    group,
                    version: leak(v["name"].as_str().unwrap_or_default()),
                    kind,
                    plural,
                    singular,
                    short_names,
                    categories,
                    namespaced,
                    status_subresource: v.pointer("/subresources/status").is_some(),
                    custom: true,
                    generation: Generation::AllButMetadataStatus,
                    name_rule: NameRule::Subdomain,
                    family: Family::Installed,
                    field_labels: &[],
                    crd: Some(version),
                }))
            })
            .collect()
    })
}

fn versions(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["versions"].as_array().into_iter().flatten()
}

fn version_of(v: &Value, list_kind: &str) -> Version {
    let schema = v
        .pointer("/schema/openAPIV3Schema")
        .cloned()
        .unwrap_or(Value::Null);
    let rules = cel::Rules::compile(&schema, "").ok();
    let columns = v["additionalPrinterColumns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| Column {
            name: c["name"].as_str().unwrap_or_default().into(),
            type_: c["type"].as_str().unwrap_or("string").into(),
            format: c["format"].as_str().unwrap_or_default().into(),
            description: c["description"].as_str().unwrap_or_default().into(),
            priority: c["priority"].as_i64().unwrap_or(0),
            json_path: c["jsonPath"].as_str().unwrap_or_default().into(),
        })
        .collect();
    let scale = v.pointer("/subresources/scale").map(|s| Scale {
        spec_replicas_path: s["specReplicasPath"].as_str().unwrap_or_default().into(),
        status_replicas_path: s["statusReplicasPath"].as_str().unwrap_or_default().into(),
        label_selector_path: s["labelSelectorPath"].as_str().map(String::from),
    });
    let mut lists = HashMap::new();
    let mut atomic_maps = std::collections::HashSet::new();
    merge_types(&schema, String::new(), &mut lists, &mut atomic_maps);
    Version {
        lists,
        atomic_maps,
        storage: v["storage"].as_bool() == Some(true),
        list_kind: list_kind.to_string(),
        schema,
        rules,
        columns,
        scale,
    }
}

/// Collects the merge types of every list and atomic map under `schema` (the paths
/// `schema::list_type` asks about: field names from the root, list items skipped).
fn merge_types(
    schema: &Value,
    path: String,
    lists: &mut HashMap<String, ListType>,
    atomic_maps: &mut std::collections::HashSet<String>,
) {
    match schema["x-kubernetes-list-type"].as_str() {
        Some("map") => {
            let keys: Vec<&'static str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(leak)
                .collect();
            let keys: &'static [&'static str] = Box::leak(keys.into_boxed_slice());
            lists.insert(
                path.clone(),
                ListType::Map {
                    keys,
                    smp_key: None,
                },
            );
        }
        Some("set") => {
            lists.insert(path.clone(), ListType::Set);
        }
        _ => {}
    }
    if schema["x-kubernetes-map-type"] == "atomic" {
        atomic_maps.insert(path.clone());
    }
    if let Some(items) = schema.get("items") {
        merge_types(items, path.clone(), lists, atomic_maps);
    }
    for (name, child) in schema["properties"].as_object().into_iter().flatten() {
        let child_path = if path.is_empty() {
            name.clone()
        } else {
            format!("{path}.{name}")
        };
        merge_types(child, child_path, lists, atomic_maps);
    }
}

/// `ValidateCustomResourceDefinition` (apiextensions-apiserver `pkg/apis/apiextensions/
/// validation/validation.go`), for what a definition needs to be served: its name,
/// group, names, scope, exactly one storage version, a schema per version, and rules
/// that compile. Structural-schema checks beyond that are not emulated (see README).
pub(crate) fn definition_errors(crd: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    let name = meta_str(crd, "name").unwrap_or_default();
    if name != format!("{plural}.{group}") {
        out.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        out.push(Cause::required("spec.group"));
    } else if !group.contains('.') {
        out.push(Cause::invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    for field in ["plural", "kind"] {
        if spec["names"][field].as_str().unwrap_or_default().is_empty() {
            out.push(Cause::required(format!("spec.names.{field}")));
        }
    }
    match spec["scope"].as_str().unwrap_or_default() {
        "Namespaced" | "Cluster" => {}
        "" => out.push(Cause::required("spec.scope")),
        other => out.push(Cause::not_supported(
            "spec.scope",
            &json!(other),
            &["Cluster", "Namespaced"],
        )),
    }
    version_errors(spec, &mut out);
    out
}

fn version_errors(spec: &Value, out: &mut Vec<Cause>) {
    let all: Vec<&Value> = versions(spec).collect();
    if all
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count()
        != 1
    {
        out.push(Cause::invalid(
            "spec.versions",
            &spec["versions"],
            "must have exactly one version marked as storage version",
        ));
    }
    for (i, v) in all.iter().enumerate() {
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        match v.pointer("/schema/openAPIV3Schema") {
            None => out.push(Cause::new(
                "FieldValueRequired",
                path,
                "Required value: schemas are required",
            )),
            Some(schema) => {
                if let Err(errors) = cel::Rules::compile(schema, &path) {
                    out.extend(errors);
                }
            }
        }
    }
}

/// The CRD controllers (naming, establishing, finalizing) in one pass; true when it
/// changed something. Cheap when nothing changed: it runs after every write.
pub(crate) fn reconcile(store: &Store) -> bool {
    let kinds = store.kinds();
    let Some(crd_kind) =
        kinds.by_resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return false;
    };
    let crds = store.lock().list(crd_kind, None);
    let mut changed = false;
    for crd in &crds {
        changed |= if crd.pointer("/metadata/deletionTimestamp").is_some() {
            finalize(store, crd_kind, crd)
        } else {
            establish(store, crd_kind, crd)
        };
    }
    changed
}

fn group_plural(crd: &Value) -> (&str, &str) {
    (
        crd["spec"]["group"].as_str().unwrap_or_default(),
        crd["spec"]["names"]["plural"].as_str().unwrap_or_default(),
    )
}

/// Serves the CRD's versions (when they changed) and reports it in the status.
fn establish(store: &Store, crd_kind: &'static ResourceKind, crd: &Value) -> bool {
    let uid = meta_str(crd, "uid").unwrap_or_default().to_string();
    let generation = crd["metadata"]["generation"].as_i64().unwrap_or(0);
    let known = store.crd_kinds().get(&uid).map(|(g, _)| *g) == Some(generation);
    if known && is_established(crd) {
        return false;
    }
    let served = served_kinds(crd);
    let (group, plural) = group_plural(crd);
    let mut st = store.lock();
    let kinds = store.kinds();
    let current: Vec<&'static ResourceKind> = kinds
        .all()
        .iter()
        .copied()
        .filter(|k| (k.group, k.plural) == (group, plural))
        .collect();
    let same = current.len() == served.len()
        && current
            .iter()
            .all(|c| served.iter().any(|s| std::ptr::eq(*c, *s)));
    if !same {
        store.set_kinds(&mut st, kinds.replacing(group, plural, &served));
    }
    store.crd_kinds().insert(uid, (generation, served));
    let status = established_status(crd);
    let stored = crd.get("status").cloned().unwrap_or(Value::Null);
    if !same_conditions(&stored, &status) {
        let mut new = crd.clone();
        new["status"] = status;
        crate::ops::system_status_update(&mut st, crd_kind, new, "kube-apiserver");
    }
    true
}

fn is_established(crd: &Value) -> bool {
    crd.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        })
}

/// What the naming and establishing controllers report for an accepted definition.
fn established_status(crd: &Value) -> Value {
    let now = crate::ops::now();
    let spec = &crd["spec"];
    let mut accepted = spec["names"].clone();
    let kind = accepted["kind"].as_str().unwrap_or_default().to_string();
    if accepted["singular"].as_str().unwrap_or_default().is_empty() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted["listKind"].as_str().unwrap_or_default().is_empty() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(v) = versions(spec).find(|v| v["storage"].as_bool() == Some(true))
        && !stored.contains(&v["name"])
    {
        stored.push(v["name"].clone());
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "lastTransitionTime": now,
             "reason": "NoConflicts", "message": "no conflicts found"},
            {"type": "Established", "status": "True", "lastTransitionTime": now,
             "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
        ],
        "acceptedNames": accepted,
        "storedVersions": stored,
    })
}

/// Equal but for the conditions' transition times.
fn same_conditions(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(list) = v.get_mut("conditions").and_then(Value::as_array_mut) {
            for c in list {
                c.as_object_mut().map(|c| c.remove("lastTransitionTime"));
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// The finalizing controller (`pkg/controller/finalizer/crd_finalizer.go`): deletes every
/// instance (each as a DELETE would: finalizers hold it), then, when none is left,
/// stops serving and releases the definition.
fn finalize(store: &Store, crd_kind: &'static ResourceKind, crd: &Value) -> bool {
    if !crate::ops::finalizers(crd)
        .iter()
        .any(|f| f == CLEANUP_FINALIZER)
    {
        return false;
    }
    let (group, plural) = group_plural(crd);
    let kinds = store.kinds();
    let storage = kinds.storage_version(group, plural);
    let mut st = store.lock();
    let mut left = 0;
    if let Some(kind) = storage {
        for obj in st.list(kind, None) {
            let r = crate::ops::delete_locked(&mut st, kind, &obj, None, None, false);
            left += usize::from(!r.deleted);
        }
    }
    let mut new = crd.clone();
    let (reason, message) = if left > 0 {
        (
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        )
    } else {
        ("InstanceDeletionCompleted", "removed all instances")
    };
    new["status"]["conditions"] = terminating(crd, reason, message);
    let changed_status = new["status"] != crd["status"];
    if changed_status {
        crate::ops::system_status_update(&mut st, crd_kind, new.clone(), "kube-apiserver");
    }
    if left > 0 {
        return changed_status;
    }
    store.set_kinds(&mut st, kinds.replacing(group, plural, &[]));
    if let Some(uid) = meta_str(crd, "uid") {
        store.crd_kinds().remove(uid);
    }
    let current = st
        .get(crd_kind, "", meta_str(crd, "name").unwrap_or_default())
        .map(|o| (*o).clone())
        .unwrap_or(new);
    let rest: Vec<String> = crate::ops::finalizers(&current)
        .into_iter()
        .filter(|f| f != CLEANUP_FINALIZER)
        .collect();
    crate::ops::set_finalizers(&mut st, crd_kind, &current, rest);
    true
}

/// A create of a custom resource whose CRD is being deleted is refused (apiextensions-
/// apiserver `pkg/apiserver/customresource_handler.go`, serveResource: 405 for the verb
/// `create` while the CRD is terminating; other verbs go on, so finalizers can be cleared).
pub(crate) fn refuse_create_while_terminating(
    st: &crate::store::State,
    store: &Store,
    kind: &ResourceKind,
) -> Result<(), crate::status::ApiError> {
    if kind.crd.is_none() {
        return Ok(());
    }
    let kinds = store.kinds();
    let Some(crd_kind) =
        kinds.by_resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
    else {
        return Ok(());
    };
    let name = format!("{}.{}", kind.plural, kind.group);
    let terminating = st
        .get(crd_kind, "", &name)
        .is_some_and(|crd| crd.pointer("/metadata/deletionTimestamp").is_some());
    if !terminating {
        return Ok(());
    }
    let mut e = crate::status::ApiError::new(
        405,
        "MethodNotAllowed",
        "create not allowed while custom resource definition is terminating",
    );
    e.details = Some(json!({"group": kind.group, "kind": kind.plural}));
    Err(e)
}

/// The conditions with `Terminating` set (and `Established` kept, as the real server does
/// until the definition is gone).
fn terminating(crd: &Value, reason: &str, message: &str) -> Value {
    let mut list: Vec<Value> = crd
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let same = list
        .iter()
        .any(|c| c["type"] == "Terminating" && c["reason"] == reason && c["message"] == message);
    if !same {
        list.retain(|c| c["type"] != "Terminating");
        list.push(json!({"type": "Terminating", "status": "True",
            "lastTransitionTime": crate::ops::now(), "reason": reason, "message": message}));
    }
    Value::Array(list)
}

/// Reads every CustomResourceDefinition in the `.yaml`/`.yml`/`.json` files of `dir`
/// (as `kubectl apply -f DIR` would, without recursing), in file-name order.
pub fn load_manifests(dir: &Path) -> Result<Vec<Value>, String> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        for doc in split_documents(&text) {
            let obj = crate::yaml::decode_apply_body(doc.as_bytes())
                .map_err(|e| format!("{}: {e}", file.display()))?;
            if obj["kind"] == "CustomResourceDefinition" {
                out.push(obj);
            }
        }
    }
    if out.is_empty() {
        return Err(format!(
            "{}: no CustomResourceDefinition found",
            dir.display()
        ));
    }
    Ok(out)
}

/// The documents of a YAML stream (separated by `---` lines).
fn split_documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    docs.into_iter().filter(|d| !d.trim().is_empty()).collect()
}

/// Creates the definitions (as `kubectl apply` would create them) and establishes them.
pub(crate) fn install(store: &Store, crds: Vec<Value>) -> Result<(), String> {
    let kind = store
        .kinds()
        .by_resource("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .expect("CustomResourceDefinitions are always served");
    let opts = crate::ops::WriteOptions {
        field_manager: Some("kubectl-client-side-apply".into()),
        ..Default::default()
    };
    for crd in crds {
        let name = meta_str(&crd, "name").unwrap_or_default().to_string();
        crate::ops::create(store, kind, "", crd, &opts)
            .map_err(|e| format!("CustomResourceDefinition {name}: {}", e.message))?;
    }
    while reconcile(store) {}
    Ok(())
}

/// A published CRD manifest by file name, for unit tests.
#[cfg(test)]
pub(crate) fn published_crd(file: &str) -> serde_json::Value {
    let dir = crate::published_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    crate::yaml::decode_apply_body(&text).expect("a manifest is YAML")
}
