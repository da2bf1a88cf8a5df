//! Structural schemas of custom resources: pruning, defaulting and validation against a CRD
//! version's `openAPIV3Schema`, with the semantics and the messages of a v1.36
//! apiextensions-apiserver (which validates with kube-openapi's `SchemaValidator`).
//!
//! The schema stays a `serde_json::Value`; every walk follows the object and looks the
//! schema up as it goes, so large schemas (LeaderWorkerSet's pod templates) cost nothing
//! for the fields an object does not set.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::Ipv6Addr;
use std::sync::{LazyLock, PoisonError, RwLock};

use regex::Regex;
use serde_json::{Map, Value};

use crate::status::Cause;

const PRESERVE: &str = "x-kubernetes-preserve-unknown-fields";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";
const INT_OR_STRING: &str = "x-kubernetes-int-or-string";

/// TypeMeta and ObjectMeta fields, kept at the root and in embedded resources
/// (pkg/apiserver/schema/pruning/algorithm.go `metaFields`).
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

// ---------------------------------------------------------------------------------------
// Schema access
// ---------------------------------------------------------------------------------------

fn prop<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    s.get("properties")?.get(k)
}

/// `additionalProperties`: `Some(None)` when it is a bool (no schema: structural.go
/// `StructuralOrBool` with a nil `Structural`).
fn additional(s: &Value) -> Option<Option<&Value>> {
    match s.get("additionalProperties")? {
        v @ Value::Object(_) => Some(Some(v)),
        Value::Bool(_) => Some(None),
        _ => None,
    }
}

fn additional_schema(s: &Value) -> Option<&Value> {
    additional(s).flatten()
}

/// The schema of an object's field: its property, else the `additionalProperties` schema.
fn field_schema<'a>(s: &'a Value, k: &str) -> Option<&'a Value> {
    prop(s, k).or_else(|| additional_schema(s))
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

/// A `default: null` is no default (structural.go keeps `Default.Object == nil`).
fn default_of(s: &Value) -> Option<&Value> {
    s.get("default").filter(|d| !d.is_null())
}

fn str_kw<'a>(s: &'a Value, k: &str) -> Option<&'a str> {
    s.get(k).and_then(Value::as_str)
}

/// An integer keyword (`maxLength`, `minItems`...); CRDs decode them as int64.
fn int_kw(s: &Value, k: &str) -> Option<i64> {
    let v = s.get(k)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

fn list_map_keys(s: &Value) -> Vec<&str> {
    s.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|ks| ks.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Pruning (pkg/apiserver/schema/pruning/algorithm.go) and embedded ObjectMeta coercion
// (pkg/apiserver/schema/objectmeta/coerce.go)
// ---------------------------------------------------------------------------------------

/// Drops the fields `schema` does not specify and returns their paths as the strict decoder
/// reports them (`spec.rules[0].foo`). Like `PruneWithOptions`, the pruned paths are sorted;
/// the unknown ObjectMeta fields of embedded resources follow (`CoerceWithOptions`, sorted
/// too). The root's apiVersion, kind and metadata are left alone (`isResourceRoot`).
pub(crate) fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut paths = PrunePaths::default();
    prune_at(obj, Some(schema), true, &mut paths);
    let mut found = paths.found;
    found.sort();
    let mut meta = Vec::new();
    coerce_embedded(obj, schema, &mut String::new(), &mut meta);
    meta.sort();
    found.extend(meta);
    found
}

/// The dotted path `UnknownFieldPathOptions` builds (keys joined by `.`, indices `[i]`).
#[derive(Default)]
struct PrunePaths {
    cur: String,
    found: Vec<String>,
}

impl PrunePaths {
    fn key(&mut self, k: &str) -> usize {
        let n = self.cur.len();
        if n > 0 {
            self.cur.push('.');
        }
        self.cur.push_str(k);
        n
    }

    fn index(&mut self, i: usize) -> usize {
        let n = self.cur.len();
        let _ = write!(self.cur, "[{i}]");
        n
    }

    fn record(&mut self, k: &str) {
        let n = self.key(k);
        self.found.push(self.cur.clone());
        self.cur.truncate(n);
    }
}

fn prune_at(x: &mut Value, s: Option<&Value>, root: bool, p: &mut PrunePaths) {
    if let Some(s) = s.filter(|s| flag(s, PRESERVE)) {
        return skip_prune(x, s, root, p);
    }
    match x {
        Value::Object(m) => prune_object(m, s, root, p),
        Value::Array(a) => {
            let it = s.and_then(items);
            for (i, v) in a.iter_mut().enumerate() {
                let n = p.index(i);
                prune_at(v, it, false, p);
                p.cur.truncate(n);
            }
        }
        _ => {}
    }
}

fn prune_object(m: &mut Map<String, Value>, s: Option<&Value>, root: bool, p: &mut PrunePaths) {
    let Some(s) = s else {
        // No schema at all: every field is unknown.
        for k in m.keys() {
            p.record(k);
        }
        m.clear();
        return;
    };
    let embedded = root || flag(s, EMBEDDED);
    m.retain(|k, v| {
        if embedded && META_FIELDS.contains(&k.as_str()) {
            return true;
        }
        let child = match (prop(s, k), additional(s)) {
            (Some(ps), _) => Some(ps),
            (None, Some(addl)) => addl,
            (None, None) => {
                p.record(k);
                return false;
            }
        };
        let n = p.key(k);
        prune_at(v, child, false, p);
        p.cur.truncate(n);
        true
    });
}

/// `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are still pruned
/// below (pruning/algorithm.go `skipPrune`).
fn skip_prune(x: &mut Value, s: &Value, root: bool, p: &mut PrunePaths) {
    let embedded = root || flag(s, EMBEDDED);
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                let child = match (prop(s, k), additional(s)) {
                    (Some(ps), _) => Some(ps),
                    (None, Some(addl)) => addl,
                    (None, None) => continue,
                };
                let n = p.key(k);
                prune_at(v, child, false, p);
                p.cur.truncate(n);
            }
        }
        Value::Array(a) => {
            let Some(it) = items(s) else { return };
            for (i, v) in a.iter_mut().enumerate() {
                let n = p.index(i);
                skip_prune(v, it, false, p);
                p.cur.truncate(n);
            }
        }
        _ => {}
    }
}

/// The `metav1.ObjectMeta` JSON fields: an embedded resource's metadata keeps only these.
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// field.Path forms: `Child` (`a.b`), `Key` (`a[k]`), `Index` (`a[0]`).
fn push_child(path: &mut String, k: &str) -> usize {
    let n = path.len();
    if n > 0 {
        path.push('.');
    }
    path.push_str(k);
    n
}

fn push_subscript(path: &mut String, k: &dyn std::fmt::Display) -> usize {
    let n = path.len();
    let _ = write!(path, "[{k}]");
    n
}

/// objectmeta/coerce.go: each embedded resource's metadata is decoded into an ObjectMeta
/// and written back, which drops unknown fields (reported under `<path>.metadata.`) and the
/// empty ones its JSON encoding omits.
fn coerce_embedded(x: &mut Value, s: &Value, path: &mut String, out: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            if flag(s, EMBEDDED)
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
            {
                coerce_object_meta(meta, path, out);
            }
            for (k, v) in m.iter_mut() {
                let (child, n) = match (prop(s, k), additional_schema(s)) {
                    (Some(ps), _) => (ps, push_child(path, k)),
                    (None, Some(a)) => (a, push_subscript(path, k)),
                    (None, None) => continue,
                };
                coerce_embedded(v, child, path, out);
                path.truncate(n);
            }
        }
        Value::Array(a) => {
            let Some(it) = items(s) else { return };
            for (i, v) in a.iter_mut().enumerate() {
                let n = push_subscript(path, &i);
                coerce_embedded(v, it, path, out);
                path.truncate(n);
            }
        }
        _ => {}
    }
}

fn coerce_object_meta(meta: &mut Map<String, Value>, path: &str, out: &mut Vec<String>) {
    let prefix = if path.is_empty() {
        "metadata".to_string()
    } else {
        format!("{path}.metadata")
    };
    meta.retain(|k, v| {
        if !OBJECT_META_FIELDS.contains(&k.as_str()) {
            out.push(format!("{prefix}.{k}"));
            return false;
        }
        // omitempty fields, and a zero creationTimestamp, do not survive the round trip.
        let empty = match v {
            Value::Null => true,
            Value::String(s) => s.is_empty(),
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::Number(n) => k == "generation" && n.as_i64() == Some(0),
            Value::Bool(_) => false,
        };
        !empty
    });
}

// ---------------------------------------------------------------------------------------
// Defaulting (pkg/apiserver/schema/defaulting/algorithm.go, prunenulls.go)
// ---------------------------------------------------------------------------------------

/// Drops the nulls of non-nullable fields without a default
/// (`PruneNonNullableNullsWithoutDefaults`), then applies the schema's defaults
/// (`Default`): absent fields get a deep copy of theirs, and so do the nulls of
/// non-nullable fields, array items and `additionalProperties` values.
pub(crate) fn apply_defaults(schema: &Value, obj: &mut Value) {
    prune_nulls(obj, Some(schema));
    default_value(obj, schema);
}

fn prune_nulls(x: &mut Value, s: Option<&Value>) {
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

fn default_value(x: &mut Value, s: &Value) {
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

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// Validates `obj` as the custom resource strategy does: kube-openapi's schema validation
/// (apiserver/validation/validation.go `ValidateCustomResource`, results converted by
/// `kubeOpenAPIResultToFieldErrors`), then embedded resources' TypeMeta and ObjectMeta
/// (schema/objectmeta/validation.go), then the list-type invariants
/// (schema/listtype/validation.go). With `old`, errors of values unchanged at a
/// correlatable path are ratcheted away (validation/ratcheting.go), and the list-type
/// checks are skipped when the old object already broke them (customresource/strategy.go).
pub(crate) fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let res = node(schema, obj, "", old);
    let mut out = dedup(res.issues);
    let mut walk = Walk::default();
    walk.run(obj, schema, true);
    out.append(&mut walk.embedded);
    let old_lists_valid = old.is_none_or(|o| {
        let mut w = Walk::default();
        w.run(o, schema, false);
        w.lists.is_empty()
    });
    if old_lists_valid {
        out.append(&mut walk.lists);
    }
    out
}

/// One kube-openapi error: its `Error()` text (a `Result` keeps each text once:
/// validate/result.go `AddErrors`) and the field error it converts to.
struct Issue {
    text: String,
    cause: Cause,
}

/// validate.Result: the errors, and `MatchCount`, which picks the anyOf/oneOf branch
/// whose errors are reported.
#[derive(Default)]
struct Res {
    issues: Vec<Issue>,
    matches: usize,
}

impl Res {
    fn matched() -> Res {
        Res {
            issues: Vec::new(),
            matches: 1,
        }
    }

    fn error(issue: Issue) -> Res {
        Res {
            issues: vec![issue],
            matches: 0,
        }
    }

    fn valid(&self) -> bool {
        self.issues.is_empty()
    }

    fn merge(&mut self, other: Res) {
        self.issues.extend(other.issues);
        self.matches += other.matches;
    }

    /// A validator that applied: its result, plus the `Inc()` SchemaValidator adds.
    fn applied(&mut self, other: Res) {
        self.merge(other);
        self.matches += 1;
    }

    fn push(&mut self, issue: Issue) {
        self.issues.push(issue);
    }
}

fn dedup(issues: Vec<Issue>) -> Vec<Cause> {
    let mut seen = std::collections::HashSet::new();
    issues
        .into_iter()
        .filter(|i| seen.insert(i.text.clone()))
        .map(|i| i.cause)
        .collect()
}

/// kubeOpenAPIResultToFieldErrors: the error's name (the kube-openapi path) becomes the
/// field, minus one leading dot; without a name the field is the nil path, `<nil>`.
fn field_of(name: &str) -> String {
    if name.is_empty() || name == "." {
        "<nil>".into()
    } else {
        name.strip_prefix('.').unwrap_or(name).into()
    }
}

/// `field.Invalid` (reason FieldValueInvalid) with kube-openapi's message as detail.
fn invalid(path: &str, bad: String, text: String) -> Issue {
    let cause = Cause::new(
        "FieldValueInvalid",
        field_of(path),
        format!("Invalid value: {bad}: {text}"),
    );
    Issue { text, cause }
}

/// An error that is not an `errors.Validation` (anyOf/oneOf/allOf/not, number ranges):
/// `field.Invalid(nil, "", err.Error())`.
fn composite(text: String) -> Issue {
    let cause = Cause::new(
        "FieldValueInvalid",
        "<nil>",
        format!("Invalid value: \"\": {text}"),
    );
    Issue { text, cause }
}

/// errors.InvalidType, converted to `field.TypeInvalid`: the value is the offending type
/// (or format) name, or the string that failed its format.
fn type_invalid(path: &str, type_name: &str, value: &str) -> Issue {
    let quoted = go_quote(value);
    let text = format!("{path} in body must be of type {type_name}: {quoted}");
    let cause = Cause::new(
        "FieldValueTypeInvalid",
        field_of(path),
        format!("Invalid value: {quoted}: {text}"),
    );
    Issue { text, cause }
}

fn required(name: String) -> Issue {
    let cause = Cause::required(field_of(&name));
    Issue {
        text: format!("{name} in body is required"),
        cause,
    }
}

/// `field.TooLong`: "may not be more than N bytes" (apimachinery field/errors.go).
fn too_long(path: &str, max: i64) -> Issue {
    let unit = if max == 1 { "byte" } else { "bytes" };
    let cause = Cause::new(
        "FieldValueTooLong",
        field_of(path),
        format!("Too long: may not be more than {max} {unit}"),
    );
    Issue {
        text: format!("{path} in body should be at most {max} chars long"),
        cause,
    }
}

/// `field.TooMany`: "Too many: <n>: must have at most N items".
fn too_many(path: &str, actual: usize, max: i64, text: String) -> Issue {
    let unit = if max == 1 { "item" } else { "items" };
    let cause = Cause::new(
        "FieldValueTooMany",
        field_of(path),
        format!("Too many: {actual}: must have at most {max} {unit}"),
    );
    Issue { text, cause }
}

/// The JSON types kube-openapi's type validator understands.
enum Types<'a> {
    Any,
    One(&'a str),
    IntOrString,
}

impl Types<'_> {
    fn of(s: &Value) -> Types<'_> {
        if flag(s, INT_OR_STRING) {
            return Types::IntOrString;
        }
        match str_kw(s, "type") {
            Some(t) if !t.is_empty() => Types::One(t),
            _ => Types::Any,
        }
    }

    fn has(&self, name: &str) -> bool {
        match self {
            Types::Any => false,
            Types::One(t) => *t == name,
            Types::IntOrString => name == "integer" || name == "string",
        }
    }

    fn joined(&self) -> &str {
        match self {
            Types::Any => "",
            Types::One(t) => t,
            Types::IntOrString => "integer,string",
        }
    }

    fn single(&self) -> &str {
        match self {
            Types::One(t) => t,
            _ => "",
        }
    }
}

/// The string formats a 1.36 server validates (apiserver/validation/formats.go, at the
/// default compatibility version 1.35), normalized without dashes as strfmt does.
const STRING_FORMATS: [&str; 26] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8sshortname",
    "k8slongname",
];

fn normalized_format(f: &str) -> Option<String> {
    let n: String = f.chars().filter(|c| *c != '-').collect();
    STRING_FORMATS.contains(&n.as_str()).then_some(n)
}

/// `StripUnsupportedFormatsPostProcessorForVersion`: the format left after unsupported
/// ones are blanked (string formats on strings and untyped nodes, int32/int64 on integers,
/// float/double on numbers, none on other types).
fn format_of<'a>(s: &'a Value, t: &Types) -> &'a str {
    let f = str_kw(s, "format").unwrap_or("");
    let keep = match t.single() {
        _ if f.is_empty() => false,
        "" | "string" => normalized_format(f).is_some(),
        "integer" => f == "int32" || f == "int64",
        "number" => f == "float" || f == "double",
        _ => false,
    };
    if keep { f } else { "" }
}

/// SchemaValidator.Validate (kube-openapi validate/schema.go): the validators that apply
/// to the value, in their order (type, allOf/anyOf/oneOf/not, string, format, number,
/// slice, enum, object). With a correlated old value, the node's errors are dropped when
/// it is unchanged (ratcheting.go `ratchetingValueValidator.Validate`).
fn node(s: &Value, v: &Value, path: &str, old: Option<&Value>) -> Res {
    let mut r = if v.is_null() {
        null_node(s, path)
    } else {
        value_node(s, v, path, old)
    };
    if let Some(o) = old
        && !r.valid()
        && same(s, v, o)
    {
        r.issues.clear();
    }
    r
}

/// A null runs only the type and enum validators, without the final `Inc()`.
fn null_node(s: &Value, path: &str) -> Res {
    let t = Types::of(s);
    let mut r = if !matches!(t, Types::Any) && !t.has("null") && !nullable(s) {
        Res::error(type_invalid(path, t.joined(), "null"))
    } else {
        Res::matched()
    };
    r.merge(enum_check(s, &Value::Null, path));
    r
}

fn value_node(s: &Value, v: &Value, path: &str, old: Option<&Value>) -> Res {
    let t = Types::of(s);
    let fmt = format_of(s, &t);
    let mut r = Res::default();
    if !matches!(t, Types::Any) || !fmt.is_empty() {
        r.applied(type_check(&t, fmt, v, path));
    }
    r.applied(composition(s, v, path));
    match v {
        Value::String(x) => {
            r.applied(string_check(s, x, path));
            if let Some(name) = normalized_format(fmt) {
                r.applied(format_check(&name, fmt, x, path));
            }
        }
        Value::Number(_) => r.applied(number_check(s, &t, fmt, v, path)),
        Value::Array(a) => r.applied(slice_check(s, a, path, old)),
        _ => {}
    }
    r.applied(enum_check(s, v, path));
    if let Value::Object(m) = v {
        r.applied(object_check(s, m, path, old));
    }
    r.matches += 1;
    r
}

/// The JSON type and format kube-openapi infers from a decoded value (type.go
/// `schemaInfoForType`): integers decode as int64, other numbers as float64.
fn json_type(v: &Value) -> (&'static str, &'static str) {
    match v {
        Value::Bool(_) => ("boolean", ""),
        Value::String(_) => ("string", ""),
        Value::Number(n) if n.is_i64() => ("integer", "int64"),
        Value::Number(_) => ("number", "float64"),
        Value::Array(_) => ("array", ""),
        _ => ("object", ""),
    }
}

/// typeValidator.Validate (validate/type.go).
fn type_check(t: &Types, fmt: &str, v: &Value, path: &str) -> Res {
    let (sch, data_fmt) = json_type(v);
    let float_int = sch == "number" && v.as_f64().is_some_and(is_json_integer) && t.has("integer");
    let int_float = sch == "integer" && t.has("number");
    let str_or_slice = v.is_string() || v.is_array();
    let type_ok = t.has(sch) || float_int || int_float;
    let numeric = t.has("number") || t.has("integer");
    match (fmt.is_empty(), str_or_slice) {
        // A format on a scalar of another type names the format (`must be of type int32`).
        (false, false) if !type_ok && data_fmt != fmt => {
            Res::error(type_invalid(path, fmt, data_fmt))
        }
        // A string format is checked by the format validator instead.
        (false, true) if !numeric => Res::matched(),
        _ if !type_ok => Res::error(type_invalid(path, t.joined(), sch)),
        _ => Res::matched(),
    }
}

/// schemaPropsValidator.Validate (validate/schema_props.go): anyOf, oneOf, allOf, not.
/// Their branches validate the same value at the same path, without ratcheting.
fn composition(s: &Value, v: &Value, path: &str) -> Res {
    let mut r = Res::default();
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        any_of(any, v, path, &mut r);
    }
    if let Some(one) = s.get("oneOf").and_then(Value::as_array) {
        one_of(one, v, path, &mut r);
    }
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        all_of(all, v, path, &mut r);
    }
    if let Some(not) = s.get("not")
        && node(not, v, path, None).valid()
    {
        r.push(composite(format!(
            "{} must not validate the schema (not)",
            go_quote(path)
        )));
    }
    r.matches += 1;
    r
}

/// Keeps the failure with the most checks passed (the first of equals): `bestFailures`.
fn keep_best(best: &mut Option<Res>, candidate: Res) {
    if best.as_ref().is_none_or(|b| candidate.matches > b.matches) {
        *best = Some(candidate);
    }
}

fn any_of(branches: &[Value], v: &Value, path: &str, r: &mut Res) {
    if branches.is_empty() {
        return;
    }
    let mut best = None;
    for b in branches {
        let res = node(b, v, path, None);
        if res.valid() {
            r.merge(res);
            return;
        }
        keep_best(&mut best, res);
    }
    r.push(composite(format!(
        "{} must validate at least one schema (anyOf)",
        go_quote(path)
    )));
    if let Some(b) = best {
        r.merge(b);
    }
}

fn one_of(branches: &[Value], v: &Value, path: &str, r: &mut Res) {
    if branches.is_empty() {
        return;
    }
    let (mut validated, mut best, mut first) = (0, None, None);
    for b in branches {
        let res = node(b, v, path, None);
        if res.valid() {
            validated += 1;
            best = None;
            first.get_or_insert(res);
        } else if validated == 0 {
            keep_best(&mut best, res);
        }
    }
    if validated == 1 {
        r.merge(first.unwrap_or_default());
        return;
    }
    let found = if validated == 0 {
        "Found none valid".to_string()
    } else {
        format!("Found {validated} valid alternatives")
    };
    r.push(composite(format!(
        "{} must validate one and only one schema (oneOf). {found}",
        go_quote(path)
    )));
    if let Some(b) = best {
        r.merge(b);
    }
}

fn all_of(branches: &[Value], v: &Value, path: &str, r: &mut Res) {
    if branches.is_empty() {
        return;
    }
    let mut validated = 0;
    for b in branches {
        let res = node(b, v, path, None);
        validated += usize::from(res.valid());
        r.merge(res);
    }
    if validated != branches.len() {
        let none = if validated == 0 {
            ". None validated"
        } else {
            ""
        };
        r.push(composite(format!(
            "{} must validate all the schemas (allOf){none}",
            go_quote(path)
        )));
    }
}

/// stringValidator.Validate (validate/validator.go): the first failing of maxLength,
/// minLength (both in characters) and pattern.
fn string_check(s: &Value, x: &str, path: &str) -> Res {
    let chars = || x.chars().count() as i64;
    if let Some(max) = int_kw(s, "maxLength")
        && (x.len() as i64) > max
        && chars() > max
    {
        return Res::error(too_long(path, max));
    }
    if let Some(min) = int_kw(s, "minLength")
        && chars() < min
    {
        let text = format!("{path} in body should be at least {min} chars long");
        return Res::error(invalid(path, go_quote(x), text));
    }
    if let Some(p) = str_kw(s, "pattern")
        && let Some(re) = go_regex(p)
        && !re.is_match(x)
    {
        let text = format!("{path} in body should match '{p}'");
        return Res::error(invalid(path, go_quote(x), text));
    }
    Res::default()
}

/// formatValidator.Validate: `FormatOf` against the strfmt registry.
fn format_check(name: &str, fmt: &str, x: &str, path: &str) -> Res {
    if format_ok(name, x) {
        Res::default()
    } else {
        Res::error(type_invalid(path, fmt, x))
    }
}

/// A decoded JSON number: int64 when integral (apimachinery's JSON decoding), else float64.
#[derive(Clone, Copy)]
enum Num {
    I(i64),
    F(f64),
}

impl Num {
    fn of(v: &Value) -> Option<Num> {
        let n = v.as_number()?;
        n.as_i64().map(Num::I).or_else(|| n.as_f64().map(Num::F))
    }

    fn float(self) -> f64 {
        match self {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    /// How `%v` prints it.
    fn go(self) -> String {
        match self {
            Num::I(i) => i.to_string(),
            Num::F(f) => go_float(f),
        }
    }
}

/// numberValidator.Validate: the value's range for its type and format, then
/// multipleOf, minimum and maximum (each bound also checked against that range).
fn number_check(s: &Value, t: &Types, fmt: &str, v: &Value, path: &str) -> Res {
    let mut r = Res::matched();
    let Some(n) = Num::of(v) else { return r };
    let (tname, nfmt) = match t.single() {
        name @ ("integer" | "number") => (name, fmt),
        _ => ("", ""),
    };
    let range = |x: Num, prefix: &str| range_error(x, tname, nfmt, prefix, path);
    if let Some(e) = range(n, "Checked") {
        r.push(e);
    }
    if let Some(f) = s.get("multipleOf").and_then(Value::as_f64) {
        let bound = range(Num::F(f), "MultipleOf");
        let native = bound.is_none();
        r.issues.extend(bound);
        r.issues.extend(multiple_of(path, n, f, native));
    }
    for (key, is_min) in [("minimum", true), ("maximum", false)] {
        let Some(b) = s.get(key).and_then(Value::as_f64) else {
            continue;
        };
        let prefix = if is_min {
            "Minimum boundary"
        } else {
            "Maximum boundary"
        };
        let bound = range(Num::F(b), prefix);
        let native = bound.is_none();
        r.issues.extend(bound);
        let excl = flag(
            s,
            if is_min {
                "exclusiveMinimum"
            } else {
                "exclusiveMaximum"
            },
        );
        r.issues
            .extend(bound_check(path, n, b, excl, is_min, native));
    }
    r
}

/// IsValueValidAgainstRange (validate/values.go): the number, printed as swag prints it,
/// must parse as the type and format. Its error is a plain error (field `<nil>`).
fn range_error(n: Num, tname: &str, fmt: &str, prefix: &str, path: &str) -> Option<Issue> {
    let rep = match n {
        Num::I(i) => i.to_string(),
        Num::F(f) => f.to_string(),
    };
    let bad = match (tname, fmt) {
        ("integer", "int32") => rep.parse::<i32>().is_err(),
        ("integer", _) => rep.parse::<i64>().is_err(),
        (_, "float") => rep.parse::<f64>().is_ok_and(|f| (f as f32).is_infinite()),
        _ => false,
    };
    bad.then(|| {
        composite(if fmt.is_empty() {
            format!("{prefix} value must be of type {tname} (default format) in {path}")
        } else {
            format!("{prefix} value must be of type {tname} with format {fmt} in {path}")
        })
    })
}

/// MultipleOfNativeType / MultipleOf (validate/values.go).
fn multiple_of(path: &str, n: Num, factor: f64, native: bool) -> Option<Issue> {
    let (bad, shown) = match n {
        Num::I(i) if native => {
            let f = factor as i64;
            if f <= 0 {
                return Some(must_be_positive(path, f.to_string()));
            }
            (i % f != 0, f.to_string())
        }
        _ => {
            if factor <= 0.0 {
                return Some(must_be_positive(path, go_float(factor)));
            }
            let d = n.float();
            let mult = if factor < 1.0 {
                1.0 / factor * d
            } else {
                d / factor
            };
            (!is_json_integer(mult), go_float(factor))
        }
    };
    let value = if native { n } else { Num::F(n.float()) };
    bad.then(|| {
        let text = format!("{path} in body should be a multiple of {shown}");
        invalid(path, value.go(), text)
    })
}

fn must_be_positive(path: &str, factor: String) -> Issue {
    let text = format!("factor MultipleOf declared for {path} must be positive: {factor}");
    invalid(path, factor, text)
}

/// MinimumNativeType / MaximumNativeType: integers compare against the bound truncated to
/// int64 (and print it so), floats against the float bound.
fn bound_check(
    path: &str,
    n: Num,
    b: f64,
    excl: bool,
    is_min: bool,
    native: bool,
) -> Option<Issue> {
    let (cmp, shown, value) = match n {
        Num::I(i) if native => {
            let bi = b as i64;
            (i.cmp(&bi), bi.to_string(), n)
        }
        _ => {
            let f = n.float();
            let ord = f.partial_cmp(&b)?;
            (ord, go_float(b), Num::F(f))
        }
    };
    use std::cmp::Ordering::{Equal, Greater, Less};
    let fails = match (is_min, cmp) {
        (true, Less) | (false, Greater) => true,
        (_, Equal) => excl,
        _ => false,
    };
    let relation = match (is_min, excl) {
        (true, false) => "greater than or equal to",
        (true, true) => "greater than",
        (false, false) => "less than or equal to",
        (false, true) => "less than",
    };
    fails.then(|| {
        let text = format!("{path} in body should be {relation} {shown}");
        invalid(path, value.go(), text)
    })
}

/// schemaSliceValidator.Validate (validate/slice_validator.go): the items, then
/// minItems, maxItems and uniqueItems.
fn slice_check(s: &Value, a: &[Value], path: &str, old: Option<&Value>) -> Res {
    let mut r = Res::default();
    if let Some(it) = items(s) {
        let olds = correlate_items(s, a, old);
        for (i, v) in a.iter().enumerate() {
            let o = olds.as_ref().and_then(|o| o[i]);
            r.merge(node(it, v, &format!("{path}[{i}]"), o));
        }
    }
    let len = a.len();
    if let Some(min) = int_kw(s, "minItems")
        && (len as i64) < min
    {
        let text = format!("{path} in body should have at least {min} items");
        r.push(invalid(path, len.to_string(), text));
    }
    if let Some(max) = int_kw(s, "maxItems")
        && (len as i64) > max
    {
        let text = format!("{path} in body should have at most {max} items");
        r.push(too_many(path, len, max, text));
    }
    if flag(s, "uniqueItems") && a.iter().enumerate().any(|(i, x)| a[..i].contains(x)) {
        let text = format!("{path} in body shouldn't contain duplicates");
        r.push(invalid(path, "\"\"".into(), text));
    }
    r.matches += 1;
    r
}

/// basicCommonValidator.Validate: the value must equal an enum member after Go's
/// `reflect` conversion to the member's type; a null never does.
fn enum_check(s: &Value, v: &Value, path: &str) -> Res {
    let Some(members) = s
        .get("enum")
        .and_then(Value::as_array)
        .filter(|e| !e.is_empty())
    else {
        return Res::default();
    };
    if members.iter().any(|m| enum_match(v, m)) {
        return Res::default();
    }
    let supported = members
        .iter()
        .map(|m| match m {
            Value::String(x) => go_quote(x),
            other => go_quote(&go_json(other)),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let cause = Cause::new(
        "FieldValueNotSupported",
        field_of(path),
        format!(
            "Unsupported value: {}: supported values: {supported}",
            go_value(v)
        ),
    );
    Res::error(Issue {
        text: format!("{path} in body should be one of [{supported}]"),
        cause,
    })
}

fn enum_match(v: &Value, member: &Value) -> bool {
    match (v, member) {
        (Value::Null, _) | (_, Value::Null) => false,
        (Value::Number(_), Value::Number(_)) => match (Num::of(v), Num::of(member)) {
            (Some(Num::I(a)), Some(Num::I(b))) => a == b,
            (Some(Num::F(a)), Some(Num::I(b))) => a as i64 == b,
            (Some(a), Some(Num::F(b))) => a.float() == b,
            _ => false,
        },
        // An int64 converts to the string of its rune.
        (Value::Number(n), Value::String(m)) => n.as_i64().is_some_and(|i| {
            let c = u32::try_from(i)
                .ok()
                .and_then(char::from_u32)
                .unwrap_or('\u{fffd}');
            m.chars().eq(std::iter::once(c))
        }),
        _ => v == member,
    }
}

/// objectValidator.Validate (validate/object_validator.go): min/maxProperties,
/// `additionalProperties` (false, or a schema for the other keys, at `<path>.<key>`), the
/// properties, then the required ones.
fn object_check(s: &Value, m: &Map<String, Value>, path: &str, old: Option<&Value>) -> Res {
    let mut r = Res::default();
    property_counts(s, m.len(), path, &mut r);
    let old_map = old.and_then(Value::as_object);
    let correlated = |k: &str| {
        let typemeta = path.is_empty() && (k == "kind" || k == "apiVersion");
        old_map.and_then(|o| o.get(k)).filter(|_| !typemeta)
    };
    match s.get("additionalProperties") {
        Some(Value::Bool(false)) => {
            for k in m.keys().filter(|k| prop(s, k).is_none()) {
                let text = format!("{path}.{k} in body is a forbidden property");
                r.push(invalid(path, go_quote(k), text));
            }
        }
        Some(a @ Value::Object(_)) => {
            for (k, v) in m.iter().filter(|(k, _)| prop(s, k).is_none()) {
                r.merge(node(a, v, &format!("{path}.{k}"), correlated(k)));
            }
        }
        _ => {}
    }
    for (k, v) in m {
        if let Some(ps) = prop(s, k) {
            let name = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            r.merge(node(ps, v, &name, correlated(k)));
        }
    }
    let req = s.get("required").and_then(Value::as_array);
    for k in req.into_iter().flatten().filter_map(Value::as_str) {
        if !m.contains_key(k) {
            r.push(required(format!("{path}.{k}")));
        }
    }
    r
}

fn property_counts(s: &Value, n: usize, path: &str, r: &mut Res) {
    if let Some(min) = int_kw(s, "minProperties")
        && (n as i64) < min
    {
        let text = format!("{path} in body should have at least {min} properties");
        r.push(invalid(path, n.to_string(), text));
    }
    if let Some(max) = int_kw(s, "maxProperties")
        && (n as i64) > max
    {
        let text = format!("{path} in body should have at most {max} properties");
        r.push(too_many(path, n, max, text));
    }
}

// ---------------------------------------------------------------------------------------
// Ratcheting correlation (k8s.io/apiserver pkg/cel/common/equality.go, maplist.go)
// ---------------------------------------------------------------------------------------

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
fn correlate_items<'a>(
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
fn same(s: &Value, new: &Value, old: &Value) -> bool {
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

// ---------------------------------------------------------------------------------------
// Embedded resources (schema/objectmeta/validation.go) and list types
// (schema/listtype/validation.go)
// ---------------------------------------------------------------------------------------

/// One walk of the object along the schema collecting, apart, the embedded resources'
/// TypeMeta/ObjectMeta errors and the list-type errors, at field.Path paths (map keys as
/// `[key]`).
#[derive(Default)]
struct Walk {
    path: String,
    embedded: Vec<Cause>,
    lists: Vec<Cause>,
}

impl Walk {
    fn run(&mut self, obj: &Value, schema: &Value, embedded: bool) {
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

/// validateListSetsAndMapsArray: `set` items and `map` keys must be unique; only the
/// first repetition of each is reported.
fn list_invariants(path: &str, s: &Value, a: &[Value], out: &mut Vec<Cause>) {
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
fn set_key(v: &Value) -> String {
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

// ---------------------------------------------------------------------------------------
// Formats (kube-openapi pkg/validation/strfmt)
// ---------------------------------------------------------------------------------------

/// The strfmt validator of a (normalized) format name.
fn format_ok(name: &str, s: &str) -> bool {
    match name {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => is_ipv4(s),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => matches(uuid_pattern(name), s),
        "isbn" => is_isbn(s, 10) || is_isbn(s, 13),
        "isbn10" => is_isbn(s, 10),
        "isbn13" => is_isbn(s, 13),
        "creditcard" => is_credit_card(s),
        "ssn" => s.len() == 11 && matches(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
        "hexcolor" => matches("^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "rgbcolor" => matches(RGB_COLOR, s),
        "byte" => matches(BASE64, s),
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        "duration" => is_duration(s),
        "k8sshortname" => s.len() <= 63 && matches(&format!("^{SHORT_NAME}$"), s),
        "k8slongname" => s.len() <= 253 && matches(&format!("^{SHORT_NAME}(\\.{SHORT_NAME})*$"), s),
        _ => true,
    }
}

const SHORT_NAME: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const BASE64: &str =
    "^(?:[A-Za-z0-9+\\/]{4})*(?:[A-Za-z0-9+\\/]{2}==|[A-Za-z0-9+\\/]{3}=|[A-Za-z0-9+\\/]{4})$";
const RGB_COLOR: &str = "^rgb\\(\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*,\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*,\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*\\)$";
const HOSTNAME: &str = r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$";

fn uuid_pattern(name: &str) -> &'static str {
    match name {
        "uuid3" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        "uuid4" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        "uuid5" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        _ => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    }
}

fn matches(pattern: &str, s: &str) -> bool {
    go_regex(pattern).is_some_and(|re| re.is_match(s))
}

/// strfmt `IsHostname`: the pattern, at most 255 bytes, labels of at most 63.
fn is_hostname(s: &str) -> bool {
    matches(HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// k8s.io/utils/net `ParseIPSloppy` for IPv4: four dot-separated decimal octets, leading
/// zeros allowed.
fn is_ipv4_sloppy(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| n <= 255)
        })
}

/// Go's IP parsers pick the family by the first '.' or ':'.
fn ip_family(s: &str) -> Option<char> {
    s.chars().find(|c| *c == '.' || *c == ':')
}

/// strfmt `isIPv4`: parses (sloppily) and has a dot (so `::ffff:1.2.3.4` passes).
fn is_ipv4(s: &str) -> bool {
    let parsed = match ip_family(s) {
        Some('.') => is_ipv4_sloppy(s),
        Some(_) => s.parse::<Ipv6Addr>().is_ok(),
        None => false,
    };
    parsed && s.contains('.')
}

/// `ParseCIDRSloppy`: an address, '/', and a decimal prefix length within the family.
fn is_cidr(s: &str) -> bool {
    let Some((addr, mask)) = s.split_once('/') else {
        return false;
    };
    let bits = match ip_family(addr) {
        Some('.') if is_ipv4_sloppy(addr) => 32,
        Some(':') if addr.parse::<Ipv6Addr>().is_ok() => 128,
        _ => return false,
    };
    !mask.is_empty()
        && mask.bytes().all(|b| b.is_ascii_digit())
        && mask.parse::<u32>().is_ok_and(|n| n <= bits)
}

/// net.ParseMAC: 6, 8 or 20 octets as `xx:xx`, `xx-xx` or `xxxx.xxxx`.
fn is_mac(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 14 {
        return false;
    }
    let (group, sep) = match (b[2], b[4]) {
        (b':' | b'-', _) => (2, b[2]),
        (_, b'.') => (4, b'.'),
        _ => return false,
    };
    if !(b.len() + 1).is_multiple_of(group + 1) {
        return false;
    }
    let octets = (b.len() + 1) / (group + 1) * group / 2;
    if !matches!(octets, 6 | 8 | 20) {
        return false;
    }
    b.chunks(group + 1).all(|c| {
        c[..group].iter().all(u8::is_ascii_hexdigit) && (c.len() == group || c[group] == sep)
    })
}

/// govalidator `IsISBN`: digits after removing whitespace and dashes, with the checksum.
fn is_isbn(s: &str, version: u32) -> bool {
    let d: Vec<u8> = s
        .bytes()
        .filter(|b| !matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ' | b'-'))
        .collect();
    let digit = |b: u8| u32::from(b - b'0');
    if version == 10 {
        let shape = d.len() == 10
            && d[..9].iter().all(u8::is_ascii_digit)
            && (d[9].is_ascii_digit() || d[9] == b'X');
        if !shape {
            return false;
        }
        let mut sum: u32 = (0..9).map(|i| (i as u32 + 1) * digit(d[i])).sum();
        sum += 10 * if d[9] == b'X' { 10 } else { digit(d[9]) };
        return sum.is_multiple_of(11);
    }
    if d.len() != 13 || !d.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = (0..12).map(|i| [1, 3][i % 2] * digit(d[i])).sum();
    digit(d[12]) == (10 - sum % 10) % 10
}

/// govalidator `IsCreditCard`: the digits match a card pattern and pass Luhn.
fn is_credit_card(s: &str) -> bool {
    const CARD: &str = "^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\\d{3})\\d{11})$";
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    if !matches(CARD, &digits) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let n = u32::from(b - b'0');
            match (i % 2 == 1, n * 2) {
                (true, d) if d >= 10 => d % 10 + 1,
                (true, d) => d,
                (false, _) => n,
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// `time.Parse("2006-01-02")`: a real calendar date.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r.clone()]
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| s[r].parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`: a date, a 't', and a time with zone.
fn is_date_time(s: &str) -> bool {
    const TIME: &str = "^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$";
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let Some(c) = go_regex(TIME).and_then(|re| {
        re.captures(time)
            .map(|c| [1, 2, 3].map(|i| c[i].to_string()))
    }) else {
        return false;
    };
    c[0].as_str() <= "23" && c[1].as_str() <= "59" && c[2].as_str() <= "59"
}

/// strfmt `ParseDuration`: Go's `time.ParseDuration`, else any "<n> <unit>" pair with a
/// known unit spelling (`5 days`).
fn is_duration(s: &str) -> bool {
    go_duration(s) || loose_duration(s)
}

fn go_duration(s: &str) -> bool {
    let mut s = s.strip_prefix(['-', '+']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let digits = |x: &str| x.bytes().take_while(u8::is_ascii_digit).count();
        if !s.starts_with('.') && digits(s) == 0 {
            return false;
        }
        let int_len = digits(s);
        let whole: u128 = match s[..int_len].parse() {
            Ok(w) => w,
            Err(_) if int_len == 0 => 0,
            Err(_) => return false,
        };
        s = &s[int_len..];
        let mut frac_len = 0;
        if let Some(rest) = s.strip_prefix('.') {
            frac_len = digits(rest);
            s = &rest[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return false;
        }
        let unit_len = s
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(s.len());
        let unit: u128 = match &s[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return false,
        };
        s = &s[unit_len..];
        total = total.saturating_add(whole.saturating_mul(unit));
        if total > 1 << 63 {
            return false;
        }
    }
    true
}

fn loose_duration(s: &str) -> bool {
    const UNITS: [&[&str]; 8] = [
        &["ns", "nano"],
        &["us", "\u{b5}s", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let Some(re) = go_regex(r"((\d+)\s*([A-Za-z\x{b5}]+))") else {
        return false;
    };
    let mut ok = false;
    for c in re.captures_iter(s) {
        if c[2].parse::<i64>().is_err() {
            return false;
        }
        let unit = c[3].trim().to_lowercase();
        for variants in UNITS {
            let last = variants.len() - 1;
            ok |= variants
                .iter()
                .enumerate()
                .any(|(i, v)| (i == last && unit.starts_with(v)) || unit.eq_ignore_ascii_case(v));
        }
    }
    ok
}

/// govalidator `IsRequestURI` (`url.ParseRequestURI`): an absolute URI or an absolute
/// path, without control characters, with valid escapes and authority.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    if s == "*" {
        return true;
    }
    let (scheme, rest) = split_scheme(s);
    if scheme == Some("") {
        return false;
    }
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    if !rest.starts_with('/') {
        return scheme.is_some();
    }
    let path = match rest.strip_prefix("//").filter(|_| scheme.is_some()) {
        Some(auth_path) => {
            let end = auth_path.find('/').unwrap_or(auth_path.len());
            if !valid_authority(&auth_path[..end]) {
                return false;
            }
            &auth_path[end..]
        }
        None => rest,
    };
    valid_escapes(path)
}

/// url.getScheme: `Some(scheme)` before the first ':' when all its characters are
/// scheme characters (`Some("")` for a leading ':').
fn split_scheme(s: &str) -> (Option<&str>, &str) {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' => return (Some(&s[..i]), &s[i + 1..]),
            _ => return (None, s),
        }
    }
    (None, s)
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'%'
            || (b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit())
    })
}

fn valid_authority(auth: &str) -> bool {
    let (user, host) = auth
        .rsplit_once('@')
        .map_or((None, auth), |(u, h)| (Some(u), h));
    let user_ok = user.is_none_or(|u| {
        u.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
    });
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .split_once(']')
            .is_some_and(|(_, port)| port.is_empty() || valid_port(port))
    } else {
        let (name, port) = host
            .rsplit_once(':')
            .map_or((host, None), |(h, p)| (h, Some(p)));
        port.is_none_or(|p| valid_port(&format!(":{p}")))
            && valid_escapes(name)
            && name.bytes().all(|b| {
                b >= 0x80 || b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%\"<>".contains(&b)
            })
    };
    user_ok && host_ok
}

fn valid_port(p: &str) -> bool {
    p.strip_prefix(':')
        .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
}

/// net/mail `ParseAddress`, simplified: an addr-spec, bare or in `Name <...>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.strip_suffix('>')) {
        (Some(i), Some(inner)) => &inner[i + 1..],
        _ => s,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| !c.is_ascii() || (c.is_ascii_graphic() && !"()<>[]:;@\\,\".".contains(c));
    let dot_atom =
        |x: &str| !x.is_empty() && x.split('.').all(|p| !p.is_empty() && p.chars().all(atext));
    let quoted = |x: &str| x.len() >= 2 && x.starts_with('"') && x.ends_with('"');
    let literal = |x: &str| x.starts_with('[') && x.ends_with(']');
    (dot_atom(local) || quoted(local)) && (dot_atom(domain) || literal(domain))
}

// ---------------------------------------------------------------------------------------
// Go regular expressions and Go value printing
// ---------------------------------------------------------------------------------------

static REGEXES: LazyLock<RwLock<HashMap<String, Option<Regex>>>> = LazyLock::new(Default::default);

/// Compiles (once) a Go RE2 pattern. `None` when Rust's engine cannot take it: the check
/// is then skipped, since the API server accepted the pattern.
fn go_regex(pattern: &str) -> Option<Regex> {
    if let Some(re) = REGEXES
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(pattern)
    {
        return re.clone();
    }
    let re = Regex::new(&translate_go_regex(pattern)).ok();
    REGEXES
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(pattern.to_string(), re.clone());
    re
}

/// Go's `\d`, `\w` and `\s` are ASCII classes (Rust's are Unicode); inside a class, Go takes
/// `[`, `&` and `~` literally where Rust reads nested classes and set operations.
fn translate_go_regex(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 16);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(n) => match ascii_class(n) {
                    Some(class) => out.push_str(class),
                    None => {
                        out.push('\\');
                        out.push(n);
                    }
                },
                None => out.push('\\'),
            },
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                if chars.next_if_eq(&'^').is_some() {
                    out.push('^');
                }
                if chars.next_if_eq(&']').is_some() {
                    out.push_str("\\]");
                }
            }
            '[' if chars.peek() == Some(&':') => {
                // A POSIX class such as [:alpha:], copied whole.
                out.push('[');
                for d in chars.by_ref() {
                    out.push(d);
                    if d == ']' {
                        break;
                    }
                }
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            _ => out.push(c),
        }
    }
    out
}

/// RE2's Perl classes, as (nestable) bracket classes.
fn ascii_class(c: char) -> Option<&'static str> {
    Some(match c {
        'd' => "[0-9]",
        'D' => "[^0-9]",
        'w' => "[0-9A-Za-z_]",
        'W' => "[^0-9A-Za-z_]",
        's' => "[\\t\\n\\f\\r ]",
        'S' => "[^\\t\\n\\f\\r ]",
        _ => return None,
    })
}

/// A bad value as field.Error prints it: strings quoted, numbers and bools with `%v`,
/// anything else as JSON.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(_) => Num::of(v).map_or_else(|| v.to_string(), Num::go),
        _ => go_json(v),
    }
}

/// Go's `%q` (strconv.Quote).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if go_printable(c) => out.push(c),
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push('"');
    out
}

/// unicode.IsPrint, approximately: no controls, format characters, separators other than
/// the ASCII space, or private use.
fn go_printable(c: char) -> bool {
    !(c.is_control()
        || matches!(c, '\u{a0}' | '\u{ad}' | '\u{2000}'..='\u{200f}' | '\u{2028}'..='\u{202f}'
            | '\u{205f}'..='\u{206f}' | '\u{3000}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}'
            | '\u{e000}'..='\u{f8ff}'))
}

/// Go's `%v` of a float64: strconv 'g' with the shortest digits, exponent form below 1e-4
/// or from 1e+06 up.
fn go_float(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f.is_infinite() {
            if f > 0.0 { "+Inf" } else { "-Inf" }.into()
        } else if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        return f.to_string();
    }
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.abs())
}

/// encoding/json's rendering: sorted keys, HTML-safe strings, ES6-style floats.
fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(_) => match Num::of(v) {
            Some(Num::F(f)) => out.push_str(&go_json_float(f)),
            _ => out.push_str(&v.to_string()),
        },
        Value::String(s) => write_go_json_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(x, out);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(k, out);
                out.push(':');
                write_go_json(x, out);
            }
            out.push('}');
        }
    }
}

fn write_go_json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// encoding/json floats: plain decimals, exponent form below 1e-6 or from 1e21.
fn go_json_float(f: f64) -> String {
    let a = f.abs();
    if a != 0.0 && !(1e-6..1e21).contains(&a) {
        let sci = format!("{f:e}");
        let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
        return match exp.strip_prefix('-') {
            Some(neg) => format!("{mantissa}e-{neg}"),
            None => format!("{mantissa}e+{exp}"),
        };
    }
    f.to_string()
}

/// swag `IsFloat64AJSONInteger`: a finite float within ±(2^53-1) that is integral, or within
/// a relative 1e-9 of its truncation.
fn is_json_integer(f: f64) -> bool {
    const MAX: f64 = 9_007_199_254_740_991.0;
    if !f.is_finite() || !(-MAX..=MAX).contains(&f) {
        return false;
    }
    if f.fract() == 0.0 {
        return true;
    }
    let g = f.trunc();
    if f < 0.0 || g == 0.0 {
        return false;
    }
    (f - g).abs() / (f.abs() + g.abs()) < 1e-9
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex};

    use serde_json::{Value, json};

    use super::*;

    /// The `openAPIV3Schema` of version v1 of a published CRD (parsed once per file).
    fn v1(file: &'static str) -> Arc<Value> {
        static CACHE: LazyLock<Mutex<HashMap<&str, Arc<Value>>>> = LazyLock::new(Default::default);
        let mut cache = CACHE.lock().unwrap();
        cache
            .entry(file)
            .or_insert_with(|| {
                let crd = crate::crd::published_crd(file);
                let versions = crd["spec"]["versions"].as_array().expect("versions");
                let v = versions
                    .iter()
                    .find(|v| v["name"] == "v1")
                    .expect("a v1 version");
                Arc::new(v["schema"]["openAPIV3Schema"].clone())
            })
            .clone()
    }

    const HTTPROUTES: &str = "gateway.networking.k8s.io_httproutes.yaml";
    const GATEWAYS: &str = "gateway.networking.k8s.io_gateways.yaml";
    const POOLS: &str = "inference.networking.k8s.io_inferencepools.yaml";
    const LWS: &str = "leaderworkerset.x-k8s.io_leaderworkersets.yaml";

    fn object(kind: &str, spec: Value) -> Value {
        json!({"apiVersion": "x.k8s.io/v1", "kind": kind, "metadata": {"name": "o"}, "spec": spec})
    }

    /// `field|reason|message`, one string per cause.
    fn render(causes: &[Cause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}|{}|{}", c.field, c.reason, c.message))
            .collect()
    }

    fn check(file: &'static str, kind: &str, spec: Value) -> Vec<String> {
        render(&validate(&v1(file), &object(kind, spec), None))
    }

    fn route(spec: Value) -> Vec<String> {
        check(HTTPROUTES, "HTTPRoute", spec)
    }

    fn gateway(listeners: Value, extra: Value) -> Vec<String> {
        let mut spec = json!({"gatewayClassName": "gc", "listeners": listeners});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        check(GATEWAYS, "Gateway", spec)
    }

    fn pool(extra: Value) -> Vec<String> {
        let mut spec =
            json!({"selector": {"matchLabels": {"app": "m"}}, "targetPorts": [{"number": 8000}]});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        check(POOLS, "InferencePool", spec)
    }

    fn lws(extra: Value) -> Vec<String> {
        let mut spec = json!({"leaderWorkerTemplate": {"workerTemplate": {}}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        check(LWS, "LeaderWorkerSet", spec)
    }

    fn listener(name: &str, port: i64) -> Value {
        json!({"name": name, "port": port, "protocol": "HTTP"})
    }

    // defaulting/algorithm.go Default: HTTPRoute's rule, match, parentRef and backendRef defaults.
    #[test]
    fn defaults_httproute() {
        let schema = v1(HTTPROUTES);
        let mut obj = object(
            "HTTPRoute",
            json!({"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "svc", "port": 8080}]}]}),
        );
        apply_defaults(&schema, &mut obj);
        let spec = &obj["spec"];
        assert_eq!(spec["parentRefs"][0]["group"], "gateway.networking.k8s.io");
        assert_eq!(spec["parentRefs"][0]["kind"], "Gateway");
        let rule = &spec["rules"][0];
        assert_eq!(
            rule["matches"],
            json!([{"path": {"type": "PathPrefix", "value": "/"}}])
        );
        let backend = &rule["backendRefs"][0];
        assert_eq!(
            (&backend["weight"], &backend["group"], &backend["kind"]),
            (&json!(1), &json!(""), &json!("Service"))
        );

        let mut bare = object("HTTPRoute", json!({}));
        apply_defaults(&schema, &mut bare);
        assert_eq!(
            bare["spec"]["rules"],
            json!([{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}]}])
        );
        assert_eq!(bare["metadata"], json!({"name": "o"}));
        assert!(validate(&schema, &bare, None).is_empty());
    }

    // defaulting/prunenulls.go PruneNonNullableNullsWithoutDefaults, then Default on nulls.
    #[test]
    fn defaults_replace_or_drop_nulls() {
        let schema = v1(LWS);
        let mut obj = object(
            "LeaderWorkerSet",
            json!({"replicas": null, "startupPolicy": null, "networkConfig": null, "rolloutStrategy": {},
                   "leaderWorkerTemplate": {"workerTemplate": {}, "size": null}}),
        );
        apply_defaults(&schema, &mut obj);
        let spec = &obj["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["startupPolicy"], "LeaderCreated");
        assert!(spec.get("networkConfig").is_none());
        assert_eq!(spec["leaderWorkerTemplate"]["size"], 1);
        assert_eq!(
            spec["leaderWorkerTemplate"]["restartPolicy"],
            "RecreateGroupOnPodRestart"
        );
        assert_eq!(spec["rolloutStrategy"]["type"], "RollingUpdate");
    }

    // defaulting/algorithm.go Default: items and additionalProperties values; nullable nulls stay.
    #[test]
    fn defaults_items_and_map_values() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "list": {"type": "array", "items": {"type": "object", "default": {"a": 1}, "properties": {"a": {"type": "integer"}, "b": {"type": "string", "default": "x"}}}},
            "map": {"type": "object", "additionalProperties": {"type": "string", "default": "d"}},
            "keep": {"type": "string", "nullable": true, "default": "k"}}}}});
        let mut obj = json!({"spec": {"list": [null, {"a": 2}], "map": {"m": null}, "keep": null}});
        apply_defaults(&schema, &mut obj);
        assert_eq!(
            obj["spec"],
            json!({"list": [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}], "map": {"m": "d"}, "keep": null})
        );
    }

    // pruning/algorithm.go PruneWithOptions: unknown fields go, their paths sorted; the
    // root's apiVersion, kind and metadata stay.
    #[test]
    fn prune_reports_sorted_paths() {
        let schema = v1(HTTPROUTES);
        let mut obj = object(
            "HTTPRoute",
            json!({"zeta": 1, "rules": [{"bogus": true, "matches": [{"path": {"value": "/", "extra": 1}}]}]}),
        );
        obj["extra"] = json!("x");
        obj["metadata"]["unknownMeta"] = json!(1);
        let dropped = prune(&schema, &mut obj);
        assert_eq!(
            dropped,
            [
                "extra",
                "spec.rules[0].bogus",
                "spec.rules[0].matches[0].path.extra",
                "spec.zeta"
            ]
        );
        assert_eq!(
            obj["spec"],
            json!({"rules": [{"matches": [{"path": {"value": "/"}}]}]})
        );
        assert_eq!(obj["metadata"]["unknownMeta"], 1);
        assert_eq!(obj["kind"], "HTTPRoute");
    }

    // pruning/algorithm.go skipPrune: x-kubernetes-preserve-unknown-fields keeps unknown
    // fields while known ones are still pruned; no schema below a field drops everything.
    #[test]
    fn prune_preserve_unknown_fields() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}}}});
        let mut obj =
            json!({"spec": {"anything": {"deep": [1, {"x": 2}]}, "known": {"a": "x", "b": "y"}}});
        assert_eq!(prune(&schema, &mut obj), ["spec.known.b"]);
        assert_eq!(
            obj["spec"],
            json!({"anything": {"deep": [1, {"x": 2}]}, "known": {"a": "x"}})
        );
    }

    // objectmeta/coerce.go CoerceWithOptions: an embedded resource keeps apiVersion, kind and
    // an ObjectMeta-shaped metadata; its other unknown fields are pruned.
    #[test]
    fn prune_embedded_resource() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object", "properties": {"x": {"type": "string"}}}}}}}}});
        let mut obj = json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "bogus": 1, "labels": {"a": "b"}, "annotations": {}},
            "spec": {"x": "1", "y": 2}, "other": 3}}});
        let dropped = prune(&schema, &mut obj);
        assert_eq!(
            dropped,
            [
                "spec.template.other",
                "spec.template.spec.y",
                "spec.template.metadata.bogus"
            ]
        );
        assert_eq!(
            obj["spec"]["template"],
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": "1"}})
        );
    }

    // validate/validator.go basicCommonValidator + kubeOpenAPIResultToFieldErrors (EnumFailCode → NotSupported).
    #[test]
    fn enum_is_not_supported() {
        assert!(pool(json!({})).is_empty());
        assert_eq!(
            pool(json!({"appProtocol": "grpc"})),
            [
                r#"spec.appProtocol|FieldValueNotSupported|Unsupported value: "grpc": supported values: "http", "kubernetes.io/h2c""#
            ]
        );
    }

    // validate/values.go Pattern and MinLength (stringValidator), reported as field.Invalid.
    #[test]
    fn pattern_and_min_length() {
        assert_eq!(
            route(json!({"hostnames": ["Bad_Host"]})),
            [
                r#"spec.hostnames[0]|FieldValueInvalid|Invalid value: "Bad_Host": spec.hostnames[0] in body should match '^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'"#
            ]
        );
        assert_eq!(
            route(json!({"parentRefs": [{"name": ""}]})),
            [
                r#"spec.parentRefs[0].name|FieldValueInvalid|Invalid value: "": spec.parentRefs[0].name in body should be at least 1 chars long"#
            ]
        );
    }

    // validate/values.go MaxItems / MaxLength → field.TooMany / field.TooLong (counted in characters).
    #[test]
    fn max_items_and_max_length() {
        let hosts: Vec<String> = (0..17).map(|i| format!("h{i}.example.com")).collect();
        assert_eq!(
            route(json!({"hostnames": hosts})),
            ["spec.hostnames|FieldValueTooMany|Too many: 17: must have at most 16 items"]
        );
        let listeners = json!([listener("http", 80)]);
        let long = "a".repeat(254);
        let spec = json!({"gatewayClassName": long, "listeners": listeners});
        assert_eq!(
            check(GATEWAYS, "Gateway", spec),
            ["spec.gatewayClassName|FieldValueTooLong|Too long: may not be more than 253 bytes"]
        );
        let wide = "é".repeat(253);
        assert!(
            check(
                GATEWAYS,
                "Gateway",
                json!({"gatewayClassName": wide, "listeners": listeners})
            )
            .is_empty()
        );
    }

    // validate/validator.go numberValidator (MinimumNativeType, MaximumNativeType,
    // IsValueValidAgainstRange) and validate/type.go typeValidator.
    #[test]
    fn numbers_and_types() {
        assert_eq!(
            lws(json!({"replicas": -1})),
            [
                "spec.replicas|FieldValueInvalid|Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
            ]
        );
        assert_eq!(
            lws(json!({"replicas": 2_000_000})),
            [
                "spec.replicas|FieldValueInvalid|Invalid value: 2000000: spec.replicas in body should be less than or equal to 1000000"
            ]
        );
        assert_eq!(
            lws(json!({"replicas": 3_000_000_000_i64})),
            [
                r#"<nil>|FieldValueInvalid|Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas"#,
                "spec.replicas|FieldValueInvalid|Invalid value: 3000000000: spec.replicas in body should be less than or equal to 1000000",
            ]
        );
        assert_eq!(
            lws(json!({"replicas": "3"})),
            [
                r#"spec.replicas|FieldValueTypeInvalid|Invalid value: "string": spec.replicas in body must be of type integer: "string""#
            ]
        );
        assert_eq!(
            lws(json!({"replicas": 1.5})),
            [
                r#"spec.replicas|FieldValueTypeInvalid|Invalid value: "float64": spec.replicas in body must be of type int32: "float64""#,
                r#"<nil>|FieldValueInvalid|Invalid value: "": Checked value must be of type integer with format int32 in spec.replicas"#,
            ]
        );
        assert!(lws(json!({"replicas": 2.0})).is_empty());
    }

    // validate/object_validator.go Required → field.Required.
    #[test]
    fn required_fields() {
        assert_eq!(
            pool(json!({"selector": null})).len(),
            1,
            "a null selector is a type error"
        );
        let schema = v1(POOLS);
        let mut obj = object("InferencePool", json!({"targetPorts": [{"number": 1}]}));
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            ["spec.selector|FieldValueRequired|Required value"]
        );
        obj.as_object_mut().unwrap().remove("spec");
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            ["spec|FieldValueRequired|Required value"]
        );
    }

    // validate/object_validator.go: additionalProperties values are validated at
    // `<path>.<key>`; minProperties is a field.Invalid with the count.
    #[test]
    fn additional_properties_and_counts() {
        assert_eq!(
            pool(json!({"selector": {"matchLabels": {"app": "bad value"}}})),
            [
                r#"spec.selector.matchLabels.app|FieldValueInvalid|Invalid value: "bad value": spec.selector.matchLabels.app in body should match '^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$'"#
            ]
        );
        assert_eq!(
            pool(json!({"selector": {"matchLabels": {}}})),
            [
                "spec.selector.matchLabels|FieldValueInvalid|Invalid value: 0: spec.selector.matchLabels in body should have at least 1 properties"
            ]
        );
    }

    // listtype/validation.go validateListMap and validateListSet: Duplicate value.
    #[test]
    fn list_type_duplicates() {
        assert_eq!(
            gateway(
                json!([listener("http", 80), listener("http", 81)]),
                json!({})
            ),
            [r#"spec.listeners[1]|FieldValueDuplicate|Duplicate value: {"name":"http"}"#]
        );
        let schema = json!({"type": "object", "properties": {
            "s": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a", "b"],
                  "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "integer"}}}}});
        let obj = json!({"s": ["x", "y", "x", "x"], "m": [{"a": "k", "b": 1}, {"a": "k", "b": 2}, {"b": 1, "a": "k"}],
                         "labels": {"k": [1, 1]}});
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            [
                "labels[k][1]|FieldValueDuplicate|Duplicate value: 1",
                r#"m[2]|FieldValueDuplicate|Duplicate value: {"a":"k","b":1}"#,
                r#"s[2]|FieldValueDuplicate|Duplicate value: "x""#,
            ]
        );
    }

    // ConvertJSONSchemaProps (x-kubernetes-int-or-string → type [integer,string]) with the
    // anyOf of the manifests (schema_props.go).
    #[test]
    fn int_or_string() {
        let surge = |v: Value| {
            lws(
                json!({"rolloutStrategy": {"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": v}}}),
            )
        };
        assert!(surge(json!("50%")).is_empty());
        assert!(surge(json!(2)).is_empty());
        let p = "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge";
        assert_eq!(
            surge(json!(true)),
            [
                format!(
                    r#"{p}|FieldValueTypeInvalid|Invalid value: "boolean": {p} in body must be of type integer,string: "boolean""#
                ),
                format!(
                    r#"<nil>|FieldValueInvalid|Invalid value: "": "{p}" must validate at least one schema (anyOf)"#
                ),
                format!(
                    r#"{p}|FieldValueTypeInvalid|Invalid value: "boolean": {p} in body must be of type integer: "boolean""#
                ),
            ]
        );
    }

    // schema_props.go oneOf/anyOf/not with the branch of most checks passed, and strfmt
    // ipv4/ipv6 (FormatOf → field.TypeInvalid).
    #[test]
    fn gateway_address_one_of() {
        let listeners = json!([listener("http", 80)]);
        let addr = |a: Value| gateway(listeners.clone(), json!({"addresses": [a]}));
        assert!(addr(json!({"type": "IPAddress", "value": "10.0.0.1"})).is_empty());
        assert!(addr(json!({"type": "IPAddress", "value": "fd00::1"})).is_empty());
        assert!(addr(json!({"type": "Hostname", "value": "example.com"})).is_empty());
        assert_eq!(
            addr(json!({"type": "IPAddress", "value": "nope"})),
            [
                r#"<nil>|FieldValueInvalid|Invalid value: "": "spec.addresses[0]" must validate one and only one schema (oneOf). Found none valid"#,
                r#"<nil>|FieldValueInvalid|Invalid value: "": "spec.addresses[0].value" must validate at least one schema (anyOf)"#,
                r#"spec.addresses[0].value|FieldValueTypeInvalid|Invalid value: "nope": spec.addresses[0].value in body must be of type ipv4: "nope""#,
            ]
        );
    }

    // validate/type.go: null only where nullable; strfmt date-time.
    #[test]
    fn nullable_and_formats() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "a": {"type": "string", "nullable": true}, "b": {"type": "string"},
            "t": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "no-such-format"}}}}});
        let obj = json!({"spec": {"a": null, "b": null, "t": "yesterday", "u": "anything"}});
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            [
                r#"spec.b|FieldValueTypeInvalid|Invalid value: "null": spec.b in body must be of type string: "null""#,
                r#"spec.t|FieldValueTypeInvalid|Invalid value: "yesterday": spec.t in body must be of type date-time: "yesterday""#,
            ]
        );
        let ok = json!({"spec": {"t": "2024-02-29T10:00:00Z"}});
        assert!(validate(&schema, &ok, None).is_empty());
    }

    // objectmeta/validation.go validateEmbeddedResource.
    #[test]
    fn embedded_resource_type_meta() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}}}});
        let obj =
            json!({"spec": {"template": {"apiVersion": "a/b/c", "metadata": {"name": "x/y"}}}});
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            [
                "spec.template.kind|FieldValueRequired|Required value",
                r#"spec.template.apiVersion|FieldValueInvalid|Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#,
                r#"spec.template.metadata.name|FieldValueInvalid|Invalid value: "x/y": may not contain '/'"#,
            ]
        );
        let ok =
            json!({"spec": {"template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {}}}});
        assert!(validate(&schema, &ok, None).is_empty());
    }

    // validation/ratcheting.go: an unchanged invalid value passes an update, a changed one
    // does not; atomic lists are compared whole.
    #[test]
    fn ratcheting_unchanged_values() {
        let schema = v1(HTTPROUTES);
        let old = object("HTTPRoute", json!({"hostnames": ["Bad_Host"]}));
        let mut relabeled = old.clone();
        relabeled["metadata"]["labels"] = json!({"a": "b"});
        assert!(validate(&schema, &relabeled, Some(&old)).is_empty());
        assert_eq!(validate(&schema, &relabeled, None).len(), 1);

        let changed = object("HTTPRoute", json!({"hostnames": ["Bad_Host2"]}));
        assert_eq!(validate(&schema, &changed, Some(&old)).len(), 1);
        let grown = object(
            "HTTPRoute",
            json!({"hostnames": ["Bad_Host", "ok.example.com"]}),
        );
        assert_eq!(
            render(&validate(&schema, &grown, Some(&old)))[0]
                .split('|')
                .next(),
            Some("spec.hostnames[0]")
        );
    }

    // pkg/cel/common/equality.go: map-list items correlate by key, so a reordered list
    // keeps its unchanged invalid items; strategy.go skips list-type checks the old object failed.
    #[test]
    fn ratcheting_map_lists() {
        let schema = v1(GATEWAYS);
        let bad = json!({"name": "a", "port": 80, "protocol": "HTTP", "hostname": "Bad_Host"});
        let spec = |listeners: Value| {
            object(
                "Gateway",
                json!({"gatewayClassName": "gc", "listeners": listeners}),
            )
        };
        let old = spec(json!([bad, listener("b", 81)]));
        let new = spec(json!([listener("b", 82), bad]));
        assert!(validate(&schema, &new, Some(&old)).is_empty());
        assert_eq!(validate(&schema, &new, None).len(), 1);

        let dup_old = spec(json!([listener("a", 80), listener("a", 81)]));
        let dup_new = spec(json!([listener("a", 80), listener("a", 82)]));
        assert!(validate(&schema, &dup_new, Some(&dup_old)).is_empty());
        assert_eq!(validate(&schema, &dup_new, Some(&old)).len(), 1);
    }

    // strfmt default.go, date.go, time.go, duration.go, kubernetes-extensions.go.
    #[test]
    fn string_formats() {
        let yes = [
            ("ipv4", "10.0.0.1"),
            ("ipv4", "010.0.0.1"),
            ("ipv6", "fd00::1"),
            ("cidr", "10.0.0.0/8"),
            ("hostname", "a.example.com"),
            ("uri", "https://x.io/a?b"),
            ("uri", "/path"),
            ("email", "a.b@c.io"),
            ("byte", "aGVsbG8="),
            ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
            ("date", "2024-02-29"),
            ("datetime", "2024-01-01T23:59:59.5+02:00"),
            ("duration", "1h30m"),
            ("duration", "5 days"),
            ("mac", "01:23:45:67:89:ab"),
            ("k8sshortname", "my-name"),
            ("isbn10", "0321751043"),
            ("creditcard", "4111 1111 1111 1111"),
            ("ssn", "123-45-6789"),
            ("hexcolor", "#fff"),
        ];
        for (f, s) in yes {
            assert!(format_ok(f, s), "{f} {s}");
        }
        let no = [
            ("ipv4", "1.2.3"),
            ("ipv4", "fd00::1"),
            ("ipv6", "10.0.0.1"),
            ("cidr", "10.0.0.0/33"),
            ("hostname", "-bad"),
            ("uri", "relative/path"),
            ("uri", "http://x/%zz"),
            ("email", "nope"),
            ("byte", "abc"),
            ("uuid", "123"),
            ("date", "2023-02-29"),
            ("datetime", "2024-01-01T24:00:00Z"),
            ("duration", "soon"),
            ("mac", "01:23:45"),
            ("k8sshortname", "Upper"),
            ("isbn10", "0321751044"),
        ];
        for (f, s) in no {
            assert!(!format_ok(f, s), "{f} {s}");
        }
    }

    // Go's RE2 classes are ASCII; its `%v`, `%q` and encoding/json renderings.
    #[test]
    fn go_regex_and_printing() {
        assert!(matches(r"^\d+$", "42") && !matches(r"^\d+$", "\u{661}\u{662}"));
        assert!(matches("^[a&&b]$", "&") && matches(r"^[\w.]+$", "a.b_c"));
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(-1.5), "-1.5");
        assert_eq!(go_quote("a\"b\n\u{7f}é\u{200b}"), r#""a\"b\n\x7fé\u200b""#);
        assert_eq!(
            go_json(&json!({"b": [1.5, 1e21, "<"], "a": null})),
            r#"{"a":null,"b":[1.5,1e+21,"\u003c"]}"#
        );
    }

    // ValidateCustomResource runs the schema over the whole object, so a root schema's
    // metadata.name constraints apply; pruning leaves the root metadata to ObjectMeta.
    #[test]
    fn root_metadata_name() {
        let schema = json!({"type": "object", "properties": {"metadata": {"type": "object",
            "properties": {"name": {"type": "string", "maxLength": 5}}}}});
        let mut obj = json!({"apiVersion": "a/v1", "kind": "K", "metadata": {"name": "too-long", "uid": "u"}});
        assert!(prune(&schema, &mut obj).is_empty());
        assert_eq!(obj["metadata"]["uid"], "u");
        assert_eq!(
            render(&validate(&schema, &obj, None)),
            ["metadata.name|FieldValueTooLong|Too long: may not be more than 5 bytes"]
        );
    }
}
