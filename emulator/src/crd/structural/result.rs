//! The results of kube-openapi's validators (validate/result.go) and the field errors
//! they convert to (apiserver/validation/validation.go `kubeOpenAPIResultToFieldErrors`).

use crate::status::Cause;

use super::messages::go_quote;

/// One kube-openapi error: its `Error()` text (a `Result` keeps each text once:
/// validate/result.go `AddErrors`) and the field error it converts to.
pub(super) struct Issue {
    pub(super) text: String,
    pub(super) cause: Cause,
}

/// validate.Result: the errors, and `MatchCount`, which picks the anyOf/oneOf branch
/// whose errors are reported.
#[derive(Default)]
pub(super) struct Res {
    pub(super) issues: Vec<Issue>,
    pub(super) matches: usize,
}

impl Res {
    pub(super) fn matched() -> Res {
        Res {
            issues: Vec::new(),
            matches: 1,
        }
    }

    pub(super) fn error(issue: Issue) -> Res {
        Res {
            issues: vec![issue],
            matches: 0,
        }
    }

    pub(super) fn valid(&self) -> bool {
        self.issues.is_empty()
    }

    pub(super) fn merge(&mut self, other: Res) {
        self.issues.extend(other.issues);
        self.matches += other.matches;
    }

    /// A validator that applied: its result, plus the `Inc()` SchemaValidator adds.
    pub(super) fn applied(&mut self, other: Res) {
        self.merge(other);
        self.matches += 1;
    }

    pub(super) fn push(&mut self, issue: Issue) {
        self.issues.push(issue);
    }
}

pub(super) fn dedup(issues: Vec<Issue>) -> Vec<Cause> {
    let mut seen = std::collections::HashSet::new();
    issues
        .into_iter()
        .filter(|i| seen.insert(i.text.clone()))
        .map(|i| i.cause)
        .collect()
}

/// kubeOpenAPIResultToFieldErrors: the error's name (the kube-openapi path) becomes the
/// field, minus one leading dot; without a name the field is the nil path, `<nil>`.
pub(super) fn field_of(name: &str) -> String {
    if name.is_empty() || name == "." {
        "<nil>".into()
    } else {
        name.strip_prefix('.').unwrap_or(name).into()
    }
}

/// `field.Invalid` (reason FieldValueInvalid) with kube-openapi's message as detail.
pub(super) fn invalid(path: &str, bad: String, text: String) -> Issue {
    let cause = Cause::new(
        "FieldValueInvalid",
        field_of(path),
        format!("Invalid value: {bad}: {text}"),
    );
    Issue { text, cause }
}

/// An error that is not an `errors.Validation` (anyOf/oneOf/allOf/not, number ranges):
/// `field.Invalid(nil, "", err.Error())`.
pub(super) fn composite(text: String) -> Issue {
    let cause = Cause::new(
        "FieldValueInvalid",
        "<nil>",
        format!("Invalid value: \"\": {text}"),
    );
    Issue { text, cause }
}

/// errors.InvalidType, converted to `field.TypeInvalid`: the value is the offending type
/// (or format) name, or the string that failed its format.
pub(super) fn type_invalid(path: &str, type_name: &str, value: &str) -> Issue {
    let quoted = go_quote(value);
    let text = format!("{path} in body must be of type {type_name}: {quoted}");
    let cause = Cause::new(
        "FieldValueTypeInvalid",
        field_of(path),
        format!("Invalid value: {quoted}: {text}"),
    );
    Issue { text, cause }
}

pub(super) fn required(name: String) -> Issue {
    let cause = Cause::required(field_of(&name));
    Issue {
        text: format!("{name} in body is required"),
        cause,
    }
}

/// `field.TooLong`: "may not be more than N bytes" (apimachinery field/errors.go).
pub(super) fn too_long(path: &str, max: i64) -> Issue {
    let unit = if max == 1 { "byte" } else { "bytes" };
    let cause = Cause::new(
        "FieldValueTooLong",
        field_of(path),
        format!("Too long: may not be more than {max} {unit}"),
    );
    Issue {
        text: format!("{path} in body should be at most {max} chars long"),
        cause,
    }
}

/// `field.TooMany`: "Too many: <n>: must have at most N items".
pub(super) fn too_many(path: &str, actual: usize, max: i64, text: String) -> Issue {
    let unit = if max == 1 { "item" } else { "items" };
    let cause = Cause::new(
        "FieldValueTooMany",
        field_of(path),
        format!("Too many: {actual}: must have at most {max} {unit}"),
    );
    Issue { text, cause }
}
