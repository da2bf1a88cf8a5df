//! Names: deployments, projects, namespaces, and Kubernetes label syntax.

use std::fmt;

use serde::Serialize;

/// Namespaces that belong to the cluster itself and are never given to a project.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Longest deployment name, so every derived name (`-canary`, `-epp`, …) stays a 63-character label.
pub const MAX_DEPLOYMENT_NAME_LEN: usize = 45;

/// A DNS-1123 label: lowercase alphanumerics and '-', starting and ending alphanumeric, ≤ 63.
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: dot-separated DNS-1123 labels, ≤ 253 in all.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

fn dns1035_label(s: &str, max: usize) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > max {
        return Err(format!(
            "must be at most {max} characters (got {})",
            s.len()
        ));
    }
    if !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("must start with a lowercase letter".into());
    }
    if !is_dns1123_label(s) {
        return Err(
            "must consist of lowercase letters, digits and '-', and end with a letter or digit"
                .into(),
        );
    }
    Ok(())
}

/// The name of a model deployment: a DNS-1035 label of at most 45 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct DeploymentName(String);

impl DeploymentName {
    pub fn parse(s: &str) -> Result<Self, String> {
        dns1035_label(s, MAX_DEPLOYMENT_NAME_LEN)?;
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeploymentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A project (tenant) name, also usable as a namespace name: a DNS-1123 label of at
/// most 63 characters that is not a system namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ProjectName(String);

impl ProjectName {
    pub fn parse(s: &str) -> Result<Self, String> {
        parse_namespace_like(s)?;
        Ok(Self(s.to_owned()))
    }

    /// The same rules, for the Kubernetes namespace a project maps to.
    pub fn parse_namespace(s: &str) -> Result<Self, String> {
        Self::parse(s)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProjectName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse_namespace_like(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 63 {
        return Err(format!("must be at most 63 characters (got {})", s.len()));
    }
    if !is_dns1123_label(s) {
        return Err("must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit".into());
    }
    if SYSTEM_NAMESPACES.contains(&s) || s.starts_with("kube-") {
        return Err(format!("`{s}` is a system namespace and cannot be used"));
    }
    Ok(())
}

/// Validates a Kubernetes label (or annotation) key: `[prefix/]name`.
pub fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix
        && !is_dns1123_subdomain(prefix)
    {
        return Err(format!(
            "key `{key}`: the prefix must be a DNS-1123 subdomain"
        ));
    }
    if name.is_empty() || name.len() > 63 {
        return Err(format!(
            "key `{key}`: the name part must be 1 to 63 characters"
        ));
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ok_ends = name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !ok_chars || !ok_ends {
        return Err(format!(
            "key `{key}`: the name part must consist of alphanumerics, '-', '_' or '.', and start and end with an alphanumeric"
        ));
    }
    Ok(())
}

/// Validates a Kubernetes label value: empty, or ≤ 63 of `[A-Za-z0-9._-]` with alphanumeric ends.
pub fn validate_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    let ok = value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && value.starts_with(|c: char| c.is_ascii_alphanumeric())
        && value.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "value `{value}` must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
        ))
    }
}

/// Hostnames and paths of routes: what a Gateway's request space is named by.
/// Longest path value the Gateway API accepts (`HTTPPathMatch.value`, `MaxLength=1024`).
pub const MAX_PATH_LENGTH: usize = 1024;

/// Whether `host` is an IP address in any spelling a client or proxy would accept as one:
/// an IPv6 literal, or a name whose last label is a number (`127.0.0.1`, `127.1`,
/// `0x7f.0.0.1`, `2130706433`), which the WHATWG URL Standard's host parser ("ends in a
/// number") turns into an IPv4 address. The Gateway API's `Hostname` says "IPs are not
/// allowed" (apis/v1/shared_types.go), but its pattern lets dotted numbers through; a
/// route "for" an address would take every request sent to that address.
pub fn is_ip_literal(host: &str) -> bool {
    let host = host.trim_end_matches('.');
    if host.contains(':') || host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let last = host.rsplit('.').next().unwrap_or("");
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks a path prefix as the Gateway API's `HTTPPathMatch` CEL rules do for `PathPrefix`
/// (gateway-api `apis/v1/httproute_types.go`: absolute, no `//`, `/./`, `/../`, no trailing
/// `/.` or `/..`, at most 1024 characters), with a narrower character set: letters, digits
/// and `/-._~` (no percent-encoding, so one path has one spelling).
pub fn validate_path_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err("must start with '/'".into());
    }
    if prefix.len() > MAX_PATH_LENGTH {
        return Err(format!("must be at most {MAX_PATH_LENGTH} characters"));
    }
    if !prefix
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/-._~".contains(&b))
    {
        return Err("must contain only letters, digits and `/-._~`".into());
    }
    if prefix.contains("//") {
        return Err("must not contain '//'".into());
    }
    if prefix
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Err("must not contain `.` or `..` segments (such as '/../')".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn ip_literals_in_every_spelling_are_recognised() {
        for ip in [
            "127.0.0.1",
            "127.1",
            "0x7f.0.0.1",
            "0X7F.1",
            "2130706433",
            "017700000001",
            "169.254.169.254",
            "10.0.0.1.",
            "::1",
            "[::1]",
            "fe80::1",
            "a.b.0x10",
        ] {
            assert!(super::is_ip_literal(ip), "{ip} is an address");
        }
        for name in [
            "qwen.example.com",
            "1.example.com",
            "v1.models.internal",
            "0xfood.example",
        ] {
            assert!(!super::is_ip_literal(name), "{name} is a name");
        }
    }

    use super::*;

    #[test]
    fn deployment_names_follow_dns1035_with_45_characters() {
        assert!(DeploymentName::parse("qwen").is_ok());
        assert!(DeploymentName::parse("qwen-2-5").is_ok());
        assert!(DeploymentName::parse(&"a".repeat(45)).is_ok());
        assert!(DeploymentName::parse(&"a".repeat(46)).is_err());
        assert!(DeploymentName::parse("2qwen").is_err());
        assert!(DeploymentName::parse("Qwen").is_err());
        assert!(DeploymentName::parse("qwen-").is_err());
        assert!(DeploymentName::parse("qwen_2").is_err());
        assert!(DeploymentName::parse("").is_err());
    }

    #[test]
    fn system_namespaces_are_refused() {
        for ns in [
            "default",
            "kube-system",
            "kube-public",
            "kube-node-lease",
            "kube-foo",
        ] {
            assert!(ProjectName::parse(ns).is_err(), "{ns} accepted");
        }
        assert!(ProjectName::parse("team-a").is_ok());
        assert!(ProjectName::parse("1team").is_ok());
        assert!(ProjectName::parse(&"a".repeat(64)).is_err());
    }

    #[test]
    fn label_keys_and_values_follow_kubernetes_syntax() {
        assert!(validate_label_key("app").is_ok());
        assert!(validate_label_key("example.com/team").is_ok());
        assert!(validate_label_key("Example.com/team").is_err());
        assert!(validate_label_key("a/b/c").is_err());
        assert!(validate_label_key("-a").is_err());
        assert!(validate_label_value("").is_ok());
        assert!(validate_label_value("v1.2_x").is_ok());
        assert!(validate_label_value("has space").is_err());
        assert!(validate_label_value(&"v".repeat(64)).is_err());
    }
}
