//! Kubernetes resource quantities (`500m`, `16Gi`, `1e3`), validated by their syntax.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

static QUANTITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
        .expect("valid regex")
});

/// A non-negative Kubernetes quantity, kept in the user's own notation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Quantity(String);

impl Quantity {
    pub fn parse(s: &str) -> Result<Self, String> {
        if QUANTITY.is_match(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(format!(
                "`{s}` is not a Kubernetes quantity (examples: `500m`, `2`, `16Gi`, `1e3`)"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_kubernetes_notation_and_refuses_the_rest() {
        for ok in ["500m", "2", "0.5", "16Gi", "1e3", "100M", ".5", "1Ki"] {
            assert!(Quantity::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-1", "16GB", "1.2.3", "Gi", "16 Gi", "1gi"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }
}
