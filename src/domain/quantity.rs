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

    /// The value in nano-units (`500m` and `0.5` are both 500 000 000), for comparing a
    /// quantity with the API server's canonical spelling of it. `None` when it does not parse
    /// or does not fit.
    pub fn nano_value(s: &str) -> Option<i128> {
        let caps = QUANTITY.captures(s)?;
        let number = caps.get(1)?.as_str();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = format!("{whole}{fraction}");
        let mut value: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().ok()?
        };
        // `value` is the number times 10^len(fraction); scale everything to nano-units.
        let mut exponent10: i32 = 9 - fraction.len() as i32;
        let mut multiplier: i128 = 1;
        match caps.get(3).map_or("", |m| m.as_str()) {
            "" => {}
            "n" => exponent10 -= 9,
            "u" => exponent10 -= 6,
            "m" => exponent10 -= 3,
            "k" => exponent10 += 3,
            "M" => exponent10 += 6,
            "G" => exponent10 += 9,
            "T" => exponent10 += 12,
            "P" => exponent10 += 15,
            "E" => exponent10 += 18,
            binary @ ("Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei") => {
                let power = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                    .iter()
                    .position(|p| *p == binary)? as u32
                    + 1;
                multiplier = 1024i128.checked_pow(power)?;
            }
            exp => exponent10 = exponent10.checked_add(exp[1..].parse::<i32>().ok()?)?,
        }
        value = value.checked_mul(multiplier)?;
        if exponent10 >= 0 {
            value.checked_mul(10i128.checked_pow(exponent10 as u32)?)
        } else {
            let divisor = 10i128.checked_pow(exponent10.unsigned_abs())?;
            // Below a nano-unit the server rounds up; so do we.
            Some(value / divisor + i128::from(value % divisor != 0))
        }
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

    #[test]
    fn equal_quantities_in_other_spellings_have_one_value() {
        // The API server stores these in canonical form (apimachinery resource.Quantity).
        for (mine, canonical) in [
            ("0.5", "500m"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("1e3", "1k"),
            ("1000m", "1"),
            (".5", "500m"),
        ] {
            assert_eq!(
                Quantity::nano_value(mine),
                Quantity::nano_value(canonical),
                "{mine} = {canonical}"
            );
        }
        assert_ne!(Quantity::nano_value("1Gi"), Quantity::nano_value("1G"));
        assert_eq!(Quantity::nano_value("2"), Some(2_000_000_000));
        assert_eq!(Quantity::nano_value("nope"), None);
        assert_eq!(
            Quantity::nano_value("1.5e2147483647"),
            None,
            "too large, no overflow"
        );
    }
}
