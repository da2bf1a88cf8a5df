//! The CEL cost model: cel-go's static estimator (`checker/cost.go`, with the Kubernetes
//! library costs of `k8s.io/apiserver/pkg/cel/library/cost.go` and the lists and sets
//! extensions' estimators), the size estimates a schema gives
//! (`k8s.io/apiserver/pkg/cel/common/schemas.go`, `MaxElements`/`MinSerializedSize`), and
//! the limits of `k8s.io/apiserver/pkg/apis/cel/config.go` and apiextensions'
//! `pkg/apis/apiextensions/validation`.
//!
//! The same estimator serves at evaluation: there the sizes come from the values the rule
//! reads (see [`ValueSizes`]) instead of the schema, which bounds cel-go's runtime cost.

use std::collections::HashMap;

use serde_json::Value;

use super::schema::{NodeId, SchemaNode};

/// `StaticEstimatedCostLimit`: the most one expression's estimated cost may be.
pub(super) const STATIC_ESTIMATED_COST_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`: the most the estimated costs of a schema's rules may add to.
pub(super) const STATIC_ESTIMATED_CRD_COST_LIMIT: u64 = 100_000_000;
/// `celconfig.PerCallLimit`: the most one evaluation may cost.
pub(super) const PER_CALL_LIMIT: u64 = 1_000_000;
/// `celconfig.RuntimeCELCostBudget`: the most the evaluations for one object may cost.
pub(super) const RUNTIME_CEL_COST_BUDGET: i64 = 10_000_000;
/// `celconfig.MaxRequestSizeBytes`.
const MAX_REQUEST_SIZE_BYTES: i64 = 3 * 1024 * 1024;

pub(super) const STRING_TRAVERSAL: f64 = 0.1;
pub(super) const REGEX_STRING_LENGTH: f64 = 0.25;
pub(super) const LIST_CREATE: u64 = 10;
pub(super) const MAP_CREATE: u64 = 30;
pub(super) const STRUCT_CREATE: u64 = 40;

/// `SchemaDeclType`'s `MaxElements` and `MinSerializedSize` of a node (its children built).
pub(super) fn size_bounds(nodes: &[SchemaNode], node: &SchemaNode, schema: &Value) -> (u64, i64) {
    let int = |key: &str| schema.get(key).and_then(Value::as_i64).map(|v| v.max(0));
    let request = (MAX_REQUEST_SIZE_BYTES - 2) as u64;
    if node.int_or_string {
        return (int("maxLength").map_or(request, |l| l as u64 * 4), 1);
    }
    match node.ty.as_str() {
        "array" => {
            let item_min = node.items.map_or(2, |i| nodes[i].min_size);
            let max = int("maxItems").map_or_else(
                || ((MAX_REQUEST_SIZE_BYTES - 2) / (item_min + 1)) as u64,
                |m| m as u64,
            );
            (max, 2)
        }
        "object" => {
            if let Some(a) = node.additional {
                let max = int("maxProperties").map_or_else(
                    || ((MAX_REQUEST_SIZE_BYTES - 2) / (nodes[a].min_size + 6)) as u64,
                    |m| m as u64,
                );
                return (max, 2);
            }
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut min = 2;
            for (name, (_, child)) in &node.props {
                let has_default = schema
                    .get("properties")
                    .and_then(|p| p.get(name))
                    .is_some_and(|p| p.get("default").is_some());
                if nodes[*child].exposed && required.contains(&name.as_str()) && !has_default {
                    min += name.len() as i64 + nodes[*child].min_size + 4;
                }
            }
            (0, min)
        }
        "string" => match node.format.as_str() {
            "byte" => (int("maxLength").map_or(request, |l| l as u64), 2),
            "duration" => (32, 3),
            "date" => (12, 12),
            "date-time" => (32, 21),
            _ => {
                let enum_max = schema.get("enum").and_then(Value::as_array).map(|e| {
                    e.iter()
                        .filter_map(Value::as_str)
                        .map(|s| s.len() as u64)
                        .max()
                        .unwrap_or(0)
                });
                let max = match (int("maxLength"), enum_max) {
                    (Some(l), _) => l as u64 * 4,
                    (None, Some(e)) if !schema["enum"].as_array().is_some_and(Vec::is_empty) => e,
                    _ => request,
                };
                (max, 2)
            }
        },
        "boolean" => (0, 4),
        _ => (0, 1),
    }
}

/// `maxCardinality` of compilation.go: how many times a value of this minimum size can
/// occur in one request, for rules under lists and maps without `maxItems`/`maxProperties`.
pub(super) fn max_cardinality(min_size: i64) -> u64 {
    (MAX_REQUEST_SIZE_BYTES / (min_size + 1)) as u64
}

/// `extractMaxElements`: the factor by which a schema multiplies how many times its
/// children occur; `None` for a list or map without a limit.
pub(super) fn max_elements_factor(schema: &Value) -> Option<u64> {
    let limit = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_i64)
            .map(|v| v.max(0) as u64)
    };
    match schema.get("type").and_then(Value::as_str) {
        Some("object") if schema.get("additionalProperties").is_some() => limit("maxProperties"),
        Some("array") => limit("maxItems"),
        _ => Some(1),
    }
}

/// `multiplyWithOverflowGuard`.
pub(super) fn multiply_guard(cost: u64, cardinality: u64) -> u64 {
    if cost == 0 {
        0
    } else {
        cost.saturating_mul(cardinality)
    }
}

/// `getCostErrorMessage`.
pub(super) fn cost_error_message(name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_string()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

/// `TotalCost`: the estimated costs of a schema's expressions, with the (at most four)
/// most expensive of those costing at least 1% of the CRD limit.
#[derive(Default)]
pub(super) struct TotalCost {
    pub(super) total: u64,
    pub(super) most_expensive: Vec<(String, u64)>,
}

impl TotalCost {
    pub(super) fn observe(&mut self, path: String, cost: u64) {
        self.total = self.total.saturating_add(cost);
        if cost < STATIC_ESTIMATED_CRD_COST_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((path, cost));
        self.most_expensive.sort_by_key(|e| std::cmp::Reverse(e.1));
        self.most_expensive.truncate(4);
    }
}

/// A range of sizes or costs (`SizeEstimate`, `CostEstimate`), saturating at `u64::MAX`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Est {
    pub(super) min: u64,
    pub(super) max: u64,
}

pub(super) const UNKNOWN: Est = Est {
    min: 0,
    max: u64::MAX,
};

impl Est {
    pub(super) fn fixed(n: u64) -> Est {
        Est { min: n, max: n }
    }
    pub(super) fn add(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_add(o.min),
            max: self.max.saturating_add(o.max),
        }
    }
    pub(super) fn mul(self, o: Est) -> Est {
        Est {
            min: self.min.saturating_mul(o.min),
            max: self.max.saturating_mul(o.max),
        }
    }
    pub(super) fn factor(self, f: f64) -> Est {
        Est {
            min: by_factor(self.min, f),
            max: by_factor(self.max, f),
        }
    }
    pub(super) fn union(self, o: Est) -> Est {
        Est {
            min: self.min.min(o.min),
            max: self.max.max(o.max),
        }
    }
}

/// `multiplyByCostFactor`: rounded up, saturating.
fn by_factor(x: u64, f: f64) -> u64 {
    let xf = x as f64;
    if xf > 0.0 && f > 0.0 && xf > u64::MAX as f64 / f {
        return u64::MAX;
    }
    let c = (xf * f).ceil();
    if c >= 18_446_744_073_709_551_616.0 {
        u64::MAX
    } else {
        c as u64
    }
}

/// Where sizes come from: the size of the values at a path (`self`, then field names,
/// `@items`, `@values`, `@keys`), as `checker.CostEstimator.EstimateSize` gives it.
pub(super) trait Sizes {
    fn size(&mut self, path: &[String]) -> Option<Est>;
}

/// The element node of a list or map node (`DeclType.ElemType`).
fn elem(n: &SchemaNode) -> Option<NodeId> {
    if n.ty == "array" {
        n.items
    } else {
        n.additional
    }
}

/// The child of an object node for a CEL field name (`DeclType.Fields`).
fn field(n: &SchemaNode, name: &str) -> Option<NodeId> {
    if n.additional.is_some() {
        return None;
    }
    n.fields.get(name).copied()
}

/// The sizes a schema allows (`sizeEstimator` of compilation.go): like it, the first path
/// element (the variable) is skipped, whatever it is.
pub(super) struct SchemaSizes<'a> {
    pub(super) nodes: &'a [SchemaNode],
    pub(super) root: NodeId,
}

impl Sizes for SchemaSizes<'_> {
    fn size(&mut self, path: &[String]) -> Option<Est> {
        let (_, rest) = path.split_first()?;
        let mut n = self.root;
        for (i, name) in rest.iter().enumerate() {
            let node = &self.nodes[n];
            n = match name.as_str() {
                "@items" | "@values" => elem(node)?,
                // Map keys are `StringType`, whose MaxElements is 0.
                "@keys" if node.additional.is_some() && i + 1 == rest.len() => {
                    return Some(Est::fixed(0));
                }
                "@keys" => return None,
                f => field(node, f)?,
            };
        }
        Some(Est {
            min: 0,
            max: self.nodes[n].max_elements,
        })
    }
}

/// The sizes of the values a rule is evaluated on: the largest of the values at the path
/// (every item of a list, value of a map), as cel-go's `actualSize` measures them (a
/// string's characters, a list's items, a map's or object's entries, 1 for others).
pub(super) struct ValueSizes<'a> {
    pub(super) nodes: &'a [SchemaNode],
    pub(super) root: NodeId,
    pub(super) new: &'a Value,
    pub(super) old: Option<&'a Value>,
    pub(super) cache: HashMap<Vec<String>, Option<Est>>,
}

impl ValueSizes<'_> {
    fn measure(&self, path: &[String]) -> Option<Est> {
        let (var, rest) = path.split_first()?;
        let start = if var == "oldSelf" {
            self.old
        } else {
            Some(self.new)
        };
        let mut values: Vec<&Value> = start.into_iter().collect();
        let mut n = self.root;
        for (i, name) in rest.iter().enumerate() {
            let node = &self.nodes[n];
            match name.as_str() {
                "@items" | "@values" => {
                    n = elem(node)?;
                    values = values
                        .into_iter()
                        .flat_map(|v| -> Box<dyn Iterator<Item = &Value>> {
                            match v {
                                Value::Array(a) => Box::new(a.iter()),
                                Value::Object(o) => Box::new(o.values()),
                                _ => Box::new(std::iter::empty()),
                            }
                        })
                        .collect();
                }
                "@keys" if i + 1 == rest.len() => {
                    let max = values
                        .iter()
                        .filter_map(|v| v.as_object())
                        .flat_map(|o| o.keys())
                        .map(|k| k.chars().count() as u64)
                        .max();
                    return Some(Est {
                        min: 0,
                        max: max.unwrap_or(0),
                    });
                }
                "@keys" => return None,
                f => {
                    let child = field(node, f)?;
                    let json = node
                        .props
                        .iter()
                        .find(|(_, (cel, c))| *c == child && cel.as_deref() == Some(f))
                        .map(|(json, _)| json.as_str())?;
                    n = child;
                    values = values.into_iter().filter_map(|v| v.get(json)).collect();
                }
            }
        }
        let node = &self.nodes[n];
        let max = values
            .iter()
            .map(|v| match v {
                Value::String(s)
                    if node.int_or_string
                        || !matches!(node.format.as_str(), "date" | "date-time" | "duration") =>
                {
                    s.chars().count() as u64
                }
                Value::Array(a) => a.len() as u64,
                Value::Object(o) => o.len() as u64,
                Value::Null => 0,
                _ => 1,
            })
            .max()
            .unwrap_or(0);
        Some(Est { min: 0, max })
    }
}

impl Sizes for ValueSizes<'_> {
    fn size(&mut self, path: &[String]) -> Option<Est> {
        if let Some(s) = self.cache.get(path) {
            return *s;
        }
        let s = self.measure(path);
        self.cache.insert(path.to_vec(), s);
        s
    }
}
