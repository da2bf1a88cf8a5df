//! Structural schemas of custom resources: pruning, defaulting and validation against a CRD
//! version's `openAPIV3Schema`, with the semantics and the messages of a v1.36
//! apiextensions-apiserver (which validates with kube-openapi's `SchemaValidator`).
//!
//! The schema stays a `serde_json::Value`; every walk follows the object and looks the
//! schema up as it goes, so large schemas (LeaderWorkerSet's pod templates) cost nothing
//! for the fields an object does not set.
//!
//! Layout: `schema` reads the schema's keywords; `pruning` and `defaulting` rewrite the
//! object; `validation` runs kube-openapi's validators, which report through `result` and
//! use `formats` (strfmt), `go_regex` (RE2 patterns), `messages` (Go's printing of values)
//! and `ratcheting` (an update's old values); `embedded` and `list_types` hold the checks
//! apiextensions-apiserver adds after kube-openapi's.

mod defaulting;
mod embedded;
mod formats;
mod go_regex;
mod list_types;
mod messages;
mod pruning;
mod ratcheting;
mod result;
mod schema;
#[cfg(test)]
mod tests;
mod validation;

use serde_json::Value;

use crate::status::Cause;
use defaulting::{default_value, prune_nulls};
use embedded::Walk;
use pruning::{PrunePaths, coerce_embedded, prune_at};
use result::dedup;
use validation::node;

/// Drops the fields `schema` does not specify and returns their paths as the strict decoder
/// reports them (`spec.rules[0].foo`). Like `PruneWithOptions`, the pruned paths are sorted;
/// the unknown ObjectMeta fields of embedded resources follow (`CoerceWithOptions`, sorted
/// too). The root's apiVersion, kind and metadata are left alone (`isResourceRoot`).
pub(crate) fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut paths = PrunePaths::default();
    prune_at(obj, Some(schema), true, &mut paths);
    let mut found = paths.found;
    found.sort();
    let mut meta = Vec::new();
    coerce_embedded(obj, schema, &mut String::new(), &mut meta);
    meta.sort();
    found.extend(meta);
    found
}

/// Drops the nulls of non-nullable fields without a default
/// (`PruneNonNullableNullsWithoutDefaults`), then applies the schema's defaults
/// (`Default`): absent fields get a deep copy of theirs, and so do the nulls of
/// non-nullable fields, array items and `additionalProperties` values.
pub(crate) fn apply_defaults(schema: &Value, obj: &mut Value) {
    prune_nulls(obj, Some(schema));
    default_value(obj, schema);
}

/// Validates `obj` as the custom resource strategy does: kube-openapi's schema validation
/// (apiserver/validation/validation.go `ValidateCustomResource`, results converted by
/// `kubeOpenAPIResultToFieldErrors`), then embedded resources' TypeMeta and ObjectMeta
/// (schema/objectmeta/validation.go), then the list-type invariants
/// (schema/listtype/validation.go). With `old`, errors of values unchanged at a
/// correlatable path are ratcheted away (validation/ratcheting.go), and the list-type
/// checks are skipped when the old object already broke them (customresource/strategy.go).
pub(crate) fn validate(schema: &Value, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let res = node(schema, obj, "", old);
    let mut out = dedup(res.issues);
    let mut walk = Walk::default();
    walk.run(obj, schema, true);
    out.append(&mut walk.embedded);
    let old_lists_valid = old.is_none_or(|o| {
        let mut w = Walk::default();
        w.run(o, schema, false);
        w.lists.is_empty()
    });
    if old_lists_valid {
        out.append(&mut walk.lists);
    }
    out
}
