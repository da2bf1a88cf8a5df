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
//! - costs (`cost.rs`, `estimate.rs`): at CRD create/update each rule's and
//!   messageExpression's worst-case cost is estimated as cel-go's `checker/cost.go` does
//!   (with the Kubernetes library's and the lists/sets extensions' call costs, and the
//!   sizes `SchemaDeclType` derives from `maxItems`/`maxLength`/`maxProperties`, or else
//!   from the 3 MiB request size); a rule's cost, times how many times its node can occur
//!   (`MaxCardinality`), must stay within `StaticEstimatedCostLimit` (10,000,000), and the
//!   schema's total within `StaticEstimatedCRDCostLimit` (100,000,000), reported as the
//!   Forbidden errors of validation.go. The `cel` crate cannot meter an evaluation, so
//!   the runtime cost is that same estimator run with the sizes of the values the rule
//!   reads (the largest string, list or map at each path, across list items and map
//!   values) instead of the schema's: an upper bound of cel-go's actual cost, exact for
//!   straight-line rules and comprehensions that run to the end, and higher where cel-go
//!   stops early (`exists`, `&&`/`||` short-circuits, the untaken `?:` branch) or where
//!   its runtime formula is cheaper than its estimate (`join`, the list functions). It is
//!   charged before evaluating: above `PerCallLimit` (1,000,000) the rule fails with
//!   cel-go's cancellation error (charged as just past the limit), and past the object's
//!   `RuntimeCELCostBudget` (10,000,000) validation stops, with the errors of
//!   validation.go. Approximations: types come from the small checker, so where it knows
//!   no type the estimate assumes an O(1) overload (`+`, comparisons) rather than
//!   cel-go's string or list one; Kubernetes types other than quantities (IP, CIDR, URL,
//!   semver, format) are not modelled (their functions are unavailable anyway); the
//!   per-expression limit is not waived for an unchanged schema on CRD update
//!   (`suppressPerExpressionCost`), as `Rules::compile` does not see the old schema; and,
//!   deliberately, in a messageExpression `string()` of a number or bool is taken to be at
//!   most 32 characters, where cel-go gives it no size (the real server refuses
//!   `'at most ' + string(self.max)` as far beyond the budget).
//!
//! Libraries: the standard library, optionals, the strings and lists extensions, the
//! Kubernetes list functions (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`),
//! `sets.contains/equivalent/intersects` and the Kubernetes quantity library. Not
//! available (a rule calling them fails when evaluated, with "undeclared reference"): the
//! regex `find`/`findAll` (the emulator has no regex crate of its own), `url`, `ip`,
//! `cidr`, `format`, `semver` and the authz library, and the two-variable comprehensions
//! (`all(k, v, ...)`, `transformMap`, ...), which the `cel` crate's interpreter lacks.

mod check;
mod compile;
mod cost;
#[cfg(test)]
mod cost_tests;
mod estimate;
mod library;
mod schema;
#[cfg(test)]
mod tests;
mod values;
mod walk;

use serde_json::Value;

use crate::status::Cause;
use compile::{Compiler, Mode, Validator};
use cost::{
    RUNTIME_CEL_COST_BUDGET, STATIC_ESTIMATED_CRD_COST_LIMIT, TotalCost, cost_error_message,
};
use schema::{SchemaNode, build_node};
use walk::{Corr, Ratchet, Walk};

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
            total_cost: TotalCost::default(),
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
            Some(1),
        );
        let mut errors = compiler.schema_errors;
        errors.extend(compiler.cel_errors);
        // The CRD-wide limit, checked once the whole schema is (validation.go).
        let total = &compiler.total_cost;
        if total.total > STATIC_ESTIMATED_CRD_COST_LIMIT {
            for (rule, _) in &total.most_expensive {
                errors.push(Cause::forbidden(
                    rule.clone(),
                    "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema",
                ));
            }
            errors.push(Cause::forbidden(
                path,
                &cost_error_message(
                    "x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema",
                    total.total,
                    STATIC_ESTIMATED_CRD_COST_LIMIT,
                ),
            ));
        }
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
            remaining: RUNTIME_CEL_COST_BUDGET,
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
