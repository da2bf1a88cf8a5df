//! kube-openapi's `SchemaValidator` (pkg/validation/validate) as a v1.36
//! apiextensions-apiserver runs it: per schema node, the validators that apply, in
//! kube-openapi's order, with ratcheting on updates.

use serde_json::{Map, Value};

use crate::status::Cause;

use super::formats::{format_ok, normalized_format};
use super::go_regex::go_regex;
use super::messages::{go_float, go_json, go_quote, go_value};
use super::ratcheting::{correlate_items, same};
use super::result::{
    Issue, Res, composite, field_of, invalid, required, too_long, too_many, type_invalid,
};
use super::schema::{INT_OR_STRING, flag, int_kw, items, nullable, prop, str_kw};

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
pub(super) fn node(s: &Value, v: &Value, path: &str, old: Option<&Value>) -> Res {
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
pub(super) enum Num {
    I(i64),
    F(f64),
}

impl Num {
    pub(super) fn of(v: &Value) -> Option<Num> {
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
    pub(super) fn go(self) -> String {
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
