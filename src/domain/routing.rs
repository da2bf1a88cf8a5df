//! Where a deployment's route sits on a Gateway, and the rules that keep tenants apart there.
//!
//! Every project's routes share the configured Gateway, where the longest matching path
//! prefix wins (Gateway API, `HTTPRouteRule.matches`: "Prefix path match with largest number
//! of characters"). Left unchecked, one project could publish a longer prefix than another's
//! and receive its traffic. So:
//! - on a Gateway outside the project's own namespace, a route without a hostname must stay
//!   under the project's own prefix `/<project>`, and wildcard hostnames are refused;
//! - a hostname is held by the first project that uses it;
//! - within a project, two routes on the same Gateway and hostname may not overlap.
//!
//! The first rule needs no other row and is here ([`check_shared_gateway_rules`], with the
//! reserved hostnames); the other two need every deployment and are the SQL function
//! `check_route_claim` (migration `route_rules_once`), which creates and spec changes run.

use super::errors::FieldErrors;
use super::records::Project;
use super::spec::{DeploymentSpec, parse_gateway_ref};

/// The part of the Gateway's request space a deployment's route takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteClaim {
    /// `namespace/name` of the Gateway; empty for the server's default Gateway.
    pub gateway: String,
    pub hostname: Option<String>,
    /// The effective path prefix, without a trailing `/` (except the root `/`).
    pub path_prefix: String,
}

impl RouteClaim {
    /// The claim of a spec for deployment `name` of `project`. A Gateway named explicitly
    /// that is the configured default counts as the default.
    pub fn of(
        spec: &DeploymentSpec,
        project: &str,
        name: &str,
        default_gateway: Option<&str>,
    ) -> Self {
        let key = |text: &str| {
            parse_gateway_ref(text)
                .map(|(ns, name, _)| format!("{ns}/{name}"))
                .unwrap_or_default()
        };
        let gateway = match &spec.routing.gateway {
            Some(named) if default_gateway.map(key) != Some(key(named)) => key(named),
            _ => String::new(),
        };
        Self {
            gateway,
            hostname: spec.routing.hostname.clone(),
            path_prefix: effective_path_prefix(spec, project, name),
        }
    }

    /// Whether a request could match both routes' path prefixes (element-wise, as the
    /// Gateway API's `PathPrefix` matches).
    pub fn paths_overlap(&self, other: &RouteClaim) -> bool {
        is_path_prefix(&self.path_prefix, &other.path_prefix)
            || is_path_prefix(&other.path_prefix, &self.path_prefix)
    }

    /// `/`, then every ancestor of the path prefix by segment, then the prefix itself:
    /// `/a/b` gives `["/", "/a", "/a/b"]`. The route-space lock takes these, and the
    /// overlap check looks them up (with the paths below the prefix).
    pub fn path_and_ancestors(&self) -> Vec<String> {
        let mut out = vec!["/".to_owned()];
        let mut at = String::new();
        for segment in self.path_prefix.split('/').filter(|s| !s.is_empty()) {
            at.push('/');
            at.push_str(segment);
            out.push(at.clone());
        }
        out
    }
}

/// The route's path prefix: the spec's, else `/{project}/{name}` unless a hostname is set.
pub fn effective_path_prefix(spec: &DeploymentSpec, project: &str, name: &str) -> String {
    match (&spec.routing.path_prefix, &spec.routing.hostname) {
        (Some(prefix), _) => match prefix.trim_end_matches('/') {
            "" => "/".to_owned(),
            trimmed => trimmed.to_owned(),
        },
        (None, Some(_)) => "/".to_owned(),
        (None, None) => format!("/{project}/{name}"),
    }
}

/// `prefix` matches every path under `path` element by element (`/a` covers `/a/b`, not `/ab`).
pub fn is_path_prefix(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Whether `spec` routes through a Gateway in the project's own namespace.
pub fn uses_own_gateway(spec: &DeploymentSpec, project: &Project) -> bool {
    spec.routing
        .gateway
        .as_deref()
        .and_then(|g| parse_gateway_ref(g).ok())
        .is_some_and(|(ns, _, _)| ns == project.namespace)
}

/// The rules a route must follow on a Gateway other projects share. Cross-project
/// hostname ownership and overlaps between deployments are checked against the store.
pub fn check_shared_gateway_rules(
    spec: &DeploymentSpec,
    project: &Project,
    claim: &RouteClaim,
    reserved_hostnames: &[String],
) -> Result<(), FieldErrors> {
    let mut errors = FieldErrors::new();
    if let Some(host) = &claim.hostname
        && reserved_hostnames
            .iter()
            .any(|reserved| hostname_matches(reserved, host))
    {
        errors.push(
            "spec.routing.hostname",
            format!("`{host}` is reserved by the platform"),
        );
    }
    // The server's default Gateway is shared even when it sits in this project's namespace
    // (a project that adopted the Gateway's namespace must not own everyone's traffic).
    if !claim.gateway.is_empty() && uses_own_gateway(spec, project) {
        return errors.finish(|| ());
    }
    match &claim.hostname {
        // A route with a hostname outranks every host-less route for that host (Gateway API
        // hostname precedence): until the platform has reserved the shared Gateway's own
        // names, a project could claim one of them and take every project's traffic.
        Some(_) if reserved_hostnames.is_empty() => errors.push(
            "spec.routing.hostname",
            "hostnames on the shared Gateway need the platform to reserve the Gateway's own \
             names first (MODELPLANE_RESERVED_HOSTNAMES); use a path under the project's prefix",
        ),
        Some(host) if host.starts_with("*.") => errors.push(
            "spec.routing.hostname",
            format!(
                "wildcard hostnames are only allowed on a Gateway in the project's own namespace `{}`",
                project.namespace
            ),
        ),
        Some(_) => {}
        None => {
            let own = format!("/{}", project.name);
            if !is_path_prefix(&own, &claim.path_prefix) || claim.path_prefix == "/" {
                errors.push(
                    "spec.routing.pathPrefix",
                    format!(
                        "on a shared Gateway a path must be `{own}` or start with `{own}/` (the project's own prefix); \
                         set `spec.routing.hostname` to use other paths"
                    ),
                );
            }
        }
    }
    errors.finish(|| ())
}

/// Whether `pattern` (a hostname, or `*.suffix`) matches `host` (which may itself be a wildcard).
fn hostname_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with('.')),
        None => pattern == host,
    }
}

#[cfg(test)]
mod tests {
    use super::super::names::validate_path_prefix;
    use chrono::Utc;
    use serde_json::json;
    use uuid::Uuid;

    use super::*;

    #[test]
    fn a_path_comes_after_the_root_and_each_ancestor() {
        let claim = |path: &str| RouteClaim {
            gateway: String::new(),
            hostname: None,
            path_prefix: path.to_owned(),
        };
        assert_eq!(claim("/").path_and_ancestors(), ["/"]);
        assert_eq!(claim("/a").path_and_ancestors(), ["/", "/a"]);
        assert_eq!(
            claim("/a/b/c").path_and_ancestors(),
            ["/", "/a", "/a/b", "/a/b/c"]
        );
    }
    use crate::domain::SpecLimits;

    fn spec(routing: serde_json::Value) -> DeploymentSpec {
        let spec: DeploymentSpec =
            serde_json::from_value(json!({"model": {"source": "hf://a/b"}, "routing": routing}))
                .unwrap();
        spec.parse("qwen", &SpecLimits::default()).unwrap().spec
    }

    fn project(name: &str) -> Project {
        Project {
            id: Uuid::now_v7(),
            name: name.into(),
            namespace: name.into(),
            namespace_adopted: false,
            created_at: Utc::now(),
        }
    }

    fn check(routing: serde_json::Value) -> Result<(), Vec<String>> {
        let spec = spec(routing);
        let p = project("team-a");
        let claim = RouteClaim::of(&spec, "team-a", "qwen", Some("gw/shared"));
        check_shared_gateway_rules(&spec, &p, &claim, &["models.example.com".into()])
            .map_err(|e| e.into_vec().into_iter().map(|e| e.field).collect())
    }

    #[test]
    fn paths_outside_the_projects_prefix_are_refused_on_a_shared_gateway() {
        assert!(check(json!({})).is_ok());
        assert!(check(json!({"pathPrefix": "/team-a"})).is_ok());
        assert!(check(json!({"pathPrefix": "/team-a/qwen/"})).is_ok());
        for bad in [
            "/",
            "/team-b/qwen/v1/chat",
            "/team-ab",
            "/team",
            "/other/team-a",
        ] {
            assert_eq!(
                check(json!({"pathPrefix": bad})),
                Err(vec!["spec.routing.pathPrefix".to_owned()]),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_projects_own_gateway_takes_any_path_but_reserved_hostnames_stay_reserved() {
        assert!(check(json!({"gateway": "team-a/own", "pathPrefix": "/"})).is_ok());
        assert!(check(json!({"gateway": "team-a/own", "hostname": "*.a.example.com"})).is_ok());
        assert!(check(json!({"gateway": "team-a/own", "hostname": "models.example.com"})).is_err());
    }

    #[test]
    fn without_reserved_hostnames_a_shared_gateway_takes_no_hostname() {
        let spec = spec(json!({"hostname": "qwen.example.com"}));
        let p = project("team-a");
        let claim = RouteClaim::of(&spec, "team-a", "qwen", Some("gw/shared"));
        let errors = check_shared_gateway_rules(&spec, &p, &claim, &[]).unwrap_err();
        assert_eq!(errors.as_slice()[0].field, "spec.routing.hostname");
    }

    #[test]
    fn the_default_gateway_is_shared_even_in_the_projects_own_namespace() {
        let spec = spec(json!({"gateway": "team-a/shared", "pathPrefix": "/"}));
        let p = project("team-a");
        let claim = RouteClaim::of(&spec, "team-a", "qwen", Some("team-a/shared"));
        assert!(check_shared_gateway_rules(&spec, &p, &claim, &[]).is_err());
    }

    #[test]
    fn hostnames_free_the_path_but_wildcards_and_reserved_names_are_refused() {
        assert!(check(json!({"hostname": "qwen.example.com", "pathPrefix": "/"})).is_ok());
        assert_eq!(
            check(json!({"hostname": "*.example.com"})),
            Err(vec!["spec.routing.hostname".to_owned()])
        );
        assert_eq!(
            check(json!({"hostname": "models.example.com"})),
            Err(vec!["spec.routing.hostname".to_owned()])
        );
    }

    #[test]
    fn path_prefixes_overlap_element_by_element() {
        let claim = |p: &str| RouteClaim {
            gateway: String::new(),
            hostname: None,
            path_prefix: p.into(),
        };
        assert!(claim("/a").paths_overlap(&claim("/a/b")));
        assert!(claim("/a/b").paths_overlap(&claim("/a")));
        assert!(claim("/a").paths_overlap(&claim("/a")));
        assert!(claim("/").paths_overlap(&claim("/x")));
        assert!(!claim("/a").paths_overlap(&claim("/ab")));
        assert!(!claim("/a/b").paths_overlap(&claim("/a/c")));
    }

    #[test]
    fn the_default_gateway_named_explicitly_is_the_default() {
        let named = spec(json!({"gateway": "gw/shared/http"}));
        assert_eq!(
            RouteClaim::of(&named, "p", "n", Some("gw/shared")).gateway,
            ""
        );
        assert_eq!(RouteClaim::of(&named, "p", "n", None).gateway, "gw/shared");
    }

    #[test]
    fn path_values_follow_the_gateway_api_rules() {
        // gateway-api apis/v1/httproute_types.go, HTTPPathMatch x-kubernetes-validations.
        for bad in [
            "/models/../admin",
            "/a/./b",
            "/a/..",
            "/a/.",
            "a",
            "/a//b",
            "/a%2fb",
            "/a#b",
        ] {
            assert!(validate_path_prefix(bad).is_err(), "{bad}");
        }
        for ok in ["/", "/a", "/a/b/", "/a/.b", "/a/..b", "/v1.2/x_y~z"] {
            assert!(validate_path_prefix(ok).is_ok(), "{ok}");
        }
        assert!(validate_path_prefix(&format!("/{}", "a".repeat(1024))).is_err());
    }
}
