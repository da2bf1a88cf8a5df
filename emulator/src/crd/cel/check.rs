//! Checking: the part of cel-go's type checker that catches authoring mistakes.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue, SourceInfo};
use cel::common::types::CelString;
use cel::{Context, ParseErrors, Program};

use super::library::env;
use super::schema::{NodeId, SchemaNode};
use super::values::go_duration;

/// A static type, as far as this checker follows it. `Unknown` is where it doesn't (and
/// so never reports an error); `Dyn` is CEL's dynamic type.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Ty {
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
    /// The Kubernetes `quantity` type.
    Quantity,
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
    pub(super) fn is_concrete(&self) -> bool {
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
pub(super) fn node_ty(nodes: &[SchemaNode], id: NodeId) -> Option<Ty> {
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

/// A checked expression: the program, its type, whether it refers to `oldSelf`, and the
/// type of each of its sub-expressions by id (for the cost model).
pub(super) struct Checked {
    pub(super) program: Program,
    pub(super) ty: Ty,
    pub(super) uses_old_self: bool,
    pub(super) types: HashMap<u64, Ty>,
}

/// Parses and checks an expression with `self` (and `oldSelf`) typed, or returns the
/// rendered compile errors.
pub(super) fn check_expression(
    nodes: &[SchemaNode],
    source: &str,
    self_ty: &Ty,
    old_ty: &Ty,
) -> Result<Checked, String> {
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
        types: HashMap::new(),
    };
    let ty = checker.check(program.expression());
    if !checker.issues.is_empty() {
        return Err(render_issues(source, checker.issues));
    }
    let uses_old_self = checker.uses_old_self;
    let types = std::mem::take(&mut checker.types);
    Ok(Checked {
        program,
        ty,
        uses_old_self,
        types,
    })
}

struct Checker<'a> {
    nodes: &'a [SchemaNode],
    info: &'a SourceInfo,
    scopes: Vec<(String, Ty)>,
    issues: Vec<Issue>,
    uses_old_self: bool,
    /// Checking the arguments of `format()` (or lists and maps in them).
    in_format: bool,
    /// The type found for each sub-expression.
    types: HashMap<u64, Ty>,
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
        let t = if !matches!(e.expr, Expr::List(_) | Expr::Map(_)) {
            let in_format = std::mem::replace(&mut self.in_format, false);
            let t = self.check_expr(e);
            self.in_format = in_format;
            t
        } else {
            self.check_expr(e)
        };
        self.types.insert(e.id, t.clone());
        t
    }

    /// The type of an expression: one arm per expression kind (cel-go's checker walks
    /// them the same way).
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

    /// The type of a call: one arm per function the checker knows (a table, like
    /// cel-go's overload declarations).
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
            "quantity" if call.target.is_none() => Ty::Quantity,
            "add" | "sub" if first == Some(Ty::Quantity) => Ty::Quantity,
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
