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

/// `typed.Compare` (structured-merge-diff `typed/compare.go`): the paths `new` added or
/// modified with respect to `old` (Added ∪ Modified), and the paths it removed.
///
/// Every path that exists on one side only is itself in Added or Removed, maps and list
/// items included (that is where the `.` entries of Update managers come from); a path
/// present on both sides is Modified only when it is a leaf (a scalar, an atomic map or
/// list, or a map/list empty or null on both sides) whose value differs. A null value is
/// present (it is not Added when the other side gives it a value).
pub fn compare(kind: &ResourceKind, old: &Value, new: &Value) -> (FieldSet, FieldSet) {
    let mut changed = FieldSet::default();
    let mut removed = FieldSet::default();
    compare_walk(
        kind,
        Some(old),
        Some(new),
        &mut Vec::new(),
        &mut changed,
        &mut removed,
    );
    (changed, removed)
}

fn is_empty_container(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    }
}

/// The path element of a list item (`k:{...}` or `v:...`).
fn item_elem(item: &Value, lt: ListType) -> String {
    match lt {
        ListType::Map { keys, .. } => key_elem(item, keys),
        _ => format!("v:{item}"),
    }
}

fn compare_walk<'a>(
    kind: &ResourceKind,
    lhs: Option<&'a Value>,
    rhs: Option<&'a Value>,
    path: &mut Vec<&'a str>,
    changed: &mut FieldSet,
    removed: &mut FieldSet,
) {
    if let (Some(l), Some(r)) = (lhs, rhs)
        && l == r
    {
        return;
    }
    let shape = |v: Option<&Value>| match v {
        Some(Value::Object(_)) => 1,
        Some(Value::Array(_)) => 2,
        Some(Value::Null) | None => 0,
        _ => 3,
    };
    let (ls, rs) = (shape(lhs), shape(rhs));
    let s = if rs != 0 { rs } else { ls };
    let mismatch = ls != 0 && rs != 0 && ls != rs;
    let both_empty = is_empty_container(lhs) && is_empty_container(rhs);
    let list_t = if s == 2 {
        list_type(kind, path)
    } else {
        ListType::Atomic
    };
    let leaf = mismatch
        || s == 3
        || s == 0
        || both_empty
        || (s == 1 && is_atomic_map(kind, path))
        || (s == 2 && list_t == ListType::Atomic);
    if leaf {
        // doLeaf
        match (lhs, rhs) {
            (None, Some(_)) => changed.member = true,
            (Some(_), None) => removed.member = true,
            (Some(l), Some(r)) if l != r => changed.member = true,
            _ => {}
        }
        return;
    }
    if s == 1 {
        let lm = lhs.and_then(Value::as_object);
        let rm = rhs.and_then(Value::as_object);
        let mut visit = |k: &'a str, l: Option<&'a Value>, r: Option<&'a Value>| {
            let mut c = FieldSet::default();
            let mut d = FieldSet::default();
            path.push(k);
            compare_walk(kind, l, r, path, &mut c, &mut d);
            path.pop();
            if !c.is_empty() {
                changed.children.insert(format!("f:{k}"), c);
            }
            if !d.is_empty() {
                removed.children.insert(format!("f:{k}"), d);
            }
        };
        for (k, r) in rm.into_iter().flatten() {
            visit(k, lm.and_then(|m| m.get(k)), Some(r));
        }
        for (k, l) in lm.into_iter().flatten() {
            if !rm.is_some_and(|m| m.contains_key(k)) {
                visit(k, Some(l), None);
            }
        }
    } else {
        let la: &'a [Value] = lhs.and_then(Value::as_array).map_or(&[], Vec::as_slice);
        let ra: &'a [Value] = rhs.and_then(Value::as_array).map_or(&[], Vec::as_slice);
        let lk: Vec<(String, &Value)> = la.iter().map(|i| (item_elem(i, list_t), i)).collect();
        let rk: Vec<(String, &Value)> = ra.iter().map(|i| (item_elem(i, list_t), i)).collect();
        let mut visit = |pe: &str, l: Option<&'a Value>, r: Option<&'a Value>| {
            let mut c = FieldSet::default();
            let mut d = FieldSet::default();
            compare_walk(kind, l, r, path, &mut c, &mut d);
            if !c.is_empty() {
                changed.children.insert(pe.to_string(), c);
            }
            if !d.is_empty() {
                removed.children.insert(pe.to_string(), d);
            }
        };
        for (i, (pe, l)) in lk.iter().enumerate() {
            if lk[..i].iter().any(|(p, _)| p == pe) {
                continue;
            }
            let r = rk.iter().find(|(p, _)| p == pe).map(|(_, r)| *r);
            visit(pe, Some(l), r);
        }
        for (i, (pe, r)) in rk.iter().enumerate() {
            if rk[..i].iter().any(|(p, _)| p == pe) || lk.iter().any(|(p, _)| p == pe) {
                continue;
            }
            visit(pe, None, Some(r));
        }
    }
    match (lhs, rhs) {
        (None, Some(_)) => changed.member = true,
        (Some(_), None) => removed.member = true,
        _ => {}
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
            ListType::Atomic => *l = c.clone(),
            lt => merge_list(kind, l, c, lt, path),
        },
        (live, cfg) => *live = cfg.clone(),
    }
}

/// Merges the items of an associative list (`listType=map` or `set`) in the order of
/// structured-merge-diff's `mergingWalker.visitListItems` (`typed/merge.go`): live items
/// that the configuration does not name stay where they are, the configuration's items
/// come in its order, and a live item the configuration names waits for its turn in the
/// configuration (so two appliers' items interleave as on the real server).
fn merge_list<'a>(
    kind: &ResourceKind,
    live: &mut Vec<Value>,
    cfg: &'a [Value],
    lt: ListType,
    path: &mut Vec<&'a str>,
) {
    use std::collections::{HashMap, HashSet};
    let mut lhs: Vec<Option<Value>> = std::mem::take(live).into_iter().map(Some).collect();
    let lpe: Vec<String> = lhs
        .iter()
        .map(|v| item_elem(v.as_ref().expect("just built"), lt))
        .collect();
    let rpe: Vec<String> = cfg.iter().map(|v| item_elem(v, lt)).collect();
    let mut l_index: HashMap<&str, usize> = HashMap::with_capacity(lpe.len());
    for (i, pe) in lpe.iter().enumerate() {
        l_index.entry(pe.as_str()).or_insert(i);
    }
    let mut r_index: HashMap<&str, usize> = HashMap::with_capacity(rpe.len());
    for (i, pe) in rpe.iter().enumerate() {
        r_index.entry(pe.as_str()).or_insert(i);
    }
    let mut shared = rpe
        .iter()
        .enumerate()
        .filter(|(i, pe)| r_index[pe.as_str()] == *i && l_index.contains_key(pe.as_str()))
        .map(|(_, pe)| pe.as_str());
    let mut next_shared = shared.next();
    let mut merged: HashSet<&str> = HashSet::with_capacity(rpe.len());
    let mut out = Vec::with_capacity(lpe.len().max(rpe.len()));
    let merge_item = |lhs: &mut Vec<Option<Value>>, pe: &str, path: &mut Vec<&'a str>| {
        let rv = &cfg[r_index[pe]];
        match l_index.get(pe).and_then(|&i| lhs[i].take()) {
            Some(mut lv) => {
                merge_walk(kind, &mut lv, rv, path);
                lv
            }
            None => rv.clone(),
        }
    };
    let (nl, nr) = (lpe.len(), rpe.len());
    let (mut li, mut ri) = (0, 0);
    while li < nl || ri < nr {
        if li < nl && ri < nr {
            let pe = lpe[li].as_str();
            if pe == rpe[ri] {
                merged.insert(pe);
                out.push(merge_item(&mut lhs, pe, path));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if r_index.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                // A shared item, but not the one wanted in this round.
                li += 1;
                continue;
            }
        }
        if li < nl {
            let pe = lpe[li].as_str();
            if !r_index.contains_key(pe) {
                if let Some(v) = lhs[li].take() {
                    out.push(v);
                }
                li += 1;
                continue;
            } else if merged.contains(pe) {
                li += 1;
            }
        }
        if ri < nr {
            let pe = rpe[ri].as_str();
            let first = merged.insert(pe);
            if first {
                out.push(merge_item(&mut lhs, pe, path));
            }
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    *live = out;
}

/// Metadata fields that are never owned by anyone: the strip set of the apiserver's
/// `stripMetaManager` (k8s.io/apimachinery `pkg/util/managedfields/internal/stripmeta.go`;
/// `metadata` itself is stripped too, below), plus the deletion fields that only the
/// server ever sets.
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
    "clusterName",
];

/// Drops fields nobody owns and, per subresource, fields the endpoint resets.
pub fn strip_set(kind: &ResourceKind, mut set: FieldSet, subresource: &str) -> FieldSet {
    set.children.remove("f:apiVersion");
    set.children.remove("f:kind");
    set.member = false;
    if let Some(meta) = set.children.get_mut("f:metadata") {
        meta.member = false;
        if !meta.children.is_empty() {
            meta.children.retain(|k, _| {
                !k.strip_prefix("f:")
                    .is_some_and(|f| UNOWNED_META.contains(&f))
            });
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
            if e.time.is_empty() {
                v.as_object_mut().map(|m| m.remove("time"));
            }
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

/// Sets the writer's entry for `operation` to `fields`; `touched` refreshes its time
/// (`managedFieldsUpdater` in k8s.io/apimachinery
/// `pkg/util/managedfields/internal/managedfieldsupdater.go` stamps the manager whenever an
/// Update changed something it now owns, or an Apply changed the object).
fn set_entry(
    entries: &mut Vec<ManagedEntry>,
    w: &Writer,
    operation: &str,
    fields: FieldSet,
    touched: bool,
) {
    match entries
        .iter_mut()
        .find(|e| e.same_slot(w.manager, operation, w.subresource))
    {
        Some(e) => {
            e.fields = fields;
            e.api_version = w.api_version.to_string();
            if touched {
                e.time = w.now.to_string();
            }
        }
        None => entries.push(ManagedEntry {
            manager: w.manager.to_string(),
            operation: operation.to_string(),
            api_version: w.api_version.to_string(),
            time: if touched {
                w.now.to_string()
            } else {
                String::new()
            },
            subresource: w.subresource.to_string(),
            fields,
        }),
    }
}

/// Drops empty entries and orders them as `sortEncodedManagedFields` does
/// (`pkg/util/managedfields/internal/managedfields.go`): by operation (Apply before
/// Update), time (to the second), manager, apiVersion, subresource.
fn finish(entries: &mut Vec<ManagedEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(|a, b| {
        a.operation
            .cmp(&b.operation)
            .then_with(|| a.time.cmp(&b.time))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
}

/// Removes `changed` and `removed` from the entries other than the writer's `operation`
/// entry (`Updater.update` in structured-merge-diff `merge/update.go`: conflicts with the
/// written fields are forced away, removed fields are dropped).
fn take_from_others(
    entries: &mut [ManagedEntry],
    w: &Writer,
    operation: &str,
    changed: &FieldSet,
    removed: &FieldSet,
) {
    for e in entries
        .iter_mut()
        .filter(|e| !e.same_slot(w.manager, operation, w.subresource))
    {
        if !changed.is_empty() {
            e.fields = e.fields.difference(changed);
        }
        if !removed.is_empty() {
            e.fields = e.fields.difference(removed);
        }
    }
}

/// Records an Update operation (create, PUT, or non-apply PATCH) as `Updater.Update`
/// (structured-merge-diff `merge/update.go`) does: the writer's entry gains every path
/// the write added or modified (`typed.Compare`), other entries lose those and the removed
/// ones. A create compares with the kind's empty object, as the create handler passes
/// `Creater.New(kind)` as the live object.
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
    let empty;
    let base = match old {
        Some(o) => o,
        None => {
            empty = crate::schema::empty_object(kind);
            &empty
        }
    };
    let (changed, removed) = compare(kind, base, new);
    let changed = strip_set(kind, changed, w.subresource);
    let removed = strip_set(kind, removed, w.subresource);
    take_from_others(&mut entries, w, "Update", &changed, &removed);
    let mine = entries
        .iter()
        .find(|e| e.same_slot(w.manager, "Update", w.subresource))
        .map(|e| e.fields.difference(&removed));
    if !changed.is_empty() {
        let mut mine = mine.unwrap_or_default();
        mine.union_with(&changed);
        set_entry(&mut entries, w, "Update", mine, true);
    } else if let Some(mine) = mine {
        set_entry(&mut entries, w, "Update", mine, false);
    }
    finish(&mut entries);
    write_managed(new, &entries);
}

/// Server-side apply of `config` onto `live` (None when creating), as `Updater.Apply`
/// (structured-merge-diff `merge/update.go`): merge, prune what the applier no longer
/// applies, then the conflicts are other managers' fields that the result added or
/// modified. Returns the merged object carrying updated managedFields; the caller
/// defaults, validates and persists it.
pub fn apply(
    kind: &ResourceKind,
    live: Option<&Value>,
    config: &Value,
    force: bool,
    w: &Writer,
) -> ApiResult<Value> {
    let applied = strip_set(kind, fields_of(kind, config), w.subresource);
    let mut entries = live.map(read_managed).unwrap_or_default();
    let mut obj = live.cloned().unwrap_or_else(|| json!({}));

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
    let removed = previous.difference(&applied);
    remove_fields(kind, &mut obj, &removed, Some(&others), &mut Vec::new());
    merge_config(kind, &mut obj, config);

    let mut noop = live.is_none();
    if let Some(live) = live {
        let (changed, removed) = compare(kind, live, &obj);
        noop = changed.is_empty() && removed.is_empty();
        let changed = strip_set(kind, changed, w.subresource);
        let removed = strip_set(kind, removed, w.subresource);
        let mut conflicts: Vec<(usize, Vec<String>)> = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if e.same_slot(w.manager, "Apply", w.subresource) {
                continue;
            }
            for p in e.fields.intersection(&changed).member_paths() {
                conflicts.push((i, p));
            }
        }
        if !conflicts.is_empty() && !force {
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
        take_from_others(&mut entries, w, "Apply", &changed, &removed);
    }
    set_entry(&mut entries, w, "Apply", applied, live.is_none() || !noop);
    finish(&mut entries);
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
