//! Label and field selectors, parsed and matched like `k8s.io/apimachinery` does.

use serde_json::Value;

use crate::resources::ResourceKind;
use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    reqs: Vec<(String, LabelOp)>,
}

/// Splits on commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, ApiError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: found '{rest}', expected: '(' in {whole:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

/// `labels.NewRequirement`'s checks (apimachinery `pkg/labels/selector.go`): the key is a
/// qualified name (path `key`), every value a label value (path `values[i][key]`, values
/// in sorted order); the list and watch handlers answer the parse error as 400 BadRequest.
fn validate_requirement(key: &str, op: &LabelOp) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    let key_msgs = crate::validation::qualified_name_messages(key);
    if !key_msgs.is_empty() {
        errs.push(format!(
            "key: Invalid value: {key:?}: {}",
            key_msgs.join("; ")
        ));
    }
    let mut values: Vec<&String> = match op {
        LabelOp::Eq(v) | LabelOp::NotEq(v) => vec![v],
        LabelOp::In(vs) | LabelOp::NotIn(vs) => vs.iter().collect(),
        LabelOp::Exists | LabelOp::NotExists => Vec::new(),
    };
    values.sort();
    values.dedup();
    for (i, v) in values.iter().enumerate() {
        let msgs = crate::validation::label_value_messages(v);
        if !msgs.is_empty() {
            errs.push(format!(
                "values[{i}][{key}]: Invalid value: {v:?}: {}",
                msgs.join("; ")
            ));
        }
    }
    match errs.len() {
        0 => Ok(()),
        1 => Err(ApiError::bad_request(format!(
            "unable to parse requirement: {}",
            errs[0]
        ))),
        _ => Err(ApiError::bad_request(format!(
            "unable to parse requirement: [{}]",
            errs.join(", ")
        ))),
    }
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(LabelSelector { reqs });
        }
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: found '', expected: identifier in {s:?}"
                )));
            }
            let req = if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), LabelOp::NotExists)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), LabelOp::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_string(), LabelOp::Eq(v.trim().to_string()))
            } else if let Some((k, rest)) = part.split_once(" notin ") {
                (k.trim().to_string(), LabelOp::NotIn(parse_set(rest, s)?))
            } else if let Some((k, rest)) = part.split_once(" in ") {
                (k.trim().to_string(), LabelOp::In(parse_set(rest, s)?))
            } else {
                (part.to_string(), LabelOp::Exists)
            };
            if req.0.is_empty() || req.0.contains(char::is_whitespace) {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: invalid label key {:?}",
                    req.0
                )));
            }
            validate_requirement(&req.0, &req.1)?;
            reqs.push(req);
        }
        Ok(LabelSelector { reqs })
    }

    /// Builds a selector from a `metav1.LabelSelector` object (matchLabels + matchExpressions).
    pub fn from_object(sel: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in m {
                reqs.push((k.clone(), LabelOp::Eq(v.as_str().unwrap_or("").to_string())));
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(String::from))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => LabelOp::In(values),
                    "NotIn" => LabelOp::NotIn(values),
                    "Exists" => LabelOp::Exists,
                    _ => LabelOp::NotExists,
                };
                reqs.push((key, op));
            }
        }
        LabelSelector { reqs }
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Matches a label map (`metadata.labels` or a template's labels).
    pub fn matches_labels(&self, labels: Option<&Value>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.reqs.iter().all(|(k, op)| match op {
            LabelOp::Eq(v) => get(k) == Some(v.as_str()),
            LabelOp::NotEq(v) => get(k) != Some(v.as_str()),
            LabelOp::In(vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelOp::NotIn(vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            LabelOp::Exists => get(k).is_some(),
            LabelOp::NotExists => get(k).is_none(),
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.matches_labels(obj.get("metadata").and_then(|m| m.get("labels")))
    }
}

/// A parsed field selector (`=`, `==`, `!=` only, like the real server).
#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    reqs: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses and checks every field label is supported for the kind (400 otherwise).
    pub fn parse(s: &str, kind: &ResourceKind) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            let supported = field == "metadata.name"
                || (field == "metadata.namespace" && kind.namespaced)
                || kind.field_labels.contains(&field);
            if !supported {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            reqs.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.reqs
            .iter()
            .all(|(field, eq, value)| (field_value(obj, field) == *value) == *eq)
    }
}

/// The string value of a field label on an object ("" when absent).
fn field_value(obj: &Value, field: &str) -> String {
    // Events expose `source` as the reporting component's name.
    let path = if field == "source" {
        "source.component"
    } else {
        field
    };
    let mut cur = obj;
    for seg in path.split('.') {
        match cur.get(seg) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_ops() {
        let labels = json!({"app": "web", "tier": "front"});
        let m = |s: &str| {
            LabelSelector::parse(s)
                .unwrap()
                .matches_labels(Some(&labels))
        };
        assert!(m("app=web"));
        assert!(m("app==web,tier"));
        assert!(m("app in (web, db),!missing"));
        assert!(!m("app notin (web)"));
        assert!(m("tier!=back"));
        assert!(!m("missing"));
        assert!(m(""));
    }
}
