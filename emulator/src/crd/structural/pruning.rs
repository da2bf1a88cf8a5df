//! Pruning (pkg/apiserver/schema/pruning/algorithm.go) and embedded ObjectMeta coercion
//! (pkg/apiserver/schema/objectmeta/coerce.go).

use std::fmt::Write as _;

use serde_json::{Map, Value};

use super::schema::{EMBEDDED, PRESERVE, additional, additional_schema, flag, items, prop};

/// TypeMeta and ObjectMeta fields, kept at the root and in embedded resources
/// (pkg/apiserver/schema/pruning/algorithm.go `metaFields`).
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The dotted path `UnknownFieldPathOptions` builds (keys joined by `.`, indices `[i]`).
#[derive(Default)]
pub(super) struct PrunePaths {
    cur: String,
    pub(super) found: Vec<String>,
}

impl PrunePaths {
    fn key(&mut self, k: &str) -> usize {
        let n = self.cur.len();
        if n > 0 {
            self.cur.push('.');
        }
        self.cur.push_str(k);
        n
    }

    fn index(&mut self, i: usize) -> usize {
        let n = self.cur.len();
        let _ = write!(self.cur, "[{i}]");
        n
    }

    fn record(&mut self, k: &str) {
        let n = self.key(k);
        self.found.push(self.cur.clone());
        self.cur.truncate(n);
    }
}

pub(super) fn prune_at(x: &mut Value, s: Option<&Value>, root: bool, p: &mut PrunePaths) {
    if let Some(s) = s.filter(|s| flag(s, PRESERVE)) {
        return skip_prune(x, s, root, p);
    }
    match x {
        Value::Object(m) => prune_object(m, s, root, p),
        Value::Array(a) => {
            let it = s.and_then(items);
            for (i, v) in a.iter_mut().enumerate() {
                let n = p.index(i);
                prune_at(v, it, false, p);
                p.cur.truncate(n);
            }
        }
        _ => {}
    }
}

fn prune_object(m: &mut Map<String, Value>, s: Option<&Value>, root: bool, p: &mut PrunePaths) {
    let Some(s) = s else {
        // No schema at all: every field is unknown.
        for k in m.keys() {
            p.record(k);
        }
        m.clear();
        return;
    };
    let embedded = root || flag(s, EMBEDDED);
    m.retain(|k, v| {
        if embedded && META_FIELDS.contains(&k.as_str()) {
            return true;
        }
        let child = match (prop(s, k), additional(s)) {
            (Some(ps), _) => Some(ps),
            (None, Some(addl)) => addl,
            (None, None) => {
                p.record(k);
                return false;
            }
        };
        let n = p.key(k);
        prune_at(v, child, false, p);
        p.cur.truncate(n);
        true
    });
}

/// `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are still pruned
/// below (pruning/algorithm.go `skipPrune`).
fn skip_prune(x: &mut Value, s: &Value, root: bool, p: &mut PrunePaths) {
    let embedded = root || flag(s, EMBEDDED);
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = match (prop(s, k), additional(s)) {
                    (Some(ps), _) => Some(ps),
                    (None, Some(addl)) => addl,
                    (None, None) => continue,
                };
                let n = p.key(k);
                prune_at(v, child, false, p);
                p.cur.truncate(n);
            }
        }
        Value::Array(a) => {
            let Some(it) = items(s) else { return };
            for (i, v) in a.iter_mut().enumerate() {
                let n = p.index(i);
                skip_prune(v, it, false, p);
                p.cur.truncate(n);
            }
        }
        _ => {}
    }
}

/// The `metav1.ObjectMeta` JSON fields: an embedded resource's metadata keeps only these.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// field.Path forms: `Child` (`a.b`), `Key` (`a[k]`), `Index` (`a[0]`).
pub(super) fn push_child(path: &mut String, k: &str) -> usize {
    let n = path.len();
    if n > 0 {
        path.push('.');
    }
    path.push_str(k);
    n
}

pub(super) fn push_subscript(path: &mut String, k: &dyn std::fmt::Display) -> usize {
    let n = path.len();
    let _ = write!(path, "[{k}]");
    n
}

/// objectmeta/coerce.go: each embedded resource's metadata is decoded into an ObjectMeta
/// and written back, which drops unknown fields (reported under `<path>.metadata.`) and the
/// empty ones its JSON encoding omits.
pub(super) fn coerce_embedded(x: &mut Value, s: &Value, path: &mut String, out: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            if flag(s, EMBEDDED)
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
            {
                coerce_object_meta(meta, path, out);
            }
            for (k, v) in m.iter_mut() {
                let (child, n) = match (prop(s, k), additional_schema(s)) {
                    (Some(ps), _) => (ps, push_child(path, k)),
                    (None, Some(a)) => (a, push_subscript(path, k)),
                    (None, None) => continue,
                };
                coerce_embedded(v, child, path, out);
                path.truncate(n);
            }
        }
        Value::Array(a) => {
            let Some(it) = items(s) else { return };
            for (i, v) in a.iter_mut().enumerate() {
                let n = push_subscript(path, &i);
                coerce_embedded(v, it, path, out);
                path.truncate(n);
            }
        }
        _ => {}
    }
}

fn coerce_object_meta(meta: &mut Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let prefix = if path.is_empty() {
        "metadata".to_string()
    } else {
        format!("{path}.metadata")
    };
    meta.retain(|k, v| {
        if !OBJECT_META_FIELDS.contains(&k.as_str()) {
            out.push(format!("{prefix}.{k}"));
            return false;
        }
        // omitempty fields, and a zero creationTimestamp, do not survive the round trip.
        let empty = match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::Number(n) => k == "generation" && n.as_i64() == Some(0),
            Value::Bool(_) => false,
        };
        !empty
    });
}
