//! Ratcheting correlation (k8s.io/apiserver pkg/cel/common/equality.go, maplist.go).

use std::collections::HashMap;

use serde_json::Value;

use super::list_types::set_key;
use super::schema::{field_schema, items, list_map_keys, str_kw};

/// The key of a `x-kubernetes-list-type: map` item: its key fields, all present scalars.
fn map_list_key(item: &Value, keys: &[&str]) -> Option<String> {
    let obj = item.as_object()?;
    let mut out = String::new();
    for k in keys {
        let v = obj.get(*k)?;
        if !matches!(v, Value::String(_) | Value::Bool(_) | Value::Number(_)) {
            return None;
        }
        out.push_str(&set_key(v));
        out.push('\0');
    }
    Some(out)
}

/// `CorrelatedObject.Index`: only items of map lists correlate, by key, with the first old
/// item having the same key. `None` when nothing in this list can correlate.
pub(super) fn correlate_items<'a>(
    s: &Value,
    new: &[Value],
    old: Option<&'a Value>,
) -> Option<Vec<Option<&'a Value>>> {
    let old = old?.as_array()?;
    if str_kw(s, "x-kubernetes-list-type") != Some("map") {
        return None;
    }
    let keys = list_map_keys(s);
    if keys.is_empty() {
        return Some(vec![None; new.len()]);
    }
    let mut by_key: HashMap<String, &Value> = HashMap::new();
    for o in old {
        if let Some(k) = map_list_key(o, &keys) {
            by_key.entry(k).or_insert(o);
        }
    }
    let olds = new
        .iter()
        .map(|n| map_list_key(n, &keys).and_then(|k| by_key.get(&k).copied()))
        .collect();
    Some(olds)
}

/// `CorrelatedObject.CachedDeepEqual`: objects compare field by field (a field without a
/// schema never correlates, so it never compares equal), map lists item by correlated
/// item, other lists and scalars as wholes.
pub(super) fn same(s: &Value, new: &Value, old: &Value) -> bool {
    match (new, old) {
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter().all(|(k, v)| {
                    let (Some(o), Some(fs)) = (b.get(k), field_schema(s, k)) else {
                        return false;
                    };
                    same(fs, v, o)
                })
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                return false;
            }
            let Some(olds) = correlate_items(s, a, Some(old)) else {
                return a == b;
            };
            let Some(it) = items(s) else {
                return a.is_empty();
            };
            a.iter()
                .zip(olds)
                .all(|(n, o)| o.is_some_and(|o| same(it, n, o)))
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => false,
        _ => new == old,
    }
}
