//! Kinds served from another kind's storage through a conversion, as the real server does
//! for `events.k8s.io/v1` Events (stored as, and readable through, core/v1 Events).

use serde_json::{Map, Value};

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

/// The identity conversion (kinds stored as themselves).
pub fn identity(v: &Value) -> Value {
    v.clone()
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
