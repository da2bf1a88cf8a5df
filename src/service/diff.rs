//! Which fields a spec change touched, for the timeline ("engine.image, replicas").

use serde_json::Value;

/// Dotted paths (at most `depth` levels deep) whose values differ between `old` and `new`.
pub fn changed_paths(old: &Value, new: &Value, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    walk(old, new, "", depth, &mut out);
    out
}

fn walk(old: &Value, new: &Value, prefix: &str, depth: usize, out: &mut Vec<String>) {
    if old == new {
        return;
    }
    match (old, new) {
        (Value::Object(a), Value::Object(b)) if depth > 0 => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                let null = Value::Null;
                walk(
                    a.get(key).unwrap_or(&null),
                    b.get(key).unwrap_or(&null),
                    &path,
                    depth - 1,
                    out,
                );
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn lists_changed_leaves_up_to_the_depth() {
        let old = json!({"replicas": 1, "engine": {"image": "a", "port": 8000}, "labels": {}});
        let new =
            json!({"replicas": 2, "engine": {"image": "b", "port": 8000}, "labels": {"x": "y"}});
        assert_eq!(
            changed_paths(&old, &new, 2),
            vec!["engine.image", "labels.x", "replicas"]
        );
        assert!(changed_paths(&old, &old, 2).is_empty());
    }
}
