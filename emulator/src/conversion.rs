//! Kinds served from another kind's storage through a conversion, as the real server does
//! for `events.k8s.io/v1` Events (stored as, and readable through, core/v1 Events).
//! [`Served`] pairs the kind a request names with the kind whose storage holds it.

use serde_json::{Map, Value};

use crate::ops::WriteResult;
use crate::resources::ResourceKind;
use crate::status::{ApiError, ApiResult};
use crate::store::Store;

/// How a view maps onto its storage kind.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub storage_group: &'static str,
    pub storage_plural: &'static str,
    pub to_storage: fn(&Value) -> Value,
    pub from_storage: fn(&Value) -> Value,
}

/// `(events.k8s.io/v1 field, core/v1 field)`; other fields have the same name in both.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];
const EVENT_SHARED: &[&str] = &[
    "metadata",
    "reason",
    "type",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingInstance",
];

fn convert(v: &Value, api_version: &str, to_core: bool) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    let Some(src) = v.as_object() else {
        return Value::Object(out);
    };
    for f in EVENT_SHARED {
        if let Some(x) = src.get(*f) {
            out.insert((*f).to_string(), x.clone());
        }
    }
    for (new, core) in EVENT_RENAMES {
        let (from, to) = if to_core { (new, core) } else { (core, new) };
        if let Some(x) = src.get(*from) {
            out.insert((*to).to_string(), x.clone());
        }
    }
    Value::Object(out)
}

fn events_to_core(v: &Value) -> Value {
    convert(v, "v1", true)
}

fn core_to_events(v: &Value) -> Value {
    convert(v, "events.k8s.io/v1", false)
}

/// The view for a served kind, if it is one.
pub fn view_for(group: &str, plural: &str) -> Option<View> {
    match (group, plural) {
        ("events.k8s.io", "events") => Some(View {
            storage_group: "",
            storage_plural: "events",
            to_storage: events_to_core,
            from_storage: core_to_events,
        }),
        _ => None,
    }
}

/// How a served kind's objects relate to its storage.
#[derive(Clone, Copy)]
enum Conversion {
    /// Stored as served.
    Identity,
    /// A view with its own functions (events.k8s.io Events).
    View(View),
    /// Another version of the same CRD, stored in its storage version: conversion
    /// strategy `None` changes only `apiVersion` (apiextensions-apiserver
    /// `pkg/apiserver/conversion/nop_converter.go`).
    CrdVersion,
}

/// A kind as served: the requested kind, the kind whose storage holds its objects, and the
/// conversion between them.
#[derive(Clone, Copy)]
pub(crate) struct Served {
    pub(crate) kind: &'static ResourceKind,
    pub(crate) storage: &'static ResourceKind,
    conversion: Conversion,
}

fn with_api_version(v: &Value, kind: &ResourceKind) -> Value {
    let mut out = v.clone();
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), Value::String(kind.api_version()));
    }
    out
}

impl Served {
    pub(crate) fn new(store: &Store, kind: &'static ResourceKind) -> ApiResult<Self> {
        if kind.crd.is_some() {
            let storage = store
                .kinds()
                .storage_version(kind.group, kind.plural)
                .ok_or_else(ApiError::page_not_found)?;
            let conversion = if std::ptr::eq(storage, kind) {
                Conversion::Identity
            } else {
                Conversion::CrdVersion
            };
            return Ok(Served {
                kind,
                storage,
                conversion,
            });
        }
        match view_for(kind.group, kind.plural) {
            None => Ok(Served {
                kind,
                storage: kind,
                conversion: Conversion::Identity,
            }),
            Some(v) => {
                let storage = store
                    .kinds()
                    .by_resource(v.storage_group, "v1", v.storage_plural)
                    .ok_or_else(ApiError::page_not_found)?;
                Ok(Served {
                    kind,
                    storage,
                    conversion: Conversion::View(v),
                })
            }
        }
    }

    pub(crate) fn is_view(&self) -> bool {
        !std::ptr::eq(self.kind, self.storage)
    }

    /// A stored object as the requested kind shows it.
    pub(crate) fn out(&self, v: &Value) -> Value {
        match self.conversion {
            Conversion::Identity => v.clone(),
            Conversion::View(view) => (view.from_storage)(v),
            Conversion::CrdVersion => with_api_version(v, self.kind),
        }
    }

    /// A request body of the requested kind as its storage holds it (`out` reversed).
    pub(crate) fn stored(&self, v: &Value) -> Value {
        match self.conversion {
            Conversion::Identity => v.clone(),
            Conversion::View(view) => (view.to_storage)(v),
            Conversion::CrdVersion => with_api_version(v, self.storage),
        }
    }

    pub(crate) fn result(&self, mut r: WriteResult) -> WriteResult {
        r.object = self.out(&r.object);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn event_round_trip() {
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hello", "reportingController": "c", "reason": "R"});
        let core = events_to_core(&ev);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core_to_events(&core), ev);
    }
}
