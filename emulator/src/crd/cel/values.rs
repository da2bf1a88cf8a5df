//! Values: a JSON value as CEL sees it through its schema (`UnstructuredToVal`).

use std::collections::HashMap;

use cel::common::traits::{Adder, Container, Indexer, Iterable, Sizer, Zeroer};
use cel::common::types::{
    self as celtypes, CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap,
    CelMapKey, CelNull, CelString, CelTimestamp, CelUInt, Type,
};
use cel::common::value::{Builtin, BuiltinRef, CowVal, Val};
use serde_json::Value;

use super::library::elements;
use super::schema::{ListType, NodeId, SchemaNode};

/// A value with no schema to go by (under `x-kubernetes-preserve-unknown-fields`).
fn dynamic(v: &Value) -> Box<dyn Val + '_> {
    match v {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Box::new(CelInt::from(i)),
            (None, Some(u)) => Box::new(CelUInt::from(u)),
            _ => Box::new(CelDouble::from(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(a) => Box::new(CelList::from(a.iter().map(dynamic).collect::<Vec<_>>())),
        Value::Object(m) => Box::new(CelMap::from(
            m.iter()
                .map(|(k, v)| (CelMapKey::from(k.as_str()), dynamic(v)))
                .collect::<HashMap<_, _>>(),
        )),
    }
}

/// `v` typed by node `id`. Object properties are keyed by their CEL names; unknown and
/// null properties are absent, as are properties whose names can't be escaped.
pub(super) fn to_val<'v>(nodes: &'v [SchemaNode], id: NodeId, v: &'v Value) -> Box<dyn Val + 'v> {
    let n = &nodes[id];
    if v.is_null() {
        return Box::new(CelNull);
    }
    if n.int_or_string {
        return dynamic(v);
    }
    match (n.ty.as_str(), v) {
        ("object", Value::Object(m)) => {
            let mut out = HashMap::with_capacity(m.len());
            if !n.props.is_empty() {
                for (k, val) in m {
                    if let Some((Some(name), child)) = n.props.get(k)
                        && !val.is_null()
                    {
                        out.insert(CelMapKey::from(name.as_str()), to_val(nodes, *child, val));
                    }
                }
            } else if let Some(a) = n.additional {
                for (k, val) in m {
                    out.insert(CelMapKey::from(k.as_str()), to_val(nodes, a, val));
                }
            }
            Box::new(CelMap::from(out))
        }
        ("array", Value::Array(items)) => {
            let list: Vec<_> = match n.items {
                Some(i) => items.iter().map(|item| to_val(nodes, i, item)).collect(),
                None => items.iter().map(dynamic).collect(),
            };
            let list = CelList::from(list);
            match &n.list_type {
                ListType::Atomic => Box::new(list),
                ListType::Set => Box::new(KeyedList {
                    items: list,
                    keys: None,
                }),
                ListType::Map(_, escaped) => Box::new(KeyedList {
                    items: list,
                    keys: Some(escaped),
                }),
            }
        }
        ("string", Value::String(s)) => string_val(&n.format, s),
        ("number", Value::Number(x)) => Box::new(CelDouble::from(x.as_f64().unwrap_or_default())),
        ("integer", Value::Number(x)) => match x.as_i64() {
            Some(i) => Box::new(CelInt::from(i)),
            None => dynamic(v),
        },
        _ => dynamic(v),
    }
}

/// A string by its format: `duration`, `date`, `date-time` and `byte` strings are
/// durations, timestamps and bytes. One that doesn't parse stays a string (the server
/// makes it an error value; schema validation of the format rejects it first).
fn string_val<'v>(format: &str, s: &'v str) -> Box<dyn Val + 'v> {
    use base64::Engine as _;
    let parsed: Option<Box<dyn Val + 'v>> = match format {
        "duration" => parse_duration(s).map(|d| Box::new(CelDuration::from(d)) as Box<dyn Val>),
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map(|d| Box::new(CelTimestamp::from(d.and_utc().fixed_offset())) as Box<dyn Val>),
        "date-time" => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .or_else(|| {
                chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                    .ok()
                    .map(|d| d.and_utc().fixed_offset())
            })
            .map(|d| Box::new(CelTimestamp::from(d)) as Box<dyn Val>),
        "byte" => base64::engine::general_purpose::STANDARD
            .decode(s)
            .ok()
            .map(|b| Box::new(CelBytes::from(b)) as Box<dyn Val>),
        _ => None,
    };
    parsed.unwrap_or_else(|| Box::new(CelString::from(s)))
}

/// `strfmt.ParseDuration`: Go's `time.ParseDuration`, else a sum of `<n><unit>` with the
/// longer units it also knows (`d`, `w`, `sec`, `hours`, ...).
fn parse_duration(s: &str) -> Option<chrono::Duration> {
    go_duration(s).or_else(|| {
        let mut total: i128 = 0;
        let mut rest = s.trim();
        let mut any = false;
        while !rest.is_empty() {
            let digits = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            if digits == 0 {
                return None;
            }
            let n: i128 = rest[..digits].parse().ok()?;
            rest = rest[digits..].trim_start();
            let unit_len = rest
                .find(|c: char| !(c.is_alphabetic()))
                .unwrap_or(rest.len());
            let unit = rest[..unit_len].to_lowercase();
            rest = rest[unit_len..].trim_start();
            let unit = unit
                .strip_suffix('s')
                .filter(|u| u.len() > 1)
                .unwrap_or(&unit);
            let nanos: i128 = match unit {
                "ns" | "nano" => 1,
                "us" | "µs" | "micro" => 1_000,
                "ms" | "milli" => 1_000_000,
                "s" | "sec" | "second" => 1_000_000_000,
                "m" | "min" | "minute" => 60_000_000_000,
                "h" | "hr" | "hour" => 3_600_000_000_000,
                "d" | "day" => 86_400_000_000_000,
                "w" | "wk" | "week" => 604_800_000_000_000,
                _ => return None,
            };
            total = total.checked_add(n.checked_mul(nanos)?)?;
            any = true;
        }
        if !any {
            return None;
        }
        i64::try_from(total).ok().map(chrono::Duration::nanoseconds)
    })
}

pub(super) use crate::crd::duration::go_duration;

/// A list of `x-kubernetes-list-type: map` or `set`: equal to another list with the same
/// elements in any order (`unstructuredMapList`/`unstructuredSetList.Equal`). Everything
/// else is the plain list's.
#[derive(Clone, Debug)]
struct KeyedList<'v> {
    items: CelList<'v>,
    /// The map keys (CEL names); `None` for a set.
    keys: Option<&'v [String]>,
}

impl KeyedList<'_> {
    /// The element of this list with the same map keys as `item` (the first one).
    fn find(&self, keys: &[String], item: &dyn Val) -> Option<&dyn Val> {
        let key_of = field_of;
        let wanted: Vec<_> = keys.iter().map(|k| key_of(item, k)).collect();
        self.items
            .inner()
            .iter()
            .map(|b| b.as_ref())
            .find(|candidate| {
                keys.iter()
                    .zip(&wanted)
                    .all(|(k, w)| match (key_of(*candidate, k), w) {
                        (None, None) => true,
                        (Some(a), Some(b)) => a.equals(b.as_ref()),
                        _ => false,
                    })
            })
    }
}

/// `v.k`, if `v` has it.
fn field_of<'b>(v: &'b dyn Val, k: &str) -> Option<Box<dyn Val + 'b>> {
    v.as_indexer()?
        .get(&CelString::from(k))
        .ok()
        .map(CowVal::into_owned)
}

impl Val for KeyedList<'_> {
    fn get_type(&self) -> &Type {
        &celtypes::LIST_TYPE
    }

    fn cel_type() -> &'static Type {
        &celtypes::LIST_TYPE
    }

    fn as_adder<'b, 'w>(&'b self) -> Option<&'b (dyn Adder + 'w)>
    where
        Self: 'w,
    {
        self.items.as_adder()
    }

    fn as_container(&self) -> Option<&dyn Container> {
        self.items.as_container()
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        self.items.as_indexer()
    }

    fn into_indexer<'w>(self: Box<Self>) -> Option<Box<dyn Indexer + 'w>>
    where
        Self: 'w,
    {
        Box::new(self.items).into_indexer()
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        self.items.as_iterable()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.items.as_sizer()
    }

    fn as_zeroer(&self) -> Option<&dyn Zeroer> {
        self.items.as_zeroer()
    }

    fn equals(&self, other: &dyn Val) -> bool {
        if other.get_type() != &celtypes::LIST_TYPE {
            return false;
        }
        let Ok(others) = elements(other) else {
            return false;
        };
        if others.len() != self.items.inner().len() {
            return false;
        }
        match self.keys {
            None => others
                .iter()
                .all(|o| self.items.inner().iter().any(|i| i.equals(*o))),
            Some(keys) => others
                .iter()
                .all(|o| self.find(keys, *o).is_some_and(|mine| mine.equals(*o))),
        }
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(self.clone())
    }

    fn as_builtin<'b, 'w>(&'b self) -> BuiltinRef<'b, 'w>
    where
        Self: 'w,
    {
        BuiltinRef::List(&self.items)
    }

    fn into_builtin<'w>(self: Box<Self>) -> Option<Builtin<'w>>
    where
        Self: 'w,
    {
        Some(Builtin::List(self.items))
    }
}
