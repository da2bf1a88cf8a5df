//! Evaluating: the walk of an object along the compiled rules, the correlation of old and
//! new values for transition rules and ratcheting, and the field errors of failed rules.

use std::sync::Arc;

use cel::common::types::{CelBool, CelOptional, CelString};
use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, ExecutionError, Program};
use serde_json::Value;

use super::compile::{Rule, Validator, required};
use super::cost::{PER_CALL_LIMIT, ValueSizes};
use super::estimate::estimate;
use super::library::env;
use super::schema::{ListType, NodeId, SchemaNode};
use super::values::to_val;
use crate::status::Cause;

/// `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

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
pub(super) struct Corr<'a> {
    pub(super) new: &'a Value,
    pub(super) old: &'a Value,
    pub(super) node: NodeId,
}

/// The correlation of the current node, and that of its nearest correlated ancestor
/// (`ratchetingOptions`).
#[derive(Clone, Copy, Default)]
pub(super) struct Ratchet<'a> {
    pub(super) current: Option<Corr<'a>>,
    pub(super) parent: Option<Corr<'a>>,
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

pub(super) struct Walk<'a> {
    pub(super) nodes: &'a [SchemaNode],
    pub(super) errors: Vec<Cause>,
    pub(super) warnings: Vec<String>,
    /// What is left of the object's `RuntimeCELCostBudget`; negative once validation
    /// stopped (the budget ran out, or a rule exceeded `PerCallLimit`).
    pub(super) remaining: i64,
}

/// The message of a rule whose evaluation would exceed what is left of the budget.
const OUT_OF_BUDGET: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

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
    pub(super) fn node(
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
        if self.remaining < 0 {
            return;
        }
        for a in &v.all_of {
            let r = Ratchet {
                current: None,
                parent: ratchet.parent,
            };
            self.node(a, path, new, old, r);
            if self.remaining < 0 {
                return;
            }
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
                        if self.remaining < 0 {
                            return;
                        }
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
                        if self.remaining < 0 {
                            return;
                        }
                    }
                }
                for (k, val) in map {
                    if let Some(pv) = v.props.get(k) {
                        let mut p = child_path(path, k);
                        let old_v = old_map.and_then(|o| o.get(k));
                        self.node(pv, &mut p, val, old_v, ratchet.key(nodes, k));
                        if self.remaining < 0 {
                            return;
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// `validateExpressions`: the rules of one node. Long because it keeps upstream's order
    /// (budget, transition rules, rule, messageExpression, ratcheting) in one place.
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
        if v.rules.is_empty() {
            return;
        }
        if self.remaining <= 0 {
            self.errors
                .push(Cause::invalid(shown(path), &ty, OUT_OF_BUDGET));
            self.remaining = -1;
            return;
        }
        // Transition rules run only where there is an old value, unless oldSelf is
        // optional.
        let runs = |r: &Rule| !r.uses_old_self || old.is_some() || r.optional_old_self;
        if !v.rules.iter().any(runs) {
            return;
        }
        // The cost of an evaluation: the estimate over the sizes of these values.
        let mut sizes = ValueSizes {
            nodes,
            root: v.node,
            new,
            old,
            cache: Default::default(),
        };
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
            let error_string = rule_error_string(rule);
            let cost = estimate(program.expression(), &rule.types, &mut sizes);
            if !self.charge(cost) {
                let detail = if self.remaining >= 0 {
                    format!(
                        "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {error_string}"
                    )
                } else {
                    OUT_OF_BUDGET.to_string()
                };
                self.errors.push(Cause::invalid(shown(path), &ty, &detail));
                self.remaining = -1;
                return;
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
            let mut message = None;
            if let Some(m) = &rule.message_expression {
                let cost = estimate(m.expression(), &rule.message_types, &mut sizes);
                if !self.charge(cost) {
                    let detail = if self.remaining >= 0 {
                        format!(
                            "no further validation rules will be run due to call cost exceeds limit for messageExpression: {}",
                            go_quote(&rule.message_expression_source)
                        )
                    } else {
                        "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run".to_string()
                    };
                    let cause = Cause::invalid(shown(&field), &ty, &detail);
                    if !rule.uses_old_self && ratchet.unchanged(nodes) {
                        self.warnings
                            .push(format!("{}: {}", cause.field, cause.message));
                    } else {
                        self.errors.push(cause);
                    }
                    self.remaining = -1;
                    return;
                }
                message = message_expression(m, &vars);
            }
            let detail = message.unwrap_or_else(|| {
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

impl Walk<'_> {
    /// Charges an evaluation's cost to the budget, as cel-go's cost tracker and
    /// `validateExpressions` do: false when the evaluation would not complete, either
    /// because it exceeds `PerCallLimit` (cel-go cancels it just past the limit, and that
    /// much is charged; `remaining` stays non-negative) or what is left of the budget
    /// (`remaining` becomes negative).
    fn charge(&mut self, cost: u64) -> bool {
        let charged = cost.min(PER_CALL_LIMIT + 1);
        if i64::try_from(charged).map_or(true, |c| c > self.remaining) {
            self.remaining = -1;
            return false;
        }
        self.remaining -= charged as i64;
        cost <= PER_CALL_LIMIT
    }
}

/// Go's `%q` of a string (`strconv.Quote`) for the common characters.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
