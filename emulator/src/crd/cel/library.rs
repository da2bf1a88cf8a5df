//! The CEL environment, and the Kubernetes function libraries the `cel` crate lacks:
//! lists, sets and quantity.

use std::sync::{Arc, OnceLock};

use cel::common::types::{self as celtypes, CelBool, CelDouble, CelInt, CelString, Type};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{Env, ExecutionError};

/// The base environment: the standard library and optionals, the strings and lists
/// extensions, and the Kubernetes libraries this module implements.
pub(super) fn env() -> &'static Arc<Env> {
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
pub(super) fn elements<'a, 'v>(
    list: &'a (dyn Val + 'v),
) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
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
