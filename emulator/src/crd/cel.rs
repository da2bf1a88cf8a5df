//! `x-kubernetes-validations`: the CEL rules of a CRD version's `openAPIV3Schema`, compiled
//! once per version and evaluated on every write of a custom resource, with the semantics
//! and error shapes of apiextensions-apiserver v1.36:
//!
//! - compiling, and the errors a CRD create/update reports for a rule:
//!   `pkg/apiserver/schema/cel/compilation.go` and the `XValidations` checks of
//!   `pkg/apis/apiextensions/validation/validation.go`;
//! - evaluating, transition rules, ratcheting and the field errors of a failed rule:
//!   `pkg/apiserver/schema/cel/validation.go`, `pkg/registry/customresource/strategy.go`;
//! - how a schema types a value in CEL: `k8s.io/apiserver/pkg/cel/common/schemas.go`
//!   (`SchemaDeclType`), `valuesunstructured.go` (`UnstructuredToVal`), `escaping.go`,
//!   `maplist.go` and `equality.go` (`CorrelatedObject`);
//! - the function libraries: `k8s.io/apiserver/pkg/cel/environment/base.go`.
//!
//! The `cel` crate parses and interprets CEL but has no type checker and no cost model, so:
//! - a small checker here rejects what cel-go's checker would for the usual authoring
//!   mistakes (an undefined field of an object, an undeclared identifier, a rule that is
//!   not a bool, a `messageExpression` that is not a string, an invalid `duration`,
//!   `timestamp` or regex literal, a list or map literal mixing types); deeper typing
//!   errors (a call with arguments of the wrong types, iterating an object) surface at
//!   evaluation as cel-go's runtime "no such overload" error instead of failing the CRD;
//! - no cost is estimated or measured: the CRD-time cost limits (`StaticEstimatedCostLimit`)
//!   and the runtime budgets (`PerCallLimit` 1,000,000, `RuntimeCELCostBudget` 10,000,000
//!   of `k8s.io/apiserver/pkg/apis/cel/config.go`) are not enforced.
//!
//! Libraries: the standard library, optionals, the strings and lists extensions, the
//! Kubernetes list functions (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`),
//! `sets.contains/equivalent/intersects` and the Kubernetes quantity library. Not
//! available (a rule calling them fails when evaluated, with "undeclared reference"): the
//! regex `find`/`findAll` (the emulator has no regex crate of its own), `url`, `ip`,
//! `cidr`, `format`, `semver` and the authz library, and the two-variable comprehensions
//! (`all(k, v, ...)`, `transformMap`, ...), which the `cel` crate's interpreter lacks.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use cel::common::traits::{Adder, Container, Indexer, Iterable, Sizer, Zeroer};
use cel::common::types::{
    self as celtypes, CelBool, CelBytes, CelDouble, CelDuration, CelInt, CelList, CelMap,
    CelMapKey, CelNull, CelOptional, CelString, CelTimestamp, CelUInt, Type,
};
use cel::common::value::{Builtin, BuiltinRef, CowVal, StaticVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, ExecutionError, ParseErrors, Program};
use serde_json::Value;

use crate::status::Cause;

/// `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// The `reason`s a rule may give (`supportedValidationReason`, listed sorted as Go's
/// `sets.String.List()` does in the NotSupported error).
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// Every x-kubernetes-validations rule of one CRD version's schema, compiled once.
pub(crate) struct Rules {
    /// The schema's nodes, typing the values the rules see.
    nodes: Vec<SchemaNode>,
    /// Where rules are, from the root; `None` when the schema has none.
    root: Option<Validator>,
}

impl Rules {
    /// Compiles every rule in the schema. A rule that does not compile is an error of the
    /// CRD itself, reported as the real server does at CRD create/update, under `path`
    /// (e.g. path = "spec.versions[0].schema.openAPIV3Schema" gives
    /// "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule").
    pub(crate) fn compile(schema: &Value, path: &str) -> Result<Rules, Vec<Cause>> {
        if !has_rules(schema) {
            return Ok(Rules {
                nodes: Vec::new(),
                root: None,
            });
        }
        let mut nodes = Vec::new();
        let root_node = build_node(&mut nodes, schema, true);
        let mut compiler = Compiler {
            nodes: &nodes,
            schema_errors: Vec::new(),
            cel_errors: Vec::new(),
        };
        let root = compiler.validator(
            schema,
            root_node,
            path,
            Mode {
                runtime: true,
                report_cel: true,
            },
            None,
        );
        let mut errors = compiler.schema_errors;
        errors.extend(compiler.cel_errors);
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Rules { nodes, root })
    }

    /// Evaluates every rule against the whole object (`obj`), with `old` on updates for
    /// transition rules, and returns the failures as field errors.
    pub(crate) fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        self.validate_with_warnings(obj, old).0
    }

    /// Like [`Rules::validate`], also returning the warnings of ratcheted failures: on an
    /// update, a rule (not a transition rule) failing on a value that did not change is a
    /// warning, not an error (`CRDValidationRatcheting`, on by default). Warnings are
    /// rendered as `field: message`, as the server's `Warning` headers carry them.
    pub(crate) fn validate_with_warnings(
        &self,
        obj: &Value,
        old: Option<&Value>,
    ) -> (Vec<Cause>, Vec<String>) {
        let Some(root) = &self.root else {
            return (Vec::new(), Vec::new());
        };
        let mut walk = Walk {
            nodes: &self.nodes,
            errors: Vec::new(),
            warnings: Vec::new(),
        };
        let ratchet = Ratchet {
            current: old.map(|old| Corr {
                new: obj,
                old,
                node: root.node,
            }),
            parent: None,
        };
        let mut path = String::new();
        walk.node(root, &mut path, obj, old, ratchet);
        (walk.errors, walk.warnings)
    }

    /// True when the schema has no rules (lets callers skip work).
    pub(crate) fn is_empty(&self) -> bool {
        self.root.is_none()
    }
}

/// Whether any node of a schema carries rules.
fn has_rules(schema: &Value) -> bool {
    let Value::Object(s) = schema else {
        return false;
    };
    if s.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty())
    {
        return true;
    }
    let props = s
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|p| p.values());
    let all_of = s
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    props
        .chain(all_of)
        .chain(s.get("items"))
        .chain(s.get("additionalProperties"))
        .any(has_rules)
}

// ---------------------------------------------------------------------------------------
// The schema, as CEL types it.

type NodeId = usize;

#[derive(Clone, Debug, Default, PartialEq)]
enum ListType {
    #[default]
    Atomic,
    Set,
    /// `x-kubernetes-list-map-keys`, and the same escaped as object fields are.
    Map(Vec<String>, Vec<String>),
}

/// One schema node, with what typing and correlating its values needs.
#[derive(Debug, Default)]
struct SchemaNode {
    /// The schema's `type` ("" for none): the value of runtime errors (`sts.Type`).
    ty: String,
    format: String,
    int_or_string: bool,
    /// Properties by their JSON name, with their CEL name (`None` when not escapable).
    props: HashMap<String, (Option<String>, NodeId)>,
    /// The properties CEL may select, by CEL name (`DeclType.Fields`).
    fields: HashMap<String, NodeId>,
    additional: Option<NodeId>,
    items: Option<NodeId>,
    list_type: ListType,
    /// `x-kubernetes-map-type` lets old and new values be correlated (`MapIsCorrelatable`).
    map_correlatable: bool,
    /// `SchemaDeclType` gives this node a CEL type: values of nodes without one (no type
    /// and not int-or-string, or a list or map of such) are hidden from CEL.
    exposed: bool,
}

fn str_of<'a>(s: &'a Value, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or("")
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Adds `schema` (and its properties, items and additionalProperties) to the arena. At a
/// resource root (the CRD's root, or an `x-kubernetes-embedded-resource`), `apiVersion`,
/// `kind`, `metadata.name` and `metadata.generateName` are always visible
/// (`WithTypeAndObjectMeta`).
fn build_node(nodes: &mut Vec<SchemaNode>, schema: &Value, resource_root: bool) -> NodeId {
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

// ---------------------------------------------------------------------------------------
// Compiling.

/// A node of the schema with rules, or with rules below it (`Validator` of validation.go).
struct Validator {
    node: NodeId,
    rules: Vec<Rule>,
    /// The node has no CEL type (`compilationErr`): every evaluation reports it.
    init_error: Option<String>,
    props: HashMap<String, Validator>,
    items: Option<Box<Validator>>,
    additional: Option<Box<Validator>>,
    /// Rules under `allOf`, applying to the same value.
    all_of: Vec<Validator>,
}

struct Rule {
    rule: String,
    message: String,
    reason: Option<String>,
    /// `fieldPath`, normalized to a field path (`NormalizedRuleFieldPath`).
    field_path: Option<String>,
    optional_old_self: bool,
    uses_old_self: bool,
    /// `Ok(None)` for a blank rule (skipped), `Err` with the compile error.
    program: Result<Option<Program>, String>,
    message_expression: Option<Program>,
}

/// What a schema position is compiled for: `runtime` builds validators (not for `anyOf`,
/// `oneOf` and `not`, whose rules the server ignores); `report_cel` reports compile errors
/// as CRD errors (not under any of those nor `allOf`: the server checks only their fields).
#[derive(Clone, Copy)]
struct Mode {
    runtime: bool,
    report_cel: bool,
}

struct Compiler<'a> {
    nodes: &'a [SchemaNode],
    /// `OpenAPISchemaErrorList.SchemaErrors`, then `CELErrors`, as the server lists them.
    schema_errors: Vec<Cause>,
    cel_errors: Vec<Cause>,
}

/// The rule's fields as written (`apiextensions.ValidationRule`).
#[derive(Default)]
struct RuleSpec {
    rule: String,
    message: String,
    message_expression: String,
    reason: Option<String>,
    field_path: String,
    optional_old_self: Option<bool>,
}

impl RuleSpec {
    fn parse(v: &Value) -> RuleSpec {
        RuleSpec {
            rule: str_of(v, "rule").to_string(),
            message: str_of(v, "message").to_string(),
            message_expression: str_of(v, "messageExpression").to_string(),
            reason: v.get("reason").and_then(Value::as_str).map(String::from),
            field_path: str_of(v, "fieldPath").to_string(),
            optional_old_self: v.get("optionalOldSelf").and_then(Value::as_bool),
        }
    }

    /// How the server prints the rule as the bad value of a compile error: Go's
    /// `json.Marshal` of the internal struct (no JSON tags; `<`, `>`, `&` escaped).
    fn go_json(&self) -> String {
        let q = go_json_string;
        format!(
            "{{\"Rule\":{},\"Message\":{},\"MessageExpression\":{},\"Reason\":{},\"FieldPath\":{},\"OptionalOldSelf\":{}}}",
            q(&self.rule),
            q(&self.message),
            q(&self.message_expression),
            self.reason.as_deref().map_or("null".into(), q),
            q(&self.field_path),
            self.optional_old_self
                .map_or("null".into(), |b| b.to_string()),
        )
    }
}

/// A JSON string as Go's `encoding/json` writes it (HTML-safe).
fn go_json_string(s: &str) -> String {
    serde_json::to_string(s)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

impl Compiler<'_> {
    /// Compiles the rules of `vschema` (the schema at this position, or an `allOf` entry
    /// of it) applying to values of `node`, and those below. `forbid_old_self` is the
    /// outermost path under which old values can't be correlated.
    fn validator(
        &mut self,
        vschema: &Value,
        node: NodeId,
        path: &str,
        mode: Mode,
        forbid_old_self: Option<&str>,
    ) -> Option<Validator> {
        let schema_errors_before = self.schema_errors.len();
        let n = &self.nodes[node];
        let mut v = Validator {
            node,
            rules: Vec::new(),
            init_error: None,
            props: HashMap::new(),
            items: None,
            additional: None,
            all_of: Vec::new(),
        };

        if let (Some(sub), Some(child)) = (
            vschema
                .get("additionalProperties")
                .filter(|a| a.is_object()),
            n.additional,
        ) {
            let p = format!("{path}.additionalProperties");
            v.additional = self
                .validator(sub, child, &p, mode, forbid_old_self)
                .map(Box::new);
        }
        if let Some(props) = vschema.get("properties").and_then(Value::as_object) {
            let own_forbid = (!matches!(
                vschema.get("x-kubernetes-map-type").and_then(Value::as_str),
                None | Some("granular") | Some("atomic")
            ))
            .then_some(path);
            for (name, sub) in props {
                let p = format!("{path}.properties[{name}]");
                let child = n.props.get(name).map(|(_, c)| *c);
                let exposed = child.is_some_and(|c| self.nodes[c].exposed);
                let sub_mode = Mode {
                    runtime: mode.runtime && exposed,
                    report_cel: mode.report_cel && child.is_some(),
                };
                // A property the node lacks (under allOf) is only checked.
                let child = child.unwrap_or(node);
                if let Some(pv) =
                    self.validator(sub, child, &p, sub_mode, forbid_old_self.or(own_forbid))
                    && sub_mode.runtime
                {
                    v.props.insert(name.clone(), pv);
                }
            }
        }
        for (keyword, nested) in [("allOf", true), ("oneOf", false), ("anyOf", false)] {
            if let Some(list) = vschema.get(keyword).and_then(Value::as_array) {
                for (i, sub) in list.iter().enumerate() {
                    let p = format!("{path}.{keyword}[{i}]");
                    let sub_mode = Mode {
                        runtime: mode.runtime && nested,
                        report_cel: false,
                    };
                    if let Some(a) = self.validator(sub, node, &p, sub_mode, forbid_old_self)
                        && sub_mode.runtime
                    {
                        v.all_of.push(a);
                    }
                }
            }
        }
        if let Some(sub) = vschema.get("not").filter(|n| n.is_object()) {
            let p = format!("{path}.not");
            let sub_mode = Mode {
                runtime: false,
                report_cel: false,
            };
            self.validator(sub, node, &p, sub_mode, forbid_old_self);
        }
        if let (Some(sub), Some(child)) = (vschema.get("items").filter(|i| i.is_object()), n.items)
        {
            let p = format!("{path}.items");
            let own_forbid = (str_of(vschema, "x-kubernetes-list-type") != "map").then_some(path);
            v.items = self
                .validator(sub, child, &p, mode, forbid_old_self.or(own_forbid))
                .map(Box::new);
        }

        let specs: Vec<RuleSpec> = vschema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .map(|r| r.iter().map(RuleSpec::parse).collect())
            .unwrap_or_default();
        if !specs.is_empty() {
            self.check_rule_fields(&specs, node, path);
            let report = mode.report_cel && self.schema_errors.len() == schema_errors_before;
            if mode.runtime || report {
                self.compile_rules(&mut v, &specs, path, report, forbid_old_self);
            }
        }

        let keep = !v.rules.is_empty()
            || v.init_error.is_some()
            || !v.props.is_empty()
            || v.items.is_some()
            || v.additional.is_some()
            || !v.all_of.is_empty();
        (mode.runtime && keep).then_some(v)
    }

    /// The checks of a rule's fields, before compiling (`SchemaErrors`).
    fn check_rule_fields(&mut self, specs: &[RuleSpec], node: NodeId, path: &str) {
        for (i, r) in specs.iter().enumerate() {
            let at = |field: &str| format!("{path}.x-kubernetes-validations[{i}].{field}");
            let rule = r.rule.trim();
            let msg = r.message.trim();
            let errs = &mut self.schema_errors;
            if rule.is_empty() {
                errs.push(required(at("rule"), "rule is not specified"));
            } else if !r.message.is_empty() && msg.is_empty() {
                errs.push(Cause::invalid(
                    at("message"),
                    &Value::from(r.message.as_str()),
                    "must be non-empty if specified",
                ));
            } else if msg.contains('\n') {
                errs.push(Cause::invalid(
                    at("message"),
                    &Value::from(r.message.as_str()),
                    "must not contain line breaks",
                ));
            } else if rule.contains('\n') && msg.is_empty() {
                errs.push(required(
                    at("message"),
                    "message must be specified if rule contains line breaks",
                ));
            }
            if !r.message_expression.is_empty() && r.message_expression.trim().is_empty() {
                errs.push(required(
                    at("messageExpression"),
                    "messageExpression must be non-empty if specified",
                ));
            }
            if let Some(reason) = &r.reason
                && !REASONS.contains(&reason.as_str())
            {
                errs.push(Cause::not_supported(
                    at("reason"),
                    &Value::from(reason.as_str()),
                    &REASONS,
                ));
            }
            let fp = Value::from(r.field_path.as_str());
            if !r.field_path.is_empty() && r.field_path.trim().is_empty() {
                errs.push(Cause::invalid(
                    at("fieldPath"),
                    &fp,
                    "must be non-empty if specified",
                ));
            }
            if r.field_path.contains('\n') {
                errs.push(Cause::invalid(
                    at("fieldPath"),
                    &fp,
                    "must not contain line breaks",
                ));
            }
            if !r.field_path.is_empty() && field_path(self.nodes, node, &r.field_path).is_err() {
                errs.push(Cause::invalid(at("fieldPath"), &fp, "must be a valid path"));
            }
        }
    }

    /// Compiles the rules of one node, reporting what fails as CRD errors when `report`.
    fn compile_rules(
        &mut self,
        v: &mut Validator,
        specs: &[RuleSpec],
        path: &str,
        report: bool,
        forbid_old_self: Option<&str>,
    ) {
        let nodes = self.nodes;
        let Some(self_ty) = node_ty(nodes, v.node) else {
            // `Compile` fails as a whole: the node has no CEL type.
            const DETAIL: &str = "failed to convert to declType for CEL validation rules";
            if report {
                self.cel_errors.push(Cause::new(
                    "InternalError",
                    format!("{path}.x-kubernetes-validations"),
                    format!("Internal error: {DETAIL}"),
                ));
            }
            v.init_error = Some(DETAIL.to_string());
            return;
        };
        for (i, spec) in specs.iter().enumerate() {
            let at = |field: &str| format!("{path}.x-kubernetes-validations[{i}].{field}");
            let compiled = compile_rule(nodes, v.node, &self_ty, spec);
            if report {
                if let Err(detail) = &compiled.rule.program {
                    self.cel_errors
                        .push(invalid_raw(at("rule"), &spec.go_json(), detail));
                }
                if let Some(detail) = &compiled.message_expression_error {
                    self.cel_errors.push(invalid_raw(
                        at("messageExpression"),
                        &spec.go_json(),
                        detail,
                    ));
                }
                if compiled.rule.uses_old_self {
                    if let Some(within) = forbid_old_self {
                        self.cel_errors.push(Cause::invalid(
                            at("rule"),
                            &Value::from(spec.rule.as_str()),
                            &format!(
                                "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                            ),
                        ));
                    }
                } else if let Some(b) = spec.optional_old_self {
                    self.cel_errors.push(Cause::invalid(
                        at("optionalOldSelf"),
                        &Value::Bool(b),
                        "may not be set if oldSelf is not used in rule",
                    ));
                }
            }
            v.rules.push(compiled.rule);
        }
    }
}

/// `field.Required` with a detail.
fn required(field: String, detail: &str) -> Cause {
    Cause::new(
        "FieldValueRequired",
        field,
        format!("Required value: {detail}"),
    )
}

/// `field.Invalid` whose bad value is already rendered.
fn invalid_raw(field: String, rendered: &str, detail: &str) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {rendered}: {detail}"),
    )
}

struct Compiled {
    rule: Rule,
    message_expression_error: Option<String>,
}

/// `compileRule`: the rule, then its messageExpression, then its fieldPath.
fn compile_rule(nodes: &[SchemaNode], node: NodeId, self_ty: &Ty, spec: &RuleSpec) -> Compiled {
    let mut rule = Rule {
        rule: spec.rule.clone(),
        message: spec.message.clone(),
        reason: spec.reason.clone(),
        field_path: None,
        optional_old_self: spec.optional_old_self == Some(true),
        uses_old_self: false,
        program: Ok(None),
        message_expression: None,
    };
    let mut message_expression_error = None;
    if spec.rule.trim().is_empty() {
        return Compiled {
            rule,
            message_expression_error,
        };
    }
    let old_ty = if rule.optional_old_self {
        Ty::Optional(Box::new(self_ty.clone()))
    } else {
        self_ty.clone()
    };
    match check_expression(nodes, &spec.rule, self_ty, &old_ty) {
        Err(issues) => rule.program = Err(format!("compilation failed: {issues}")),
        Ok((program, ty, uses_old_self)) => {
            rule.uses_old_self = uses_old_self;
            if ty.is_concrete() && ty != Ty::Bool {
                rule.program = Err("cel expression must evaluate to a bool".to_string());
            } else {
                rule.program = Ok(Some(program));
                if !spec.message_expression.is_empty() {
                    match check_expression(nodes, &spec.message_expression, self_ty, &old_ty) {
                        Err(issues) => {
                            message_expression_error =
                                Some(format!("messageExpression compilation failed: {issues}"))
                        }
                        Ok((_, ty, _)) if ty.is_concrete() && ty != Ty::String => {
                            message_expression_error =
                                Some("messageExpression must evaluate to a string".to_string())
                        }
                        Ok((p, _, _)) => rule.message_expression = Some(p),
                    }
                }
                if message_expression_error.is_none() && !spec.field_path.is_empty() {
                    rule.field_path = field_path(nodes, node, &spec.field_path).ok();
                }
            }
        }
    }
    Compiled {
        rule,
        message_expression_error,
    }
}

/// `ValidFieldPath`: a relative JSON path of fields (`.a.b`, `['a.b']`) into the node,
/// as a field path (`a.b`, map keys as `[k]`). List indices are not allowed.
fn field_path(nodes: &[SchemaNode], mut node: NodeId, json_path: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = json_path;
    let append = |node: &mut NodeId, out: &mut String, name: &str| -> Result<(), String> {
        let n = &nodes[*node];
        if !n.props.is_empty() {
            let (_, child) = n
                .props
                .get(name)
                .ok_or_else(|| "does not refer to a valid field".to_string())?;
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            *node = *child;
        } else if let Some(a) = n.additional {
            out.push('[');
            out.push_str(name);
            out.push(']');
            *node = a;
        } else {
            return Err("does not refer to a valid field".to_string());
        }
        Ok(())
    };
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[', ']']).unwrap_or(r.len());
            if end == 0 {
                return Err("unexpected end of JSON path".to_string());
            }
            append(&mut node, &mut out, &r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(r) = r.strip_prefix('\'') else {
                return Err("expected single quoted string".to_string());
            };
            let mut end = None;
            let bytes = r.as_bytes();
            for i in 0..bytes.len() {
                if bytes[i] == b'\'' && (i == 0 || bytes[i - 1] != b'\\') {
                    end = Some(i);
                    break;
                }
            }
            let end = end.ok_or_else(|| "unexpected end of JSON path".to_string())?;
            let name = unescape_single_quoted(&r[..end])?;
            append(&mut node, &mut out, &name)?;
            rest = r[end + 1..]
                .strip_prefix(']')
                .ok_or_else(|| "expected ]".to_string())?;
        } else {
            return Err(format!("expected [ or . but got: {rest}"));
        }
    }
    Ok(out)
}

fn unescape_single_quoted(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        out.push(match chars.next() {
            Some('a') => '\u{7}',
            Some('b') => '\u{8}',
            Some('f') => '\u{c}',
            Some('n') => '\n',
            Some('r') => '\r',
            Some('t') => '\t',
            Some('v') => '\u{b}',
            Some('\'') => '\'',
            Some('\\') => '\\',
            other => return Err(format!("invalid escape char \\{}", other.unwrap_or(' '))),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------
// The CEL environment.

/// The base environment: the standard library and optionals, the strings and lists
/// extensions, and the Kubernetes libraries this module implements.
fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // cel-go keeps the last of repeated map literal keys.
        env.set_error_on_duplicate_map_keys(false);
        env.add_extension(cel::extensions::strings)
            .and_then(|()| env.add_extension(cel::extensions::lists))
            .and_then(|()| kubernetes_lists(&mut env))
            .and_then(|()| sets(&mut env))
            .and_then(|()| quantities(&mut env))
            .expect("the CEL libraries declare distinct overloads");
        Arc::new(env)
    })
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

/// The elements of a list argument.
fn elements<'a, 'v>(list: &'a (dyn Val + 'v)) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let iter = list.as_iterable().ok_or_else(|| {
        ExecutionError::no_such_overload("list", vec![list.get_type().name().into()])
    })?;
    let mut it = iter.iter();
    let mut out = Vec::new();
    while let Some(v) = it.next() {
        out.push(v);
    }
    Ok(out)
}

fn compare(a: &dyn Val, b: &dyn Val) -> Result<std::cmp::Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| ExecutionError::no_such_overload("_<_", vec![a.get_type().name().into()]))?
        .compare(b)
}

/// `k8s.io/apiserver/pkg/cel/library/lists.go`.
fn kubernetes_lists(env: &mut Env) -> Result<(), cel::DeclarationError> {
    use celtypes::LIST_TYPE as LIST;
    env.add_member_overload("isSorted", "list_is_sorted_bool", LIST, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_a_index_of_int",
        LIST,
        vec![celtypes::DYN_TYPE],
        index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_a_last_index_of_int",
        LIST,
        vec![celtypes::DYN_TYPE],
        last_index_of,
    )
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    for pair in items.windows(2) {
        if compare(pair[0], pair[1])? == std::cmp::Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    let Some((first, rest)) = items.split_first() else {
        // The static type picks the zero; an empty list has none at runtime: int.
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    let mut acc: Box<dyn Val + 'v> = first.clone_as_boxed();
    for item in rest {
        let next = acc
            .as_adder()
            .ok_or_else(|| ExecutionError::no_such_overload("sum", vec![]))?
            .add(*item)?
            .into_owned();
        acc = next;
    }
    Ok(CowVal::Owned(acc))
}

fn extreme<'b, 'v>(args: Args<'b, 'v>, name: &str, prefer: std::cmp::Ordering) -> Ret<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    let mut best: Option<&(dyn Val + 'v)> = None;
    for item in items {
        best = Some(match best {
            Some(b) if compare(b, item)? != prefer => b,
            _ => item,
        });
    }
    best.map(|b| CowVal::Owned(b.clone_as_boxed()))
        .ok_or_else(|| ExecutionError::function_error(name, format!("{name} called on empty list")))
}

fn min<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, "min", std::cmp::Ordering::Greater)
}

fn max<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    extreme(args, "max", std::cmp::Ordering::Less)
}

fn index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    let i = items.iter().position(|v| v.equals(args[1].as_ref()));
    Ok(CowVal::owned(CelInt::from(i.map_or(-1, |i| i as i64))))
}

fn last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let items = elements(args[0].as_ref())?;
    let i = items.iter().rposition(|v| v.equals(args[1].as_ref()));
    Ok(CowVal::owned(CelInt::from(i.map_or(-1, |i| i as i64))))
}

/// cel-go's `ext.Sets()`.
fn sets(env: &mut Env) -> Result<(), cel::DeclarationError> {
    let lists = || vec![celtypes::LIST_TYPE, celtypes::LIST_TYPE];
    env.add_overload(
        "sets.contains",
        "list_sets_contains_list",
        lists(),
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "list_sets_equivalent_list",
        lists(),
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "list_sets_intersects_list",
        lists(),
        sets_intersects,
    )
}

fn contains_all(a: &[&dyn Val], b: &[&dyn Val]) -> bool {
    b.iter().all(|x| a.iter().any(|y| y.equals(*x)))
}

fn sets_contains<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = (elements(args[0].as_ref())?, elements(args[1].as_ref())?);
    Ok(CowVal::owned(CelBool::from(contains_all(&a, &b))))
}

fn sets_equivalent<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = (elements(args[0].as_ref())?, elements(args[1].as_ref())?);
    Ok(CowVal::owned(CelBool::from(
        contains_all(&a, &b) && contains_all(&b, &a),
    )))
}

fn sets_intersects<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = (elements(args[0].as_ref())?, elements(args[1].as_ref())?);
    Ok(CowVal::owned(CelBool::from(
        b.iter().any(|x| a.iter().any(|y| y.equals(*x))),
    )))
}

/// A `resource.Quantity` (`k8s.io/apiserver/pkg/cel/quantity.go`), in nano-units as
/// `crate::quantity` parses it.
#[derive(Clone, Copy, Debug)]
struct Quantity(i128);

const QUANTITY: Type = Type::new_unspecified_type("kubernetes.Quantity");
static QUANTITY_TYPE: Type = QUANTITY;

const NANO: i128 = 1_000_000_000;

impl Val for Quantity {
    fn get_type(&self) -> &Type {
        &QUANTITY_TYPE
    }

    fn cel_type() -> &'static Type {
        &QUANTITY_TYPE
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Quantity>()
            .is_some_and(|o| o.0 == self.0)
    }

    fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
    where
        Self: 'w,
    {
        Box::new(*self)
    }

    fn as_any(&self) -> Option<&dyn std::any::Any> {
        Some(self)
    }
}

impl StaticVal for Quantity {}

/// `k8s.io/apiserver/pkg/cel/library/quantity.go`.
fn quantities(env: &mut Env) -> Result<(), cel::DeclarationError> {
    use celtypes::{INT_TYPE, STRING_TYPE};
    let q = || QUANTITY;
    env.add_overload(
        "quantity",
        "string_to_quantity",
        vec![STRING_TYPE],
        to_quantity,
    )?;
    env.add_overload(
        "isQuantity",
        "is_quantity_string",
        vec![STRING_TYPE],
        is_quantity,
    )?;
    env.add_overload("sign", "quantity_sign", vec![q()], quantity_sign)?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_is_greater_than",
        q(),
        vec![q()],
        quantity_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity_is_less_than",
        q(),
        vec![q()],
        quantity_less,
    )?;
    env.add_member_overload(
        "compareTo",
        "quantity_compare_to",
        q(),
        vec![q()],
        quantity_compare,
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_get_float",
        q(),
        vec![],
        quantity_float,
    )?;
    env.add_member_overload("asInteger", "quantity_get_int", q(), vec![], quantity_int)?;
    env.add_member_overload(
        "isInteger",
        "quantity_is_integer",
        q(),
        vec![],
        quantity_is_integer,
    )?;
    env.add_member_overload("add", "quantity_add", q(), vec![q()], quantity_add)?;
    env.add_member_overload("add", "quantity_add_int", q(), vec![INT_TYPE], quantity_add)?;
    env.add_member_overload("sub", "quantity_sub", q(), vec![q()], quantity_sub)?;
    env.add_member_overload("sub", "quantity_sub_int", q(), vec![INT_TYPE], quantity_sub)
}

fn quantity_arg(v: &dyn Val) -> Result<i128, ExecutionError> {
    if let Some(q) = v.downcast_ref::<Quantity>() {
        return Ok(q.0);
    }
    v.downcast_ref::<CelInt>()
        .map(|i| i128::from(*i.inner()) * NANO)
        .ok_or_else(|| {
            ExecutionError::no_such_overload("quantity", vec![v.get_type().name().into()])
        })
}

fn string_arg(v: &dyn Val) -> Result<&str, ExecutionError> {
    v.downcast_ref::<CelString>()
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::no_such_overload("string", vec![v.get_type().name().into()]))
}

fn to_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = string_arg(args[0].as_ref())?;
    crate::quantity::nano_value(s)
        .map(|n| CowVal::owned(Quantity(n)))
        .ok_or_else(|| {
            ExecutionError::function_error(
                "quantity",
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )
        })
}

fn is_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = string_arg(args[0].as_ref())?;
    Ok(CowVal::owned(CelBool::from(
        crate::quantity::nano_value(s).is_some(),
    )))
}

fn quantity_sign<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(args[0].as_ref())?;
    Ok(CowVal::owned(CelInt::from(q.signum() as i64)))
}

fn quantity_cmp(args: &Args<'_, '_>) -> Result<std::cmp::Ordering, ExecutionError> {
    Ok(quantity_arg(args[0].as_ref())?.cmp(&quantity_arg(args[1].as_ref())?))
}

fn quantity_greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(quantity_cmp(&args)?.is_gt())))
}

fn quantity_less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelBool::from(quantity_cmp(&args)?.is_lt())))
}

fn quantity_compare<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    Ok(CowVal::owned(CelInt::from(quantity_cmp(&args)? as i64)))
}

fn quantity_float<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(args[0].as_ref())?;
    Ok(CowVal::owned(CelDouble::from(q as f64 / NANO as f64)))
}

/// `Quantity.AsInt64`: whole and within an int64.
fn quantity_as_i64(q: i128) -> Option<i64> {
    (q % NANO == 0)
        .then(|| i64::try_from(q / NANO).ok())
        .flatten()
}

fn quantity_int<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(args[0].as_ref())?;
    quantity_as_i64(q)
        .map(|i| CowVal::owned(CelInt::from(i)))
        .ok_or_else(|| {
            ExecutionError::function_error("asInteger", "cannot convert value to integer")
        })
}

fn quantity_is_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = quantity_arg(args[0].as_ref())?;
    Ok(CowVal::owned(CelBool::from(quantity_as_i64(q).is_some())))
}

fn quantity_add<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = (
        quantity_arg(args[0].as_ref())?,
        quantity_arg(args[1].as_ref())?,
    );
    Ok(CowVal::owned(Quantity(a + b)))
}

fn quantity_sub<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = (
        quantity_arg(args[0].as_ref())?,
        quantity_arg(args[1].as_ref())?,
    );
    Ok(CowVal::owned(Quantity(a - b)))
}

// ---------------------------------------------------------------------------------------
// Checking: the part of cel-go's type checker that catches authoring mistakes.

/// A static type, as far as this checker follows it. `Unknown` is where it doesn't (and
/// so never reports an error); `Dyn` is CEL's dynamic type.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    Unknown,
    Dyn,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    Null,
    Duration,
    Timestamp,
    Type,
    List(Box<Ty>),
    Map(Box<Ty>, Box<Ty>),
    Object(NodeId),
    Optional(Box<Ty>),
}

impl Ty {
    /// The name cel-go prints for a primitive type.
    fn simple_name(&self) -> Option<&'static str> {
        Some(match self {
            Ty::Bool => "bool",
            Ty::Int => "int",
            Ty::Uint => "uint",
            Ty::Double => "double",
            Ty::String => "string",
            Ty::Bytes => "bytes",
            Ty::Null => "null_type",
            Ty::Duration => "google.protobuf.Duration",
            Ty::Timestamp => "google.protobuf.Timestamp",
            _ => return None,
        })
    }

    /// A type known for sure: a mismatch with it is an error.
    fn is_concrete(&self) -> bool {
        !matches!(self, Ty::Unknown | Ty::Dyn)
    }

    fn join(self, other: Ty) -> Ty {
        match (self, other) {
            (a, b) if a == b => a,
            (Ty::Unknown, x) | (x, Ty::Unknown) => x,
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.join(*b))),
            (Ty::Map(k1, v1), Ty::Map(k2, v2)) => {
                Ty::Map(Box::new(k1.join(*k2)), Box::new(v1.join(*v2)))
            }
            (Ty::Optional(a), Ty::Optional(b)) => Ty::Optional(Box::new(a.join(*b))),
            _ => Ty::Dyn,
        }
    }
}

/// The CEL type of a node's values (`SchemaDeclType`), `None` when it has none.
fn node_ty(nodes: &[SchemaNode], id: NodeId) -> Option<Ty> {
    let n = &nodes[id];
    if !n.exposed {
        return None;
    }
    if n.int_or_string {
        return Some(Ty::Dyn);
    }
    Some(match n.ty.as_str() {
        "array" => Ty::List(Box::new(node_ty(nodes, n.items?)?)),
        "object" => match n.additional {
            Some(a) => Ty::Map(Box::new(Ty::String), Box::new(node_ty(nodes, a)?)),
            None => Ty::Object(id),
        },
        "string" => match n.format.as_str() {
            "byte" => Ty::Bytes,
            "duration" => Ty::Duration,
            "date" | "date-time" => Ty::Timestamp,
            _ => Ty::String,
        },
        "boolean" => Ty::Bool,
        "number" => Ty::Double,
        "integer" => Ty::Int,
        _ => return None,
    })
}

/// A compile error, where cel-go reports it.
struct Issue {
    line: usize,
    /// 0-based, in characters.
    column: usize,
    message: String,
}

/// The errors as cel-go's `Issues.String()` prints them: sorted by place, each with the
/// line of the source and a caret under the place.
fn render_issues(source: &str, mut issues: Vec<Issue>) -> String {
    issues.sort_by_key(|i| (i.line, i.column));
    let lines: Vec<&str> = source.split('\n').collect();
    let mut out = Vec::new();
    for i in issues {
        let mut s = format!("ERROR: <input>:{}:{}: {}", i.line, i.column + 1, i.message);
        if let Some(line) = i.line.checked_sub(1).and_then(|l| lines.get(l)) {
            let line = line.replace('\t', " ");
            s.push_str("\n | ");
            s.push_str(&line);
            s.push_str("\n | ");
            let mut chars = line.chars();
            for _ in 0..i.column {
                match chars.next() {
                    Some(c) if c.len_utf8() > 1 => s.push('\u{FF0E}'),
                    Some(_) => s.push('.'),
                    None => break,
                }
            }
            match chars.next() {
                Some(c) if c.len_utf8() > 1 => s.push('\u{FF3E}'),
                _ => s.push('^'),
            }
        }
        out.push(s);
    }
    out.join("\n")
}

fn parse_issues(errors: &ParseErrors) -> Vec<Issue> {
    errors
        .errors
        .iter()
        .map(|e| Issue {
            line: usize::try_from(e.pos.0).unwrap_or(0),
            column: usize::try_from(e.pos.1 - 1).unwrap_or(0),
            message: e.msg.clone(),
        })
        .collect()
}

/// Parses and checks an expression with `self` (and `oldSelf`) typed: the program, its
/// type, and whether it refers to `oldSelf`; or the rendered compile errors.
fn check_expression(
    nodes: &[SchemaNode],
    source: &str,
    self_ty: &Ty,
    old_ty: &Ty,
) -> Result<(Program, Ty, bool), String> {
    let program = env()
        .compile(source)
        .map_err(|e| render_issues(source, parse_issues(&e)))?;
    let mut checker = Checker {
        nodes,
        info: program.source_info(),
        scopes: vec![
            ("self".to_string(), self_ty.clone()),
            ("oldSelf".to_string(), old_ty.clone()),
        ],
        issues: Vec::new(),
        uses_old_self: false,
        in_format: false,
    };
    let ty = checker.check(program.expression());
    if !checker.issues.is_empty() {
        return Err(render_issues(source, checker.issues));
    }
    let uses_old_self = checker.uses_old_self;
    Ok((program, ty, uses_old_self))
}

struct Checker<'a> {
    nodes: &'a [SchemaNode],
    info: &'a SourceInfo,
    scopes: Vec<(String, Ty)>,
    issues: Vec<Issue>,
    uses_old_self: bool,
    /// Checking the arguments of `format()` (or lists and maps in them).
    in_format: bool,
}

/// The names a bare identifier may be besides variables: CEL's type names.
const TYPE_NAMES: [&str; 13] = [
    "bool",
    "bytes",
    "double",
    "int",
    "uint",
    "string",
    "list",
    "map",
    "null_type",
    "type",
    "optional_type",
    "google.protobuf.Duration",
    "google.protobuf.Timestamp",
];

impl Checker<'_> {
    fn error(&mut self, id: u64, message: String) {
        let (line, column) = self
            .info
            .offset_for(id)
            .map(|(start, _)| line_column(&self.info.source, start as usize))
            .unwrap_or((1, 0));
        self.issues.push(Issue {
            line,
            column,
            message,
        });
    }

    fn variable(&mut self, name: &str) -> Option<Ty> {
        let i = self.scopes.iter().rposition(|(n, _)| n == name)?;
        if i == 1 && name == "oldSelf" {
            self.uses_old_self = true;
        }
        Some(self.scopes[i].1.clone())
    }

    /// Whether an expression is a name that is no variable: a function's namespace
    /// (`optional.of`, `sets.contains`), left to the evaluation.
    fn is_namespace(&self, e: &IdedExpr) -> bool {
        match &e.expr {
            Expr::Ident(name) => {
                !self.scopes.iter().any(|(n, _)| n == name) && !TYPE_NAMES.contains(&name.as_str())
            }
            Expr::Select(s) if !s.test => self.is_namespace(&s.operand),
            _ => false,
        }
    }

    fn check(&mut self, e: &IdedExpr) -> Ty {
        if !matches!(e.expr, Expr::List(_) | Expr::Map(_)) {
            let in_format = std::mem::replace(&mut self.in_format, false);
            let t = self.check_expr(e);
            self.in_format = in_format;
            return t;
        }
        self.check_expr(e)
    }

    fn check_expr(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Expr::Ident(name) => {
                if let Some(t) = self.variable(name) {
                    t
                } else if TYPE_NAMES.contains(&name.as_str()) {
                    Ty::Type
                } else {
                    self.error(
                        e.id,
                        format!("undeclared reference to '{name}' (in container '')"),
                    );
                    Ty::Unknown
                }
            }
            Expr::Select(s) => {
                if !s.test && self.is_namespace(&s.operand) {
                    // A qualified name: only type names are declared.
                    let mut root = &*s.operand;
                    let mut name = s.field.clone();
                    while let Expr::Select(inner) = &root.expr {
                        name = format!("{}.{name}", inner.field);
                        root = &inner.operand;
                    }
                    if let Expr::Ident(first) = &root.expr {
                        if TYPE_NAMES.contains(&format!("{first}.{name}").as_str()) {
                            return Ty::Type;
                        }
                        self.error(
                            root.id,
                            format!("undeclared reference to '{first}' (in container '')"),
                        );
                    }
                    return Ty::Unknown;
                }
                let operand = self.check(&s.operand);
                let field = self.select(e.id, operand, &s.field);
                if s.test { Ty::Bool } else { field }
            }
            Expr::Call(call) => self.call(call),
            Expr::List(l) => {
                let items: Vec<(u64, Ty)> =
                    l.elements.iter().map(|i| (i.id, self.check(i))).collect();
                self.homogeneous(&items, true);
                let elem = items.into_iter().fold(Ty::Unknown, |a, (_, t)| a.join(t));
                Ty::List(Box::new(elem))
            }
            Expr::Map(m) => {
                let (mut keys, mut values) = (Vec::new(), Vec::new());
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(entry) = &entry.expr {
                        keys.push((entry.key.id, self.check(&entry.key)));
                        values.push((entry.value.id, self.check(&entry.value)));
                    }
                }
                self.homogeneous(&keys, false);
                self.homogeneous(&values, false);
                let k = keys.into_iter().fold(Ty::Unknown, |a, (_, t)| a.join(t));
                let v = values.into_iter().fold(Ty::Unknown, |a, (_, t)| a.join(t));
                Ty::Map(Box::new(k), Box::new(v))
            }
            Expr::Comprehension(c) => {
                let range = self.check(&c.iter_range);
                let elem = match &range {
                    Ty::List(t) => (**t).clone(),
                    Ty::Map(k, _) => (**k).clone(),
                    Ty::Dyn => Ty::Dyn,
                    _ => Ty::Unknown,
                };
                let accu = self.check(&c.accu_init);
                self.scopes.push((c.iter_var.clone(), elem));
                self.scopes.push((c.accu_var.clone(), accu.clone()));
                self.check(&c.loop_cond);
                let step = self.check(&c.loop_step);
                if let Some(last) = self.scopes.last_mut() {
                    last.1 = accu.join(step);
                }
                let result = self.check(&c.result);
                self.scopes.truncate(self.scopes.len() - 2);
                result
            }
            Expr::Struct(_) | Expr::Unspecified => Ty::Unknown,
        }
    }

    /// The type of `operand.field`, reporting an object's undefined field.
    fn select(&mut self, id: u64, operand: Ty, field: &str) -> Ty {
        match operand {
            Ty::Object(node) => match self.nodes[node].fields.get(field) {
                Some(&child) => node_ty(self.nodes, child).unwrap_or(Ty::Unknown),
                None => {
                    self.error(id, format!("undefined field '{field}'"));
                    Ty::Unknown
                }
            },
            Ty::Map(_, v) => *v,
            Ty::Optional(inner) => Ty::Optional(Box::new(self.select(id, *inner, field))),
            Ty::Dyn => Ty::Dyn,
            _ => Ty::Unknown,
        }
    }

    /// cel-go's literal validators (`ValidateDurationLiterals`, `ValidateTimestampLiterals`,
    /// `ValidateRegexLiterals`): a literal first argument of `duration`, `timestamp` or
    /// `matches` must be valid.
    fn literal_argument(&mut self, call: &CallExpr) {
        let Some(IdedExpr {
            id,
            expr: Expr::Literal(LiteralValue::String(s)),
        }) = call.args.first()
        else {
            return;
        };
        let valid = match call.func_name.as_str() {
            "duration" => go_duration(s.inner()).is_some(),
            "timestamp" => chrono::DateTime::parse_from_rfc3339(s.inner()).is_ok(),
            "matches" => valid_regex(s.inner()),
            _ => return,
        };
        if !valid {
            self.error(*id, format!("invalid {} argument", call.func_name));
        }
    }

    /// `ValidateHomogeneousAggregateLiterals`: the elements of a list literal (keys and
    /// values of a map literal) are of one type, but under `format()`.
    fn homogeneous(&mut self, items: &[(u64, Ty)], stop_at_first: bool) {
        if self.in_format {
            return;
        }
        let mut first: Option<&str> = None;
        for (id, ty) in items {
            let Some(name) = ty.simple_name() else {
                continue;
            };
            match first {
                None => first = Some(name),
                Some(f) if f != name => {
                    self.error(*id, format!("expected type '{f}' but found '{name}'"));
                    if stop_at_first {
                        return;
                    }
                }
                Some(_) => {}
            }
        }
    }

    fn call(&mut self, call: &CallExpr) -> Ty {
        if let Some(target) = &call.target
            && self.is_namespace(target)
        {
            // `optional.of(x)`, `sets.contains(a, b)`, ...: a namespaced function.
            let args: Vec<Ty> = call.args.iter().map(|a| self.check(a)).collect();
            return match (call.func_name.as_str(), args.first()) {
                ("of" | "ofNonZeroValue", Some(t)) => Ty::Optional(Box::new(t.clone())),
                ("none", _) => Ty::Optional(Box::new(Ty::Unknown)),
                ("contains" | "equivalent" | "intersects", _) => Ty::Bool,
                ("quote", _) => Ty::String,
                ("range", _) => Ty::List(Box::new(Ty::Int)),
                _ => Ty::Unknown,
            };
        }
        let in_format = std::mem::replace(&mut self.in_format, false);
        let target = call.target.as_ref().map(|t| self.check(t));
        self.in_format = call.func_name == "format";
        let args: Vec<Ty> = call.args.iter().map(|a| self.check(a)).collect();
        self.in_format = in_format;
        self.literal_argument(call);
        let first = target.clone().or_else(|| args.first().cloned());
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Ty::Unknown);
        let elem = |t: Option<Ty>| match t {
            Some(Ty::List(t)) => *t,
            Some(Ty::Dyn) => Ty::Dyn,
            _ => Ty::Unknown,
        };
        match call.func_name.as_str() {
            "_&&_"
            | "_||_"
            | "!_"
            | "_==_"
            | "_!=_"
            | "_<_"
            | "_<=_"
            | "_>_"
            | "_>=_"
            | "@in"
            | "@not_strictly_false"
            | "matches"
            | "startsWith"
            | "endsWith"
            | "contains"
            | "isSorted"
            | "hasValue"
            | "exists"
            | "all"
            | "exists_one" => Ty::Bool,
            "_?_:_" => arg(1).join(arg(2)),
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" => {
                let (a, b) = (arg(0), arg(1));
                match (call.func_name.as_str(), a, b) {
                    ("_-_", Ty::Timestamp, Ty::Timestamp) => Ty::Duration,
                    (_, Ty::Timestamp, Ty::Duration) | (_, Ty::Duration, Ty::Timestamp) => {
                        Ty::Timestamp
                    }
                    ("_+_", Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.join(*b))),
                    (_, a, b) if a == b || !a.is_concrete() || !b.is_concrete() => a.join(b),
                    _ => Ty::Unknown,
                }
            }
            "-_" => arg(0),
            "_[_]" => match arg(0) {
                Ty::List(t) => *t,
                Ty::Map(_, v) => *v,
                Ty::Dyn => Ty::Dyn,
                _ => Ty::Unknown,
            },
            "size" | "int" | "indexOf" | "lastIndexOf" | "getSeconds" | "getMinutes"
            | "getHours" | "getMilliseconds" | "getFullYear" | "getMonth" | "getDate"
            | "getDayOfMonth" | "getDayOfWeek" | "getDayOfYear" => Ty::Int,
            "uint" => Ty::Uint,
            "double" => Ty::Double,
            "string" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring"
            | "charAt" | "format" | "join" => Ty::String,
            "bytes" => Ty::Bytes,
            "bool" => Ty::Bool,
            "duration" => Ty::Duration,
            "timestamp" => Ty::Timestamp,
            "dyn" => Ty::Dyn,
            "type" => Ty::Type,
            "split" => Ty::List(Box::new(Ty::String)),
            "reverse" => first.unwrap_or(Ty::Unknown),
            "sort" | "slice" | "distinct" => first.unwrap_or(Ty::Unknown),
            "sum" | "min" | "max" => elem(first),
            "value" => match first {
                Some(Ty::Optional(t)) => *t,
                _ => Ty::Unknown,
            },
            "orValue" => match first {
                Some(Ty::Optional(t)) => t.join(arg(0)),
                _ => Ty::Unknown,
            },
            _ => Ty::Unknown,
        }
    }
}

/// Whether the `matches` of the `cel` crate accepts a pattern.
fn valid_regex(pattern: &str) -> bool {
    static PROBE: OnceLock<Option<Program>> = OnceLock::new();
    let Some(probe) = PROBE.get_or_init(|| env().compile("''.matches(p)").ok()) else {
        return true;
    };
    let mut ctx = Context::with_env(Arc::clone(env()));
    ctx.add_variable_as_val("p", Box::new(CelString::from(pattern)));
    cel::Value::resolve_val(probe.expression(), &ctx).is_ok()
}

/// The 1-based line and 0-based column of a character offset.
fn line_column(source: &str, offset: usize) -> (usize, usize) {
    let (mut line, mut column) = (1, 0);
    for c in source.chars().take(offset) {
        if c == '\n' {
            line += 1;
            column = 0;
        } else {
            column += 1;
        }
    }
    (line, column)
}

// ---------------------------------------------------------------------------------------
// Values: a JSON value as CEL sees it through its schema (`UnstructuredToVal`).

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
fn to_val<'v>(nodes: &'v [SchemaNode], id: NodeId, v: &'v Value) -> Box<dyn Val + 'v> {
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

/// Go's `time.ParseDuration`.
fn go_duration(s: &str) -> Option<chrono::Duration> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let frac_len = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            frac_part = &r[..frac_len];
            rest = &r[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: i128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let int: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut value = int.checked_mul(unit)?;
        if !frac_part.is_empty() {
            let digits = frac_part.len().min(18) as u32;
            let frac: i128 = frac_part[..digits as usize].parse().ok()?;
            value += frac * unit / 10i128.pow(digits);
        }
        total = total.checked_add(value)?;
    }
    let total = if neg { -total } else { total };
    i64::try_from(total).ok().map(chrono::Duration::nanoseconds)
}

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

// ---------------------------------------------------------------------------------------
// Evaluating.

/// `self` and `oldSelf` for one rule.
struct Vars<'a, 'v> {
    this: &'a (dyn Val + 'v),
    old: Option<&'a (dyn Val + 'v)>,
    /// `optionalOldSelf`: `oldSelf` is an optional, empty on create.
    optional: Option<Box<dyn Val + 'v>>,
}

impl VariableResolver for Vars<'_, '_> {
    fn resolve<'b>(&'b self, name: &str) -> Option<CowVal<'b, 'b>> {
        match name {
            "self" => Some(CowVal::Borrowed(self.this)),
            "oldSelf" => match &self.optional {
                Some(o) => Some(CowVal::Borrowed(o.as_ref())),
                None => self.old.map(CowVal::Borrowed),
            },
            _ => None,
        }
    }
}

/// Old and new values at the same place, for ratcheting (`CorrelatedObject`).
#[derive(Clone, Copy)]
struct Corr<'a> {
    new: &'a Value,
    old: &'a Value,
    node: NodeId,
}

/// The correlation of the current node, and that of its nearest correlated ancestor
/// (`ratchetingOptions`).
#[derive(Clone, Copy, Default)]
struct Ratchet<'a> {
    current: Option<Corr<'a>>,
    parent: Option<Corr<'a>>,
}

impl<'a> Ratchet<'a> {
    fn key(self, nodes: &[SchemaNode], field: &str) -> Ratchet<'a> {
        let Some(current) = self.current else {
            return self;
        };
        if self.parent.is_none() && matches!(field, "apiVersion" | "kind") {
            return Ratchet::default();
        }
        Ratchet {
            current: corr_key(nodes, current, field),
            parent: Some(current),
        }
    }

    fn index(self, nodes: &[SchemaNode], i: usize) -> Ratchet<'a> {
        let Some(current) = self.current else {
            return self;
        };
        Ratchet {
            current: corr_index(nodes, current, i),
            parent: Some(current),
        }
    }

    /// Whether an error here is only a warning: this node, or its nearest correlated
    /// ancestor, did not change.
    fn unchanged(&self, nodes: &[SchemaNode]) -> bool {
        match (self.current, self.parent) {
            (Some(c), _) | (None, Some(c)) => deep_equal(nodes, c),
            (None, None) => false,
        }
    }
}

fn corr_key<'a>(nodes: &[SchemaNode], c: Corr<'a>, field: &str) -> Option<Corr<'a>> {
    let new = c.new.as_object()?.get(field)?;
    let old = c.old.as_object()?.get(field)?;
    let n = &nodes[c.node];
    let node = match n.props.get(field) {
        Some((_, child)) => *child,
        None => n.additional?,
    };
    Some(Corr { new, old, node })
}

fn corr_index<'a>(nodes: &[SchemaNode], c: Corr<'a>, i: usize) -> Option<Corr<'a>> {
    let new = c.new.as_array()?.get(i)?;
    let old = map_list_match(&nodes[c.node], c.old.as_array()?, new)?;
    Some(Corr {
        new,
        old,
        node: nodes[c.node].items?,
    })
}

/// `CachedDeepEqual`: map lists compare by their keys, objects by their schema's fields.
fn deep_equal(nodes: &[SchemaNode], c: Corr<'_>) -> bool {
    match (c.new, c.old) {
        (Value::Null, Value::Null) => true,
        (Value::Array(new), Value::Array(old)) => {
            if new.len() != old.len() {
                return false;
            }
            if !matches!(nodes[c.node].list_type, ListType::Map(..)) {
                return new == old;
            }
            (0..new.len())
                .all(|i| corr_index(nodes, c, i).is_some_and(|child| deep_equal(nodes, child)))
        }
        (Value::Object(new), Value::Object(old)) => {
            new.len() == old.len()
                && new
                    .keys()
                    .all(|k| corr_key(nodes, c, k).is_some_and(|child| deep_equal(nodes, child)))
        }
        (new, old) => new == old,
    }
}

/// The old element of a map list with the same keys as `item` (`MapList.Get`); none for
/// other lists.
fn map_list_match<'a>(node: &SchemaNode, old: &'a [Value], item: &Value) -> Option<&'a Value> {
    let ListType::Map(keys, _) = &node.list_type else {
        return None;
    };
    if keys.is_empty() || node.ty != "array" {
        return None;
    }
    let key_of = |v: &'a Value| -> Option<Vec<&'a Value>> {
        let obj = v.as_object()?;
        keys.iter()
            .map(|k| {
                obj.get(k)
                    .filter(|v| !v.is_array() && !v.is_object() && !v.is_null())
            })
            .collect()
    };
    // The keys of `item` borrow from another lifetime: compare by value.
    let obj = item.as_object()?;
    let wanted: Vec<&Value> = keys
        .iter()
        .map(|k| {
            obj.get(k)
                .filter(|v| !v.is_array() && !v.is_object() && !v.is_null())
        })
        .collect::<Option<_>>()?;
    old.iter().find(|o| {
        key_of(o)
            .is_some_and(|k| k.len() == wanted.len() && k.iter().zip(&wanted).all(|(a, b)| a == b))
    })
}

struct Walk<'a> {
    nodes: &'a [SchemaNode],
    errors: Vec<Cause>,
    warnings: Vec<String>,
}

/// Appends a property to a field path (`field.Path.Child`).
fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// A field path as the server prints it: `<nil>` for the root.
fn shown(path: &str) -> String {
    if path.is_empty() {
        "<nil>".to_string()
    } else {
        path.to_string()
    }
}

impl<'a> Walk<'a> {
    fn node(
        &mut self,
        v: &Validator,
        path: &mut String,
        new: &'a Value,
        old: Option<&'a Value>,
        ratchet: Ratchet<'a>,
    ) {
        // Null values are not validated, nor anything under them.
        if new.is_null() {
            return;
        }
        let old = old.filter(|o| !o.is_null());
        self.expressions(v, path, new, old, ratchet);
        for a in &v.all_of {
            let r = Ratchet {
                current: None,
                parent: ratchet.parent,
            };
            self.node(a, path, new, old, r);
        }
        let nodes = self.nodes;
        let len = path.len();
        match new {
            Value::Array(items) => {
                if let Some(iv) = &v.items {
                    let old_items = old.and_then(Value::as_array);
                    for (i, item) in items.iter().enumerate() {
                        let old_item =
                            old_items.and_then(|o| map_list_match(&nodes[v.node], o, item));
                        path.push_str(&format!("[{i}]"));
                        self.node(iv, path, item, old_item, ratchet.index(nodes, i));
                        path.truncate(len);
                    }
                }
            }
            Value::Object(map) => {
                let correlatable = nodes[v.node].map_correlatable;
                let old_map = old.and_then(Value::as_object).filter(|_| correlatable);
                if let Some(av) = &v.additional {
                    for (k, val) in map {
                        path.push_str(&format!("[{k}]"));
                        let old_v = old_map.and_then(|o| o.get(k));
                        self.node(av, path, val, old_v, ratchet.key(nodes, k));
                        path.truncate(len);
                    }
                }
                for (k, val) in map {
                    if let Some(pv) = v.props.get(k) {
                        let mut p = child_path(path, k);
                        let old_v = old_map.and_then(|o| o.get(k));
                        self.node(pv, &mut p, val, old_v, ratchet.key(nodes, k));
                    }
                }
            }
            _ => {}
        }
    }

    /// `validateExpressions`: the rules of one node.
    fn expressions(
        &mut self,
        v: &Validator,
        path: &str,
        new: &'a Value,
        old: Option<&'a Value>,
        ratchet: Ratchet<'a>,
    ) {
        let nodes = self.nodes;
        let node = &nodes[v.node];
        let ty = Value::from(node.ty.as_str());
        if let Some(e) = &v.init_error {
            self.errors.push(Cause::invalid(
                shown(path),
                &ty,
                &format!("rule compiler initialization error: {e}"),
            ));
            return;
        }
        // Transition rules run only where there is an old value, unless oldSelf is
        // optional.
        let runs = |r: &Rule| !r.uses_old_self || old.is_some() || r.optional_old_self;
        if !v.rules.iter().any(runs) {
            return;
        }
        let this = to_val(nodes, v.node, new);
        let old_val = old
            .filter(|_| v.rules.iter().any(|r| r.uses_old_self))
            .map(|o| to_val(nodes, v.node, o));
        for rule in &v.rules {
            let program = match &rule.program {
                Ok(Some(p)) => p,
                Ok(None) => continue,
                Err(e) => {
                    self.errors.push(Cause::invalid(
                        shown(path),
                        &ty,
                        &format!("rule compile error: {e}"),
                    ));
                    continue;
                }
            };
            if !runs(rule) {
                continue;
            }
            let vars = Vars {
                this: this.as_ref(),
                old: old_val.as_deref(),
                optional: rule.optional_old_self.then(|| {
                    Box::new(match &old_val {
                        Some(o) => CelOptional::of(o.clone_as_boxed()),
                        None => CelOptional::none(),
                    }) as Box<dyn Val>
                }),
            };
            let outcome = evaluate(program, &vars, |v| {
                v.downcast_ref::<CelBool>().map(|b| *b.inner())
            });
            let error_string = rule_error_string(rule);
            match outcome {
                Ok(Some(true)) => continue,
                Ok(_) => {}
                Err(e) => {
                    let text = error_text(&e);
                    let detail = if text.starts_with("no such overload") {
                        format!(
                            "'{text}': call arguments did not match a supported operator, function or macro signature for rule: {error_string}"
                        )
                    } else {
                        format!("{text} evaluating rule: {error_string}")
                    };
                    self.errors.push(Cause::invalid(shown(path), &ty, &detail));
                    continue;
                }
            }
            let field = match &rule.field_path {
                Some(fp) => child_path(path, fp),
                None => path.to_string(),
            };
            let detail = rule
                .message_expression
                .as_ref()
                .and_then(|m| message_expression(m, &vars))
                .unwrap_or_else(|| {
                    if rule.message.is_empty() {
                        format!("failed rule: {error_string}")
                    } else {
                        rule.message.trim().to_string()
                    }
                });
            let value = (!matches!(node.ty.as_str(), "object" | "array")).then_some(new);
            let cause = cause_for_reason(shown(&field), value, &detail, rule.reason.as_deref());
            if !rule.uses_old_self && ratchet.unchanged(nodes) {
                self.warnings
                    .push(format!("{}: {}", cause.field, cause.message));
            } else {
                self.errors.push(cause);
            }
        }
    }
}

/// Runs a program with `self`/`oldSelf` bound, reading the result with `read`.
fn evaluate<T>(
    program: &Program,
    vars: &Vars<'_, '_>,
    read: impl FnOnce(&dyn Val) -> T,
) -> Result<T, ExecutionError> {
    let mut ctx = Context::with_env(Arc::clone(env()));
    ctx.set_variable_resolver(vars);
    let out = cel::Value::resolve_val(program.expression(), &ctx)?;
    Ok(read(out.as_ref()))
}

/// `evalMessageExpression`: the message, or `None` to fall back to `message`.
fn message_expression(program: &Program, vars: &Vars<'_, '_>) -> Option<String> {
    let text = evaluate(program, vars, |v| {
        v.downcast_ref::<CelString>()
            .map(|s| s.inner().trim().to_string())
    })
    .ok()??;
    (!text.is_empty() && text.len() <= MAX_MESSAGE_EXPRESSION_BYTES && !text.contains('\n'))
        .then_some(text)
}

/// `ruleErrorString`: the message, else the rule.
fn rule_error_string(rule: &Rule) -> String {
    if rule.message.is_empty() {
        rule.rule.trim().to_string()
    } else {
        rule.message.trim().to_string()
    }
}

/// `fieldErrorForReason`; `value` is `None` for objects and arrays, whose value the
/// server leaves out (`field.OmitValueType`).
fn cause_for_reason(
    field: String,
    value: Option<&Value>,
    detail: &str,
    reason: Option<&str>,
) -> Cause {
    match (reason, value) {
        (Some("FieldValueForbidden"), _) => Cause::forbidden(field, detail),
        (Some("FieldValueRequired"), _) => required(field, detail),
        (Some("FieldValueDuplicate"), Some(v)) => Cause::duplicate(field, v),
        (Some("FieldValueDuplicate"), None) => {
            Cause::new("FieldValueDuplicate", field, "Duplicate value")
        }
        (_, Some(v)) => Cause::invalid(field, v, detail),
        (_, None) => Cause::new(
            "FieldValueInvalid",
            field,
            format!("Invalid value: {detail}"),
        ),
    }
}

/// An evaluation error as cel-go words it.
fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {}", value_text(i)),
        ExecutionError::DivisionByZero(_) => "division by zero".to_string(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".to_string(),
        ExecutionError::Overflow(..) => "integer overflow".to_string(),
        ExecutionError::UndeclaredReference(name) => {
            format!("undeclared reference to '{name}' (in container '')")
        }
        ExecutionError::FunctionError { message, .. } => message.clone(),
        ExecutionError::DuplicateKey(k) => format!("repeated key: {}", value_text(k)),
        _ => "no such overload".to_string(),
    }
}

fn value_text(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        cel::Value::Float(f) => f.to_string(),
        cel::Value::String(s) => s.to_string(),
        cel::Value::Bool(b) => b.to_string(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SCHEMA_PATH: &str = "spec.versions[0].schema.openAPIV3Schema";

    /// The compiled rules of a published CRD's version.
    fn published(file: &str, version: &str) -> Rules {
        let crd = crate::crd::published_crd(file);
        let versions = crd["spec"]["versions"].as_array().expect("versions");
        let (i, v) = versions
            .iter()
            .enumerate()
            .find(|(_, v)| v["name"] == version)
            .unwrap_or_else(|| panic!("{file} has no version {version}"));
        let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
        Rules::compile(&v["schema"]["openAPIV3Schema"], &path)
            .unwrap_or_else(|e| panic!("{file} {version}: {e:#?}"))
    }

    fn count_rules(v: &Validator) -> usize {
        v.rules
            .iter()
            .filter(|r| matches!(r.program, Ok(Some(_))))
            .count()
            + v.props.values().map(count_rules).sum::<usize>()
            + v.items.as_deref().map_or(0, count_rules)
            + v.additional.as_deref().map_or(0, count_rules)
            + v.all_of.iter().map(count_rules).sum::<usize>()
    }

    fn messages(causes: &[Cause]) -> Vec<(String, String, String)> {
        causes
            .iter()
            .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
            .collect()
    }

    // apiextensions-apiserver pkg/apis/apiextensions/validation/validation.go: every rule of
    // every published manifest compiles, as the real server accepted these CRDs.
    #[test]
    fn every_published_rule_compiles() {
        let dir = std::env::var_os("MODELPLANE_CRDS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../target/crds").into());
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/crds.sh", dir.display()))
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .filter(|f| f.ends_with(".yaml"))
            .collect();
        files.sort();
        let (mut with_rules, mut compiled) = (0, 0);
        for file in &files {
            let crd = crate::crd::published_crd(file);
            for (i, v) in crd["spec"]["versions"]
                .as_array()
                .expect("versions")
                .iter()
                .enumerate()
            {
                let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
                let rules = Rules::compile(&v["schema"]["openAPIV3Schema"], &path)
                    .unwrap_or_else(|e| panic!("{file} {}: {e:#?}", v["name"]));
                with_rules += usize::from(!rules.is_empty());
                compiled += rules.root.as_ref().map_or(0, count_rules);
            }
        }
        assert!(files.len() >= 5, "{files:?}");
        assert!(with_rules >= 5, "{with_rules} versions with rules");
        // The manifests of target/crds hold 248 rules (with repeats across versions).
        assert!(compiled >= 200, "{compiled} rules compiled");
    }

    fn httproute(rules: Value) -> Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "HTTPRoute",
            "metadata": {"name": "chat", "namespace": "default"},
            "spec": {
                "parentRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
                "rules": rules,
            },
        })
    }

    fn backend(name: &str, weight: i64) -> Value {
        json!({"group": "", "kind": "Service", "name": name, "port": 8000, "weight": weight})
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateExpressions):
    // a failed rule on an object node is field.Invalid at the node with the value omitted.
    #[test]
    fn httproute_relative_path_prefix_is_rejected() {
        let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
        let route = httproute(json!([{
            "matches": [{"path": {"type": "PathPrefix", "value": "foo"}}],
            "backendRefs": [backend("llm", 1)],
        }]));
        assert_eq!(
            messages(&rules.validate(&route, None)),
            [(
                "FieldValueInvalid".to_string(),
                "spec.rules[0].matches[0].path".to_string(),
                "Invalid value: value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']"
                    .to_string(),
            )]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: a valid route passes
    // every rule of the manifest (weights, header matches, timeouts with duration()).
    #[test]
    fn httproute_canary_passes() {
        let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
        let route = httproute(json!([
            {
                "matches": [{
                    "path": {"type": "PathPrefix", "value": "/v1/chat"},
                    "headers": [{"type": "Exact", "name": "x-canary", "value": "true"}],
                }],
                "backendRefs": [backend("llm-canary", 1)],
            },
            {
                "matches": [{"path": {"type": "PathPrefix", "value": "/v1/chat"}}],
                "backendRefs": [backend("llm-stable", 90), backend("llm-canary", 10)],
                "timeouts": {"request": "30s", "backendRequest": "10s"},
            },
        ]));
        assert_eq!(messages(&rules.validate(&route, None)), []);
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go with cel-go's
    // duration(): Go duration strings compare as durations.
    #[test]
    fn httproute_backend_timeout_longer_than_request_fails() {
        let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
        let route = httproute(json!([{
            "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
            "backendRefs": [backend("llm", 1)],
            "timeouts": {"request": "1m", "backendRequest": "1h30m"},
        }]));
        assert_eq!(
            messages(&rules.validate(&route, None)),
            [(
                "FieldValueInvalid".to_string(),
                "spec.rules[0].timeouts".to_string(),
                "Invalid value: backendRequest timeout cannot be longer than request timeout"
                    .to_string(),
            )]
        );
    }

    // k8s.io/apiserver pkg/cel/escaping.go: `namespace` is a CEL reserved word, seen as
    // `__namespace__` (HTTPRoute's parentRefs uniqueness rules).
    #[test]
    fn parent_refs_see_namespace_escaped() {
        let rules = published("gateway.networking.k8s.io_httproutes.yaml", "v1");
        let refs = |a: &str, b: &str| {
            let mut route = httproute(json!([{
                "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                "backendRefs": [backend("llm", 1)],
            }]));
            route["spec"]["parentRefs"] = json!([
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": a},
                {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": b},
            ]);
            messages(&rules.validate(&route, None))
        };
        assert_eq!(refs("infra", "edge"), []);
        assert_eq!(
            refs("infra", "infra"),
            [(
                "FieldValueInvalid".to_string(),
                "spec.parentRefs".to_string(),
                "Invalid value: sectionName must be unique when parentRefs includes 2 or more references to the same parent"
                    .to_string(),
            )]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateArray):
    // rules on a list see the whole list; exists_one finds the duplicate.
    #[test]
    fn gateway_listener_names_must_be_unique() {
        let rules = published("gateway.networking.k8s.io_gateways.yaml", "v1");
        let gateway = |second: &str| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": {"name": "gw", "namespace": "default"},
                "spec": {
                    "gatewayClassName": "envoy",
                    "listeners": [
                        {"name": "http", "port": 80, "protocol": "HTTP"},
                        {"name": second, "port": 8080, "protocol": "HTTP"},
                    ],
                },
            })
        };
        assert_eq!(messages(&rules.validate(&gateway("admin"), None)), []);
        assert_eq!(
            messages(&rules.validate(&gateway("http"), None)),
            [(
                "FieldValueInvalid".to_string(),
                "spec.listeners".to_string(),
                "Invalid value: Listener name must be unique within the Gateway".to_string(),
            )]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: a transition rule
    // (GatewayClass spec.controllerName: `self == oldSelf`) is skipped on create, passes
    // unchanged, fails changed; a failed rule on a string shows the value.
    #[test]
    fn gatewayclass_controller_name_is_immutable() {
        let rules = published("gateway.networking.k8s.io_gatewayclasses.yaml", "v1");
        let class = |controller: &str| {
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": "envoy"},
                "spec": {"controllerName": controller},
            })
        };
        let old = class("example.com/gateway");
        assert_eq!(messages(&rules.validate(&old, None)), []);
        assert_eq!(messages(&rules.validate(&old, Some(&old))), []);
        assert_eq!(
            messages(&rules.validate(&class("example.com/other"), Some(&old))),
            [(
                "FieldValueInvalid".to_string(),
                "spec.controllerName".to_string(),
                "Invalid value: \"example.com/other\": Value is immutable".to_string(),
            )]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: InferencePool's
    // rules, exists_one over integers and has() on an optional field.
    #[test]
    fn inferencepool_target_ports_must_be_unique() {
        let rules = published("inference.networking.k8s.io_inferencepools.yaml", "v1");
        let pool = |ports: Value| {
            json!({
                "apiVersion": "inference.networking.k8s.io/v1",
                "kind": "InferencePool",
                "metadata": {"name": "pool", "namespace": "default"},
                "spec": {
                    "selector": {"matchLabels": {"app": "vllm"}},
                    "targetPorts": ports,
                    "endpointPickerRef": {"group": "", "kind": "Service", "name": "epp", "port": {"number": 9002}},
                },
            })
        };
        assert_eq!(
            messages(&rules.validate(&pool(json!([{"number": 8000}, {"number": 8001}])), None)),
            []
        );
        assert_eq!(
            messages(&rules.validate(&pool(json!([{"number": 8000}, {"number": 8000}])), None)),
            [(
                "FieldValueInvalid".to_string(),
                "spec.targetPorts".to_string(),
                "Invalid value: port number must be unique".to_string(),
            )]
        );
    }

    /// A CRD root schema whose `spec` has `props` and `rules`.
    fn spec_schema(props: Value, rules: Value) -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": props, "x-kubernetes-validations": rules},
            },
        })
    }

    fn compile_errors(schema: &Value) -> Vec<(String, String, String)> {
        match Rules::compile(schema, SCHEMA_PATH) {
            Ok(_) => Vec::new(),
            Err(e) => messages(&e),
        }
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/compilation.go (compileRule) and
    // pkg/apis/apiextensions/validation/validation.go: a syntax error is field.Invalid on
    // the rule, the bad value being the whole ValidationRule as Go's json.Marshal prints it.
    #[test]
    fn a_rule_that_does_not_parse_is_a_crd_error() {
        let schema = spec_schema(
            json!({"replicas": {"type": "integer"}}),
            json!([{"rule": "self.replicas >"}]),
        );
        let errors = compile_errors(&schema);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let (reason, field, message) = &errors[0];
        assert_eq!(reason, "FieldValueInvalid");
        assert_eq!(
            field,
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
        );
        let expected = concat!(
            r#"Invalid value: {"Rule":"self.replicas \u003e","Message":"","MessageExpression":"","Reason":null,"FieldPath":"","OptionalOldSelf":null}: "#,
            "compilation failed: ERROR: <input>:1:16: Syntax error: mismatched input '<EOF>' expecting ",
        );
        assert!(message.starts_with(expected), "{message}");
        assert!(
            message.ends_with("\n | self.replicas >\n | ...............^"),
            "{message}"
        );
    }

    // cel-go checker (as run by compilation.go): an undefined field of an object, an
    // undeclared identifier, and a rule that is not a bool don't compile.
    #[test]
    fn checker_errors_are_crd_errors() {
        let props = json!({
            "replicas": {"type": "integer"},
            "name": {"type": "string"},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
        });
        let message = |rule: &str| {
            let errors = compile_errors(&spec_schema(props.clone(), json!([{"rule": rule}])));
            assert_eq!(errors.len(), 1, "{rule}: {errors:#?}");
            let m = &errors[0].2;
            m[m.find("}: ").expect("rendered rule") + 3..].to_string()
        };
        assert_eq!(
            message("self.replicsa > 1"),
            "compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'\n | self.replicsa > 1\n | ....^"
        );
        assert_eq!(
            message("self.replicas > limit"),
            "compilation failed: ERROR: <input>:1:17: undeclared reference to 'limit' (in container '')\n | self.replicas > limit\n | ................^"
        );
        assert_eq!(
            message("self.name"),
            "cel expression must evaluate to a bool"
        );
        assert_eq!(
            message("self.name.matches('[a-z')"),
            "compilation failed: ERROR: <input>:1:19: invalid matches argument\n | self.name.matches('[a-z')\n | ..................^"
        );
        assert!(
            message("duration('5 minutes') > duration('1s')").contains("invalid duration argument")
        );
        assert!(
            message("self.name in ['a', 1]").contains("expected type 'string' but found 'int'")
        );
        // Comprehension variables are typed by the list they range over.
        assert_eq!(
            message("self.ports.all(p, p.prot > 0)"),
            "compilation failed: ERROR: <input>:1:20: undefined field 'prot'\n | self.ports.all(p, p.prot > 0)\n | ...................^"
        );
    }

    // cel-go (as compilation.go configures it): expressions the checker must accept.
    #[test]
    fn valid_expressions_compile_and_run() {
        let schema = spec_schema(
            json!({
                "ports": {"type": "array", "items": {"type": "integer"}},
                "weights": {"type": "object", "additionalProperties": {"type": "integer"}},
                "name": {"type": "string"},
                "port": {"x-kubernetes-int-or-string": true},
                "since": {"type": "string", "format": "date-time"},
            }),
            json!([
                {"rule": "self.ports.sortBy(p, -p) == [3, 2, 1] && lists.range(3) == [0, 1, 2]"},
                {"rule": "self.?missing.orValue('x') == 'x' && optional.of(1).value() == 1 && self.ports[?5].hasValue() == false"},
                {"rule": "'%s-%d'.format(['a', 1]) == 'a-1' && strings.quote('a') == '\"a\"'"},
                {"rule": "self.ports.map(x, x * 2).all(y, y > 0) && self.ports.filter(p, p > 1).size() == 2"},
                {"rule": "self.weights.all(k, self.weights[k] > 0) && self.weights.exists(k, k == 'a') && 'a' in self.weights"},
                {"rule": "type(self.port) == string && size(self.name) > 0 && self.name.charAt(0) == 'c' && self.name.substring(1) == 'hat'"},
                {"rule": "self.since > timestamp('2020-01-01T00:00:00Z') && self.since - duration('1h') < self.since"},
                {"rule": "self.ports.exists_one(p, p == 2) && !(4 in self.ports) && self.name.lowerAscii().upperAscii() == 'CHAT'"},
                {"rule": "dyn(self.port) == 'http' && int('12') == 12 && string(12) == '12' && double(1) == 1.0"},
            ]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap_or_else(|e| panic!("{e:#?}"));
        let spec = json!({"spec": {
            "ports": [1, 2, 3], "weights": {"a": 1}, "name": "chat", "port": "http",
            "since": "2024-01-01T00:00:00Z",
        }});
        assert_eq!(messages(&rules.validate(&spec, None)), []);
    }

    // pkg/apis/apiextensions/validation/validation.go: the rule's own fields are checked
    // first, and CEL is not compiled where they fail.
    #[test]
    fn rule_fields_are_checked() {
        let props = json!({"name": {"type": "string"}});
        let errors = compile_errors(&spec_schema(
            props.clone(),
            json!([
                {"rule": " "},
                {"rule": "true", "message": "  "},
                {"rule": "true", "reason": "FieldValueUnknown"},
                {"rule": "true", "fieldPath": ".nope"},
                {"rule": "true\n&& true"},
                {"rule": "self.nope", "messageExpression": " "},
            ]),
        ));
        let at = |i: usize, f: &str| {
            format!("{SCHEMA_PATH}.properties[spec].x-kubernetes-validations[{i}].{f}")
        };
        assert_eq!(
            errors,
            [
                ("FieldValueRequired".into(), at(0, "rule"), "Required value: rule is not specified".into()),
                ("FieldValueInvalid".into(), at(1, "message"), "Invalid value: \"  \": must be non-empty if specified".into()),
                (
                    "FieldValueNotSupported".into(),
                    at(2, "reason"),
                    "Unsupported value: \"FieldValueUnknown\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\"".into()
                ),
                ("FieldValueInvalid".into(), at(3, "fieldPath"), "Invalid value: \".nope\": must be a valid path".into()),
                ("FieldValueRequired".into(), at(4, "message"), "Required value: message must be specified if rule contains line breaks".into()),
                ("FieldValueRequired".into(), at(5, "messageExpression"), "Required value: messageExpression must be non-empty if specified".into()),
            ]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (evalMessageExpression):
    // the message is the messageExpression's string, else `message` when it fails or is
    // empty, else "failed rule: <rule>".
    #[test]
    fn message_expression_and_fallbacks() {
        let schema = spec_schema(
            json!({"replicas": {"type": "integer"}, "name": {"type": "string"}}),
            json!([
                {"rule": "self.replicas <= 5", "messageExpression": "'replicas ' + string(self.replicas) + ' exceeds 5'"},
                {"rule": "self.replicas <= 6", "message": "too many", "messageExpression": "self.name"},
                {"rule": "  self.replicas <= 4  "},
            ]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let got = messages(&rules.validate(&json!({"spec": {"replicas": 7, "name": ""}}), None));
        let invalid = |m: &str| {
            (
                "FieldValueInvalid".to_string(),
                "spec".to_string(),
                format!("Invalid value: {m}"),
            )
        };
        assert_eq!(
            got,
            [
                invalid("replicas 7 exceeds 5"),
                invalid("too many"),
                invalid("failed rule: self.replicas <= 4"),
            ]
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (fieldErrorForReason,
    // ValidFieldPath): `reason` picks the error type, `fieldPath` the field.
    #[test]
    fn reason_and_field_path() {
        let schema = spec_schema(
            json!({
                "name": {"type": "string"},
                "legacy": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ports": {"type": "array", "items": {"type": "integer"}},
            }),
            json!([
                {"rule": "has(self.name)", "reason": "FieldValueRequired", "fieldPath": ".name", "message": "name is required"},
                {"rule": "!has(self.legacy)", "reason": "FieldValueForbidden", "fieldPath": "['legacy']", "message": "legacy is gone"},
                {"rule": "self.labels.all(k, k != 'app.kubernetes.io/name')", "fieldPath": ".labels['app.kubernetes.io/name']", "message": "reserved"},
                {"rule": "self.ports.all(p, self.ports.exists_one(q, q == p))", "reason": "FieldValueDuplicate", "fieldPath": ".ports"},
            ]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let spec = json!({"spec": {
            "legacy": "x",
            "labels": {"app.kubernetes.io/name": "chat"},
            "ports": [80, 80],
        }});
        assert_eq!(
            messages(&rules.validate(&spec, None)),
            [
                (
                    "FieldValueRequired".into(),
                    "spec.name".into(),
                    "Required value: name is required".into()
                ),
                (
                    "FieldValueForbidden".into(),
                    "spec.legacy".into(),
                    "Forbidden: legacy is gone".into()
                ),
                (
                    "FieldValueInvalid".into(),
                    "spec.labels[app.kubernetes.io/name]".into(),
                    "Invalid value: reserved".into()
                ),
                (
                    "FieldValueDuplicate".into(),
                    "spec.ports".into(),
                    "Duplicate value".into()
                ),
            ]
        );
        // A list index is no valid fieldPath.
        let bad = spec_schema(
            json!({"ports": {"type": "array", "items": {"type": "integer"}}}),
            json!([{"rule": "true", "fieldPath": ".ports[0]"}]),
        );
        assert_eq!(
            compile_errors(&bad)[0].2,
            "Invalid value: \".ports[0]\": must be a valid path"
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: evaluation errors are
    // field.Invalid with the schema type as the value; the root's field is "<nil>".
    #[test]
    fn evaluation_errors_and_root_rules() {
        let mut schema = spec_schema(
            json!({"name": {"type": "string"}, "replicas": {"type": "integer"}}),
            json!([
                {"rule": "self.name.startsWith('a')", "message": "name must start with a"},
                {"rule": "self.replicas / 0 > 1"},
            ]),
        );
        schema["x-kubernetes-validations"] =
            json!([{"rule": "self.metadata.name.startsWith('x-')"}]);
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let obj = json!({"apiVersion": "v1", "kind": "K", "metadata": {"name": "y"}, "spec": {"replicas": 1}});
        assert_eq!(
            messages(&rules.validate(&obj, None)),
            [
                ("FieldValueInvalid".into(), "<nil>".into(), "Invalid value: failed rule: self.metadata.name.startsWith('x-')".into()),
                ("FieldValueInvalid".into(), "spec".into(), "Invalid value: \"object\": no such key: name evaluating rule: name must start with a".into()),
                ("FieldValueInvalid".into(), "spec".into(), "Invalid value: \"object\": division by zero evaluating rule: self.replicas / 0 > 1".into()),
            ]
        );
    }

    fn ports_list(list_rules: Value, item_rules: Value) -> Value {
        spec_schema(
            json!({"ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "x-kubernetes-validations": list_rules,
                "items": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                    "x-kubernetes-validations": item_rules,
                },
            }}),
            json!([]),
        )
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (validateArray) and
    // k8s.io/apiserver pkg/cel/common/maplist.go, valuesunstructured.go: items of a map
    // list correlate with the old item of the same keys, and map lists compare equal
    // whatever their order.
    #[test]
    fn map_lists_correlate_by_key() {
        let schema = ports_list(
            json!([{"rule": "self == oldSelf", "message": "ports are immutable"}]),
            json!([{"rule": "self.port == oldSelf.port", "message": "port is immutable"}]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let old = json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "grpc", "port": 90}]}});
        let reordered = json!({"spec": {"ports": [{"name": "grpc", "port": 90}, {"name": "http", "port": 80}]}});
        assert_eq!(messages(&rules.validate(&reordered, Some(&old))), []);
        let changed = json!({"spec": {"ports": [{"name": "grpc", "port": 91}, {"name": "http", "port": 80}]}});
        assert_eq!(
            messages(&rules.validate(&changed, Some(&old))),
            [
                (
                    "FieldValueInvalid".into(),
                    "spec.ports".into(),
                    "Invalid value: ports are immutable".into()
                ),
                (
                    "FieldValueInvalid".into(),
                    "spec.ports[0]".into(),
                    "Invalid value: port is immutable".into()
                ),
            ]
        );
        // A new item has no old one: its transition rule is skipped.
        let added = json!({"spec": {"ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 9}]}});
        assert_eq!(
            messages(&rules.validate(&added, Some(&old))),
            [(
                "FieldValueInvalid".into(),
                "spec.ports".into(),
                "Invalid value: ports are immutable".into()
            )]
        );
    }

    // pkg/apis/apiextensions/validation/validation.go: oldSelf can't be used where old
    // values don't correlate (items of atomic lists and sets).
    #[test]
    fn old_self_under_an_atomic_list_is_a_crd_error() {
        let schema = spec_schema(
            json!({"names": {"type": "array", "items": {
                "type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}],
            }}}),
            json!([]),
        );
        assert_eq!(
            compile_errors(&schema),
            [(
                "FieldValueInvalid".into(),
                format!(
                    "{SCHEMA_PATH}.properties[spec].properties[names].items.x-kubernetes-validations[0].rule"
                ),
                format!(
                    "Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {SCHEMA_PATH}.properties[spec].properties[names]"
                ),
            )]
        );
        let optional_without_old_self = spec_schema(
            json!({"name": {"type": "string"}}),
            json!([{"rule": "true", "optionalOldSelf": true}]),
        );
        assert_eq!(
            compile_errors(&optional_without_old_self)[0].2,
            "Invalid value: true: may not be set if oldSelf is not used in rule"
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go: with
    // optionalOldSelf, a transition rule runs on create too, oldSelf being an optional.
    #[test]
    fn optional_old_self() {
        let schema = spec_schema(
            json!({"replicas": {"type": "integer"}}),
            json!([{
                "rule": "oldSelf.hasValue() ? self.replicas >= oldSelf.value().replicas : self.replicas == 1",
                "optionalOldSelf": true,
                "message": "start at 1, then only grow",
            }]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let spec = |n: i64| json!({"spec": {"replicas": n}});
        assert_eq!(messages(&rules.validate(&spec(1), None)), []);
        assert_eq!(rules.validate(&spec(2), None).len(), 1);
        assert_eq!(messages(&rules.validate(&spec(3), Some(&spec(2)))), []);
        assert_eq!(rules.validate(&spec(1), Some(&spec(2))).len(), 1);
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (ratchetingOptions)
    // and k8s.io/apiserver pkg/cel/common/equality.go: on update, a failing rule on an
    // unchanged value is a warning (CRDValidationRatcheting), not an error.
    #[test]
    fn unchanged_values_ratchet() {
        let schema = spec_schema(
            json!({
                "replicas": {"type": "integer", "x-kubernetes-validations": [{"rule": "self <= 5", "message": "at most 5"}]},
                "name": {"type": "string"},
            }),
            json!([]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let old = json!({"spec": {"replicas": 7, "name": "a"}});
        let renamed = json!({"spec": {"replicas": 7, "name": "b"}});
        let (errors, warnings) = rules.validate_with_warnings(&renamed, Some(&old));
        assert_eq!(messages(&errors), []);
        assert_eq!(warnings, ["spec.replicas: Invalid value: 7: at most 5"]);
        assert_eq!(
            messages(&rules.validate(&json!({"spec": {"replicas": 8, "name": "a"}}), Some(&old))),
            [(
                "FieldValueInvalid".into(),
                "spec.replicas".into(),
                "Invalid value: 8: at most 5".into()
            )]
        );
        assert_eq!(
            rules.validate(&old, None).len(),
            1,
            "no ratcheting on create"
        );
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation_test.go ("typemeta fields
    // are not ratcheted", "fieldPath ... on the changed parent"): apiVersion and kind never
    // ratchet, and a rule ratchets by the node it is on, not by its fieldPath.
    #[test]
    fn ratcheting_exceptions() {
        let schema = json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string", "x-kubernetes-validations": [{"rule": "self == 'v1'"}]},
                "kind": {"type": "string", "x-kubernetes-validations": [{"rule": "self == 'Pod'"}]},
                "spec": {
                    "type": "object",
                    "properties": {"foo": {"type": "string"}, "bar": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.foo == 'baz'", "message": "gotta be baz", "fieldPath": ".foo"}],
                },
            },
        });
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let old = json!({"apiVersion": "v2", "kind": "Baz", "spec": {"foo": "bar"}});
        let new = json!({"apiVersion": "v2", "kind": "Baz", "spec": {"foo": "bar", "bar": "x"}});
        assert_eq!(
            messages(&rules.validate(&new, Some(&old))),
            [
                (
                    "FieldValueInvalid".into(),
                    "apiVersion".into(),
                    "Invalid value: \"v2\": failed rule: self == 'v1'".into()
                ),
                (
                    "FieldValueInvalid".into(),
                    "kind".into(),
                    "Invalid value: \"Baz\": failed rule: self == 'Pod'".into()
                ),
                (
                    "FieldValueInvalid".into(),
                    "spec.foo".into(),
                    "Invalid value: gotta be baz".into()
                ),
            ]
        );
    }

    // k8s.io/apiserver pkg/cel/common/schemas.go and valuesunstructured.go: formats and
    // x-kubernetes-int-or-string type values; escaped property names.
    #[test]
    fn schema_types_values() {
        let schema = spec_schema(
            json!({
                "timeout": {"type": "string", "format": "duration"},
                "since": {"type": "string", "format": "date-time"},
                "ratio": {"type": "number"},
                "port": {"x-kubernetes-int-or-string": true},
                "x-api-key": {"type": "string"},
                "opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            }),
            json!([
                {"rule": "self.timeout <= duration('1h')", "message": "timeout"},
                {"rule": "self.since < timestamp('2030-01-01T00:00:00Z')", "message": "since"},
                {"rule": "self.ratio > 0.5", "message": "ratio"},
                {"rule": "type(self.port) == int ? self.port < 65536 : self.port.matches('^[a-z]+$')", "message": "port"},
                {"rule": "self.x__dash__api__dash__key.size() > 3", "message": "key"},
                {"rule": "size(self.opaque) == 0", "message": "opaque"},
            ]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let spec = |timeout: &str, port: Value| {
            json!({"spec": {
                "timeout": timeout, "since": "2024-05-01T10:00:00Z", "ratio": 1,
                "port": port, "x-api-key": "secret", "opaque": {"anything": [1]},
            }})
        };
        assert_eq!(
            messages(&rules.validate(&spec("1d", json!(8080)), None)).len(),
            1
        );
        assert_eq!(
            messages(&rules.validate(&spec("30m", json!("http")), None)),
            []
        );
        assert_eq!(
            messages(&rules.validate(&spec("90m", json!("HTTP")), None)),
            [
                (
                    "FieldValueInvalid".into(),
                    "spec".into(),
                    "Invalid value: timeout".into()
                ),
                (
                    "FieldValueInvalid".into(),
                    "spec".into(),
                    "Invalid value: port".into()
                ),
            ]
        );
        // Unknown fields of a preserved object are not visible to the checker either.
        let undefined = spec_schema(
            json!({"opaque": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
            json!([{"rule": "has(self.opaque.anything)"}]),
        );
        assert!(
            compile_errors(&undefined)[0]
                .2
                .contains("undefined field 'anything'")
        );
    }

    // k8s.io/apiserver pkg/cel/library/lists.go and cel-go ext.Sets / ext.Strings.
    #[test]
    fn kubernetes_list_and_set_functions() {
        let schema = spec_schema(
            json!({
                "ports": {"type": "array", "items": {"type": "integer"}},
                "names": {"type": "array", "items": {"type": "string"}},
            }),
            json!([
                {"rule": "self.ports.isSorted() && self.ports.sum() == 6 && self.ports.min() == 1 && self.ports.max() == 3"},
                {"rule": "self.ports.indexOf(2) == 1 && self.ports.lastIndexOf(9) == -1"},
                {"rule": "sets.contains(self.names, ['a']) && sets.intersects(self.names, ['b', 'z']) && !sets.equivalent(self.names, ['a'])"},
                {"rule": "self.names.map(n, n.upperAscii()).join(',') == 'A,B' && 'a/b'.split('/')[1] == 'b'"},
                {"rule": "self.names.filter(n, n != 'a').size() == 1 && self.names.exists_one(n, n == 'b')"},
                {"rule": "[3, 1].min() == 1"},
                {"rule": "quantity('1Gi').isGreaterThan(quantity('1000M')) && quantity('1.5').add(1) == quantity('2500m')"},
                {"rule": "isQuantity('10Mi') && !isQuantity('ten') && quantity('2k').asInteger() == 2000 && sign(quantity('-1m')) == -1"},
            ]),
        );
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        let ok = json!({"spec": {"ports": [1, 2, 3], "names": ["a", "b"]}});
        assert_eq!(messages(&rules.validate(&ok, None)), []);
        let unsorted = json!({"spec": {"ports": [3, 2, 1], "names": ["a", "b"]}});
        assert_eq!(rules.validate(&unsorted, None).len(), 1);
    }

    // apiextensions-apiserver pkg/apiserver/schema/cel/validation.go (AllOfValidators):
    // rules under allOf apply to the same value.
    #[test]
    fn all_of_rules_apply() {
        let schema = json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object",
                "properties": {"a": {"type": "integer"}},
                "allOf": [{"x-kubernetes-validations": [{"rule": "self.a > 0", "message": "positive"}]}],
            }},
        });
        let rules = Rules::compile(&schema, SCHEMA_PATH).unwrap();
        assert_eq!(
            messages(&rules.validate(&json!({"spec": {"a": 0}}), None)),
            [(
                "FieldValueInvalid".into(),
                "spec".into(),
                "Invalid value: positive".into()
            )]
        );
    }

    // Rules live in a static kind table shared by tokio tasks.
    #[test]
    fn rules_are_send_and_sync() {
        fn shared<T: Send + Sync + 'static>() {}
        shared::<Rules>();
        let rules = Rules::compile(&json!({"type": "object"}), SCHEMA_PATH).unwrap();
        assert!(rules.is_empty());
        assert!(rules.validate(&json!({"a": 1}), None).is_empty());
    }
}
