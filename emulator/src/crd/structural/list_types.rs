//! List types (schema/listtype/validation.go): the uniqueness of `set` items and `map`
//! keys.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::status::Cause;

use super::messages::{go_json, go_value};
use super::schema::{list_map_keys, str_kw};
use super::validation::Num;

/// validateListSetsAndMapsArray: `set` items and `map` keys must be unique; only the
/// first repetition of each is reported.
pub(super) fn list_invariants(path: &str, s: &Value, a: &[Value], out: &mut Vec<Cause>) {
    match str_kw(s, "x-kubernetes-list-type") {
        Some("set") => {
            for i in repeated(a.iter().map(set_key)) {
                out.push(duplicate(path, i, &a[i]));
            }
        }
        Some("map") => list_map_invariants(path, s, a, out),
        _ => {}
    }
}

fn duplicate(path: &str, i: usize, v: &Value) -> Cause {
    Cause::new(
        "FieldValueDuplicate",
        format!("{path}[{i}]"),
        format!("Duplicate value: {}", go_value(v)),
    )
}

/// Go compares scalars as interface values (int64 1 differs from float64 1) and compound
/// values by their JSON encoding.
pub(super) fn set_key(v: &Value) -> String {
    match v {
        Value::Null => "n".into(),
        Value::Bool(b) => format!("b{b}"),
        Value::String(s) => format!("s{s}"),
        Value::Number(_) => match Num::of(v) {
            Some(Num::I(i)) => format!("i{i}"),
            Some(Num::F(f)) => format!("f{}", f.to_bits()),
            None => format!("x{v}"),
        },
        _ => format!("c{}", go_json(v)),
    }
}

/// The indices where a key shows up for the second time.
fn repeated(keys: impl Iterator<Item = String>) -> Vec<usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, k) in keys.enumerate() {
        let times = seen.entry(k).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

fn list_map_invariants(path: &str, s: &Value, a: &[Value], out: &mut Vec<Cause>) {
    if let Some(i) = a.iter().position(|x| !x.is_null() && !x.is_object()) {
        let msg = "must be an object for an array of list-type map";
        let cause = format!("Invalid value: {}: {msg}", go_value(&a[i]));
        out.push(Cause::new(
            "FieldValueInvalid",
            format!("{path}[{i}]"),
            cause,
        ));
        return;
    }
    let keys = list_map_keys(s);
    // The key fields an item sets; a missing key (or a null item) is "unspecified".
    let key_of = |x: &Value| -> Value {
        let mut key = Map::new();
        for k in &keys {
            if let Some(v) = x.get(*k) {
                key.insert((*k).to_string(), v.clone());
            }
        }
        Value::Object(key)
    };
    let item_keys: Vec<Value> = a.iter().map(key_of).collect();
    let single = keys.len() == 1;
    let dedup_key = |k: &Value| match (single, k.as_object().and_then(|o| o.values().next())) {
        (true, Some(v)) => set_key(v),
        (true, None) => "u".to_string(),
        (false, _) => set_key(k),
    };
    for i in repeated(item_keys.iter().map(dedup_key)) {
        out.push(duplicate(path, i, &item_keys[i]));
    }
}
