//! Compiling: the rules of a schema into [`Validator`]s, and the errors a CRD create or
//! update reports for them.

use std::collections::HashMap;

use cel::Program;
use serde_json::Value;

use super::check::{Checked, Ty, check_expression, node_ty};
use super::cost::{
    STATIC_ESTIMATED_COST_LIMIT, SchemaSizes, TotalCost, cost_error_message, max_cardinality,
    max_elements_factor, multiply_guard,
};
use super::estimate::estimate;
use super::schema::{NodeId, SchemaNode, str_of};
use crate::status::Cause;

/// The `reason`s a rule may give (`supportedValidationReason`, listed sorted as Go's
/// `sets.String.List()` does in the NotSupported error).
const REASONS: [&str; 4] = [
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// A node of the schema with rules, or with rules below it (`Validator` of validation.go).
pub(super) struct Validator {
    pub(super) node: NodeId,
    pub(super) rules: Vec<Rule>,
    /// The node has no CEL type (`compilationErr`): every evaluation reports it.
    pub(super) init_error: Option<String>,
    pub(super) props: HashMap<String, Validator>,
    pub(super) items: Option<Box<Validator>>,
    pub(super) additional: Option<Box<Validator>>,
    /// Rules under `allOf`, applying to the same value.
    pub(super) all_of: Vec<Validator>,
}

pub(super) struct Rule {
    pub(super) rule: String,
    pub(super) message: String,
    pub(super) reason: Option<String>,
    /// `fieldPath`, normalized to a field path (`NormalizedRuleFieldPath`).
    pub(super) field_path: Option<String>,
    pub(super) optional_old_self: bool,
    pub(super) uses_old_self: bool,
    /// `Ok(None)` for a blank rule (skipped), `Err` with the compile error.
    pub(super) program: Result<Option<Program>, String>,
    pub(super) message_expression: Option<Program>,
    pub(super) message_expression_source: String,
    /// The types of the rule's and the messageExpression's sub-expressions (cost model).
    pub(super) types: HashMap<u64, Ty>,
    pub(super) message_types: HashMap<u64, Ty>,
}

/// What a schema position is compiled for: `runtime` builds validators (not for `anyOf`,
/// `oneOf` and `not`, whose rules the server ignores); `report_cel` reports compile errors
/// as CRD errors (not under any of those nor `allOf`: the server checks only their fields).
#[derive(Clone, Copy)]
pub(super) struct Mode {
    pub(super) runtime: bool,
    pub(super) report_cel: bool,
}

pub(super) struct Compiler<'a> {
    pub(super) nodes: &'a [SchemaNode],
    /// `OpenAPISchemaErrorList.SchemaErrors`, then `CELErrors`, as the server lists them.
    pub(super) schema_errors: Vec<Cause>,
    pub(super) cel_errors: Vec<Cause>,
    /// The estimated costs of the rules compiled so far (`CELSchemaContext.TotalCost`).
    pub(super) total_cost: TotalCost,
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
    /// Long because it follows compilation.go's `Compile` step by step (each rule's
    /// checks, cost and error in upstream's order), so the two read side by side.
    pub(super) fn validator(
        &mut self,
        vschema: &Value,
        node: NodeId,
        path: &str,
        mode: Mode,
        forbid_old_self: Option<&str>,
        cardinality: Option<u64>,
    ) -> Option<Validator> {
        let schema_errors_before = self.schema_errors.len();
        let n = &self.nodes[node];
        // `childContext`: how many times the children of this schema may occur.
        let child_cardinality =
            cardinality.and_then(|c| max_elements_factor(vschema).map(|f| multiply_guard(c, f)));
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
                .validator(sub, child, &p, mode, forbid_old_self, child_cardinality)
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
                if let Some(pv) = self.validator(
                    sub,
                    child,
                    &p,
                    sub_mode,
                    forbid_old_self.or(own_forbid),
                    child_cardinality,
                ) && sub_mode.runtime
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
                    if let Some(a) =
                        self.validator(sub, node, &p, sub_mode, forbid_old_self, cardinality)
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
            self.validator(sub, node, &p, sub_mode, forbid_old_self, cardinality);
        }
        if let (Some(sub), Some(child)) = (vschema.get("items").filter(|i| i.is_object()), n.items)
        {
            let p = format!("{path}.items");
            let own_forbid = (str_of(vschema, "x-kubernetes-list-type") != "map").then_some(path);
            v.items = self
                .validator(
                    sub,
                    child,
                    &p,
                    mode,
                    forbid_old_self.or(own_forbid),
                    child_cardinality,
                )
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
                let ctx = RuleContext {
                    path,
                    report,
                    forbid_old_self,
                    cardinality,
                };
                self.compile_rules(&mut v, &specs, ctx);
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
    fn compile_rules(&mut self, v: &mut Validator, specs: &[RuleSpec], ctx: RuleContext<'_>) {
        let RuleContext {
            path,
            report,
            forbid_old_self,
            cardinality,
        } = ctx;
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
                // `getExpressionCost`: the rule's cost times how many times it may run.
                let times = cardinality.unwrap_or_else(|| max_cardinality(nodes[v.node].min_size));
                let cost = multiply_guard(compiled.max_cost, times);
                if cost > STATIC_ESTIMATED_COST_LIMIT {
                    let detail = cost_error_message(
                        "estimated rule cost",
                        cost,
                        STATIC_ESTIMATED_COST_LIMIT,
                    );
                    self.cel_errors.push(Cause::forbidden(at("rule"), &detail));
                }
                self.total_cost.observe(at("rule"), cost);
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
                } else if compiled.rule.message_expression.is_some() {
                    let cost = compiled.message_max_cost;
                    if cost > STATIC_ESTIMATED_COST_LIMIT {
                        let detail = cost_error_message(
                            "estimated messageExpression cost",
                            cost,
                            STATIC_ESTIMATED_COST_LIMIT,
                        );
                        self.cel_errors
                            .push(Cause::forbidden(at("messageExpression"), &detail));
                    }
                    self.total_cost.observe(at("messageExpression"), cost);
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
pub(super) fn required(field: String, detail: &str) -> Cause {
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

/// Where a node's rules are, and what their CRD errors and costs depend on.
#[derive(Clone, Copy)]
struct RuleContext<'a> {
    path: &'a str,
    report: bool,
    forbid_old_self: Option<&'a str>,
    /// `CELSchemaContext.MaxCardinality`: `None` when under a list or map without a limit.
    cardinality: Option<u64>,
}

struct Compiled {
    rule: Rule,
    message_expression_error: Option<String>,
    /// The estimated worst-case costs (`MaxCost`, `MessageExpressionMaxCost`).
    max_cost: u64,
    message_max_cost: u64,
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
        message_expression_source: spec.message_expression.clone(),
        types: HashMap::new(),
        message_types: HashMap::new(),
    };
    let mut message_expression_error = None;
    let (mut max_cost, mut message_max_cost) = (0, 0);
    if spec.rule.trim().is_empty() {
        return Compiled {
            rule,
            message_expression_error,
            max_cost,
            message_max_cost,
        };
    }
    let mut sizes = SchemaSizes { nodes, root: node };
    let old_ty = if rule.optional_old_self {
        Ty::Optional(Box::new(self_ty.clone()))
    } else {
        self_ty.clone()
    };
    match check_expression(nodes, &spec.rule, self_ty, &old_ty) {
        Err(issues) => rule.program = Err(format!("compilation failed: {issues}")),
        Ok(Checked {
            program,
            ty,
            uses_old_self,
            types,
        }) => {
            rule.uses_old_self = uses_old_self;
            if ty.is_concrete() && ty != Ty::Bool {
                rule.program = Err("cel expression must evaluate to a bool".to_string());
            } else {
                max_cost = estimate(program.expression(), &types, &mut sizes);
                rule.types = types;
                rule.program = Ok(Some(program));
                if !spec.message_expression.is_empty() {
                    match check_expression(nodes, &spec.message_expression, self_ty, &old_ty) {
                        Err(issues) => {
                            message_expression_error =
                                Some(format!("messageExpression compilation failed: {issues}"))
                        }
                        Ok(c) if c.ty.is_concrete() && c.ty != Ty::String => {
                            message_expression_error =
                                Some("messageExpression must evaluate to a string".to_string())
                        }
                        Ok(c) => {
                            message_max_cost =
                                estimate(c.program.expression(), &c.types, &mut sizes);
                            rule.message_types = c.types;
                            rule.message_expression = Some(c.program);
                        }
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
        max_cost,
        message_max_cost,
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
