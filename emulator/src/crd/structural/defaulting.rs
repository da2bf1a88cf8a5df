//! Defaulting (pkg/apiserver/schema/defaulting/algorithm.go, prunenulls.go).

use serde_json::{Map, Value};

use super::schema::{additional_schema, default_of, field_schema, items, nullable, prop};

pub(super) fn prune_nulls(x: &mut Value, s: Option<&Value>) {
    match x {
        Value::Object(m) => m.retain(|k, v| {
            let fs = s.and_then(|s| field_schema(s, k));
            if v.is_null() && fs.is_some_and(|fs| !nullable(fs) && default_of(fs).is_none()) {
                return false;
            }
            prune_nulls(v, fs);
            true
        }),
        Value::Array(a) => {
            let it = s.and_then(items);
            for v in a {
                prune_nulls(v, it);
            }
        }
        _ => {}
    }
}

/// A null in a non-nullable slot takes the slot's default (or stays null without one).
fn default_null(v: &mut Value, s: &Value) {
    if v.is_null() && !nullable(s) {
        *v = default_of(s).cloned().unwrap_or(Value::Null);
    }
}

pub(super) fn default_value(x: &mut Value, s: &Value) {
    match x {
        Value::Object(m) => default_object(m, s),
        Value::Array(a) => {
            let Some(it) = items(s) else { return };
            for v in a {
                default_null(v, it);
                default_value(v, it);
            }
        }
        _ => {}
    }
}

fn default_object(m: &mut Map<String, Value>, s: &Value) {
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, ps) in props {
            let Some(d) = default_of(ps) else { continue };
            match m.get_mut(k) {
                None => {
                    m.insert(k.clone(), d.clone());
                }
                Some(v) if v.is_null() && !nullable(ps) => *v = d.clone(),
                Some(_) => {}
            }
        }
    }
    let addl = additional_schema(s);
    for (k, v) in m.iter_mut() {
        if let Some(ps) = prop(s, k) {
            default_value(v, ps);
        } else if let Some(a) = addl {
            default_null(v, a);
            default_value(v, a);
        }
    }
}
