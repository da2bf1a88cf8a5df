//! The validation the real server performs for the served kinds, with its messages and field paths.

use serde_json::Value;

use crate::resources::{NameRule, ResourceKind};
use crate::selectors::LabelSelector;
use crate::status::Cause;

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const NAME_PART_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const PORT_RANGE_MSG: &str = "must be between 1 and 65535, inclusive";

/// The DNS-1123 label regex `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without the length limit.
fn matches_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && matches_dns1123_label(s)
}

fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// The messages of apimachinery's `IsDNS1123Subdomain` / `IsDNS1123Label`
/// (`pkg/util/validation/validation.go`): the length message, then the regex message.
fn dns_messages(rule: NameRule, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (max, ok, msg) = match rule {
        NameRule::Subdomain => (
            253,
            name.split('.').all(matches_dns1123_label),
            DNS1123_SUBDOMAIN_MSG,
        ),
        NameRule::Label1123 => (63, matches_dns1123_label(name), DNS1123_LABEL_MSG),
        NameRule::PathSegment => {
            // path.ValidatePathSegmentName
            if name == "." || name == ".." {
                return vec![format!("may not be '{name}'")];
            }
            for bad in ["/", "%"] {
                if name.contains(bad) {
                    out.push(format!("may not contain '{bad}'"));
                }
            }
            return out;
        }
    };
    if name.len() > max {
        out.push(format!("must be no more than {max} characters"));
    }
    if !ok {
        out.push(msg.into());
    }
    out
}

/// Validates `metadata.name` for the kind; returns the messages of the failed rules.
pub fn name_errors(rule: NameRule, name: &str) -> Vec<String> {
    dns_messages(rule, name)
}

/// apimachinery `IsQualifiedName` (label and annotation keys), its messages in order.
pub fn qualified_name_messages(key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        [n] => *n,
        [prefix, n] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    dns_messages(NameRule::Subdomain, prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            n
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                NAME_PART_MSG.replacen("name part ", "", 1)
            )];
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".into());
    }
    if !is_name_part(name) {
        out.push(NAME_PART_MSG.into());
    }
    out
}

/// apimachinery `IsValidLabelValue`, its messages in order.
pub fn label_value_messages(v: &str) -> Vec<String> {
    let mut out = Vec::new();
    if v.len() > 63 {
        out.push("must be no more than 63 characters".into());
    }
    if !v.is_empty() && !is_name_part(v) {
        out.push(LABEL_VALUE_MSG.into());
    }
    out
}

fn qualified_name_errors(key: &str, field: &str, out: &mut Vec<Cause>) {
    for m in qualified_name_messages(key) {
        out.push(Cause::invalid(field, &Value::String(key.into()), &m));
    }
}

/// Label keys and values, reported at `path` (e.g. `metadata.labels`).
pub fn validate_labels(labels: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    let Some(m) = labels.and_then(Value::as_object) else {
        return;
    };
    for (k, v) in m {
        qualified_name_errors(k, path, out);
        for msg in label_value_messages(v.as_str().unwrap_or("")) {
            out.push(Cause::invalid(path, v, &msg));
        }
    }
}

/// `ValidateLabelSelector` (apimachinery `pkg/apis/meta/v1/validation`): matchLabels at
/// `<path>.matchLabels`, each expression's operator, values and key.
fn label_selector(sel: &Value, path: &str, out: &mut Vec<Cause>) {
    validate_labels(sel.get("matchLabels"), &format!("{path}.matchLabels"), out);
    for (i, e) in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ep = format!("{path}.matchExpressions[{i}]");
        let values = e
            .get("values")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" | "NotIn" if values == 0 => out.push(Cause::new(
                "FieldValueRequired",
                format!("{ep}.values"),
                "Required value: must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => out.push(Cause::forbidden(
                format!("{ep}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => out.push(Cause::invalid(
                format!("{ep}.operator"),
                &Value::String(other.into()),
                "not a valid selector operator",
            )),
        }
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        qualified_name_errors(key, &format!("{ep}.key"), out);
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

/// ValidateOwnerReferences: apiVersion, kind, name and uid are required; one controller at most.
fn owner_references(refs: Option<&Value>, out: &mut Vec<Cause>) {
    let Some(refs) = refs.and_then(Value::as_array) else {
        return;
    };
    for r in refs {
        for (field, what) in [
            ("apiVersion", "version"),
            ("kind", "kind"),
            ("name", "name"),
            ("uid", "uid"),
        ] {
            if r.get(field)
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                out.push(Cause::invalid(
                    format!("metadata.ownerReferences.{field}"),
                    &Value::String(String::new()),
                    &format!("{what} must not be empty"),
                ));
            }
        }
    }
    let controllers = refs
        .iter()
        .filter(|r| r.get("controller") == Some(&Value::Bool(true)))
        .count();
    if controllers > 1 {
        out.push(Cause::new(
            "FieldValueInvalid",
            "metadata.ownerReferences",
            "Invalid value: ownerReferences: Only one reference can have Controller set to true",
        ));
    }
}

/// Validates the whole object (and immutability against `old` on update).
pub fn validate(kind: &ResourceKind, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut out = Vec::new();
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name.is_empty() {
        out.push(Cause::new(
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    } else {
        for msg in name_errors(kind.name_rule, name) {
            out.push(Cause::invalid(
                "metadata.name",
                &Value::String(name.into()),
                &msg,
            ));
        }
    }
    validate_labels(obj.pointer("/metadata/labels"), "metadata.labels", &mut out);
    owner_references(obj.pointer("/metadata/ownerReferences"), &mut out);
    if let Some(ann) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        for k in ann.keys() {
            qualified_name_errors(k, "metadata.annotations", &mut out);
        }
        let total: usize = ann
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if total > 256 * 1024 {
            out.push(Cause::new(
                "FieldValueTooLong",
                "metadata.annotations",
                "Too long: may not be more than 262144 bytes",
            ));
        }
    }
    match (kind.group, kind.kind) {
        ("", "Pod") => {
            if let Some(spec) = obj.get("spec") {
                pod_spec(spec, "spec", &mut out);
            } else {
                out.push(Cause::required("spec.containers"));
            }
            if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
                pod_spec_update(old_spec, obj.get("spec").unwrap_or(&Value::Null), &mut out);
            }
        }
        ("apps", "Deployment") | ("apps", "ReplicaSet") => workload(kind, obj, old, &mut out),
        ("", "Service") => service(obj, old, &mut out),
        ("discovery.k8s.io", "EndpointSlice") => endpoint_slice(obj, old, &mut out),
        ("", "ConfigMap") | ("", "Secret") => config_keys(obj, &mut out),
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => rbac_role(kind, obj, &mut out),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            rbac_binding(kind, obj, old, &mut out)
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            out.extend(crate::crd::definition_errors(obj));
        }
        _ => {}
    }
    if let Some(v) = kind.crd.filter(|v| v.has_schema()) {
        // apiextensions-apiserver's customResourceStrategy: the schema, then the rules.
        let schema_errors = crate::crd::structural::validate(&v.schema, obj, old);
        // Rules are not run on an object the schema already refused for a type, a
        // missing or unsupported value or a size (apiextensions-apiserver
        // pkg/registry/customresource/strategy.go, hasBlockingErr).
        let blocking = schema_errors.iter().any(|c| {
            matches!(
                c.reason.as_str(),
                "FieldValueNotSupported"
                    | "FieldValueRequired"
                    | "FieldValueTooLong"
                    | "FieldValueTooMany"
                    | "FieldValueTypeInvalid"
            )
        });
        out.extend(schema_errors);
        if let Some(rules) = v.rules.as_ref().filter(|r| !r.is_empty()) {
            if blocking {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    "<nil>",
                    "Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
                ));
            } else {
                out.extend(rules.validate(obj, old));
            }
        }
    }
    out
}

/// Go's `%#v` of a `[]string`.
fn go_string_slice(items: &[&Value]) -> String {
    let parts: Vec<String> = items
        .iter()
        .map(|v| format!("{:?}", v.as_str().unwrap_or("")))
        .collect();
    format!("[]string{{{}}}", parts.join(", "))
}

/// Go's `%#v` of a string map, as printed in selector-mismatch messages.
fn go_map(v: Option<&Value>) -> String {
    let entries: Vec<String> = v
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    if entries.is_empty() {
        "map[string]string(nil)".into()
    } else {
        format!("map[string]string{{{}}}", entries.join(", "))
    }
}

/// Go's `%v` of a `*metav1.LabelSelector` (its generated `String()`).
fn selector_repr(sel: &Value) -> String {
    let labels: Vec<String> = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}: {},", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    let exprs = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    format!(
        "&LabelSelector{{MatchLabels:map[string]string{{{}}},MatchExpressions:[]LabelSelectorRequirement{{{}}},}}",
        labels.join(""),
        if exprs == 0 { "" } else { "..." }
    )
}

fn nonnegative(spec: &Value, f: &str, out: &mut Vec<Cause>) {
    if let Some(n) = int(spec.get(f)).filter(|n| *n < 0) {
        out.push(Cause::invalid(
            format!("spec.{f}"),
            &Value::from(n),
            "must be greater than or equal to 0",
        ));
    }
}

/// Deployments and ReplicaSets, in the order of `ValidateDeploymentSpec` and
/// `ValidateReplicaSetSpec` (pkg/apis/apps/validation/validation.go), then the selector
/// immutability of the registry strategies' ValidateUpdate.
fn workload(kind: &ResourceKind, obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    nonnegative(&spec, "replicas", out);
    if kind.kind == "ReplicaSet" {
        nonnegative(&spec, "minReadySeconds", out);
    }
    let selector = spec.get("selector").filter(|s| !s.is_null());
    match selector {
        None => out.push(Cause::required("spec.selector")),
        Some(sel) => {
            label_selector(sel, "spec.selector", out);
            if LabelSelector::from_object(sel).is_empty() {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.selector",
                    format!(
                        "Invalid value: {}: empty selector is invalid for {}",
                        selector_repr(sel),
                        kind.singular
                    ),
                ));
            }
        }
    }
    // ValidatePodTemplateSpecForReplicaSet: a missing selector is labels.Nothing(), which
    // matches no labels; an empty one is labels.Everything(), which is not checked.
    let labels = spec.pointer("/template/metadata/labels");
    let matches = match selector {
        None => false,
        Some(sel) => {
            let parsed = LabelSelector::from_object(sel);
            parsed.is_empty() || parsed.matches_labels(labels)
        }
    };
    if !matches {
        out.push(Cause::new(
            "FieldValueInvalid",
            "spec.template.metadata.labels",
            format!(
                "Invalid value: {}: `selector` does not match template `labels`",
                go_map(labels)
            ),
        ));
    }
    validate_labels(labels, "spec.template.metadata.labels", out);
    match spec.pointer("/template/spec") {
        Some(ps) => {
            pod_spec(ps, "spec.template.spec", out);
            let rp = ps
                .get("restartPolicy")
                .and_then(Value::as_str)
                .unwrap_or("Always");
            if rp != "Always" {
                out.push(Cause::not_supported(
                    "spec.template.spec.restartPolicy",
                    &Value::String(rp.into()),
                    &["Always"],
                ));
            }
            if ps
                .get("activeDeadlineSeconds")
                .is_some_and(|v| !v.is_null())
            {
                out.push(Cause::forbidden(
                    "spec.template.spec.activeDeadlineSeconds",
                    &format!("activeDeadlineSeconds in {} is not Supported", kind.kind),
                ));
            }
        }
        None => out.push(Cause::required("spec.template.spec.containers")),
    }
    if kind.kind == "Deployment" {
        deployment_strategy(&spec, out);
        nonnegative(&spec, "minReadySeconds", out);
        nonnegative(&spec, "revisionHistoryLimit", out);
        if let Some(pd) = int(spec.get("progressDeadlineSeconds")) {
            nonnegative(&spec, "progressDeadlineSeconds", out);
            if pd <= int(spec.get("minReadySeconds")).unwrap_or(0) {
                out.push(Cause::invalid(
                    "spec.progressDeadlineSeconds",
                    &Value::from(pd),
                    "must be greater than minReadySeconds",
                ));
            }
        }
    }
    if let (Some(sel), Some(old_sel)) = (selector, old.and_then(|o| o.pointer("/spec/selector")))
        && old_sel != sel
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            "spec.selector",
            format!("Invalid value: {}: field is immutable", selector_repr(sel)),
        ));
    }
}

/// An int-or-percent as `intstr.IntOrString.String()` prints it.
fn int_or_string_repr(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The integer an int-or-percent stands for in the zero check (`getIntOrPercentValue`).
fn int_or_percent_value(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => s
            .strip_suffix('%')
            .and_then(|p| p.parse().ok())
            .unwrap_or(0),
        _ => 0,
    }
}

/// `ValidatePositiveIntOrPercent`.
fn positive_int_or_percent(v: Option<&Value>, path: &str, out: &mut Vec<Cause>) {
    match v {
        Some(Value::String(s)) => {
            let digits = s.strip_suffix('%').unwrap_or("");
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    path,
                    format!("Invalid value: {s}: a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"),
                ));
            }
        }
        Some(Value::Number(n)) if n.as_i64().unwrap_or(0) < 0 => out.push(Cause::new(
            "FieldValueInvalid",
            path,
            format!("Invalid value: {n}: must be greater than or equal to 0"),
        )),
        _ => {}
    }
}

/// `ValidateDeploymentStrategy`.
fn deployment_strategy(spec: &Value, out: &mut Vec<Cause>) {
    let ty = spec
        .pointer("/strategy/type")
        .and_then(Value::as_str)
        .unwrap_or("RollingUpdate");
    let ru = spec
        .pointer("/strategy/rollingUpdate")
        .filter(|v| !v.is_null());
    match ty {
        "Recreate" => {
            if ru.is_some() {
                out.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            let Some(ru) = ru else {
                out.push(Cause::new(
                    "FieldValueRequired",
                    "spec.strategy.rollingUpdate",
                    "Required value: this should be defaulted and never be nil",
                ));
                return;
            };
            let mu = ru.get("maxUnavailable");
            positive_int_or_percent(mu, "spec.strategy.rollingUpdate.maxUnavailable", out);
            positive_int_or_percent(
                ru.get("maxSurge"),
                "spec.strategy.rollingUpdate.maxSurge",
                out,
            );
            let mu_repr = mu.map_or_else(|| "0".to_string(), int_or_string_repr);
            if int_or_percent_value(mu) == 0 && int_or_percent_value(ru.get("maxSurge")) == 0 {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    format!("Invalid value: {mu_repr}: may not be 0 when `maxSurge` is 0"),
                ));
            }
            if matches!(mu, Some(Value::String(s)) if s.ends_with('%'))
                && int_or_percent_value(mu) > 100
            {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    format!("Invalid value: {mu_repr}: must not be greater than 100%"),
                ));
            }
        }
        other => {
            // NotSupported on the whole strategy, printed with Go's %#v of the internal type.
            let ru_repr = if ru.is_some() {
                "(*apps.RollingUpdateDeployment)(...)"
            } else {
                "(*apps.RollingUpdateDeployment)(nil)"
            };
            out.push(Cause::new(
                "FieldValueNotSupported",
                "spec.strategy",
                format!(
                    "Unsupported value: apps.DeploymentStrategy{{Type:{other:?}, RollingUpdate:{ru_repr}}}: supported values: \"Recreate\", \"RollingUpdate\""
                ),
            ));
        }
    }
}

fn pod_spec(spec: &Value, path: &str, out: &mut Vec<Cause>) {
    let volumes: Vec<&str> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.get("name").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    for (i, v) in volumes.iter().enumerate() {
        if volumes[..i].contains(v) {
            out.push(Cause::duplicate(
                format!("{path}.volumes[{i}].name"),
                &Value::String((*v).into()),
            ));
        }
    }
    let containers = spec.get("containers").and_then(Value::as_array);
    match containers {
        None => out.push(Cause::required(format!("{path}.containers"))),
        Some(cs) if cs.is_empty() => out.push(Cause::required(format!("{path}.containers"))),
        Some(_) => {}
    }
    let mut names: Vec<String> = Vec::new();
    for list in ["initContainers", "containers"] {
        let Some(cs) = spec.get(list).and_then(Value::as_array) else {
            continue;
        };
        for (i, c) in cs.iter().enumerate() {
            let cp = format!("{path}.{list}[{i}]");
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() {
                out.push(Cause::required(format!("{cp}.name")));
            } else if !is_dns1123_label(name) {
                out.push(Cause::invalid(
                    format!("{cp}.name"),
                    &Value::String(name.into()),
                    DNS1123_LABEL_MSG,
                ));
            } else if names.iter().any(|n| n == name) {
                out.push(Cause::duplicate(
                    format!("{cp}.name"),
                    &Value::String(name.into()),
                ));
            }
            names.push(name.to_string());
            container_env(c, &cp, out);
            container_resources(c, &cp, out);
            if c.get("image")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .is_empty()
            {
                out.push(Cause::required(format!("{cp}.image")));
            }
            if let Some(p) = c.get("imagePullPolicy").and_then(Value::as_str)
                && !["Always", "IfNotPresent", "Never"].contains(&p)
            {
                out.push(Cause::not_supported(
                    format!("{cp}.imagePullPolicy"),
                    &Value::String(p.into()),
                    &["Always", "IfNotPresent", "Never"],
                ));
            }
            let mut port_names: Vec<&str> = Vec::new();
            for (j, p) in c
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let pp = format!("{cp}.ports[{j}]");
                match int(p.get("containerPort")) {
                    Some(n) if (1..=65535).contains(&n) => {}
                    Some(n) => out.push(Cause::invalid(
                        format!("{pp}.containerPort"),
                        &Value::from(n),
                        PORT_RANGE_MSG,
                    )),
                    None => out.push(Cause::required(format!("{pp}.containerPort"))),
                }
                if let Some(n) = int(p.get("hostPort"))
                    && !(1..=65535).contains(&n)
                {
                    out.push(Cause::invalid(
                        format!("{pp}.hostPort"),
                        &Value::from(n),
                        PORT_RANGE_MSG,
                    ));
                }
                if let Some(pn) = p.get("name").and_then(Value::as_str) {
                    if let Some(msg) = port_name_error(pn) {
                        out.push(Cause::invalid(
                            format!("{pp}.name"),
                            &Value::String(pn.into()),
                            msg,
                        ));
                    } else if port_names.contains(&pn) {
                        out.push(Cause::duplicate(
                            format!("{pp}.name"),
                            &Value::String(pn.into()),
                        ));
                    }
                    port_names.push(pn);
                }
                protocol(p, &pp, out);
            }
            for (j, m) in c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let vn = m.get("name").and_then(Value::as_str).unwrap_or("");
                if !volumes.contains(&vn) {
                    out.push(Cause::new(
                        "FieldValueNotFound",
                        format!("{cp}.volumeMounts[{j}].name"),
                        format!("Not found: {vn:?}"),
                    ));
                }
                if m.get("mountPath")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .is_empty()
                {
                    out.push(Cause::required(format!("{cp}.volumeMounts[{j}].mountPath")));
                }
            }
        }
    }
    if let Some(rp) = spec.get("restartPolicy").and_then(Value::as_str)
        && !["Always", "OnFailure", "Never"].contains(&rp)
    {
        out.push(Cause::not_supported(
            format!("{path}.restartPolicy"),
            &Value::String(rp.into()),
            &["Always", "OnFailure", "Never"],
        ));
    }
    if let Some(dp) = spec.get("dnsPolicy").and_then(Value::as_str) {
        let ok = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
        if !ok.contains(&dp) {
            out.push(Cause::not_supported(
                format!("{path}.dnsPolicy"),
                &Value::String(dp.into()),
                &ok,
            ));
        }
    }
}

fn endpoint_slice(obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    // ValidateEndpointSlice (pkg/apis/discovery/validation/validation.go): the address type,
    // then each endpoint's addresses, then (ValidateEndpointSliceUpdate) the address type's
    // immutability, in that order.
    let types = ["IPv4", "IPv6", "FQDN"];
    let address_type = obj.get("addressType").and_then(Value::as_str);
    match address_type {
        None => out.push(Cause::required("addressType")),
        Some(t) if !types.contains(&t) => out.push(Cause::not_supported(
            "addressType",
            &Value::String(t.into()),
            &types,
        )),
        Some(_) => {}
    }
    for (i, e) in obj
        .get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let addresses = e.get("addresses").and_then(Value::as_array);
        if addresses.map_or(0, Vec::len) == 0 {
            out.push(Cause::required(format!("endpoints[{i}].addresses")));
        }
        for (j, address) in addresses.into_iter().flatten().enumerate() {
            let field = format!("endpoints[{i}].addresses[{j}]");
            let text = address.as_str().unwrap_or_default();
            if let Some(detail) = endpoint_address_problem(address_type, text) {
                out.push(Cause::invalid(field, address, &detail));
            }
        }
    }
    if let (Some(t), Some(prev)) = (
        address_type,
        old.and_then(|o| o.get("addressType"))
            .and_then(Value::as_str),
    ) && prev != t
    {
        out.push(Cause::invalid(
            "addressType",
            &Value::String(t.into()),
            "field is immutable",
        ));
    }
}

/// What is wrong with an EndpointSlice address of `address_type`: `IsValidIPv4Address` /
/// `IsValidIPv6Address`, then `ValidateEndpointIP` (pkg/apis/core/validation), which refuses
/// addresses nothing should be sent to: unspecified, loopback, link-local. FQDN addresses are
/// checked as names elsewhere; unknown types are not checked (as upstream).
fn endpoint_address_problem(address_type: Option<&str>, address: &str) -> Option<String> {
    use std::net::IpAddr;
    let ip: IpAddr = match address_type {
        Some("IPv4") => match address.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => ip.into(),
            Err(_) => return Some("must be a valid IPv4 address".into()),
        },
        Some("IPv6") => match address.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => ip.into(),
            Err(_) => return Some("must be a valid IPv6 address".into()),
        },
        _ => return None,
    };
    let link_local_unicast = match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    let link_local_multicast = match ip {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => (v6.segments()[0] & 0xff0f) == 0xff02,
    };
    if ip.is_unspecified() {
        Some(format!("may not be unspecified ({address})"))
    } else if ip.is_loopback() {
        Some("may not be in the loopback range (127.0.0.0/8, ::1/128)".into())
    } else if link_local_unicast {
        Some("may not be in the link-local range (169.254.0.0/16, fe80::/10)".into())
    } else if link_local_multicast {
        Some("may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)".into())
    } else {
        None
    }
}

/// Pod specs are immutable but for a few fields (ValidatePodUpdate).
fn pod_spec_update(old: &Value, new: &Value, out: &mut Vec<Cause>) {
    // Carry the mutable fields over from the new spec, then nothing else may differ.
    let mut allowed = old.clone();
    for list in ["containers", "initContainers"] {
        if let (Some(Value::Array(a)), Some(Value::Array(n))) =
            (allowed.get_mut(list), new.get(list))
            && a.len() == n.len()
        {
            for (c, nc) in a.iter_mut().zip(n) {
                if let Some(img) = nc.get("image") {
                    c["image"] = img.clone();
                }
            }
        }
    }
    for f in ["activeDeadlineSeconds", "terminationGracePeriodSeconds"] {
        match new.get(f) {
            Some(v) => allowed[f] = v.clone(),
            None => {
                allowed.as_object_mut().map(|m| m.remove(f));
            }
        }
    }
    // Tolerations may only be added to; scheduling gates may only be removed.
    let old_tol = old
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(nt) = new.get("tolerations").and_then(Value::as_array)
        && old_tol.iter().all(|t| nt.contains(t))
    {
        allowed["tolerations"] = Value::Array(nt.clone());
    }
    let old_gates = old
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let new_gates = new
        .get("schedulingGates")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if new_gates.iter().all(|g| old_gates.contains(g)) {
        match new.get("schedulingGates") {
            Some(g) => allowed["schedulingGates"] = g.clone(),
            None => {
                allowed.as_object_mut().map(|m| m.remove("schedulingGates"));
            }
        }
    }
    if &allowed != new {
        out.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn list_len(v: &Value, key: &str) -> usize {
    v.get(key).and_then(Value::as_array).map_or(0, Vec::len)
}

/// `ValidateRole` / `ValidateClusterRole` (pkg/apis/rbac/validation/validation.go): every
/// rule through `ValidatePolicyRule` (namespaced for Roles), and a ClusterRole's
/// aggregationRule needs at least one valid clusterRoleSelector.
fn rbac_role(kind: &ResourceKind, obj: &Value, out: &mut Vec<Cause>) {
    for (i, rule) in obj
        .get("rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        policy_rule(rule, kind.namespaced, &format!("rules[{i}]"), out);
    }
    if kind.kind != "ClusterRole" {
        return;
    }
    let Some(agg) = obj.get("aggregationRule").filter(|a| a.is_object()) else {
        return;
    };
    let path = "aggregationRule.clusterRoleSelectors";
    let selectors = agg
        .get("clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if selectors.is_empty() {
        out.push(Cause::new(
            "FieldValueRequired",
            path,
            "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil",
        ));
    }
    for (i, sel) in selectors.iter().enumerate() {
        label_selector(sel, &format!("{path}[{i}]"), out);
    }
}

/// `ValidatePolicyRule`: verbs required; non-resource URLs only in cluster rules and
/// never mixed with resources (nothing else is checked then); otherwise apiGroups and
/// resources required.
fn policy_rule(rule: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    if list_len(rule, "verbs") == 0 {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.verbs"),
            "Required value: verbs must contain at least one value",
        ));
    }
    let urls: Vec<&Value> = rule
        .get("nonResourceURLs")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if !urls.is_empty() {
        let invalid = |detail: &str| {
            Cause::new(
                "FieldValueInvalid",
                format!("{path}.nonResourceURLs"),
                format!("Invalid value: {}: {detail}", go_string_slice(&urls)),
            )
        };
        if namespaced {
            out.push(invalid(
                "namespaced rules cannot apply to non-resource URLs",
            ));
        }
        if ["apiGroups", "resources", "resourceNames"]
            .iter()
            .any(|f| list_len(rule, f) > 0)
        {
            out.push(invalid(
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
        return;
    }
    if list_len(rule, "apiGroups") == 0 {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.apiGroups"),
            "Required value: resource rules must supply at least one api group",
        ));
    }
    if list_len(rule, "resources") == 0 {
        out.push(Cause::new(
            "FieldValueRequired",
            format!("{path}.resources"),
            "Required value: resource rules must supply at least one resource",
        ));
    }
}

/// `ValidateRoleBinding` / `ValidateClusterRoleBinding` and their `...Update`
/// (pkg/apis/rbac/validation/validation.go): roleRef apiGroup, kind (a ClusterRoleBinding
/// may only bind a ClusterRole) and name (a path segment), each subject, and on update an
/// unchanged roleRef.
fn rbac_binding(kind: &ResourceKind, obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    let role_ref = obj.get("roleRef").cloned().unwrap_or(Value::Null);
    let group = str_at(&role_ref, "apiGroup");
    if group != RBAC_GROUP {
        out.push(Cause::not_supported(
            "roleRef.apiGroup",
            &Value::String(group.into()),
            &[RBAC_GROUP],
        ));
    }
    let ref_kind = str_at(&role_ref, "kind");
    let kinds: &[&str] = if kind.namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&ref_kind) {
        out.push(Cause::not_supported(
            "roleRef.kind",
            &Value::String(ref_kind.into()),
            kinds,
        ));
    }
    let ref_name = str_at(&role_ref, "name");
    if ref_name.is_empty() {
        out.push(Cause::required("roleRef.name"));
    } else {
        for msg in name_errors(NameRule::PathSegment, ref_name) {
            out.push(Cause::invalid(
                "roleRef.name",
                &Value::String(ref_name.into()),
                &msg,
            ));
        }
    }
    for (i, subject) in obj
        .get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        binding_subject(subject, kind.namespaced, &format!("subjects[{i}]"), out);
    }
    if let Some(old_ref) = old.and_then(|o| o.get("roleRef")) {
        let changed = ["apiGroup", "kind", "name"]
            .iter()
            .any(|f| str_at(old_ref, f) != str_at(&role_ref, f));
        if changed {
            // field.Invalid with the internal rbac.RoleRef, printed with %#v.
            out.push(Cause::new(
                "FieldValueInvalid",
                "roleRef",
                format!(
                    "Invalid value: rbac.RoleRef{{APIGroup:{:?}, Kind:{:?}, Name:{:?}}}: cannot change roleRef",
                    group, ref_kind, ref_name
                ),
            ));
        }
    }
}

/// `ValidateRoleBindingSubject`: name required; ServiceAccounts need a DNS-1123 subdomain
/// name, apiGroup "" and (in a ClusterRoleBinding) a namespace; Users and Groups the RBAC
/// apiGroup; no other kinds.
fn binding_subject(subject: &Value, namespaced: bool, path: &str, out: &mut Vec<Cause>) {
    let name = str_at(subject, "name");
    if name.is_empty() {
        out.push(Cause::required(format!("{path}.name")));
    }
    let group = str_at(subject, "apiGroup");
    match str_at(subject, "kind") {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in name_errors(NameRule::Subdomain, name) {
                    out.push(Cause::invalid(
                        format!("{path}.name"),
                        &Value::String(name.into()),
                        &msg,
                    ));
                }
            }
            if !group.is_empty() {
                out.push(Cause::not_supported(
                    format!("{path}.apiGroup"),
                    &Value::String(group.into()),
                    &[""],
                ));
            }
            if !namespaced && str_at(subject, "namespace").is_empty() {
                out.push(Cause::required(format!("{path}.namespace")));
            }
        }
        "User" | "Group" => {
            if group != RBAC_GROUP {
                out.push(Cause::not_supported(
                    format!("{path}.apiGroup"),
                    &Value::String(group.into()),
                    &[RBAC_GROUP],
                ));
            }
        }
        other => out.push(Cause::not_supported(
            format!("{path}.kind"),
            &Value::String(other.into()),
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

/// ConfigMap and Secret keys: `[-._a-zA-Z0-9]+`, at most 253 characters.
fn config_keys(obj: &Value, out: &mut Vec<Cause>) {
    const MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    for field in ["data", "binaryData", "stringData"] {
        for key in obj
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys())
        {
            let ok = !key.is_empty()
                && key.len() <= 253
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
                && key != "."
                && key != "..";
            if !ok {
                out.push(Cause::invalid(
                    format!("{field}[{key}]"),
                    &Value::String(key.clone()),
                    MSG,
                ));
            }
        }
    }
}

/// Environment variable names: required, printable ASCII without '=' (the relaxed rule
/// that is the default since Kubernetes 1.34).
fn container_env(c: &Value, cp: &str, out: &mut Vec<Cause>) {
    for (i, e) in c
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let name = e.get("name").and_then(Value::as_str).unwrap_or("");
        if name.is_empty() {
            out.push(Cause::required(format!("{cp}.env[{i}].name")));
        } else if !name.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'=') {
            out.push(Cause::invalid(
                format!("{cp}.env[{i}].name"),
                &Value::String(name.into()),
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
    }
}

/// Requests may not exceed limits for the same resource.
fn container_resources(c: &Value, cp: &str, out: &mut Vec<Cause>) {
    let (Some(req), Some(lim)) = (
        c.pointer("/resources/requests").and_then(Value::as_object),
        c.pointer("/resources/limits").and_then(Value::as_object),
    ) else {
        return;
    };
    for (res, r) in req {
        let Some(l) = lim.get(res) else { continue };
        let (Some(rq), Some(lq)) = (quantity_value(r), quantity_value(l)) else {
            continue;
        };
        if rq > lq {
            out.push(Cause::invalid(
                format!("{cp}.resources.requests"),
                r,
                &format!(
                    "must be less than or equal to {res} limit of {}",
                    l.as_str().map_or_else(|| l.to_string(), String::from)
                ),
            ));
        }
    }
}

fn quantity_value(v: &Value) -> Option<f64> {
    let s = match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    crate::quantity::nano_value(&s).map(|n| n as f64)
}

fn protocol(p: &Value, path: &str, out: &mut Vec<Cause>) {
    if let Some(proto) = p.get("protocol").and_then(Value::as_str)
        && !["TCP", "UDP", "SCTP"].contains(&proto)
    {
        out.push(Cause::not_supported(
            format!("{path}.protocol"),
            &Value::String(proto.into()),
            &["SCTP", "TCP", "UDP"],
        ));
    }
}

/// IANA service names: at most 15 characters, lowercase alphanumerics and '-', at least one letter.
fn port_name_error(n: &str) -> Option<&'static str> {
    if n.len() > 15 {
        return Some("must be no more than 15 characters");
    }
    if !n
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Some("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if n.contains("--") {
        return Some("must not contain consecutive hyphens");
    }
    if !n.bytes().any(|b| b.is_ascii_lowercase()) {
        return Some("must contain at least one letter (a-z)");
    }
    if n.starts_with('-') || n.ends_with('-') {
        return Some("must not begin or end with a hyphen");
    }
    None
}

fn service(obj: &Value, old: Option<&Value>, out: &mut Vec<Cause>) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let ty = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    let types = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
    if !types.contains(&ty) {
        out.push(Cause::not_supported(
            "spec.type",
            &Value::String(ty.into()),
            &types,
        ));
    }
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    let ports = spec
        .get("ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if ports.is_empty() && ty != "ExternalName" && !headless {
        out.push(Cause::required("spec.ports"));
    }
    let mut names: Vec<String> = Vec::new();
    let mut seen: Vec<(i64, String)> = Vec::new();
    for (i, p) in ports.iter().enumerate() {
        let pp = format!("spec.ports[{i}]");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            out.push(Cause::required(format!("{pp}.name")));
        } else if !name.is_empty() {
            if !is_dns1123_label(name) {
                out.push(Cause::invalid(
                    format!("{pp}.name"),
                    &Value::String(name.into()),
                    DNS1123_LABEL_MSG,
                ));
            } else if names.iter().any(|n| n == name) {
                out.push(Cause::duplicate(
                    format!("{pp}.name"),
                    &Value::String(name.into()),
                ));
            }
        }
        names.push(name.to_string());
        match int(p.get("port")) {
            Some(n) if (1..=65535).contains(&n) => {
                let proto = p
                    .get("protocol")
                    .and_then(Value::as_str)
                    .unwrap_or("TCP")
                    .to_string();
                if seen.contains(&(n, proto.clone())) {
                    out.push(Cause::duplicate(pp.clone(), p));
                }
                seen.push((n, proto));
            }
            Some(n) => out.push(Cause::invalid(
                format!("{pp}.port"),
                &Value::from(n),
                PORT_RANGE_MSG,
            )),
            None => out.push(Cause::required(format!("{pp}.port"))),
        }
        match p.get("targetPort") {
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                if !(1..=65535).contains(&n) {
                    out.push(Cause::invalid(
                        format!("{pp}.targetPort"),
                        &Value::from(n),
                        PORT_RANGE_MSG,
                    ));
                }
            }
            Some(Value::String(s)) => {
                if let Some(msg) = port_name_error(s) {
                    out.push(Cause::invalid(
                        format!("{pp}.targetPort"),
                        &Value::String(s.clone()),
                        msg,
                    ));
                }
            }
            _ => {}
        }
        if let Some(n) = int(p.get("nodePort"))
            && !(1..=65535).contains(&n)
        {
            out.push(Cause::invalid(
                format!("{pp}.nodePort"),
                &Value::from(n),
                PORT_RANGE_MSG,
            ));
        }
        protocol(p, &pp, out);
    }
    // validateServiceClusterIPsRelatedFields (pkg/apis/core/validation/validation.go):
    // clusterIP and clusterIPs[0] agree, and every clusterIPs entry is an IP ("None"
    // only alone and first).
    if ty != "ExternalName" {
        let ips: Vec<&Value> = spec
            .get("clusterIPs")
            .and_then(Value::as_array)
            .map(|a| a.iter().collect())
            .unwrap_or_default();
        if let Some(ip) = spec
            .get("clusterIP")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        {
            if ips.is_empty() {
                out.push(Cause::required("spec.clusterIPs"));
            } else if ips[0].as_str() != Some(ip) {
                out.push(Cause::new(
                    "FieldValueInvalid",
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: {}: first value must match `clusterIP`",
                        go_string_slice(&ips)
                    ),
                ));
            }
        }
        for (i, ip) in ips.iter().enumerate() {
            let ip = ip.as_str().unwrap_or("");
            if i == 0 && ip == "None" {
                if ips.len() > 1 {
                    out.push(Cause::new(
                        "FieldValueInvalid",
                        "spec.clusterIPs",
                        format!(
                            "Invalid value: {}: 'None' must be the first and only value",
                            go_string_slice(&ips)
                        ),
                    ));
                }
                continue;
            }
            if ip.parse::<std::net::IpAddr>().is_err() {
                out.push(Cause::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    &Value::String(ip.into()),
                    "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                ));
            }
        }
    }
    if let (Some(new_ip), Some(old_ip)) = (
        spec.get("clusterIP").and_then(Value::as_str),
        old.and_then(|o| o.pointer("/spec/clusterIP"))
            .and_then(Value::as_str),
    ) && new_ip != old_ip
        && ty != "ExternalName"
    {
        out.push(Cause::invalid(
            "spec.clusterIPs[0]",
            &Value::String(new_ip.into()),
            "may not change once set",
        ));
    }
    validate_labels(spec.get("selector"), "spec.selector", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_strategy_rules() {
        let kind = crate::resources::KINDS
            .iter()
            .find(|k| k.kind == "Deployment")
            .unwrap();
        let d = serde_json::json!({"metadata": {"name": "d"}, "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
        let causes = validate(kind, &d, None);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].field,
            "spec.strategy.rollingUpdate.maxUnavailable"
        );
    }

    #[test]
    fn container_rules() {
        let kind = crate::resources::KINDS
            .iter()
            .find(|k| k.kind == "Pod")
            .unwrap();
        let pod = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i",
            "env": [{"name": "A=B"}, {"name": "OK_1"}],
            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}});
        let fields: Vec<String> = validate(kind, &pod, None)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.containers[0].env[0].name",
                "spec.containers[0].resources.requests"
            ]
        );
        let cm_kind = crate::resources::KINDS
            .iter()
            .find(|k| k.kind == "ConfigMap")
            .unwrap();
        let cm = serde_json::json!({"metadata": {"name": "c"}, "data": {"good.key": "v", "bad/key": "v"}});
        let fields: Vec<String> = validate(cm_kind, &cm, None)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, ["data[bad/key]"]);
    }

    #[test]
    fn dns_names() {
        // IsDNS1123Subdomain: 253 characters in all, parts of any length.
        assert!(name_errors(NameRule::Subdomain, "a.b-c").is_empty());
        assert!(name_errors(NameRule::Subdomain, &"a".repeat(253)).is_empty());
        assert_eq!(
            name_errors(NameRule::Subdomain, &"a".repeat(254)),
            ["must be no more than 253 characters"]
        );
        assert!(!name_errors(NameRule::Subdomain, "A").is_empty());
        assert!(name_errors(NameRule::Label1123, "1svc").is_empty());
        assert!(port_name_error("http").is_none());
        assert!(port_name_error("8080").is_some());
    }
}
