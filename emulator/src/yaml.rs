//! Apply bodies (`application/apply-patch+yaml`) decoded to the JSON value the real server
//! gets. The apiserver's apply patcher (`handlers/patch.go`, `newApplyPatcher` with
//! k8s.io/apimachinery `pkg/util/yaml.Unmarshal`) runs sigs.k8s.io/yaml: go-yaml v2 parses
//! the document with YAML 1.1 resolution (`resolve.go`: `yes`/`on`/`y` are true, `no`/`off`/`n`
//! false, `~` null, `0x1F` and `010` integers in Go's base-prefix syntax, underscores
//! ignored), `convertToJSONableObject` turns non-string keys into strings, `json.Marshal`
//! renders floats (so `1.0` becomes `1`), and `ConvertMapNumbers` reads integral numbers back
//! as int64. Timestamps stay strings (go-yaml v2 keeps them so for `interface{}` targets).

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use serde_json::{Map, Number, Value};

/// Decodes an apply body; a JSON body takes the fast path (JSON is YAML, and resolves to
/// the same values once integral floats become integers).
pub fn decode_apply_body(body: &[u8]) -> Result<Value, String> {
    if let Ok(mut v) = serde_json::from_slice::<Value>(body) {
        integral_floats_to_ints(&mut v);
        return Ok(v);
    }
    let text = std::str::from_utf8(body).map_err(|e| format!("yaml: invalid UTF-8: {e}"))?;
    yaml_to_json(text).map_err(|e| format!("error converting YAML to JSON: yaml: {e}"))
}

/// `json.Marshal` then `ConvertMapNumbers`: a float with no fraction that fits int64 is an
/// integer.
fn integral_floats_to_ints(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(i) = n.as_f64().and_then(float_as_int) {
                *v = Value::Number(i.into());
            }
        }
        Value::Array(a) => a.iter_mut().for_each(integral_floats_to_ints),
        Value::Object(m) => m.values_mut().for_each(integral_floats_to_ints),
        _ => {}
    }
}

fn float_as_int(f: f64) -> Option<i64> {
    // Go's json.Marshal writes integral floats below 1e21 without a fraction or exponent;
    // ParseInt then succeeds when the value fits int64.
    (f.is_finite() && f.fract() == 0.0 && f.abs() < 9.223_372_036_854_775e18).then_some(f as i64)
}

fn float_value(f: f64) -> Result<Value, String> {
    if let Some(i) = float_as_int(f) {
        return Ok(Value::Number(i.into()));
    }
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| format!("json: unsupported value: {f}"))
}

/// A parsed scalar as go-yaml v2 resolves it.
#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str(String),
}

/// `ParseInt(s, 0, 64)`: Go's base prefixes (0x, 0o, 0b, and a leading 0 for octal).
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let mag = go_parse_uint(body)?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

/// `ParseUint(s, 0, 64)`.
fn go_parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    let lower = s.to_ascii_lowercase();
    let (radix, digits) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// `yamlStyleFloat` in go-yaml v2 `resolve.go`.
fn yaml_style_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'-' | b'+')) {
        i = 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while *i < b.len() && b[*i].is_ascii_digit() {
            *i += 1;
        }
        *i > start
    };
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    } else {
        if !digits(&mut i) {
            return false;
        }
        if i < b.len() && b[i] == b'.' {
            i += 1;
            digits(&mut i);
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len()
}

/// go-yaml v2 `resolve(tag, in)` for an untagged plain scalar.
fn resolve_plain(s: &str) -> Scalar {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        "" | "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match s.as_bytes()[0] {
        b'.' => {
            if let Ok(f) = s.parse::<f64>() {
                return Scalar::Float(f);
            }
        }
        b'0'..=b'9' | b'+' | b'-' => {
            let plain = s.replace('_', "");
            if let Some(i) = go_parse_int(&plain) {
                return Scalar::Int(i);
            }
            if let Some(u) = go_parse_uint(&plain) {
                return Scalar::Uint(u);
            }
            if yaml_style_float(&plain)
                && let Ok(f) = plain.parse::<f64>()
            {
                return Scalar::Float(f);
            }
            if let Some(bin) = plain.strip_prefix("-0b")
                && let Ok(i) = i64::from_str_radix(bin, 2)
            {
                return Scalar::Int(-i);
            }
        }
        _ => {}
    }
    Scalar::Str(s.to_string())
}

fn resolve(value: &str, style: ScalarStyle, tag: Option<&Tag>) -> Scalar {
    let tag = tag.map(|t| format!("{}{}", t.handle, t.suffix));
    match tag.as_deref() {
        Some("!!str" | "tag:yaml.org,2002:str") => return Scalar::Str(value.to_string()),
        Some(_) => return resolve_plain(value),
        None => {}
    }
    if style == ScalarStyle::Plain {
        resolve_plain(value)
    } else {
        Scalar::Str(value.to_string())
    }
}

fn scalar_value(s: &Scalar) -> Result<Value, String> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(*b),
        Scalar::Int(i) => Value::Number((*i).into()),
        Scalar::Uint(u) => Value::Number((*u).into()),
        Scalar::Float(f) => float_value(*f)?,
        Scalar::Str(s) => Value::String(s.clone()),
    })
}

/// `convertToJSONableObject`'s key conversion.
fn scalar_key(s: &Scalar) -> Result<String, String> {
    Ok(match s {
        Scalar::Str(s) => s.clone(),
        Scalar::Int(i) => i.to_string(),
        Scalar::Uint(u) => u.to_string(),
        Scalar::Bool(b) => b.to_string(),
        Scalar::Float(f) if f.is_nan() => ".nan".into(),
        Scalar::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.into(),
        // strconv.FormatFloat(f, 'g', -1, 32)
        Scalar::Float(f) => format!("{}", *f as f32),
        Scalar::Null => return Err("unsupported map key of type: <nil>".into()),
    })
}

enum Frame {
    Seq(Vec<Value>, usize),
    Map {
        map: Map<String, Value>,
        key: Option<Result<String, ()>>,
        anchor: usize,
    },
}

fn yaml_to_json(text: &str) -> Result<Value, String> {
    let mut anchors: HashMap<usize, Value> = HashMap::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut done: Option<Value> = None;
    // Pending scalar key when it is `<<` (a merge key).
    for ev in Parser::new_from_str(text) {
        let (ev, span) = ev.map_err(|e| e.to_string())?;
        let line = span.start.line();
        let node: Option<(Value, Option<Scalar>, usize)> = match ev {
            Event::StreamStart | Event::DocumentStart(_) | Event::Nothing => None,
            Event::StreamEnd | Event::DocumentEnd => {
                if done.is_some() || stack.is_empty() {
                    // go-yaml v2 Unmarshal reads the first document only.
                    if done.is_some() {
                        break;
                    }
                }
                None
            }
            Event::Alias(id) => Some((
                anchors
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| format!("line {line}: unknown anchor referenced"))?,
                None,
                0,
            )),
            Event::Scalar(v, style, anchor, tag) => {
                let s = resolve(&v, style, tag.as_ref().map(Cow::as_ref));
                let is_merge = style == ScalarStyle::Plain && tag.is_none() && v == "<<";
                let value = scalar_value(&s)?;
                let key_form = if is_merge {
                    Some(Scalar::Str("<<".into()))
                } else {
                    Some(s)
                };
                Some((value, key_form, anchor))
            }
            Event::SequenceStart(anchor, _) => {
                stack.push(Frame::Seq(Vec::new(), anchor));
                None
            }
            Event::MappingStart(anchor, _) => {
                stack.push(Frame::Map {
                    map: Map::new(),
                    key: None,
                    anchor,
                });
                None
            }
            Event::SequenceEnd => match stack.pop() {
                Some(Frame::Seq(items, anchor)) => Some((Value::Array(items), None, anchor)),
                _ => return Err("unbalanced sequence".into()),
            },
            Event::MappingEnd => match stack.pop() {
                Some(Frame::Map { map, anchor, .. }) => Some((Value::Object(map), None, anchor)),
                _ => return Err("unbalanced mapping".into()),
            },
        };
        let Some((value, scalar, anchor)) = node else {
            continue;
        };
        if anchor != 0 {
            anchors.insert(anchor, value.clone());
        }
        match stack.last_mut() {
            None => {
                if done.is_none() {
                    done = Some(value);
                }
            }
            Some(Frame::Seq(items, _)) => items.push(value),
            Some(Frame::Map { map, key, .. }) => match key.take() {
                None => {
                    *key = Some(match &scalar {
                        Some(s) => Ok(scalar_key(s).map_err(|e| format!("{e}, line {line}"))?),
                        // A collection as a key: go-yaml accepts it, sigs.k8s.io/yaml
                        // cannot make it a string.
                        None => Err(()),
                    });
                }
                Some(Err(())) => {
                    return Err("unsupported map key of type: collection".into());
                }
                Some(Ok(k)) if k == "<<" && !value.is_string() => {
                    // A merge key: the mapping (or each mapping of a sequence, the first
                    // winning) sets its keys here, as go-yaml v2 `d.merge` does.
                    let sources: Vec<Value> = match value {
                        Value::Array(a) => a.into_iter().rev().collect(),
                        v => vec![v],
                    };
                    for src in sources {
                        match src {
                            Value::Object(m) => map.extend(m),
                            _ => {
                                return Err(format!(
                                    "line {line}: map merge requires map or sequence of maps as the value"
                                ));
                            }
                        }
                    }
                }
                Some(Ok(k)) => {
                    map.insert(k, value);
                }
            },
        }
    }
    Ok(done.unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// go-yaml v2 `resolve.go` (the YAML 1.1 booleans and nulls; Go base prefixes; floats
    /// with no fraction become integers through sigs.k8s.io/yaml's JSON round trip), and
    /// sigs.k8s.io/yaml `convertToJSONableObject` (non-string keys become strings).
    #[test]
    fn yaml_bodies_decode_as_sigs_k8s_io_yaml_does() {
        let v = decode_apply_body(
            br#"# a comment
apiVersion: v1
kind: ConfigMap
metadata:
  name: cm
  labels: {a: "yes"}
data:
  quoted: "on"
  block: |
    line one
    line two
flags:
  - yes
  - On
  - no
  - off
  - y
  - ~
  - null
  - ""
numbers: [1, 1.0, 1.5, 0x1F, 010, 0o17, 1_000, -0b101, 1e3, .5, 12345678901234567890]
strings: [2024-01-01, 1.2.3, "007", !!str 42, yesno]
keys: {1: a, true: b, 1.5: c}
"#,
        )
        .unwrap();
        assert_eq!(v["metadata"]["labels"]["a"], "yes");
        assert_eq!(v["data"]["quoted"], "on");
        assert_eq!(v["data"]["block"], "line one\nline two\n");
        assert_eq!(
            v["flags"],
            json!([true, true, false, false, true, null, null, ""])
        );
        assert_eq!(
            v["numbers"],
            json!([
                1,
                1,
                1.5,
                31,
                8,
                15,
                1000,
                -5,
                1000,
                0.5,
                12345678901234567890u64
            ])
        );
        assert_eq!(
            v["strings"],
            json!(["2024-01-01", "1.2.3", "007", "42", "yesno"])
        );
        assert_eq!(v["keys"], json!({"1": "a", "true": "b", "1.5": "c"}));
    }

    /// Anchors, aliases and merge keys (go-yaml v2 `decode.go`), and only the first
    /// document is read.
    #[test]
    fn anchors_aliases_and_merge_keys() {
        let v = decode_apply_body(
            b"base: &b {a: 1, b: 2}\nother:\n  <<: *b\n  b: 3\nlist: [*b]\ny: 4\n---\nsecond: 1\n",
        )
        .unwrap();
        assert_eq!(v["other"], json!({"a": 1, "b": 3}));
        assert_eq!(v["list"], json!([{"a": 1, "b": 2}]));
        // YAML 1.1: the plain key `y` is the boolean true, so the JSON key is "true".
        assert_eq!(v["true"], 4);
        assert!(v.get("y").is_none());
        assert!(v.get("second").is_none());
    }

    /// JSON bodies (what kubectl and client-go send) take the fast path and get the same
    /// numbers: `1.0` is the integer 1 after sigs.k8s.io/yaml's JSON round trip.
    #[test]
    fn json_bodies_resolve_like_yaml() {
        let v = decode_apply_body(br#"{"a": 1.0, "b": 2.5, "c": [3e0], "d": "yes"}"#).unwrap();
        assert_eq!(v, json!({"a": 1, "b": 2.5, "c": [3], "d": "yes"}));
        assert!(decode_apply_body(b"a: [1, 2\n").is_err());
        assert!(decode_apply_body(b"a: .nan\n").is_err());
    }
}
