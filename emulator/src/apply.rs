//! Server-side apply and field ownership (`metadata.managedFields`, `FieldsV1`).
//!
//! Field sets use the real `fieldsV1` encoding: `f:<field>` for struct/map fields,
//! `k:<json key>` for items of keyed lists, `v:<json value>` for items of set lists,
//! and `.` for "the item itself" when it also has owned children.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::resources::ResourceKind;
use crate::schema::{ListType, is_atomic_map, item_key, list_type};
use crate::status::{ApiError, ApiResult};

/// A set of field paths in `fieldsV1` shape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// This node itself is in the set.
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    fn leaf() -> Self {
        FieldSet {
            member: true,
            children: BTreeMap::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub fn from_fields_v1(v: &Value) -> Self {
        let mut set = FieldSet::default();
        if let Some(m) = v.as_object() {
            if m.is_empty() {
                set.member = true;
            }
            for (k, child) in m {
                if k == "." {
                    set.member = true;
                } else {
                    set.children
                        .insert(k.clone(), FieldSet::from_fields_v1(child));
                }
            }
        }
        set
    }

    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), json!({}));
        }
        for (k, c) in &self.children {
            m.insert(k.clone(), c.to_fields_v1());
        }
        Value::Object(m)
    }

    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (k, c) in &other.children {
            self.children.entry(k.clone()).or_default().union_with(c);
        }
    }

    /// Members of `self` that are not members of `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            let d = match other.children.get(k) {
                Some(o) => c.difference(o),
                None => c.clone(),
            };
            if !d.is_empty() {
                out.children.insert(k.clone(), d);
            }
        }
        out
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, c) in &self.children {
            if let Some(o) = other.children.get(k) {
                let i = c.intersection(o);
                if !i.is_empty() {
                    out.children.insert(k.clone(), i);
                }
            }
        }
        out
    }

    /// Every member path, as lists of path elements.
    pub fn member_paths(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, c) in &self.children {
            prefix.push(k.clone());
            c.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    fn remove_path(&mut self, path: &[String]) {
        match path.split_first() {
            None => self.member = false,
            Some((head, rest)) => {
                if let Some(c) = self.children.get_mut(head) {
                    c.remove_path(rest);
                    if c.is_empty() {
                        self.children.remove(head);
                    }
                }
            }
        }
    }

    fn get(&self, elem: &str) -> Option<&FieldSet> {
        self.children.get(elem)
    }
}

/// Renders a path like the server does in conflict messages: `.spec.containers[name="app"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut s = String::new();
    for e in path {
        if let Some(f) = e.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = e.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = e.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        } else {
            s.push_str(&format!("[{e}]"));
        }
    }
    s
}

fn key_elem(item: &Value, keys: &[&str]) -> String {
    format!("k:{}", Value::Object(item_key(item, keys)))
}

/// The field set an object (or apply configuration) specifies.
pub fn fields_of(kind: &ResourceKind, v: &Value) -> FieldSet {
    walk_fields(kind, v, &mut Vec::new())
}

fn walk_fields<'a>(kind: &ResourceKind, v: &'a Value, path: &mut Vec<&'a str>) -> FieldSet {
    match v {
        Value::Object(m) if !m.is_empty() && !is_atomic_map(kind, path) => {
            let mut node = FieldSet::default();
            for (k, child) in m {
                if child.is_null() {
                    continue;
                }
                path.push(k);
                let c = walk_fields(kind, child, path);
                path.pop();
                node.children.insert(format!("f:{k}"), c);
            }
            if node.children.is_empty() {
                node.member = true;
            }
            node
        }
        Value::Array(items) if !items.is_empty() => match list_type(kind, path) {
            ListType::Map { keys, .. } => {
                let mut node = FieldSet::default();
                for item in items {
                    let mut c = walk_fields(kind, item, path);
                    c.member = true;
                    node.children.insert(key_elem(item, keys), c);
                }
                node
            }
            ListType::Set => {
                let mut node = FieldSet::default();
                for item in items {
                    node.children.insert(format!("v:{item}"), FieldSet::leaf());
                }
                node
            }
            ListType::Atomic => FieldSet::leaf(),
        },
        _ => FieldSet::leaf(),
    }
}

/// Fields whose value differs between `old` and `new` (added or changed, not removed).
pub fn changed_fields(kind: &ResourceKind, old: Option<&Value>, new: &Value) -> FieldSet {
    diff_walk(kind, old, new, &mut Vec::new())
}

fn diff_walk<'a>(
    kind: &ResourceKind,
    old: Option<&Value>,
    new: &'a Value,
    path: &mut Vec<&'a str>,
) -> FieldSet {
    if old == Some(new) {
        return FieldSet::default();
    }
    match new {
        Value::Object(m)
            if !m.is_empty() && !is_atomic_map(kind, path) && old.is_none_or(Value::is_object) =>
        {
            let mut node = FieldSet::default();
            for (k, child) in m {
                if child.is_null() {
                    continue;
                }
                path.push(k);
                let c = diff_walk(kind, old.and_then(|o| o.get(k)), child, path);
                path.pop();
                if !c.is_empty() {
                    node.children.insert(format!("f:{k}"), c);
                }
            }
            node
        }
        Value::Array(items) if !items.is_empty() && old.is_none_or(Value::is_array) => {
            let old_items: &[Value] = old
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            match list_type(kind, path) {
                ListType::Map { keys, .. } => {
                    let mut node = FieldSet::default();
                    for item in items {
                        let key = item_key(item, keys);
                        let prev = old_items.iter().find(|o| item_key(o, keys) == key);
                        let mut c = diff_walk(kind, prev, item, path);
                        if prev.is_none() {
                            c.member = true;
                        }
                        if !c.is_empty() {
                            node.children.insert(key_elem(item, keys), c);
                        }
                    }
                    node
                }
                ListType::Set => {
                    let mut node = FieldSet::default();
                    for item in items.iter().filter(|i| !old_items.contains(i)) {
                        node.children.insert(format!("v:{item}"), FieldSet::leaf());
                    }
                    node
                }
                ListType::Atomic => FieldSet::leaf(),
            }
        }
        _ => FieldSet::leaf(),
    }
}

/// Navigates to the value at one path element.
fn child_value<'a>(
    v: &'a Value,
    elem: &str,
    keys_for: impl Fn() -> Option<&'static [&'static str]>,
) -> Option<&'a Value> {
    if let Some(f) = elem.strip_prefix("f:") {
        return v.get(f);
    }
    let items = v.as_array()?;
    if let Some(k) = elem.strip_prefix("k:") {
        let want: Map<String, Value> = serde_json::from_str(k).ok()?;
        let keys = keys_for()?;
        return items.iter().find(|i| item_key(i, keys) == want);
    }
    if let Some(raw) = elem.strip_prefix("v:") {
        let want: Value = serde_json::from_str(raw).ok()?;
        return items.iter().find(|i| **i == want);
    }
    None
}

fn value_at<'a>(kind: &ResourceKind, root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = root;
    let mut names: Vec<&str> = Vec::new();
    for elem in path {
        let keys_for = || match list_type(kind, &names) {
            ListType::Map { keys, .. } => Some(keys),
            _ => None,
        };
        cur = child_value(cur, elem, keys_for)?;
        if let Some(f) = elem.strip_prefix("f:") {
            names.push(f);
        }
    }
    Some(cur)
}

/// Removes from `set` everything that does not exist in `obj`.
fn retain_existing(kind: &ResourceKind, set: &FieldSet, obj: &Value) -> FieldSet {
    let mut out = FieldSet::default();
    for p in set.member_paths() {
        if value_at(kind, obj, &p).is_some() {
            let mut node = &mut out;
            for e in &p {
                node = node.children.entry(e.clone()).or_default();
            }
            node.member = true;
        }
    }
    out
}

/// Removes the members of `removed` from `v`, except where `keep` owns the field or something under it.
fn remove_fields(
    kind: &ResourceKind,
    v: &mut Value,
    removed: &FieldSet,
    keep: Option<&FieldSet>,
    names: &mut Vec<String>,
) {
    for (elem, child) in &removed.children {
        let keep_child = keep.and_then(|k| k.get(elem));
        let name_str: Vec<&str> = names.iter().map(String::as_str).collect();
        let keys = match list_type(kind, &name_str) {
            ListType::Map { keys, .. } => Some(keys),
            _ => None,
        };
        // Locate the element.
        let idx_or_key: Option<Result<usize, String>> = if let Some(f) = elem.strip_prefix("f:") {
            v.get(f).map(|_| Err(f.to_string()))
        } else if let Some(items) = v.as_array() {
            let found = child_value(v, elem, || keys)
                .and_then(|target| items.iter().position(|i| std::ptr::eq(i, target)));
            found.map(Ok)
        } else {
            None
        };
        let Some(loc) = idx_or_key else { continue };
        if child.member && keep_child.is_none() {
            match loc {
                Err(f) => {
                    v.as_object_mut().map(|m| m.remove(&f));
                }
                Ok(i) => {
                    v.as_array_mut().map(|a| a.remove(i));
                }
            }
            continue;
        }
        if child.children.is_empty() {
            continue;
        }
        let pushed = if let Err(f) = &loc {
            names.push(f.clone());
            true
        } else {
            false
        };
        let target = match &loc {
            Err(f) => v.get_mut(f.as_str()),
            Ok(i) => v.get_mut(*i),
        };
        let mut now_empty = false;
        if let Some(t) = target {
            remove_fields(kind, t, child, keep_child, names);
            now_empty = t.as_object().is_some_and(Map::is_empty);
        }
        if pushed {
            names.pop();
        }
        // A map emptied by removal disappears unless someone still owns it.
        if now_empty
            && keep_child.is_none()
            && let Err(f) = loc
        {
            v.as_object_mut().map(|m| m.remove(&f));
        }
    }
}

/// Merges an apply configuration into a live object: maps recursively, keyed lists by key,
/// set lists by value, everything else replaced.
pub fn merge_config(kind: &ResourceKind, live: &mut Value, cfg: &Value) {
    merge_walk(kind, live, cfg, &mut Vec::new())
}

fn merge_walk<'a>(kind: &ResourceKind, live: &mut Value, cfg: &'a Value, path: &mut Vec<&'a str>) {
    match (live, cfg) {
        (Value::Object(l), Value::Object(c)) if !is_atomic_map(kind, path) => {
            for (k, cv) in c {
                if cv.is_null() {
                    l.remove(k);
                    continue;
                }
                path.push(k);
                match l.get_mut(k) {
                    Some(lv) => merge_walk(kind, lv, cv, path),
                    None => {
                        l.insert(k.clone(), cv.clone());
                    }
                }
                path.pop();
            }
        }
        (Value::Array(l), Value::Array(c)) => match list_type(kind, path) {
            ListType::Map { keys, .. } => {
                let mut rest: Vec<Option<Value>> =
                    std::mem::take(l).into_iter().map(Some).collect();
                let mut out = Vec::new();
                for ci in c {
                    let key = item_key(ci, keys);
                    let pos = rest
                        .iter()
                        .position(|r| r.as_ref().is_some_and(|r| item_key(r, keys) == key));
                    match pos.and_then(|p| rest[p].take()) {
                        Some(mut li) => {
                            merge_walk(kind, &mut li, ci, path);
                            out.push(li);
                        }
                        None => out.push(ci.clone()),
                    }
                }
                out.extend(rest.into_iter().flatten());
                *l = out;
            }
            ListType::Set => {
                let mut out: Vec<Value> = c.clone();
                out.extend(l.iter().filter(|x| !c.contains(x)).cloned());
                *l = out;
            }
            ListType::Atomic => *l = c.clone(),
        },
        (live, cfg) => *live = cfg.clone(),
    }
}

/// Metadata fields that are never owned by anyone.
const UNOWNED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

/// Drops fields nobody owns and, per subresource, fields the endpoint resets.
pub fn strip_set(kind: &ResourceKind, mut set: FieldSet, subresource: &str) -> FieldSet {
    set.children.remove("f:apiVersion");
    set.children.remove("f:kind");
    if let Some(meta) = set.children.get_mut("f:metadata") {
        for f in UNOWNED_META {
            meta.children.remove(&format!("f:{f}"));
        }
        if meta.children.is_empty() {
            set.children.remove("f:metadata");
        }
    }
    if kind.has_status() {
        if subresource == "status" {
            set.children.retain(|k, _| k == "f:status");
        } else {
            set.children.remove("f:status");
        }
    }
    set
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

impl ManagedEntry {
    fn same_slot(&self, manager: &str, operation: &str, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation && self.subresource == subresource
    }
}

pub fn read_managed(obj: &Value) -> Vec<ManagedEntry> {
    let Some(list) = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
    else {
        return Vec::new();
    };
    list.iter()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            ManagedEntry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields: e
                    .get("fieldsV1")
                    .map(FieldSet::from_fields_v1)
                    .unwrap_or_default(),
            }
        })
        .collect()
}

pub fn write_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let list: Vec<Value> = entries
        .iter()
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": e.fields.to_fields_v1(),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = Value::String(e.subresource.clone());
            }
            v
        })
        .collect();
    let meta = crate::resources::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Who is writing, and how.
#[derive(Debug, Clone)]
pub struct Writer<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub now: &'a str,
}

/// Sets `entry`'s fields, refreshing its timestamp only when ownership changed.
fn set_entry(entries: &mut Vec<ManagedEntry>, w: &Writer, operation: &str, fields: FieldSet) {
    match entries
        .iter_mut()
        .find(|e| e.same_slot(w.manager, operation, w.subresource))
    {
        Some(e) => {
            if e.fields != fields || e.api_version != w.api_version {
                e.fields = fields;
                e.api_version = w.api_version.to_string();
                e.time = w.now.to_string();
            }
        }
        None => entries.push(ManagedEntry {
            manager: w.manager.to_string(),
            operation: operation.to_string(),
            api_version: w.api_version.to_string(),
            time: w.now.to_string(),
            subresource: w.subresource.to_string(),
            fields,
        }),
    }
}

fn finish(kind: &ResourceKind, entries: &mut Vec<ManagedEntry>, obj: &Value) {
    for e in entries.iter_mut() {
        e.fields = retain_existing(kind, &e.fields, obj);
    }
    entries.retain(|e| !e.fields.is_empty());
}

/// Records an Update operation (create, PUT, or non-apply PATCH): the writer takes
/// ownership of every field it changed, silently taking it from other managers.
pub fn record_update(kind: &ResourceKind, old: Option<&Value>, new: &mut Value, w: &Writer) {
    // managedFields sent in the body replace the stored ones when they differ (this is how
    // clients reset or migrate ownership, e.g. kubectl's client-side to server-side apply
    // upgrade; `[{}]` clears them). Otherwise the stored ownership is the starting point.
    let sent = new
        .pointer("/metadata/managedFields")
        .filter(|m| !m.is_null());
    let stored = old.and_then(|o| o.pointer("/metadata/managedFields"));
    let mut entries = match (sent, old) {
        (Some(m), Some(_)) if Some(m) != stored => read_managed(new),
        _ => old.map(read_managed).unwrap_or_default(),
    };
    let changed = strip_set(kind, changed_fields(kind, old, new), w.subresource);
    if !changed.is_empty() {
        for e in entries.iter_mut() {
            e.fields = e.fields.difference(&changed);
        }
        let mut mine = entries
            .iter()
            .find(|e| e.same_slot(w.manager, "Update", w.subresource))
            .map(|e| e.fields.clone())
            .unwrap_or_default();
        mine.union_with(&changed);
        set_entry(&mut entries, w, "Update", mine);
    }
    finish(kind, &mut entries, new);
    write_managed(new, &entries);
}

/// Server-side apply of `config` onto `live` (None when creating). Returns the merged
/// object carrying updated managedFields; the caller defaults, validates and persists it.
pub fn apply(
    kind: &ResourceKind,
    live: Option<&Value>,
    config: &Value,
    force: bool,
    w: &Writer,
) -> ApiResult<Value> {
    let applied = strip_set(kind, fields_of(kind, config), w.subresource);
    let mut entries = live.map(read_managed).unwrap_or_default();
    let live_obj = live.cloned().unwrap_or_else(|| json!({}));

    // Conflicts: fields another manager owns whose applied value differs from the live one.
    let mut conflicts: Vec<(usize, Vec<String>)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if e.manager == w.manager {
            continue;
        }
        for p in e.fields.intersection(&applied).member_paths() {
            let is_leaf = {
                let mut n = Some(&applied);
                for el in &p {
                    n = n.and_then(|x| x.get(el));
                }
                n.is_some_and(|n| n.children.is_empty())
            };
            if is_leaf && value_at(kind, &live_obj, &p) != value_at(kind, config, &p) {
                conflicts.push((i, p));
            }
        }
    }
    if !conflicts.is_empty() {
        if !force {
            let list: Vec<(String, String, String)> = conflicts
                .iter()
                .map(|(i, p)| {
                    (
                        entries[*i].manager.clone(),
                        entries[*i].api_version.clone(),
                        path_string(p),
                    )
                })
                .collect();
            let name = config
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Err(ApiError::apply_conflict(kind, name, &list));
        }
        for (i, p) in &conflicts {
            entries[*i].fields.remove_path(p);
        }
    }

    let previous = entries
        .iter()
        .find(|e| e.same_slot(w.manager, "Apply", w.subresource))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    let mut others = FieldSet::default();
    for e in entries
        .iter()
        .filter(|e| !e.same_slot(w.manager, "Apply", w.subresource))
    {
        others.union_with(&e.fields);
    }
    let mut obj = live_obj;
    let removed = previous.difference(&applied);
    remove_fields(kind, &mut obj, &removed, Some(&others), &mut Vec::new());
    merge_config(kind, &mut obj, config);

    set_entry(&mut entries, w, "Apply", applied);
    finish(kind, &mut entries, &obj);
    write_managed(&mut obj, &entries);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::KINDS;

    fn deploy() -> &'static ResourceKind {
        KINDS.iter().find(|k| k.kind == "Deployment").unwrap()
    }

    #[test]
    fn fields_v1_roundtrip_and_keys() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": "b"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "i", "ports": [{"containerPort": 80}]}]}}}});
        let set = strip_set(deploy(), fields_of(deploy(), &obj), "");
        let v = set.to_fields_v1();
        let c = &v["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"];
        assert_eq!(c["."], json!({}));
        assert_eq!(
            c["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["f:containerPort"],
            json!({})
        );
        assert!(v["f:metadata"].get("f:name").is_none());
        assert_eq!(FieldSet::from_fields_v1(&v), set);
    }

    #[test]
    fn apply_removes_dropped_fields() {
        let w = Writer {
            manager: "m",
            api_version: "apps/v1",
            subresource: "",
            now: "t",
        };
        let a = json!({"metadata": {"name": "x", "labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 2}});
        let obj = apply(deploy(), None, &a, false, &w).unwrap();
        let b = json!({"metadata": {"name": "x", "labels": {"a": "1"}}, "spec": {}});
        let obj2 = apply(deploy(), Some(&obj), &b, false, &w).unwrap();
        assert_eq!(obj2["metadata"]["labels"], json!({"a": "1"}));
        assert!(obj2["spec"].get("replicas").is_none());
    }

    #[test]
    fn apply_conflicts_between_managers() {
        let w1 = Writer {
            manager: "one",
            api_version: "apps/v1",
            subresource: "",
            now: "t",
        };
        let w2 = Writer {
            manager: "two",
            ..w1.clone()
        };
        let obj = apply(
            deploy(),
            None,
            &json!({"metadata": {"name": "x"}, "spec": {"replicas": 2}}),
            false,
            &w1,
        )
        .unwrap();
        let err = apply(
            deploy(),
            Some(&obj),
            &json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}}),
            false,
            &w2,
        )
        .unwrap_err();
        assert_eq!(err.code, 409);
        // Same value: shared ownership, no conflict.
        assert!(
            apply(
                deploy(),
                Some(&obj),
                &json!({"metadata": {"name": "x"}, "spec": {"replicas": 2}}),
                false,
                &w2
            )
            .is_ok()
        );
        let forced = apply(
            deploy(),
            Some(&obj),
            &json!({"metadata": {"name": "x"}, "spec": {"replicas": 3}}),
            true,
            &w2,
        )
        .unwrap();
        let entries = read_managed(&forced);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].manager, "two");
    }
}
