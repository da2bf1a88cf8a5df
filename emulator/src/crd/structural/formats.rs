//! Formats (kube-openapi pkg/validation/strfmt): the string formats a server validates and
//! their checks.

use std::net::Ipv6Addr;

use super::go_regex::go_regex;

/// The string formats a 1.36 server validates (apiserver/validation/formats.go, at the
/// default compatibility version 1.35), normalized without dashes as strfmt does.
const STRING_FORMATS: [&str; 26] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
    "k8sshortname",
    "k8slongname",
];

pub(super) fn normalized_format(f: &str) -> Option<String> {
    let n: String = f.chars().filter(|c| *c != '-').collect();
    STRING_FORMATS.contains(&n.as_str()).then_some(n)
}

/// The strfmt validator of a (normalized) format name.
pub(super) fn format_ok(name: &str, s: &str) -> bool {
    match name {
        "bsonobjectid" => s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => is_ipv4(s),
        "ipv6" => s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => is_mac(s),
        "uuid" | "uuid3" | "uuid4" | "uuid5" => matches(uuid_pattern(name), s),
        "isbn" => is_isbn(s, 10) || is_isbn(s, 13),
        "isbn10" => is_isbn(s, 10),
        "isbn13" => is_isbn(s, 13),
        "creditcard" => is_credit_card(s),
        "ssn" => s.len() == 11 && matches(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$", s),
        "hexcolor" => matches("^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$", s),
        "rgbcolor" => matches(RGB_COLOR, s),
        "byte" => matches(BASE64, s),
        "date" => is_date(s),
        "datetime" => is_date_time(s),
        "duration" => is_duration(s),
        "k8sshortname" => s.len() <= 63 && matches(&format!("^{SHORT_NAME}$"), s),
        "k8slongname" => s.len() <= 253 && matches(&format!("^{SHORT_NAME}(\\.{SHORT_NAME})*$"), s),
        _ => true,
    }
}

const SHORT_NAME: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const BASE64: &str =
    "^(?:[A-Za-z0-9+\\/]{4})*(?:[A-Za-z0-9+\\/]{2}==|[A-Za-z0-9+\\/]{3}=|[A-Za-z0-9+\\/]{4})$";
const RGB_COLOR: &str = "^rgb\\(\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*,\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*,\\s*(0|[1-9]\\d?|1\\d\\d?|2[0-4]\\d|25[0-5])\\s*\\)$";
const HOSTNAME: &str = r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$";

fn uuid_pattern(name: &str) -> &'static str {
    match name {
        "uuid3" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
        "uuid4" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        "uuid5" => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$",
        _ => "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$",
    }
}

pub(super) fn matches(pattern: &str, s: &str) -> bool {
    go_regex(pattern).is_some_and(|re| re.is_match(s))
}

/// strfmt `IsHostname`: the pattern, at most 255 bytes, labels of at most 63.
fn is_hostname(s: &str) -> bool {
    matches(HOSTNAME, s) && s.len() <= 255 && s.split('.').all(|p| p.len() <= 63)
}

/// k8s.io/utils/net `ParseIPSloppy` for IPv4: four dot-separated decimal octets, leading
/// zeros allowed.
fn is_ipv4_sloppy(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.bytes().all(|b| b.is_ascii_digit())
                && p.parse::<u32>().is_ok_and(|n| n <= 255)
        })
}

/// Go's IP parsers pick the family by the first '.' or ':'.
fn ip_family(s: &str) -> Option<char> {
    s.chars().find(|c| *c == '.' || *c == ':')
}

/// strfmt `isIPv4`: parses (sloppily) and has a dot (so `::ffff:1.2.3.4` passes).
fn is_ipv4(s: &str) -> bool {
    let parsed = match ip_family(s) {
        Some('.') => is_ipv4_sloppy(s),
        Some(_) => s.parse::<Ipv6Addr>().is_ok(),
        None => false,
    };
    parsed && s.contains('.')
}

/// `ParseCIDRSloppy`: an address, '/', and a decimal prefix length within the family.
fn is_cidr(s: &str) -> bool {
    let Some((addr, mask)) = s.split_once('/') else {
        return false;
    };
    let bits = match ip_family(addr) {
        Some('.') if is_ipv4_sloppy(addr) => 32,
        Some(':') if addr.parse::<Ipv6Addr>().is_ok() => 128,
        _ => return false,
    };
    !mask.is_empty()
        && mask.bytes().all(|b| b.is_ascii_digit())
        && mask.parse::<u32>().is_ok_and(|n| n <= bits)
}

/// net.ParseMAC: 6, 8 or 20 octets as `xx:xx`, `xx-xx` or `xxxx.xxxx`.
fn is_mac(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 14 {
        return false;
    }
    let (group, sep) = match (b[2], b[4]) {
        (b':' | b'-', _) => (2, b[2]),
        (_, b'.') => (4, b'.'),
        _ => return false,
    };
    if !(b.len() + 1).is_multiple_of(group + 1) {
        return false;
    }
    let octets = (b.len() + 1) / (group + 1) * group / 2;
    if !matches!(octets, 6 | 8 | 20) {
        return false;
    }
    b.chunks(group + 1).all(|c| {
        c[..group].iter().all(u8::is_ascii_hexdigit) && (c.len() == group || c[group] == sep)
    })
}

/// govalidator `IsISBN`: digits after removing whitespace and dashes, with the checksum.
fn is_isbn(s: &str, version: u32) -> bool {
    let d: Vec<u8> = s
        .bytes()
        .filter(|b| !matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ' | b'-'))
        .collect();
    let digit = |b: u8| u32::from(b - b'0');
    if version == 10 {
        let shape = d.len() == 10
            && d[..9].iter().all(u8::is_ascii_digit)
            && (d[9].is_ascii_digit() || d[9] == b'X');
        if !shape {
            return false;
        }
        let mut sum: u32 = (0..9).map(|i| (i as u32 + 1) * digit(d[i])).sum();
        sum += 10 * if d[9] == b'X' { 10 } else { digit(d[9]) };
        return sum.is_multiple_of(11);
    }
    if d.len() != 13 || !d.iter().all(u8::is_ascii_digit) {
        return false;
    }
    let sum: u32 = (0..12).map(|i| [1, 3][i % 2] * digit(d[i])).sum();
    digit(d[12]) == (10 - sum % 10) % 10
}

/// govalidator `IsCreditCard`: the digits match a card pattern and pass Luhn.
fn is_credit_card(s: &str) -> bool {
    const CARD: &str = "^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\\d{3})\\d{11})$";
    let digits: String = s.chars().filter(char::is_ascii_digit).collect();
    if !matches(CARD, &digits) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let n = u32::from(b - b'0');
            match (i % 2 == 1, n * 2) {
                (true, d) if d >= 10 => d % 10 + 1,
                (true, d) => d,
                (false, _) => n,
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// `time.Parse("2006-01-02")`: a real calendar date.
fn is_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r.clone()]
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| s[r].parse().ok())
            .flatten()
    };
    let (Some(y), Some(m), Some(d)) = (num(0..4), num(5..7), num(8..10)) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

/// strfmt `IsDateTime`: a date, a 't', and a time with zone.
fn is_date_time(s: &str) -> bool {
    const TIME: &str = "^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$";
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let mut parts = lower.split('t');
    let (Some(date), Some(time)) = (parts.next(), parts.next()) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let Some(c) = go_regex(TIME).and_then(|re| {
        re.captures(time)
            .map(|c| [1, 2, 3].map(|i| c[i].to_string()))
    }) else {
        return false;
    };
    c[0].as_str() <= "23" && c[1].as_str() <= "59" && c[2].as_str() <= "59"
}

/// strfmt `ParseDuration`: Go's `time.ParseDuration`, else any "<n> <unit>" pair with a
/// known unit spelling (`5 days`).
fn is_duration(s: &str) -> bool {
    go_duration(s) || loose_duration(s)
}

/// strfmt's `duration`: Go's `time.ParseDuration` syntax.
fn go_duration(s: &str) -> bool {
    crate::crd::duration::go_duration(s).is_some()
}

fn loose_duration(s: &str) -> bool {
    const UNITS: [&[&str]; 8] = [
        &["ns", "nano"],
        &["us", "\u{b5}s", "micro"],
        &["ms", "milli"],
        &["s", "sec"],
        &["m", "min"],
        &["h", "hr", "hour"],
        &["d", "day"],
        &["w", "wk", "week"],
    ];
    let Some(re) = go_regex(r"((\d+)\s*([A-Za-z\x{b5}]+))") else {
        return false;
    };
    let mut ok = false;
    for c in re.captures_iter(s) {
        if c[2].parse::<i64>().is_err() {
            return false;
        }
        let unit = c[3].trim().to_lowercase();
        for variants in UNITS {
            let last = variants.len() - 1;
            ok |= variants
                .iter()
                .enumerate()
                .any(|(i, v)| (i == last && unit.starts_with(v)) || unit.eq_ignore_ascii_case(v));
        }
    }
    ok
}

/// govalidator `IsRequestURI` (`url.ParseRequestURI`): an absolute URI or an absolute
/// path, without control characters, with valid escapes and authority.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return false;
    }
    if s == "*" {
        return true;
    }
    let (scheme, rest) = split_scheme(s);
    if scheme == Some("") {
        return false;
    }
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    if !rest.starts_with('/') {
        return scheme.is_some();
    }
    let path = match rest.strip_prefix("//").filter(|_| scheme.is_some()) {
        Some(auth_path) => {
            let end = auth_path.find('/').unwrap_or(auth_path.len());
            if !valid_authority(&auth_path[..end]) {
                return false;
            }
            &auth_path[end..]
        }
        None => rest,
    };
    valid_escapes(path)
}

/// url.getScheme: `Some(scheme)` before the first ':' when all its characters are
/// scheme characters (`Some("")` for a leading ':').
fn split_scheme(s: &str) -> (Option<&str>, &str) {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' => return (Some(&s[..i]), &s[i + 1..]),
            _ => return (None, s),
        }
    }
    (None, s)
}

fn valid_escapes(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter().enumerate().all(|(i, c)| {
        *c != b'%'
            || (b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit())
    })
}

fn valid_authority(auth: &str) -> bool {
    let (user, host) = auth
        .rsplit_once('@')
        .map_or((None, auth), |(u, h)| (Some(u), h));
    let user_ok = user.is_none_or(|u| {
        u.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c))
    });
    let host_ok = if let Some(inner) = host.strip_prefix('[') {
        inner
            .split_once(']')
            .is_some_and(|(_, port)| port.is_empty() || valid_port(port))
    } else {
        let (name, port) = host
            .rsplit_once(':')
            .map_or((host, None), |(h, p)| (h, Some(p)));
        port.is_none_or(|p| valid_port(&format!(":{p}")))
            && valid_escapes(name)
            && name.bytes().all(|b| {
                b >= 0x80 || b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%\"<>".contains(&b)
            })
    };
    user_ok && host_ok
}

fn valid_port(p: &str) -> bool {
    p.strip_prefix(':')
        .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
}

/// net/mail `ParseAddress`, simplified: an addr-spec, bare or in `Name <...>`.
fn is_email(s: &str) -> bool {
    let s = s.trim();
    let addr = match (s.rfind('<'), s.strip_suffix('>')) {
        (Some(i), Some(inner)) => &inner[i + 1..],
        _ => s,
    };
    let Some((local, domain)) = addr.rsplit_once('@') else {
        return false;
    };
    let atext = |c: char| !c.is_ascii() || (c.is_ascii_graphic() && !"()<>[]:;@\\,\".".contains(c));
    let dot_atom =
        |x: &str| !x.is_empty() && x.split('.').all(|p| !p.is_empty() && p.chars().all(atext));
    let quoted = |x: &str| x.len() >= 2 && x.starts_with('"') && x.ends_with('"');
    let literal = |x: &str| x.starts_with('[') && x.ends_with(']');
    (dot_atom(local) || quoted(local)) && (dot_atom(domain) || literal(domain))
}
