//! The schema, as CEL types it: an arena of [`SchemaNode`]s built from an
//! `openAPIV3Schema`, and CEL's escaping of property names.

use std::collections::HashMap;

use serde_json::Value;

pub(super) type NodeId = usize;

#[derive(Clone, Debug, Default, PartialEq)]
pub(super) enum ListType {
    #[default]
    Atomic,
    Set,
    /// `x-kubernetes-list-map-keys`, and the same escaped as object fields are.
    Map(Vec<String>, Vec<String>),
}

/// One schema node, with what typing and correlating its values needs.
#[derive(Debug, Default)]
pub(super) struct SchemaNode {
    /// The schema's `type` ("" for none): the value of runtime errors (`sts.Type`).
    pub(super) ty: String,
    pub(super) format: String,
    pub(super) int_or_string: bool,
    /// Properties by their JSON name, with their CEL name (`None` when not escapable).
    pub(super) props: HashMap<String, (Option<String>, NodeId)>,
    /// The properties CEL may select, by CEL name (`DeclType.Fields`).
    pub(super) fields: HashMap<String, NodeId>,
    pub(super) additional: Option<NodeId>,
    pub(super) items: Option<NodeId>,
    pub(super) list_type: ListType,
    /// `x-kubernetes-map-type` lets old and new values be correlated (`MapIsCorrelatable`).
    pub(super) map_correlatable: bool,
    /// `SchemaDeclType` gives this node a CEL type: values of nodes without one (no type
    /// and not int-or-string, or a list or map of such) are hidden from CEL.
    pub(super) exposed: bool,
    /// `DeclType.MaxElements`: the most characters, items or properties a value may have,
    /// from `maxLength`/`maxItems`/`maxProperties` or the request size (see `cost.rs`).
    pub(super) max_elements: u64,
    /// `DeclType.MinSerializedSize`: the fewest bytes a value serializes to in JSON.
    pub(super) min_size: i64,
}

pub(super) fn str_of<'a>(s: &'a Value, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Adds `schema` (and its properties, items and additionalProperties) to the arena. At a
/// resource root (the CRD's root, or an `x-kubernetes-embedded-resource`), `apiVersion`,
/// `kind`, `metadata.name` and `metadata.generateName` are always visible
/// (`WithTypeAndObjectMeta`). One function for every keyword, as `SchemaDeclType` is.
pub(super) fn build_node(
    nodes: &mut Vec<SchemaNode>,
    schema: &Value,
    resource_root: bool,
) -> NodeId {
    let id = nodes.len();
    nodes.push(SchemaNode::default());
    let mut node = SchemaNode {
        ty: str_of(schema, "type").to_string(),
        format: str_of(schema, "format").to_string(),
        int_or_string: flag(schema, "x-kubernetes-int-or-string"),
        map_correlatable: matches!(
            schema.get("x-kubernetes-map-type").and_then(Value::as_str),
            None | Some("granular") | Some("atomic")
        ),
        ..SchemaNode::default()
    };
    let mut props = Vec::new();
    if let Some(p) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in p {
            let child = build_node(nodes, sub, flag(sub, "x-kubernetes-embedded-resource"));
            props.push((name.clone(), child));
        }
    }
    if resource_root && !has_type_and_object_meta(schema) {
        props.retain(|(name, _)| !matches!(name.as_str(), "kind" | "apiVersion" | "metadata"));
        let string = serde_json::json!({"type": "string"});
        let meta = serde_json::json!({"type": "object", "properties": {"name": string, "generateName": string}});
        for name in ["kind", "apiVersion"] {
            props.push((name.to_string(), build_node(nodes, &string, false)));
        }
        props.push(("metadata".to_string(), build_node(nodes, &meta, false)));
    }
    for (name, child) in props {
        let escaped = escape(&name);
        if let Some(e) = &escaped
            && nodes[child].exposed
        {
            node.fields.insert(e.clone(), child);
        }
        node.props.insert(name, (escaped, child));
    }
    if let Some(items) = schema.get("items").filter(|i| i.is_object()) {
        node.items = Some(build_node(
            nodes,
            items,
            flag(items, "x-kubernetes-embedded-resource"),
        ));
    }
    if let Some(add) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        node.additional = Some(build_node(
            nodes,
            add,
            flag(add, "x-kubernetes-embedded-resource"),
        ));
    }
    node.list_type = match str_of(schema, "x-kubernetes-list-type") {
        "set" => ListType::Set,
        "map" => {
            let keys: Vec<String> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let escaped = keys
                .iter()
                .map(|k| escape(k).unwrap_or(k.clone()))
                .collect();
            ListType::Map(keys, escaped)
        }
        _ => ListType::Atomic,
    };
    node.exposed = if node.int_or_string {
        true
    } else {
        match node.ty.as_str() {
            "array" => node.items.is_some_and(|i| nodes[i].exposed),
            "object" => node.additional.is_none_or(|a| nodes[a].exposed),
            "string" | "boolean" | "number" | "integer" => true,
            _ => false,
        }
    };
    let (max_elements, min_size) = super::cost::size_bounds(nodes, &node, schema);
    node.max_elements = max_elements;
    node.min_size = min_size;
    nodes[id] = node;
    id
}

/// Whether a resource root's schema already declares `kind`, `apiVersion`, `metadata.name`
/// and `metadata.generateName` as strings (then `WithTypeAndObjectMeta` keeps it).
fn has_type_and_object_meta(schema: &Value) -> bool {
    let is = |s: Option<&Value>, ty: &str| {
        s.and_then(|s| s.get("type")).and_then(Value::as_str) == Some(ty)
    };
    let props = schema.get("properties");
    let prop = |name: &str| props.and_then(|p| p.get(name));
    let meta_props = prop("metadata").and_then(|m| m.get("properties"));
    is(prop("kind"), "string")
        && is(prop("apiVersion"), "string")
        && is(prop("metadata"), "object")
        && is(meta_props.and_then(|p| p.get("name")), "string")
        && is(meta_props.and_then(|p| p.get("generateName")), "string")
}

/// CEL's name for a property (`cel.Escape`): reserved words become `__word__`; in other
/// names `__`, `.`, `-` and `/` become `__underscores__`, `__dot__`, `__dash__` and
/// `__slash__`. Names with other characters, or starting with a digit, can't be escaped.
fn escape(name: &str) -> Option<String> {
    const RESERVED: [&str; 21] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}
