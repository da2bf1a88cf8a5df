//! The API operations (create, update, patch, apply, delete) with the real server's
//! semantics: identity metadata, status isolation, defaulting, validation, generation,
//! managedFields, optimistic concurrency, finalizers and dry-run.
//!
//! These functions are used by the HTTP layer and are public so that in-process users
//! (tests, the simulated cluster's controllers) get exactly the same behaviour.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::admission::{initial_status, keep_allocated, prepare_create};
use crate::apply::{self, Writer};
use crate::defaults::apply_defaults;
use crate::patch::{PatchType, apply_patch};
use crate::resources::{Generation, ResourceKind, meta_mut, meta_str};
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{State, Store};
use crate::validation::validate;

/// How unknown fields are treated (`fieldValidation` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

/// Options shared by every write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// `fieldManager`; when absent, derived from the User-Agent (as the real server does).
    pub field_manager: Option<String>,
    /// The manager name derived from the User-Agent, used when `field_manager` is absent.
    pub default_manager: String,
    pub field_validation: FieldValidation,
    /// `force` (server-side apply only).
    pub force: Option<bool>,
    /// Set by the simulated cluster's components: their bodies are stored objects they
    /// changed, decoded when first written, so the unknown-field decode is skipped (it was
    /// a tenth of the emulator's CPU under load). Never set for HTTP requests.
    pub internal: bool,
}

impl WriteOptions {
    fn manager(&self) -> String {
        self.field_manager
            .clone()
            .unwrap_or_else(|| self.default_manager.clone())
    }
}

/// A successful write: the resulting object and any warnings (sent as `Warning` headers).
#[derive(Debug, Clone)]
pub struct WriteResult {
    pub object: Value,
    pub warnings: Vec<String>,
    /// True when a new object was created (201 instead of 200).
    pub created: bool,
}

/// Deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// Options of a DELETE.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub dry_run: bool,
    /// `gracePeriodSeconds` (pods only; other kinds have no graceful deletion).
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

/// The outcome of a DELETE: the object, and whether it is gone or still held (finalizers,
/// graceful pod termination, namespace cleanup).
#[derive(Debug, Clone)]
pub struct DeleteResult {
    pub object: Value,
    pub deleted: bool,
}

pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

const GENERATE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub(crate) fn generate_suffix() -> String {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    bytes[..5]
        .iter()
        .map(|b| GENERATE_ALPHABET[*b as usize % GENERATE_ALPHABET.len()] as char)
        .collect()
}

/// Checks the body's apiVersion/kind against the endpoint (filling them in when absent).
fn check_type(kind: &ResourceKind, body: &mut Value) -> ApiResult<()> {
    let Some(o) = body.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    let av = kind.api_version();
    match o.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("apiVersion".into(), Value::String(av));
        }
        Some(v) if v == av => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({av})"
            )));
        }
    }
    match o.get("kind").and_then(Value::as_str) {
        None | Some("") => {
            o.insert("kind".into(), Value::String(kind.kind.into()));
        }
        Some(k) if k == kind.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                kind.kind
            )));
        }
    }
    Ok(())
}

/// Namespace checks for a namespaced create: it must exist and not be terminating.
fn check_namespace(
    st: &State,
    store: &Store,
    kind: &ResourceKind,
    ns: &str,
    name: &str,
) -> ApiResult<()> {
    if !kind.namespaced {
        return Ok(());
    }
    let ns_kind = store
        .kinds()
        .by_resource("", "v1", "namespaces")
        .expect("namespaces are always served");
    match st.get(ns_kind, "", ns) {
        None => Err(ApiError::namespace_not_found(ns)),
        Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
            // The NamespaceLifecycle admission plugin: Forbidden with a NamespaceTerminating
            // cause on metadata.namespace (plugin/pkg/admission/namespace/lifecycle).
            let mut e = ApiError::forbidden(
                kind,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]);
            }
            Err(e)
        }
        Some(_) => Ok(()),
    }
}

/// Applies the `fieldValidation` policy: unknown fields are always dropped (as decoding
/// into the Go types does); Strict rejects them, Warn reports them, Ignore says nothing.
fn field_validation(
    kind: &ResourceKind,
    body: &mut Value,
    opts: &WriteOptions,
) -> ApiResult<Vec<String>> {
    if opts.internal {
        return Ok(Vec::new());
    }
    if let Some(msg) = crate::fields::decode_error(kind, body) {
        return Err(ApiError::bad_request(msg));
    }
    let unknown: Vec<String> = crate::fields::prune_unknown(kind, body)
        .into_iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    match opts.field_validation {
        FieldValidation::Ignore => Ok(Vec::new()),
        FieldValidation::Warn => Ok(unknown),
        FieldValidation::Strict if unknown.is_empty() => Ok(Vec::new()),
        FieldValidation::Strict => Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            unknown.join(", ")
        ))),
    }
}

/// Fields the main endpoint may not change (owned by the status subresource) and vice versa.
fn isolate_subresource(kind: &ResourceKind, old: &Value, new: &mut Value, subresource: &str) {
    if subresource == "status" && !kind.custom {
        // The built-in status strategies' PrepareForUpdate reset the spec (and a few more
        // fields) and keep the rest of the new object, metadata included: a `/status`
        // write may change annotations. Deployments also reset labels (pkg/registry/apps/
        // deployment/strategy.go deploymentStatusStrategy); pods keep their
        // ownerReferences (pkg/registry/core/pod/strategy.go podStatusStrategy).
        match old.get("spec") {
            Some(s) => new["spec"] = s.clone(),
            None => {
                new.as_object_mut().map(|o| o.remove("spec"));
            }
        }
        let reset: &[&str] = match (kind.group, kind.kind) {
            ("apps", "Deployment") => &["labels"],
            ("", "Pod") => &["ownerReferences"],
            _ => &[],
        };
        for f in reset {
            match old.pointer(&format!("/metadata/{f}")) {
                Some(v) => {
                    meta_mut(new).insert((*f).into(), v.clone());
                }
                None => {
                    meta_mut(new).remove(*f);
                }
            }
        }
    } else if subresource == "status" {
        // Custom resources (apiextensions status_strategy.go): only status changes.
        let status = new.get("status").cloned();
        let mut merged = old.clone();
        match status {
            Some(s) => merged["status"] = s,
            None => {
                merged.as_object_mut().map(|o| o.remove("status"));
            }
        }
        // Keep the resourceVersion precondition the client sent, and the ownership an
        // apply computed (updates recompute theirs from the stored object afterwards).
        for f in ["resourceVersion", "managedFields"] {
            if let Some(v) = new.pointer(&format!("/metadata/{f}")).cloned() {
                meta_mut(&mut merged).insert(f.into(), v);
            }
        }
        *new = merged;
    } else if kind.has_status() {
        match old.get("status") {
            Some(s) => new["status"] = s.clone(),
            None => {
                new.as_object_mut().map(|o| o.remove("status"));
            }
        }
    }
}

/// Copies server-owned metadata from the stored object.
fn keep_identity(old: &Value, new: &mut Value) {
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = meta_mut(new);
    for f in [
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "name",
        "namespace",
    ] {
        match old_meta.get(f) {
            Some(v) => {
                meta.insert(f.into(), v.clone());
            }
            None => {
                meta.remove(f);
            }
        }
    }
    meta.remove("selfLink");
}

fn spec_part(kind: &ResourceKind, obj: &Value) -> Value {
    match kind.generation {
        Generation::AllButMetadataStatus => {
            let mut o = obj.as_object().cloned().unwrap_or_default();
            for k in ["metadata", "status", "apiVersion", "kind"] {
                o.remove(k);
            }
            Value::Object(o)
        }
        Generation::SpecAndAnnotations => {
            json!([obj.get("spec"), obj.pointer("/metadata/annotations")])
        }
        _ => obj.get("spec").cloned().unwrap_or(Value::Null),
    }
}

/// True when the object is marked deleted and nothing holds it any more.
pub fn is_finalized(kind: &ResourceKind, obj: &Value) -> bool {
    if obj.pointer("/metadata/deletionTimestamp").is_none() {
        return false;
    }
    let empty = |p: &str| {
        obj.pointer(p)
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
    };
    let grace = obj
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    empty("/metadata/finalizers")
        && (kind.kind != "Namespace" || empty("/spec/finalizers"))
        && (kind.kind != "Pod" || grace == 0)
}

/// The grace period a pod deletion gets: bound, running pods wait for their kubelet;
/// unscheduled or finished pods go at once (the pod strategy's CheckGracefulDelete).
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || finished {
        return 0;
    }
    let default = pod
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(30);
    requested.unwrap_or(default).max(0)
}

/// Equality for no-op detection: managedFields timestamps and resourceVersion do not count.
fn same_content(a: &Value, b: &Value) -> bool {
    // Compared in place (copying both objects to drop the ignored members cost a tenth of
    // the simulated cluster's time).
    fn same_except<'a>(
        a: &'a Map<String, Value>,
        b: &'a Map<String, Value>,
        ignored: &[&str],
        mut same: impl FnMut(&str, &'a Value, &'a Value) -> bool,
    ) -> bool {
        let kept =
            |m: &Map<String, Value>| m.keys().filter(|k| !ignored.contains(&k.as_str())).count();
        kept(a) == kept(b)
            && a.iter()
                .filter(|(k, _)| !ignored.contains(&k.as_str()))
                .all(|(k, va)| b.get(k).is_some_and(|vb| same(k, va, vb)))
    }
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    same_except(a, b, &[], |k, va, vb| match (k, va, vb) {
        ("metadata", Value::Object(ma), Value::Object(mb)) => {
            same_except(ma, mb, &["resourceVersion"], |k, va, vb| {
                match (k, va, vb) {
                    ("managedFields", Value::Array(fa), Value::Array(fb)) => {
                        fa.len() == fb.len()
                            && fa.iter().zip(fb).all(|(ea, eb)| match (ea, eb) {
                                (Value::Object(ea), Value::Object(eb)) => {
                                    same_except(ea, eb, &["time"], |_, x, y| x == y)
                                }
                                _ => ea == eb,
                            })
                    }
                    _ => va == vb,
                }
            })
        }
        _ => va == vb,
    })
}

fn invalid_if_any(kind: &ResourceKind, name: &str, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(kind, name, causes))
    }
}

/// Shared tail of update, patch and apply: validate, default, account and persist.
#[allow(clippy::too_many_arguments)]
fn commit_update(
    st: &mut State,
    kind: &'static ResourceKind,
    old: &Value,
    mut new: Value,
    subresource: &str,
    opts: &WriteOptions,
    applied: bool,
    warnings: Vec<String>,
) -> ApiResult<WriteResult> {
    let name = meta_str(old, "name").unwrap_or("").to_string();
    let old_rv = meta_str(old, "resourceVersion").unwrap_or("");
    if let Some(rv) = meta_str(&new, "resourceVersion")
        && !rv.is_empty()
        && rv != old_rv
    {
        return Err(ApiError::stale(kind, &name));
    }
    isolate_subresource(kind, old, &mut new, subresource);
    keep_identity(old, &mut new);
    keep_allocated(kind, old, &mut new);
    apply_defaults(kind, &mut new);
    invalid_if_any(kind, &name, validate(kind, &new, Some(old)))?;
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let before: Vec<Value> = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let after: Vec<Value> = new
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if after.iter().any(|f| !before.contains(f)) {
            return Err(ApiError::invalid(
                kind,
                &name,
                vec![Cause::forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted",
                )],
            ));
        }
    }
    let manager = opts.manager();
    let api_version = kind.api_version();
    let now = now();
    if !applied {
        let w = Writer {
            manager: &manager,
            api_version: &api_version,
            subresource,
            now: &now,
        };
        apply::record_update(kind, Some(old), &mut new, &w);
    }
    // Only the main endpoint's strategies bump the generation (a `/status` write that
    // changes a Deployment's annotations does not).
    if kind.generation != Generation::None
        && subresource != "status"
        && spec_part(kind, old) != spec_part(kind, &new)
    {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    meta_mut(&mut new).insert("resourceVersion".into(), Value::String(old_rv.to_string()));
    if same_content(old, &new) {
        return Ok(WriteResult {
            object: old.clone(),
            warnings,
            created: false,
        });
    }
    if opts.dry_run {
        return Ok(WriteResult {
            object: new,
            warnings,
            created: false,
        });
    }
    let ns = meta_str(old, "namespace").unwrap_or("").to_string();
    let stored = if is_finalized(kind, &new) {
        st.replace(kind, new);
        st.remove(kind, &ns, &name).expect("just stored")
    } else {
        st.replace(kind, new)
    };
    Ok(WriteResult {
        object: (*stored).clone(),
        warnings,
        created: false,
    })
}

/// POST: creates an object.
pub fn create(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    mut body: Value,
    opts: &WriteOptions,
) -> ApiResult<WriteResult> {
    check_type(kind, &mut body)?;
    let warnings = field_validation(kind, &mut body, opts)?;
    store.write(|st| {
        crate::crd::refuse_create_while_terminating(st, store, kind)?;
        create_locked(st, store, kind, ns, body, opts, false, warnings)
    })
}

/// Creation with the lock held; `by_apply` when the object already carries apply's managedFields.
#[allow(clippy::too_many_arguments)]
fn create_locked(
    st: &mut State,
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    mut obj: Value,
    opts: &WriteOptions,
    by_apply: bool,
    warnings: Vec<String>,
) -> ApiResult<WriteResult> {
    {
        let meta = meta_mut(&mut obj);
        if kind.namespaced {
            match meta.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    meta.insert("namespace".into(), json!(ns));
                }
            }
        } else {
            meta.remove("namespace");
        }
        let name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty()
            && let Some(g) = meta
                .get("generateName")
                .and_then(Value::as_str)
                .filter(|g| !g.is_empty())
        {
            // Like the real server (RetryGenerateName), retry a few times on a collision.
            let scope = if kind.namespaced { ns } else { "" };
            let mut generated = format!("{g}{}", generate_suffix());
            for _ in 0..7 {
                if st.get(kind, scope, &generated).is_none() {
                    break;
                }
                generated = format!("{g}{}", generate_suffix());
            }
            meta.insert("name".into(), json!(generated));
        }
    }
    let name = meta_str(&obj, "name").unwrap_or("").to_string();
    if name.is_empty() {
        return Err(ApiError::invalid(
            kind,
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )],
        ));
    }
    check_namespace(st, store, kind, ns, &name)?;
    if st
        .get(kind, if kind.namespaced { ns } else { "" }, &name)
        .is_some()
    {
        return Err(ApiError::already_exists(kind, &name));
    }
    let now = now();
    {
        let meta = meta_mut(&mut obj);
        meta.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
        meta.insert("creationTimestamp".into(), json!(now));
        for f in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(f);
        }
        if !by_apply {
            meta.remove("managedFields");
        }
        if kind.generation != Generation::None {
            meta.insert("generation".into(), json!(1));
        } else {
            meta.remove("generation");
        }
    }
    if kind.has_status() {
        obj.as_object_mut().map(|o| o.remove("status"));
    }
    prepare_create(st, store, kind, &mut obj)?;
    apply_defaults(kind, &mut obj);
    if kind.has_status()
        && obj.get("status").is_none()
        && let Some(s) = initial_status(kind, &obj)
    {
        obj["status"] = s;
    }
    invalid_if_any(kind, &name, validate(kind, &obj, None))?;
    if !by_apply {
        let manager = opts.manager();
        let av = kind.api_version();
        let w = Writer {
            manager: &manager,
            api_version: &av,
            subresource: "",
            now: &now,
        };
        apply::record_update(kind, None, &mut obj, &w);
    }
    if opts.dry_run {
        return Ok(WriteResult {
            object: obj,
            warnings,
            created: true,
        });
    }
    let stored = st.insert(kind, obj);
    if kind.kind == "Namespace" && kind.group.is_empty() {
        // The service account controller reacts at once; creating the account with the
        // namespace keeps pods created right afterwards from racing it.
        if let Some(sa) = store.kinds().by_resource("", "v1", "serviceaccounts") {
            let _ = system_create(
                st,
                store,
                sa,
                &name,
                json!({"metadata": {"name": "default"}}),
                "kube-controller-manager",
            );
        }
        // The root CA publisher (pkg/controller/certificates/rootcacertpublisher) gives
        // every namespace the kube-root-ca.crt ConfigMap that projected service-account
        // volumes read.
        if let Some(cm) = store.kinds().by_resource("", "v1", "configmaps") {
            let _ = system_create(
                st,
                store,
                cm,
                &name,
                crate::admission::root_ca_config_map(),
                "kube-controller-manager",
            );
        }
    }
    Ok(WriteResult {
        object: (*stored).clone(),
        warnings,
        created: true,
    })
}

/// The body must name the object the URL names (rest.BeforeUpdate).
fn check_name(body: &Value, name: &str) -> ApiResult<()> {
    match meta_str(body, "name").unwrap_or("") {
        n if n == name => Ok(()),
        n => Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        ))),
    }
}

fn check_body_namespace(kind: &ResourceKind, body: &Value, ns: &str) -> ApiResult<()> {
    if let Some(n) = meta_str(body, "namespace")
        && kind.namespaced
        && !n.is_empty()
        && n != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    Ok(())
}

fn get_locked(
    st: &State,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
) -> ApiResult<Arc<Value>> {
    st.get(kind, if kind.namespaced { ns } else { "" }, name)
        .ok_or_else(|| ApiError::not_found(kind, name))
}

/// GET of one object.
pub fn get(store: &Store, kind: &'static ResourceKind, ns: &str, name: &str) -> ApiResult<Value> {
    get_locked(&store.lock(), kind, ns, name).map(|o| (*o).clone())
}

/// PUT: replaces an object (on the main endpoint or a subresource).
pub fn update(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    subresource: &str,
    mut body: Value,
    opts: &WriteOptions,
) -> ApiResult<WriteResult> {
    check_type(kind, &mut body)?;
    check_name(&body, name)?;
    check_body_namespace(kind, &body, ns)?;
    let warnings = field_validation(kind, &mut body, opts)?;
    store.write(|st| {
        let old = get_locked(st, kind, ns, name)?;
        commit_update(st, kind, &old, body, subresource, opts, false, warnings)
    })
}

/// PATCH: JSON, merge, strategic or apply patch.
#[allow(clippy::too_many_arguments)]
pub fn patch(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    subresource: &str,
    pt: PatchType,
    body: &[u8],
    opts: &WriteOptions,
) -> ApiResult<WriteResult> {
    validate_patch_options(pt, opts)?;
    if pt == PatchType::Apply {
        return server_side_apply(store, kind, ns, name, subresource, body, opts);
    }
    store.write(|st| {
        let old = get_locked(st, kind, ns, name)?;
        let mut new = (*old).clone();
        apply_patch(kind, pt, &mut new, body)?;
        // A patch may carry a resourceVersion precondition; otherwise it is unconditional.
        let patched_rv = meta_str(&new, "resourceVersion").map(String::from);
        if patched_rv.as_deref() == meta_str(&old, "resourceVersion") {
            meta_mut(&mut new).remove("resourceVersion");
        }
        if meta_str(&new, "name") != Some(name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                meta_str(&new, "name").unwrap_or("")
            )));
        }
        let warnings = field_validation(kind, &mut new, opts)?;
        commit_update(st, kind, &old, new, subresource, opts, false, warnings)
    })
}

/// `ValidatePatchOptions` (apimachinery `pkg/apis/meta/v1/validation/validation.go`):
/// `force` only with apply, and apply needs a `fieldManager`; a 422 on `PatchOptions`.
fn validate_patch_options(pt: PatchType, opts: &WriteOptions) -> ApiResult<()> {
    let mut causes = Vec::new();
    if pt != PatchType::Apply {
        if opts.force.is_some() {
            causes.push(Cause::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
    } else if opts.field_manager.as_deref().unwrap_or("").is_empty() {
        causes.push(Cause::new(
            "FieldValueRequired",
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_options("PatchOptions", causes))
    }
}

fn server_side_apply(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    subresource: &str,
    body: &[u8],
    opts: &WriteOptions,
) -> ApiResult<WriteResult> {
    // handlers/patch.go `applyPatcher.applyPatchToCurrentObject`: "error decoding patch: ...".
    let config: Value = crate::yaml::decode_apply_body(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let Some(o) = config.as_object() else {
        return Err(ApiError::bad_request(
            "apply configuration must be an object",
        ));
    };
    for f in ["apiVersion", "kind"] {
        if o.get(f).and_then(Value::as_str).unwrap_or("").is_empty() {
            let what = if f == "kind" {
                "Object 'Kind' is missing"
            } else {
                "Object 'apiVersion' is missing"
            };
            return Err(ApiError::bad_request(format!("{what} in '{}'", config)));
        }
    }
    let mut config = config;
    check_type(kind, &mut config)?;
    check_name(&config, name)?;
    check_body_namespace(kind, &config, ns)?;
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    let manager = opts.field_manager.clone().unwrap_or_default();
    let warnings = field_validation(kind, &mut config, opts)?;
    let force = opts.force.unwrap_or(false);
    let av = kind.api_version();
    store.write(|st| {
        let old = st.get(kind, if kind.namespaced { ns } else { "" }, name);
        let now = now();
        let w = Writer {
            manager: &manager,
            api_version: &av,
            subresource,
            now: &now,
        };
        match old {
            None => {
                if subresource == "status" {
                    return Err(ApiError::not_found(kind, name));
                }
                let obj = apply::apply(kind, None, &config, force, &w)?;
                create_locked(st, store, kind, ns, obj, opts, true, warnings)
            }
            Some(old) => {
                let mut obj = apply::apply(kind, Some(&old), &config, force, &w)?;
                // An apply never carries a resourceVersion precondition unless the config has one.
                if config.pointer("/metadata/resourceVersion").is_none() {
                    meta_mut(&mut obj).remove("resourceVersion");
                }
                commit_update(st, kind, &old, obj, subresource, opts, true, warnings)
            }
        }
    })
}

/// DELETE of one object.
pub fn delete(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    opts: &DeleteOptions,
) -> ApiResult<DeleteResult> {
    store.write(|st| {
        let obj = get_locked(st, kind, ns, name)?;
        // The NamespaceLifecycle admission plugin protects the system namespaces.
        if kind.kind == "Namespace" && ["default", "kube-system", "kube-public"].contains(&name) {
            return Err(ApiError::forbidden(kind, name, "this namespace may not be deleted"));
        }
        // rest.BeforeDelete (apiserver pkg/registry/rest/delete.go): a Conflict on the Kind.
        if let Some(uid) = &opts.precondition_uid {
            let actual = meta_str(&obj, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::precondition_failed(
                    kind,
                    name,
                    &format!("the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated"),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            let actual = meta_str(&obj, "resourceVersion").unwrap_or("");
            if rv != actual {
                return Err(ApiError::precondition_failed(
                    kind,
                    name,
                    &format!(
                        "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({actual}). The object might have been modified"
                    ),
                ));
            }
        }
        Ok(delete_locked(
            st,
            kind,
            &obj,
            opts.propagation,
            opts.grace_period_seconds,
            opts.dry_run,
        ))
    })
}

/// Deletes (or starts deleting) a stored object; used by the API and by garbage collection.
pub fn delete_locked(
    st: &mut State,
    kind: &'static ResourceKind,
    obj: &Value,
    propagation: Option<Propagation>,
    grace_period: Option<i64>,
    dry_run: bool,
) -> DeleteResult {
    let ns = meta_str(obj, "namespace").unwrap_or("").to_string();
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    let mut new = obj.clone();
    let mut finalizers: Vec<Value> = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match propagation {
        Some(Propagation::Foreground) => {
            let f = json!("foregroundDeletion");
            if !finalizers.contains(&f) {
                finalizers.push(f);
            }
            finalizers.retain(|x| x != "orphan");
        }
        Some(Propagation::Orphan) => {
            let f = json!("orphan");
            if !finalizers.contains(&f) {
                finalizers.push(f);
            }
            finalizers.retain(|x| x != "foregroundDeletion");
        }
        _ => {}
    }
    // The CRD registry's Delete (apiextensions-apiserver pkg/registry/
    // customresourcedefinition/etcd.go) adds the cleanup finalizer: instances go first.
    if kind.group == "apiextensions.k8s.io" && obj.pointer("/metadata/deletionTimestamp").is_none()
    {
        let f = json!(crate::crd::CLEANUP_FINALIZER);
        if !finalizers.contains(&f) {
            finalizers.push(f);
        }
    }
    let grace = if kind.kind == "Pod" {
        pod_grace_period(obj, grace_period)
    } else {
        0
    };
    let pending = !finalizers.is_empty() || kind.kind == "Namespace" || grace > 0;
    if !pending {
        if dry_run {
            // A pod's deletion is always graceful (the pod strategy's CheckGracefulDelete),
            // even with a grace period of 0: rest.BeforeDelete sets deletionTimestamp and
            // deletionGracePeriodSeconds and bumps the generation, and a dry run answers
            // with that object (registry/generic/registry/store.go Delete). Other kinds
            // answer with the stored object.
            let mut out = obj.clone();
            if kind.kind == "Pod" && kind.group.is_empty() {
                let meta = meta_mut(&mut out);
                if !meta.contains_key("deletionTimestamp") {
                    meta.insert("deletionTimestamp".into(), json!(now()));
                    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                    if let Some(g) = meta.get("generation").and_then(Value::as_i64) {
                        meta.insert("generation".into(), json!(g + 1));
                    }
                }
            }
            return DeleteResult {
                object: out,
                deleted: true,
            };
        }
        let gone = st
            .remove(kind, &ns, &name)
            .map(|o| (*o).clone())
            .unwrap_or_else(|| obj.clone());
        return DeleteResult {
            object: gone,
            deleted: true,
        };
    }
    {
        let meta = meta_mut(&mut new);
        if !finalizers.is_empty() {
            meta.insert("finalizers".into(), Value::Array(finalizers));
        }
        let deadline = (chrono::Utc::now() + chrono::Duration::seconds(grace))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let current_grace = meta
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if !meta.contains_key("deletionTimestamp") {
            meta.insert("deletionTimestamp".into(), json!(deadline));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            // Setting deletionTimestamp bumps generation for kinds that track it.
            if let Some(g) = meta.get("generation").and_then(Value::as_i64) {
                meta.insert("generation".into(), json!(g + 1));
            }
        } else if current_grace.is_some_and(|c| grace < c) {
            // A second delete may only shorten a pod's grace period.
            meta.insert("deletionTimestamp".into(), json!(deadline));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
    }
    if kind.kind == "Namespace" {
        new["status"] = json!({"phase": "Terminating"});
    }
    if dry_run || same_content(obj, &new) {
        return DeleteResult {
            object: new,
            deleted: false,
        };
    }
    if is_finalized(kind, &new) {
        // e.g. a terminating pod deleted again with gracePeriodSeconds=0.
        st.replace(kind, new);
        let gone = st.remove(kind, &ns, &name).map(|o| (*o).clone());
        return DeleteResult {
            object: gone.unwrap_or_default(),
            deleted: true,
        };
    }
    let stored = st.replace(kind, new);
    DeleteResult {
        object: (*stored).clone(),
        deleted: false,
    }
}

/// Reads `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Replaces an object's finalizers (system writes by the garbage collector), removing it when finalized.
pub fn set_finalizers(st: &mut State, kind: &'static ResourceKind, obj: &Value, fins: Vec<String>) {
    let mut new = obj.clone();
    let meta = meta_mut(&mut new);
    if fins.is_empty() {
        meta.remove("finalizers");
    } else {
        meta.insert("finalizers".into(), json!(fins));
    }
    let ns = meta_str(obj, "namespace").unwrap_or("").to_string();
    let name = meta_str(obj, "name").unwrap_or("").to_string();
    if is_finalized(kind, &new) {
        st.replace(kind, new);
        st.remove(kind, &ns, &name);
    } else {
        st.replace(kind, new);
    }
}

/// Creates an object on behalf of a simulated controller (manager `manager`, operation Update),
/// with the lock already held. Errors (e.g. AlreadyExists) are returned as for any client.
pub fn system_create(
    st: &mut State,
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    obj: Value,
    manager: &str,
) -> ApiResult<Value> {
    let opts = WriteOptions {
        default_manager: manager.to_string(),
        ..Default::default()
    };
    let mut obj = obj;
    check_type(kind, &mut obj)?;
    create_locked(st, store, kind, ns, obj, &opts, false, Vec::new()).map(|r| r.object)
}

/// A controller's write of `obj`'s status with the lock held (the apiextensions
/// controllers); a write that fails (the object went away) is dropped, as a controller
/// would drop it and look again.
pub(crate) fn system_status_update(
    st: &mut State,
    kind: &'static ResourceKind,
    obj: Value,
    manager: &str,
) {
    let ns = meta_str(&obj, "namespace").unwrap_or("").to_string();
    let name = meta_str(&obj, "name").unwrap_or("").to_string();
    let Ok(old) = get_locked(st, kind, &ns, &name) else {
        return;
    };
    let opts = WriteOptions {
        default_manager: manager.to_string(),
        internal: true,
        ..Default::default()
    };
    let _ = commit_update(st, kind, &old, obj, "status", &opts, false, Vec::new());
}

/// `pods/{name}/binding`: assigns a node once (spec.nodeName, and the PodScheduled condition),
/// recorded as an Update on the `binding` subresource.
pub fn bind(
    store: &Store,
    kind: &'static ResourceKind,
    ns: &str,
    name: &str,
    node: &str,
    opts: &WriteOptions,
) -> ApiResult<Value> {
    store.write(|st| {
        let old = get_locked(st, kind, ns, name)?;
        if let Some(current) = old.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(ApiError::conflict(
                kind,
                name,
                &format!("pod {name} is already assigned to node {current:?}"),
            ));
        }
        if old.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(ApiError::conflict(kind, name, &format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        let mut new = (*old).clone();
        new["spec"]["nodeName"] = json!(node);
        let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now()});
        let conditions = new["status"].as_object_mut().map(|st| st.entry("conditions").or_insert_with(|| json!([])));
        if let Some(Value::Array(list)) = conditions {
            list.retain(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled"));
            list.push(condition);
        }
        let manager = opts.manager();
        let api_version = kind.api_version();
        let now = now();
        let w = Writer { manager: &manager, api_version: &api_version, subresource: "binding", now: &now };
        apply::record_update(kind, Some(&old), &mut new, &w);
        if opts.dry_run {
            return Ok(new);
        }
        Ok((*st.replace(kind, new)).clone())
    })
}
