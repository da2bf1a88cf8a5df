//! Go's duration syntax (`time.ParseDuration`: `1h30m`, `500ms`, `-1.5s`), shared by the
//! schema's `duration` format and CEL's `duration()`.

/// Go's `time.ParseDuration`.
pub(crate) fn go_duration(s: &str) -> Option<chrono::Duration> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(r) = rest.strip_prefix('.') {
            let frac_len = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
            frac_part = &r[..frac_len];
            rest = &r[frac_len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit: i128 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let int: i128 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut value = int.checked_mul(unit)?;
        if !frac_part.is_empty() {
            let digits = frac_part.len().min(18) as u32;
            let frac: i128 = frac_part[..digits as usize].parse().ok()?;
            value += frac * unit / 10i128.pow(digits);
        }
        total = total.checked_add(value)?;
    }
    let total = if neg { -total } else { total };
    i64::try_from(total).ok().map(chrono::Duration::nanoseconds)
}
