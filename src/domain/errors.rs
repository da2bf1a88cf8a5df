//! Field-path validation errors shared by every parser in the domain.

use serde::Serialize;

/// One problem with one field of the input, e.g. `spec.resources.gpu.count`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct FieldError {
    /// Dotted JSON path of the offending field (`spec.engine.args[2]`).
    pub field: String,
    /// What is wrong and, where useful, what would be accepted.
    pub message: String,
}

/// An accumulator of [`FieldError`]s, so a client learns about every problem at once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldErrors(Vec<FieldError>);

impl FieldErrors {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn single(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut errors = Self::new();
        errors.push(field, message);
        errors
    }

    pub fn push(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            message: message.into(),
        });
    }

    /// Records `result`'s error (if any) under `field`, returning the value when valid.
    pub fn check<T>(&mut self, field: &str, result: Result<T, String>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(message) => {
                self.push(field, message);
                None
            }
        }
    }

    /// Adds every error of `other`.
    pub fn extend(&mut self, other: FieldErrors) {
        self.0.extend(other.0);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same errors, for input that sits at `prefix` of a larger document (`replicas`
    /// becomes `spec.replicas`; an error of the whole value names `prefix`).
    pub fn under(self, prefix: &str) -> Self {
        Self(
            self.0
                .into_iter()
                .map(|e| FieldError {
                    field: match e.field.as_str() {
                        "" => prefix.to_owned(),
                        f if f.starts_with('[') => format!("{prefix}{f}"),
                        f => format!("{prefix}.{f}"),
                    },
                    message: e.message,
                })
                .collect(),
        )
    }

    pub fn into_vec(self) -> Vec<FieldError> {
        self.0
    }

    pub fn as_slice(&self) -> &[FieldError] {
        &self.0
    }

    /// `Ok(value)` when nothing was recorded, otherwise the collected errors.
    pub fn finish<T>(self, value: impl FnOnce() -> T) -> Result<T, FieldErrors> {
        if self.0.is_empty() {
            Ok(value())
        } else {
            Err(self)
        }
    }
}

impl std::fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for FieldErrors {}

/// Deserialises `value` into `T`, turning a type error or an unknown field into a
/// [`FieldErrors`] that names the field's path. Only an object becomes a struct.
pub fn from_json_value<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, FieldErrors> {
    serde_path_to_error::deserialize(super::json::Strict(value)).map_err(|err| {
        let path = path_or_root(&err.path().to_string());
        let (field, message) = describe_serde_error(&path, &err.into_inner().to_string());
        FieldErrors::single(field, message)
    })
}

/// [`from_json_value`] for a value that sits at `field` of a larger input, so its errors
/// name the same paths as when it arrives inside a request body (`spec.replicas`).
pub fn from_json_value_at<T: serde::de::DeserializeOwned>(
    field: &str,
    value: serde_json::Value,
) -> Result<T, FieldErrors> {
    from_json_value(value).map_err(|errors| errors.under(field))
}

fn path_or_root(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_owned()
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

/// Turns serde's message into one for an API client: the missing field's own path, and
/// JSON words instead of Rust's (`expected an integer, got the number 1e20`, not
/// `invalid type: floating point 1e20, expected i64`), without serde's position suffix.
fn describe_serde_error(path: &str, message: &str) -> (String, String) {
    let message = match message.rfind(" at line ") {
        Some(i) => &message[..i],
        None => message,
    };
    if let Some(name) = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.strip_suffix('`'))
    {
        return (join(path, name), "is required".to_owned());
    }
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let expected = rest
            .split_once(", expected ")
            .map(|(_, e)| format!("; expected {e}"))
            .unwrap_or_default();
        return (path.to_owned(), format!("is not a known field{expected}"));
    }
    if let Some(rest) = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "))
        && let Some((found, expected)) = rest.rsplit_once(", expected ")
    {
        return (
            path.to_owned(),
            format!(
                "expected {}, got {}",
                json_words(expected),
                found_words(found)
            ),
        );
    }
    (path.to_owned(), message.to_owned())
}

/// What serde expected, in JSON's words.
fn json_words(expected: &str) -> String {
    match expected {
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "an integer".into(),
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number of 0 or more".into(),
        "f32" | "f64" => "a number".into(),
        "a sequence" => "an array".into(),
        "a map" => "an object".into(),
        e if e.starts_with("struct ") => "an object".into(),
        e if e.starts_with("a string") || e.starts_with("a boolean") => e.into(),
        e if e.starts_with("variant identifier") || e.starts_with("one of") => e.into(),
        e => e.into(),
    }
}

/// What serde found, in JSON's words.
fn found_words(found: &str) -> String {
    let value = |prefix: &str| {
        found
            .strip_prefix(prefix)
            .map(|v| v.trim_matches('`').to_owned())
    };
    if let Some(n) = value("floating point ").or_else(|| value("integer ")) {
        let n = n.strip_suffix(".0").unwrap_or(&n).replace("e+", "e");
        return format!("the number {n}");
    }
    match found {
        "sequence" => "an array".into(),
        "map" => "an object".into(),
        "unit value" | "null" => "null".into(),
        f if f.starts_with("boolean ") => f.trim_start_matches("boolean ").trim_matches('`').into(),
        f => f.into(),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Body {
        name: String,
        spec: Spec,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Spec {
        model: String,
        replicas: Option<i64>,
        port: Option<u16>,
    }

    fn error(value: serde_json::Value) -> (String, String) {
        let e = from_json_value::<Body>(value)
            .unwrap_err()
            .into_vec()
            .remove(0);
        (e.field, e.message)
    }

    #[test]
    fn a_missing_field_is_reported_at_its_own_path() {
        assert_eq!(
            error(json!({"spec": {"model": "m"}})),
            ("name".into(), "is required".into())
        );
        assert_eq!(
            error(json!({"name": "n", "spec": {}})),
            ("spec.model".into(), "is required".into())
        );
    }

    #[test]
    fn messages_use_json_words() {
        assert_eq!(
            error(json!({"name": "n", "spec": {"model": "m", "replicas": 1e20}})),
            (
                "spec.replicas".into(),
                "expected an integer, got the number 1e20".into()
            )
        );
        assert_eq!(
            error(json!({"name": "n", "spec": {"model": "m", "port": -1}})),
            (
                "spec.port".into(),
                "expected a whole number of 0 or more, got the number -1".into()
            )
        );
        assert_eq!(
            error(json!({"name": "n", "spec": {"model": "m", "replicas": "two"}})),
            (
                "spec.replicas".into(),
                "expected an integer, got string \"two\"".into()
            )
        );
        let (field, message) = error(json!({"name": "n", "spec": {"model": "m", "extra": 1}}));
        assert_eq!(field, "spec.extra");
        assert!(
            message.starts_with("is not a known field; expected one of"),
            "{message}"
        );
    }
}
