//! cel-go's cost estimator (`checker/cost.go` of cel-go v0.26), over the `cel` crate's AST
//! and the types [`super::check`] found, with the call costs of the Kubernetes library
//! (`k8s.io/apiserver/pkg/cel/library/cost.go` `EstimateCallCost`) and of the lists and
//! sets extensions (`ext/lists.go`, `ext/sets.go`).

use std::collections::HashMap;

use cel::common::ast::{CallExpr, ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};

use super::check::Ty;
use super::cost::{
    Est, LIST_CREATE, MAP_CREATE, REGEX_STRING_LENGTH, STRING_TRAVERSAL, STRUCT_CREATE, Sizes,
    UNKNOWN,
};

/// The worst-case cost of an expression: `checker.Cost(...).Max` as `EstimateCost` gives it.
pub(super) fn estimate(expr: &IdedExpr, types: &HashMap<u64, Ty>, sizes: &mut dyn Sizes) -> u64 {
    let mut c = Coster {
        types,
        sizes,
        paths: HashMap::new(),
        locals: HashMap::new(),
        computed: HashMap::new(),
        entries: HashMap::new(),
    };
    c.cost(expr).max
}

#[derive(Clone, Copy, PartialEq)]
enum Container {
    List,
    Map,
}

/// `entrySizeEstimate`: the sizes of the keys (indices) and values of a list or map.
#[derive(Clone, Copy)]
struct Entry {
    container: Container,
    key: Est,
    val: Est,
}

fn union_entries(a: Option<Entry>, b: Option<Entry>) -> Option<Entry> {
    let (a, b) = (a?, b?);
    Some(Entry {
        container: a.container,
        key: a.key.union(b.key),
        val: a.val.union(b.val),
    })
}

struct Local {
    path: Vec<String>,
    size: Option<Est>,
    entry: Option<Entry>,
}

struct Coster<'a> {
    types: &'a HashMap<u64, Ty>,
    sizes: &'a mut dyn Sizes,
    paths: HashMap<u64, Vec<String>>,
    locals: HashMap<String, Vec<Local>>,
    computed: HashMap<u64, Est>,
    entries: HashMap<u64, Entry>,
}

/// `isScalar`: the types whose size is always 1.
fn is_scalar(t: &Ty) -> bool {
    match t {
        Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Duration | Ty::Timestamp => true,
        Ty::Optional(inner) => is_scalar(inner),
        _ => false,
    }
}

/// `computeExprSize`: the sizes CEL knows from the expression itself.
fn expr_size(e: &IdedExpr) -> Option<Est> {
    Some(Est::fixed(match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => s.inner().chars().count() as u64,
        Expr::Literal(LiteralValue::Bytes(b)) => b.len() as u64,
        Expr::Literal(_) => 1,
        Expr::List(l) => l.elements.len() as u64,
        Expr::Map(m) => m.entries.len() as u64,
        _ => return None,
    }))
}

/// A namespaced function's name (`sets.contains`), when `target` is a namespace.
fn namespace(e: &IdedExpr) -> Option<String> {
    match &e.expr {
        Expr::Ident(n) if matches!(n.as_str(), "sets" | "optional" | "strings" | "lists") => {
            Some(n.clone())
        }
        _ => None,
    }
}

impl Coster<'_> {
    fn ty(&self, e: &IdedExpr) -> Ty {
        self.types.get(&e.id).cloned().unwrap_or(Ty::Unknown)
    }

    fn local(&self, name: &str) -> Option<&Local> {
        self.locals.get(name).and_then(|s| s.last())
    }

    fn push_local(&mut self, name: &str, l: Local) {
        self.locals.entry(name.to_string()).or_default().push(l);
    }

    fn pop_local(&mut self, name: &str) {
        if let Some(s) = self.locals.get_mut(name) {
            s.pop();
        }
    }

    fn path(&self, e: &IdedExpr) -> Vec<String> {
        if let Expr::Ident(n) = &e.expr
            && let Some(l) = self.local(n)
        {
            return l.path.clone();
        }
        self.paths.get(&e.id).cloned().unwrap_or_default()
    }

    /// `computeSize`.
    fn size(&mut self, e: &IdedExpr) -> Option<Est> {
        if let Some(s) = self.computed.get(&e.id) {
            return Some(*s);
        }
        if let Some(s) = expr_size(e) {
            return Some(s);
        }
        let path = self.path(e);
        if !path.is_empty()
            && let Some(s) = self.sizes.size(&path)
        {
            self.computed.insert(e.id, s);
            return Some(s);
        }
        if is_scalar(&self.ty(e)) {
            return Some(Est::fixed(1));
        }
        if let Expr::Ident(n) = &e.expr {
            return self.local(n).and_then(|l| l.size);
        }
        None
    }

    fn size_or_unknown(&mut self, e: &IdedExpr) -> Est {
        self.size(e).unwrap_or(UNKNOWN)
    }

    /// `computeEntrySize`.
    fn entry(&self, e: &IdedExpr) -> Option<Entry> {
        if let Some(s) = self.entries.get(&e.id) {
            return Some(*s);
        }
        if let Expr::Ident(n) = &e.expr {
            return self.local(n).and_then(|l| l.entry);
        }
        None
    }

    /// `cost`: one arm per expression kind, as cel-go's `coster.cost` is laid out.
    fn cost(&mut self, e: &IdedExpr) -> Est {
        match &e.expr {
            Expr::Literal(_) | Expr::Unspecified => Est::fixed(0),
            Expr::Ident(name) => {
                let path = match self.local(name) {
                    Some(l) => l.path.clone(),
                    None => vec![name.clone()],
                };
                self.paths.insert(e.id, path);
                Est::fixed(1)
            }
            Expr::Select(s) => {
                if s.test {
                    // Kubernetes sets `PresenceTestHasCost(false)` (environment/base.go).
                    return self.cost(&s.operand);
                }
                let mut sum = self.cost(&s.operand);
                if matches!(
                    self.ty(&s.operand),
                    Ty::Object(_) | Ty::Map(..) | Ty::Unknown
                ) {
                    sum = sum.add(Est::fixed(1));
                }
                let mut path = self.path(&s.operand);
                path.push(s.field.clone());
                self.paths.insert(e.id, path);
                sum
            }
            Expr::Call(call) => self.call(e, call),
            Expr::List(l) => {
                let mut sum = Est::fixed(0);
                let mut item = Est {
                    min: if l.elements.is_empty() { 0 } else { u64::MAX },
                    max: 0,
                };
                for el in &l.elements {
                    sum = sum.add(self.cost(el));
                    item = item.union(self.size_or_unknown(el));
                }
                let entry = Entry {
                    container: Container::List,
                    key: Est::fixed(1),
                    val: item,
                };
                self.entries.insert(e.id, entry);
                sum.add(Est::fixed(LIST_CREATE))
            }
            Expr::Map(m) => {
                let mut sum = Est::fixed(0);
                let empty = if m.entries.is_empty() { 0 } else { u64::MAX };
                let mut key = Est { min: empty, max: 0 };
                let mut val = key;
                for entry in &m.entries {
                    if let EntryExpr::MapEntry(me) = &entry.expr {
                        sum = sum.add(self.cost(&me.key)).add(self.cost(&me.value));
                        key = key.union(self.size_or_unknown(&me.key));
                        val = val.union(self.size_or_unknown(&me.value));
                    }
                }
                let entry = Entry {
                    container: Container::Map,
                    key,
                    val,
                };
                self.entries.insert(e.id, entry);
                sum.add(Est::fixed(MAP_CREATE))
            }
            Expr::Struct(s) => {
                let mut sum = Est::fixed(STRUCT_CREATE);
                for entry in &s.entries {
                    if let EntryExpr::StructField(f) = &entry.expr {
                        sum = sum.add(self.cost(&f.value));
                    }
                }
                sum
            }
            Expr::Comprehension(c) => {
                if is_bind(c) {
                    self.bind(e, c)
                } else {
                    self.comprehension(e, c)
                }
            }
        }
    }

    fn local_for(&mut self, e: &IdedExpr) -> Local {
        Local {
            path: self.path(e),
            size: self.size(e),
            entry: self.entry(e),
        }
    }

    fn bind(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Est {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let l = self.local_for(&c.accu_init);
        self.push_local(&c.accu_var, l);
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        if let Some(s) = self.size(&c.result) {
            self.computed.insert(e.id, s);
        }
        if let Some(en) = self.entry(&c.result) {
            self.entries.insert(e.id, en);
        }
        sum
    }

    fn comprehension(&mut self, e: &IdedExpr, c: &ComprehensionExpr) -> Est {
        let mut sum = self.cost(&c.iter_range).add(self.cost(&c.accu_init));
        let accu = self.local_for(&c.accu_init);
        self.push_local(&c.accu_var, accu);
        // `pushIterSingle`: a list's items, a map's keys.
        let entry = self.entry(&c.iter_range);
        let container =
            entry
                .map(|en| en.container)
                .unwrap_or_else(|| match self.ty(&c.iter_range) {
                    Ty::Map(..) | Ty::Object(_) | Ty::Dyn => Container::Map,
                    _ => Container::List,
                });
        let (size, sub) = match container {
            Container::List => (entry.map(|en| en.val), "@items"),
            Container::Map => (entry.map(|en| en.key), "@keys"),
        };
        let mut path = self.path(&c.iter_range);
        path.push(sub.to_string());
        self.push_local(
            &c.iter_var,
            Local {
                path,
                size,
                entry: None,
            },
        );
        let loop_cost = self.cost(&c.loop_cond);
        let step_cost = self.cost(&c.loop_step);
        self.pop_local(&c.iter_var);
        sum = sum.add(self.cost(&c.result));
        self.pop_local(&c.accu_var);
        let range = self.size_or_unknown(&c.iter_range);
        sum = sum.add(range.mul(step_cost.add(loop_cost)));
        match &c.accu_init.expr {
            Expr::Literal(_) => {
                if let Some(s) = self.size(&c.accu_init) {
                    self.computed.insert(e.id, s);
                }
            }
            Expr::List(_) | Expr::Map(_) => {
                self.computed.insert(e.id, range);
                if let Some(en) = self.entry(&c.loop_step) {
                    self.entries.insert(e.id, en);
                }
            }
            _ => {}
        }
        sum
    }

    fn call(&mut self, e: &IdedExpr, call: &CallExpr) -> Est {
        let ns = call.target.as_deref().and_then(namespace);
        let name = match &ns {
            Some(ns) => format!("{ns}.{}", call.func_name),
            None => call.func_name.clone(),
        };
        let target = if ns.is_some() {
            None
        } else {
            call.target.as_deref()
        };
        if name == "dyn" && call.args.len() == 1 && target.is_none() {
            let arg = &call.args[0];
            let c = self.cost(arg);
            if let Some(s) = self.size(arg) {
                self.computed.insert(e.id, s);
            }
            if let Some(en) = self.entry(arg) {
                self.entries.insert(e.id, en);
            }
            return Est::fixed(1).add(c);
        }
        let arg_costs: Vec<Est> = call.args.iter().map(|a| self.cost(a)).collect();
        let mut sum = Est::fixed(0);
        if let Some(t) = target {
            sum = sum.add(self.cost(t));
        }
        let args_sum = arg_costs.iter().fold(Est::fixed(0), |a, c| a.add(*c));
        let (fn_cost, mut result) = self.function_cost(e, &name, target, &call.args, &arg_costs);
        let fn_cost = match fn_cost {
            Charged::WithArgs(c) => c.add(args_sum),
            Charged::Total(c) => c,
        };
        if name == "_[_]" && call.args.len() == 2 {
            let list = matches!(self.ty(&call.args[0]), Ty::List(_));
            result = self.entry(&call.args[0]).map(|en| en.val);
            let mut path = self.path(&call.args[0]);
            path.push(if list { "@items" } else { "@values" }.to_string());
            self.paths.insert(e.id, path);
        }
        if result.is_none() {
            result = self.size(e);
        }
        if let Some(r) = result {
            self.computed.insert(e.id, r);
        }
        sum.add(fn_cost)
    }

    fn list_elem_size(&mut self, target: &IdedExpr) -> Option<Est> {
        let mut path = self.path(target);
        if path.is_empty() {
            return None;
        }
        path.push("@items".to_string());
        self.sizes.size(&path)
    }

    /// `functionCost`: the call's cost (with or without its arguments') and result size.
    /// A table of one arm per library function (cel-go's checker and Kubernetes's
    /// `library/cost.go`), kept as one match so each arm can be set against upstream.
    fn function_cost(
        &mut self,
        e: &IdedExpr,
        name: &str,
        target: Option<&IdedExpr>,
        args: &[IdedExpr],
        arg_costs: &[Est],
    ) -> (Charged, Option<Est>) {
        use Charged::{Total, WithArgs};
        let tty = target.map(|t| self.ty(t));
        let is_list = matches!(tty, Some(Ty::List(_)));
        let one = Est::fixed(1);
        // The extensions' overload estimators, then the Kubernetes library's.
        match (name, target) {
            ("sets.contains" | "sets.intersects" | "sets.equivalent", None) if args.len() == 2 => {
                let f = if name == "sets.equivalent" { 2.0 } else { 1.0 };
                let (a, b) = (
                    self.size_or_unknown(&args[0]),
                    self.size_or_unknown(&args[1]),
                );
                return (WithArgs(a.mul(b).factor(f).add(one)), None);
            }
            ("slice", Some(t)) if is_list && args.len() == 2 => {
                let sz = self.size_or_unknown(t);
                let start = int_literal(&args[0]).unwrap_or(0);
                let end = int_literal(&args[1]).unwrap_or(sz.max);
                return list_call(1.0, Est::fixed(end.wrapping_sub(start)));
            }
            ("flatten", Some(t)) if is_list && args.len() <= 1 => {
                let depth = args
                    .first()
                    .map_or(Some(1), int_literal)
                    .unwrap_or(u64::MAX);
                let sz = self.size_or_unknown(t);
                return list_call(depth as f64, sz);
            }
            ("lists.range", None) if args.len() == 1 => {
                let n = int_literal(&args[0]).unwrap_or(u64::MAX);
                return list_call(1.0, Est::fixed(n));
            }
            ("reverse", Some(t)) if is_list && args.is_empty() => {
                let sz = self.size_or_unknown(t);
                return list_call(1.0, sz);
            }
            ("distinct", Some(t)) if args.is_empty() => {
                let sz = self.size_or_unknown(t);
                return list_call(2.0, sz.mul(sz));
            }
            ("sort", Some(t)) if args.is_empty() => {
                let sz = self.size_or_unknown(t);
                let f = match &tty {
                    Some(Ty::List(el)) if matches!(**el, Ty::String | Ty::Bytes) => {
                        2.0 + STRING_TRAVERSAL
                    }
                    _ => 2.0,
                };
                return list_call(f, sz.mul(sz));
            }
            ("isSorted" | "sum" | "max" | "min" | "indexOf" | "lastIndexOf", Some(t)) => {
                let sz = self.size_or_unknown(t);
                if matches!(tty, Some(Ty::String)) {
                    return (WithArgs(sz.factor(STRING_TRAVERSAL)), None);
                }
                let mut el = one;
                if let Some(Ty::List(elt)) = &tty
                    && matches!(**elt, Ty::String | Ty::Bytes)
                {
                    let es = self.list_elem_size(t).unwrap_or(UNKNOWN);
                    el = el.add(es.factor(STRING_TRAVERSAL));
                }
                return (WithArgs(sz.mul(el)), None);
            }
            ("lowerAscii" | "upperAscii" | "substring" | "trim", Some(t)) => {
                let sz = self.size_or_unknown(t);
                return (WithArgs(sz.factor(STRING_TRAVERSAL)), Some(sz));
            }
            ("replace", Some(t)) if args.len() >= 2 => {
                let sz = self.size_or_unknown(t);
                let from = self.size_or_unknown(&args[0]);
                let to = self.size_or_unknown(&args[1]);
                let size = replace_size(sz, from, to);
                return (WithArgs(sz.factor(2.0 * STRING_TRAVERSAL)), Some(size));
            }
            ("split", Some(t)) => {
                let sz = self.size_or_unknown(t);
                let max = args.get(1).and_then(int_literal).unwrap_or(sz.max);
                let cost = sz.factor(2.0 * STRING_TRAVERSAL);
                return (WithArgs(cost), Some(Est { min: 0, max }));
            }
            ("join", Some(t)) => {
                let list = self.size_or_unknown(t);
                let mut sz = Est::fixed(0);
                if matches!(tty, Some(Ty::List(_)) | Some(Ty::Unknown) | Some(Ty::Dyn)) {
                    let el = self.list_elem_size(t).unwrap_or(UNKNOWN);
                    sz = list.mul(el);
                }
                if let Some(sep) = args.first() {
                    let sep = self.size_or_unknown(sep);
                    let n = Est {
                        min: list.min.saturating_sub(1),
                        max: list.max.saturating_sub(1),
                    };
                    sz = sz.add(sep.mul(n));
                }
                return (WithArgs(sz.factor(STRING_TRAVERSAL)), Some(sz));
            }
            ("quantity" | "isQuantity", None) if !args.is_empty() => {
                let sz = self.size_or_unknown(&args[0]);
                return (WithArgs(sz.factor(STRING_TRAVERSAL)), None);
            }
            (
                "sign" | "asInteger" | "isInteger" | "asApproximateFloat" | "isGreaterThan"
                | "isLessThan" | "compareTo" | "add" | "sub",
                Some(_),
            ) => return (WithArgs(one), None),
            _ => {}
        }
        // cel-go's own overloads.
        let arg_ty = |c: &Self, i: usize| args.get(i).map(|a| c.ty(a)).unwrap_or(Ty::Unknown);
        match name {
            "format" if target.is_some() => {
                let sz = target.map_or(UNKNOWN, |t| self.size_or_unknown(t));
                return (WithArgs(sz.factor(STRING_TRAVERSAL)), None);
            }
            "bytes" | "string" | "strings.quote" if args.len() == 1 && target.is_none() => {
                let from = arg_ty(self, 0);
                let sz = self.size_or_unknown(&args[0]);
                let cost = WithArgs(sz.factor(STRING_TRAVERSAL));
                match (name, from) {
                    ("bytes", Ty::String) => {
                        return (
                            cost,
                            Some(Est {
                                min: sz.min,
                                max: sz.max.saturating_mul(4),
                            }),
                        );
                    }
                    ("string", Ty::Bytes) => {
                        return (
                            cost,
                            Some(Est {
                                min: sz.min / 4,
                                max: sz.max,
                            }),
                        );
                    }
                    ("strings.quote", _) => {
                        let max = sz.max.saturating_mul(2).saturating_add(2);
                        return (
                            cost,
                            Some(Est {
                                min: sz.min.saturating_add(2),
                                max,
                            }),
                        );
                    }
                    _ => {}
                }
            }
            "startsWith" | "endsWith" if target.is_some() && args.len() == 1 => {
                let sz = self.size_or_unknown(&args[0]);
                return (WithArgs(sz.factor(STRING_TRAVERSAL)), None);
            }
            "@in" if args.len() == 2 && !matches!(arg_ty(self, 1), Ty::Map(..) | Ty::Object(_)) => {
                let sz = self.size_or_unknown(&args[1]);
                return (WithArgs(sz.factor(1.0)), None);
            }
            "matches" if target.is_some() && args.len() == 1 => {
                let s = target.map_or(UNKNOWN, |t| self.size_or_unknown(t));
                let str_cost = s.add(one).factor(STRING_TRAVERSAL);
                let re = self.size_or_unknown(&args[0]).factor(REGEX_STRING_LENGTH);
                return (WithArgs(str_cost.mul(re)), None);
            }
            "contains" if target.is_some() && args.len() == 1 => {
                let s = target.map_or(UNKNOWN, |t| self.size_or_unknown(t));
                let sub = self.size_or_unknown(&args[0]);
                let cost = s.factor(STRING_TRAVERSAL).mul(sub.factor(STRING_TRAVERSAL));
                return (WithArgs(cost), None);
            }
            "_&&_" | "_||_" if arg_costs.len() == 2 => {
                let (l, r) = (arg_costs[0], arg_costs[1]);
                return (
                    Total(Est {
                        min: l.min,
                        max: l.max.saturating_add(r.max),
                    }),
                    None,
                );
            }
            "_?_:_" if args.len() == 3 => {
                let size = self
                    .size_or_unknown(&args[1])
                    .union(self.size_or_unknown(&args[2]));
                if let Some(en) = union_entries(self.entry(&args[1]), self.entry(&args[2])) {
                    self.entries.insert(e.id, en);
                }
                let cost = arg_costs[0].add(arg_costs[1].union(arg_costs[2]));
                return (Total(cost), Some(size));
            }
            "_+_" if args.len() == 2 => {
                let (a, b) = (arg_ty(self, 0), arg_ty(self, 1));
                let kind = |t: &Ty| match t {
                    Ty::String => Some(Ty::String),
                    Ty::Bytes => Some(Ty::Bytes),
                    Ty::List(_) => Some(Ty::List(Box::new(Ty::Unknown))),
                    _ => None,
                };
                if let Some(k) = kind(&a).or_else(|| kind(&b)) {
                    let size = self
                        .size_or_unknown(&args[0])
                        .add(self.size_or_unknown(&args[1]));
                    if let Some(en) = union_entries(self.entry(&args[0]), self.entry(&args[1])) {
                        self.entries.insert(e.id, en);
                    }
                    if matches!(k, Ty::List(_)) {
                        return (WithArgs(one), Some(size));
                    }
                    return (WithArgs(size.factor(STRING_TRAVERSAL)), Some(size));
                }
            }
            // Quantities compare in constant time (the Kubernetes library's `_==_`).
            "_==_"
                if args.len() == 2
                    && arg_ty(self, 0) == Ty::Quantity
                    && arg_ty(self, 1) == Ty::Quantity =>
            {
                return (WithArgs(one), None);
            }
            "_<_" | "_>_" | "_<=_" | "_>=_" | "_==_" | "_!=_" if args.len() == 2 => {
                let sized = matches!(name, "_==_" | "_!=_")
                    || matches!(arg_ty(self, 0), Ty::String | Ty::Bytes)
                    || matches!(arg_ty(self, 1), Ty::String | Ty::Bytes);
                if sized {
                    let l = self.size_or_unknown(&args[0]);
                    let r = self.size_or_unknown(&args[1]);
                    let smallest = l.max.min(r.max);
                    let est = Est {
                        min: u64::from(smallest > 0),
                        max: smallest,
                    };
                    return (WithArgs(est.factor(STRING_TRAVERSAL)), None);
                }
            }
            _ => {}
        }
        (WithArgs(one), None)
    }
}

/// A call's cost: its own (the arguments' are added), or the total.
enum Charged {
    WithArgs(Est),
    Total(Est),
}

/// `estimateAllocatingListCall` of the lists extension.
fn list_call(factor: f64, size: Est) -> (Charged, Option<Est>) {
    let cost = size.factor(factor).add(Est::fixed(1 + LIST_CREATE));
    (Charged::WithArgs(cost), Some(size))
}

/// `nodeAsIntValue`: a non-negative int literal.
fn int_literal(e: &IdedExpr) -> Option<u64> {
    match &e.expr {
        Expr::Literal(LiteralValue::Int(i)) => Some((*i.inner()).max(0) as u64),
        _ => None,
    }
}

/// The result size of `replace` (`EstimateCallCost` of the Kubernetes library).
fn replace_size(sz: Est, from: Est, to: Est) -> Est {
    let (mut count, mut retained) = (Est::fixed(0), Est::fixed(0));
    if from.min == 0 {
        count.max = sz.max.saturating_add(1);
        retained.max = sz.max;
    } else if to.max <= from.min {
        retained.max = sz.max;
    } else {
        count.max = (sz.max as f64 / from.min as f64).ceil() as u64;
    }
    if from.max == 0 {
        count.min = if sz.min < u64::MAX {
            sz.min + 1
        } else {
            sz.min
        };
        retained.min = sz.min;
    } else if from.max <= to.min {
        retained.min = sz.min;
    } else {
        count.min = (sz.min as f64 / from.max as f64).ceil() as u64;
    }
    count.mul(to).add(retained)
}

/// `isBind`: `cel.bind`'s comprehension (an empty range and a false condition).
fn is_bind(c: &ComprehensionExpr) -> bool {
    matches!(&c.iter_range.expr, Expr::List(l) if l.elements.is_empty())
        && matches!(&c.loop_cond.expr, Expr::Literal(LiteralValue::Boolean(b)) if !*b.inner())
        && c.accu_var != "__result__"
}
