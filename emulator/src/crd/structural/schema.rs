//! Schema access: the keywords of a structural schema node, read from the
//! `serde_json::Value` as apiextensions-apiserver's `Structural` holds them.

use serde_json::Value;

pub(super) const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
pub(super) const EMBEDDED: &str = "x-kubernetes-embedded-resource";
pub(super) const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

pub(super) fn prop<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    s.get("properties")?.get(k)
}

/// `additionalProperties`: `Some(None)` when it is a bool (no schema: structural.go
/// `StructuralOrBool` with a nil `Structural`).
pub(super) fn additional(s: &Value) -> Option<Option<&Value>> {
    match s.get("additionalProperties")? {
        v @ Value::Object(_) => Some(Some(v)),
        Value::Bool(_) => Some(None),
        _ => None,
    }
}

pub(super) fn additional_schema(s: &Value) -> Option<&Value> {
    additional(s).flatten()
}

/// The schema of an object's field: its property, else the `additionalProperties` schema.
pub(super) fn field_schema<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    prop(s, k).or_else(|| additional_schema(s))
}

pub(super) fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

pub(super) fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

pub(super) fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

/// A `default: null` is no default (structural.go keeps `Default.Object == nil`).
pub(super) fn default_of(s: &Value) -> Option<&Value> {
    s.get("default").filter(|d| !d.is_null())
}

pub(super) fn str_kw<'a>(s: &'a Value, k: &str) -> Option<&'a str> {
    s.get(k).and_then(Value::as_str)
}

/// An integer keyword (`maxLength`, `minItems`...); CRDs decode them as int64.
pub(super) fn int_kw(s: &Value, k: &str) -> Option<i64> {
    let v = s.get(k)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

pub(super) fn list_map_keys(s: &Value) -> Vec<&str> {
    s.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|ks| ks.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}
