//! Embedded resources (schema/objectmeta/validation.go), checked in the walk that also
//! collects the list-type errors (schema/listtype/validation.go, in `list_types`).

use serde_json::{Map, Value};

use crate::status::Cause;

use super::list_types::list_invariants;
use super::messages::go_value;
use super::pruning::{push_child, push_subscript};
use super::schema::{EMBEDDED, additional_schema, flag, items, prop};

/// One walk of the object along the schema collecting, apart, the embedded resources'
/// TypeMeta/ObjectMeta errors and the list-type errors, at field.Path paths (map keys as
/// `[key]`).
#[derive(Default)]
pub(super) struct Walk {
    path: String,
    pub(super) embedded: Vec<Cause>,
    pub(super) lists: Vec<Cause>,
}

impl Walk {
    pub(super) fn run(&mut self, obj: &Value, schema: &Value, embedded: bool) {
        self.visit(obj, schema, embedded);
    }

    fn visit(&mut self, x: &Value, s: &Value, embedded: bool) {
        match x {
            Value::Object(m) => {
                if embedded && flag(s, EMBEDDED) {
                    embedded_resource(&self.path, m, &mut self.embedded);
                }
                for (k, v) in m {
                    let (child, n) = match (prop(s, k), additional_schema(s)) {
                        (Some(ps), _) => (ps, push_child(&mut self.path, k)),
                        (None, Some(a)) => (a, push_subscript(&mut self.path, k)),
                        (None, None) => continue,
                    };
                    self.visit(v, child, embedded);
                    self.path.truncate(n);
                }
            }
            Value::Array(a) => {
                list_invariants(&self.path, s, a, &mut self.lists);
                let Some(it) = items(s) else { return };
                for (i, v) in a.iter().enumerate() {
                    let n = push_subscript(&mut self.path, &i);
                    self.visit(v, it, embedded);
                    self.path.truncate(n);
                }
            }
            _ => {}
        }
    }
}

fn child_path(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// validateEmbeddedResource: apiVersion and kind are required strings (kind a mixed-case
/// DNS-1035 label), and the metadata a valid ObjectMeta.
fn embedded_resource(path: &str, m: &Map<String, Value>, out: &mut Vec<Cause>) {
    for k in ["apiVersion", "kind"] {
        if !m.contains_key(k) {
            out.push(Cause::required(child_path(path, k)));
        }
    }
    for (k, v) in m {
        let field = child_path(path, k);
        match (k.as_str(), v) {
            ("apiVersion" | "kind", Value::String(s)) if s.is_empty() => {
                out.push(Cause::invalid(field, v, "must not be empty"));
            }
            ("apiVersion", Value::String(s)) if s.matches('/').count() > 1 => {
                let msg = format!("unexpected GroupVersion string: {s}");
                out.push(Cause::invalid(field, v, &msg));
            }
            ("kind", Value::String(s)) => {
                let errs = dns1035_messages(&s.to_lowercase());
                if !errs.is_empty() {
                    let msg = format!(
                        "may have mixed case, but should otherwise match: {}",
                        errs.join(",")
                    );
                    out.push(Cause::invalid(field, v, &msg));
                }
            }
            ("apiVersion" | "kind", other) if !other.is_string() => {
                let msg = "must be a string";
                out.push(Cause::new(
                    "FieldValueInvalid",
                    field,
                    format!("Invalid value: {}: {msg}", go_value(other)),
                ));
            }
            ("metadata", Value::Object(meta)) => embedded_object_meta(&field, meta, out),
            _ => {}
        }
    }
}

fn dns1035_messages(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    let b = s.as_bytes();
    let ok = b.first().is_some_and(u8::is_ascii_lowercase)
        && b.last()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
    if !ok {
        errs.push(DNS1035_LABEL_MSG.to_string());
    }
    errs
}

/// ValidateObjectMeta as validateEmbeddedResource calls it: names are path segments, a
/// namespace must be a DNS label, labels valid label keys and values.
fn embedded_object_meta(path: &str, meta: &Map<String, Value>, out: &mut Vec<Cause>) {
    use crate::resources::NameRule;
    use crate::validation::name_errors;
    let text = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("");
    let generate = text("generateName");
    for bad in ["/", "%"] {
        if generate.contains(bad) {
            let msg = format!("may not contain '{bad}'");
            out.push(Cause::invalid(
                format!("{path}.generateName"),
                &Value::from(generate),
                &msg,
            ));
        }
    }
    let name = text("name");
    if !name.is_empty() {
        for msg in name_errors(NameRule::PathSegment, name) {
            out.push(Cause::invalid(
                format!("{path}.name"),
                &Value::from(name),
                &msg,
            ));
        }
    }
    let ns = text("namespace");
    if !ns.is_empty() {
        for msg in name_errors(NameRule::Label1123, ns) {
            out.push(Cause::invalid(
                format!("{path}.namespace"),
                &Value::from(ns),
                &msg,
            ));
        }
    }
    crate::validation::validate_labels(meta.get("labels"), &format!("{path}.labels"), out);
}
