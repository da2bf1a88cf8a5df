//! PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

use serde_json::{Map, Value};

use crate::resources::ResourceKind;
use crate::schema::{ListType, list_type};
use crate::status::{ApiError, ApiResult};

/// The patch flavours the server accepts, by request Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    Json,
    Merge,
    Strategic,
    Apply,
}

impl PatchType {
    pub fn from_content_type(ct: &str) -> Option<Self> {
        let base = ct.split(';').next().unwrap_or("").trim();
        match base {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Applies a JSON, merge or strategic patch to `target`.
pub fn apply_patch(
    kind: &ResourceKind,
    pt: PatchType,
    target: &mut Value,
    body: &[u8],
) -> ApiResult<()> {
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    match pt {
        PatchType::Json => {
            // jsonpatch.DecodePatch only needs a list of objects (400 otherwise); an
            // operation it cannot apply, an unknown `op` included, fails in Apply, which
            // the handler answers with NewGenericServerResponse(422) (handlers/patch.go).
            let Some(ops) = patch.as_array().filter(|a| a.iter().all(Value::is_object)) else {
                return Err(ApiError::bad_request(
                    "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
                ));
            };
            const OPS: &[&str] = &["add", "remove", "replace", "move", "copy", "test"];
            if ops.iter().any(|o| {
                !o.get("op")
                    .and_then(Value::as_str)
                    .is_some_and(|op| OPS.contains(&op))
            }) {
                return Err(ApiError::patch_not_applicable());
            }
            let p: json_patch::Patch =
                serde_json::from_value(patch).map_err(|_| ApiError::patch_not_applicable())?;
            json_patch::patch(target, &p).map_err(|_| ApiError::patch_not_applicable())?;
        }
        PatchType::Merge => {
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: merge patch must be a JSON object",
                ));
            }
            json_patch::merge(target, &patch);
        }
        PatchType::Strategic => {
            if kind.custom {
                // The PATCH route of a custom resource does not consume strategic merge.
                return Err(ApiError::route_unsupported_media_type());
            }
            if !patch.is_object() {
                return Err(ApiError::bad_request(
                    "error decoding patch: strategic merge patch must be a JSON object",
                ));
            }
            strategic_merge(kind, target, &patch, &mut Vec::new());
        }
        PatchType::Apply => unreachable!("apply is handled by server-side apply"),
    }
    Ok(())
}

/// Removes `$`-directives from a value that is inserted verbatim.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

fn strategic_merge(kind: &ResourceKind, target: &mut Value, patch: &Value, path: &mut Vec<String>) {
    let Value::Object(pm) = patch else {
        *target = patch.clone();
        return;
    };
    if pm.get("$patch").and_then(Value::as_str) == Some("replace") || !target.is_object() {
        *target = strip_directives(patch);
        return;
    }
    let tm = target.as_object_mut().expect("checked above");
    if let Some(keep) = pm.get("$retainKeys").and_then(Value::as_array) {
        tm.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    for (k, pv) in pm {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(del)) = (tm.get_mut(field), pv.as_array()) {
                list.retain(|x| !del.contains(x));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if pv.is_null() {
            tm.remove(k);
            continue;
        }
        path.push(k.clone());
        match pv {
            Value::Array(items) => {
                let names: Vec<&str> = path.iter().map(String::as_str).collect();
                let lt = list_type(kind, &names);
                let cur = tm
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                tm.insert(
                    k.clone(),
                    Value::Array(merge_list(kind, lt, cur, items, path)),
                );
            }
            Value::Object(_) => {
                let slot = tm
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if pv.get("$patch").and_then(Value::as_str) == Some("delete") {
                    tm.remove(k);
                } else {
                    strategic_merge(kind, slot, pv, path);
                }
            }
            other => {
                tm.insert(k.clone(), other.clone());
            }
        }
        path.pop();
    }
    // `$setElementOrder/<list>` (sent by kubectl's client-side apply) orders the merged list.
    for (k, order) in pm {
        let (Some(field), Some(order)) = (k.strip_prefix("$setElementOrder/"), order.as_array())
        else {
            continue;
        };
        path.push(field.to_string());
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        let smp_key = match list_type(kind, &names) {
            ListType::Map { smp_key, .. } => smp_key,
            _ => None,
        };
        path.pop();
        if let Some(Value::Array(list)) = tm.get_mut(field) {
            let rank = |item: &Value| {
                order.iter().position(|o| match smp_key {
                    Some(key) => o.get(key).is_some() && o.get(key) == item.get(key),
                    None => o == item,
                })
            };
            // Stable: listed items in the given order, then the others as they were.
            let mut indexed: Vec<(usize, Value)> = std::mem::take(list)
                .into_iter()
                .map(|item| (rank(&item).unwrap_or(usize::MAX), item))
                .collect();
            indexed.sort_by_key(|(r, _)| *r);
            *list = indexed.into_iter().map(|(_, item)| item).collect();
        }
    }
}

fn merge_list(
    kind: &ResourceKind,
    lt: ListType,
    mut cur: Vec<Value>,
    items: &[Value],
    path: &mut Vec<String>,
) -> Vec<Value> {
    // A `{"$patch": "replace"}` item replaces the whole list with the other items.
    if items
        .iter()
        .any(|i| i.get("$patch").and_then(Value::as_str) == Some("replace"))
    {
        return items
            .iter()
            .filter(|i| i.get("$patch").is_none())
            .map(strip_directives)
            .collect();
    }
    match lt {
        ListType::Map {
            smp_key: Some(key), ..
        } => {
            for item in items {
                let kv = item.get(key);
                let pos = cur.iter().position(|c| kv.is_some() && c.get(key) == kv);
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(p), true) => {
                        cur.remove(p);
                    }
                    (None, true) => {}
                    (Some(p), false) => strategic_merge(kind, &mut cur[p], item, path),
                    (None, false) => cur.push(strip_directives(item)),
                }
            }
            cur
        }
        ListType::Set => {
            for item in items {
                if !cur.contains(item) {
                    cur.push(item.clone());
                }
            }
            cur
        }
        _ => items.iter().map(strip_directives).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::KINDS;
    use serde_json::json;

    #[test]
    fn strategic_directives() {
        let kind = KINDS.iter().find(|k| k.kind == "Deployment").unwrap();
        let mut obj = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"template": {"spec": {
            "containers": [{"name": "x", "image": "x"}, {"name": "y", "image": "y"}],
            "volumes": [{"name": "v", "emptyDir": {}}]}}}});
        let patch = json!({
            "metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "z"}, {"name": "y"}, {"name": "x"}],
                "containers": [{"name": "z", "image": "z"}],
                "volumes": [{"name": "v", "configMap": {"name": "cm"}, "$retainKeys": ["configMap", "name"]}]}}}});
        apply_patch(
            kind,
            PatchType::Strategic,
            &mut obj,
            patch.to_string().as_bytes(),
        )
        .unwrap();
        assert_eq!(obj["metadata"]["finalizers"], json!(["b"]));
        let names: Vec<&str> = obj["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["z", "y", "x"]);
        assert_eq!(
            obj["spec"]["template"]["spec"]["volumes"][0],
            json!({"name": "v", "configMap": {"name": "cm"}})
        );
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let kind = KINDS.iter().find(|k| k.kind == "Deployment").unwrap();
        let mut obj = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "b:1"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "a:2", "env": [{"name": "Y", "value": "2"}]},
            {"name": "b", "$patch": "delete"}]}}}});
        apply_patch(
            kind,
            PatchType::Strategic,
            &mut obj,
            patch.to_string().as_bytes(),
        )
        .unwrap();
        let cs = &obj["spec"]["template"]["spec"]["containers"];
        assert_eq!(cs.as_array().unwrap().len(), 1);
        assert_eq!(cs[0]["image"], "a:2");
        assert_eq!(cs[0]["env"].as_array().unwrap().len(), 2);
    }
}
