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
        let path = err.path().to_string();
        let inner = err.into_inner();
        FieldErrors::single(
            path_or_root(&path),
            describe_serde_error(&inner.to_string()),
        )
    })
}

fn path_or_root(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_owned()
    }
}

/// serde's messages end with " at line 1 column 42", which means nothing to an API client.
fn describe_serde_error(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}
