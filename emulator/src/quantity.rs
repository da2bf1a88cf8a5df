//! `resource.Quantity` canonical form: the real server re-serialises every quantity it stores
//! (`1024Mi` becomes `1Gi`, `0.5` becomes `500m`, numbers become strings), so the emulator
//! must too, or a reconciler comparing desired and observed resources would see no diff
//! here where a real cluster shows one.

use serde_json::Value;

#[derive(Clone, Copy, PartialEq)]
enum Format {
    BinarySI,
    DecimalSI,
    DecimalExponent,
}

const NANO: i128 = 1_000_000_000;

/// Parses a quantity into nano-units (rounded up, like the real server) and its format.
fn parse(s: &str) -> Option<(i128, Format)> {
    let s = s.trim();
    let num_end = s
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || ((*c == '+' || *c == '-') && *i == 0)))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(num_end);
    let (negative, digits) = match number.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int_part, frac_part) = digits.split_once('.').unwrap_or((digits, ""));
    if (int_part.is_empty() && frac_part.is_empty())
        || !int_part
            .bytes()
            .chain(frac_part.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let (format, base2, exp10): (Format, u32, i32) = match suffix {
        "" => (Format::DecimalSI, 0, 0),
        "Ki" => (Format::BinarySI, 10, 0),
        "Mi" => (Format::BinarySI, 20, 0),
        "Gi" => (Format::BinarySI, 30, 0),
        "Ti" => (Format::BinarySI, 40, 0),
        "Pi" => (Format::BinarySI, 50, 0),
        "Ei" => (Format::BinarySI, 60, 0),
        "n" => (Format::DecimalSI, 0, -9),
        "u" => (Format::DecimalSI, 0, -6),
        "m" => (Format::DecimalSI, 0, -3),
        "k" => (Format::DecimalSI, 0, 3),
        "M" => (Format::DecimalSI, 0, 6),
        "G" => (Format::DecimalSI, 0, 9),
        "T" => (Format::DecimalSI, 0, 12),
        "P" => (Format::DecimalSI, 0, 15),
        "E" => (Format::DecimalSI, 0, 18),
        e if e.starts_with(['e', 'E']) => (Format::DecimalExponent, 0, e[1..].parse().ok()?),
        _ => return None,
    };
    // value = (int.frac) * 2^base2 * 10^exp10, in nano-units, rounded up.
    let frac_len = frac_part.len() as i32;
    let mantissa: i128 = format!("{int_part}{frac_part}")
        .trim_start_matches('0')
        .parse()
        .unwrap_or(0);
    let mut num = mantissa.checked_mul(1i128 << base2)?;
    let mut den: i128 = 1;
    let scale = exp10 + 9 - frac_len;
    if scale >= 0 {
        num = num.checked_mul(10i128.checked_pow(scale as u32)?)?;
    } else {
        den = 10i128.checked_pow((-scale) as u32)?;
    }
    let nano = (num + den - 1) / den;
    Some((if negative { -nano } else { nano }, format))
}

/// The value of a quantity in nano-units (for comparisons), or None when it does not parse.
pub fn nano_value(s: &str) -> Option<i128> {
    parse(s).map(|(nano, _)| nano)
}

/// The canonical string of a quantity, or None when it does not parse.
pub fn canonical(s: &str) -> Option<String> {
    let (nano, format) = parse(s)?;
    Some(render(nano, format))
}

/// Like [`canonical`], rounded up to milli precision first, as resource lists are
/// (SetDefaults_ResourceList): `100n` becomes `1m`.
pub fn canonical_milli(s: &str) -> Option<String> {
    let (nano, format) = parse(s)?;
    const MILLI: i128 = 1_000_000;
    let rounded = if nano % MILLI == 0 {
        nano
    } else if nano > 0 {
        (nano / MILLI + 1) * MILLI
    } else {
        (nano / MILLI) * MILLI
    };
    Some(render(rounded, format))
}

fn render(nano: i128, mut format: Format) -> String {
    if nano == 0 {
        return "0".into();
    }
    let (sign, abs) = if nano < 0 { ("-", -nano) } else { ("", nano) };
    if format == Format::BinarySI {
        if abs >= 1024 * NANO && abs % NANO == 0 {
            let bytes = abs / NANO;
            let mut power = 0;
            while power < 6 && bytes % (1i128 << (10 * (power + 1))) == 0 {
                power += 1;
            }
            let suffix = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"][power];
            return format!("{sign}{}{suffix}", bytes >> (10 * power));
        }
        format = Format::DecimalSI;
    }
    // Largest power of 1000 that divides the value exactly.
    let mut exp = -9;
    while exp < 18 && abs % 10i128.pow((exp + 9 + 3) as u32) == 0 {
        exp += 3;
    }
    let mantissa = abs / 10i128.pow((exp + 9) as u32);
    let suffix = match format {
        Format::DecimalExponent if exp == 0 => String::new(),
        Format::DecimalExponent => format!("e{exp}"),
        _ => match exp {
            -9 => "n",
            -6 => "u",
            -3 => "m",
            0 => "",
            3 => "k",
            6 => "M",
            9 => "G",
            12 => "T",
            15 => "P",
            _ => "E",
        }
        .to_string(),
    };
    format!("{sign}{mantissa}{suffix}")
}

/// Canonicalises every quantity in a resource list (`{name: quantity}`, e.g. resources.limits).
pub fn canonicalize_map(map: Option<&mut Value>) {
    let Some(Value::Object(m)) = map else { return };
    for v in m.values_mut() {
        let text = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => continue,
        };
        if let Some(c) = canonical_milli(&text) {
            *v = Value::String(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{canonical, canonical_milli};

    #[test]
    fn canonical_forms() {
        for (input, want) in [
            ("1", "1"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("1500m", "1500m"),
            ("2000", "2k"),
            ("1024Mi", "1Gi"),
            ("1536Mi", "1536Mi"),
            ("1.5Gi", "1536Mi"),
            ("512", "512"),
            ("100Ki", "100Ki"),
            ("0.1", "100m"),
            ("1e3", "1e3"),
            ("16Gi", "16Gi"),
            ("0", "0"),
            ("250m", "250m"),
        ] {
            assert_eq!(canonical(input).as_deref(), Some(want), "{input}");
        }
        assert_eq!(canonical("abc"), None);
        assert_eq!(canonical_milli("100n").as_deref(), Some("1m"));
        assert_eq!(canonical_milli("1.5m").as_deref(), Some("2m"));
    }
}
