//! `GET /metrics`: the kube-apiserver's `apiserver_request_total` counter in the Prometheus
//! text format, counting every resource request the emulator answered.
//!
//! Labels follow the real server (k8s.io/apiserver `pkg/endpoints/metrics/metrics.go`,
//! `requestCounter` with labels verb, dry_run, group, version, resource, subresource, scope,
//! component, code; `MonitorRequest`, `CanonicalVerb`, `CleanVerb`, `cleanDryRun`; and the
//! per-route scope of `pkg/endpoints/installer.go`):
//!
//! - `verb` is UPPERCASE, as the installer registers routes: `GET` (one object), `LIST`
//!   (a collection GET), `WATCH` (`?watch=true` or the legacy `/watch/` paths), `POST`
//!   (create), `PUT` (update), `PATCH`, `APPLY` (a PATCH whose Content-Type is
//!   `application/apply-patch+yaml`: `CleanVerb` reports it so), `DELETE`,
//!   `DELETECOLLECTION`. Other methods are reported as `other`.
//! - `scope` is `resource` for requests naming an object and for POST (the installer's
//!   `strings.Contains(action.Path, "/{name}") || action.Verb == "POST"`), `namespace` for
//!   namespaced collections, `cluster` for cluster-scoped kinds and all-namespaces paths.
//! - `dry_run` is the sorted, de-duplicated `dryRun` values joined by commas (`All`), or
//!   empty.
//! - `component` is always `apiserver`.
//!
//! Requests that name no served resource (discovery, `/version`, `/openapi`, `/metrics`,
//! unknown paths) are not counted, as in the real server. Watches are counted when the
//! stream opens (the real server counts them when they end).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::resources::Kinds;

/// The labels of one `apiserver_request_total` series (component is constant).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Labels {
    verb: &'static str,
    dry_run: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: &'static str,
    code: u16,
}

/// The request counters, shared by the middleware and the `/metrics` handler.
#[derive(Clone, Default)]
pub struct Metrics(Arc<Mutex<BTreeMap<Labels, u64>>>);

/// What the metrics need to know about a request.
pub(crate) struct RequestInfo<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: &'a std::collections::HashMap<String, String>,
    pub content_type: &'a str,
}

impl Metrics {
    /// Counts one answered request (a no-op for non-resource requests).
    pub(crate) fn observe(&self, kinds: &Kinds, req: &RequestInfo<'_>, code: u16) {
        let Some(labels) = labels(kinds, req, code) else {
            return;
        };
        *self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(labels)
            .or_insert(0) += 1;
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::from(
            "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n# TYPE apiserver_request_total counter\n",
        );
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (l, n) in map.iter() {
            out.push_str(&format!(
                "apiserver_request_total{{code=\"{}\",component=\"apiserver\",dry_run=\"{}\",group=\"{}\",resource=\"{}\",scope=\"{}\",subresource=\"{}\",verb=\"{}\",version=\"{}\"}} {n}\n",
                l.code,
                escape(&l.dry_run),
                escape(&l.group),
                escape(&l.resource),
                l.scope,
                escape(&l.subresource),
                l.verb,
                escape(&l.version),
            ));
        }
        out
    }
}

/// Label value escaping of the text format (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(kinds: &Kinds, req: &RequestInfo<'_>, code: u16) -> Option<Labels> {
    let segs: Vec<&str> = req
        .path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segs.as_slice() {
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return None,
    };
    let (legacy_watch, rest) = match rest {
        ["watch", r @ ..] => (true, r),
        r => (false, r),
    };
    // (resource, namespaced path, name, subresource)
    let (plural, in_ns, name, sub): (&str, bool, Option<&str>, &str) = match rest {
        [plural] => (plural, false, None, ""),
        ["namespaces", ns, s] if group.is_empty() && (*s == "status" || *s == "finalize") => {
            ("namespaces", false, Some(*ns), *s)
        }
        ["namespaces", _, plural] => (plural, true, None, ""),
        ["namespaces", _, plural, n] => (plural, true, Some(*n), ""),
        ["namespaces", _, plural, n, s] => (plural, true, Some(*n), *s),
        // `services/{name}/proxy/{path...}`, `pods/{name}/proxy/{path...}`: a connect
        // subresource with a path.
        ["namespaces", _, plural, n, "proxy", ..] => (plural, true, Some(*n), "proxy"),
        [plural, n] => (plural, false, Some(*n), ""),
        [plural, n, s] => (plural, false, Some(*n), *s),
        _ => return None,
    };
    let kind = kinds.by_resource(group, version, plural)?;
    if in_ns && !kind.namespaced {
        return None;
    }
    let watch = legacy_watch
        || req
            .query
            .get("watch")
            .is_some_and(|w| !w.is_empty() && w != "0" && !w.eq_ignore_ascii_case("false"));
    // Connect subresources (the service and pod proxies) count under the installer's "CONNECT"
    // action whatever the method (k8s.io/apiserver pkg/endpoints/installer.go).
    let verb = match (req.method, name.is_some()) {
        _ if sub == "proxy" => "CONNECT",
        ("GET" | "HEAD", _) if watch => "WATCH",
        ("GET" | "HEAD", true) => "GET",
        ("GET" | "HEAD", false) => "LIST",
        ("POST", _) => "POST",
        ("PUT", _) => "PUT",
        ("PATCH", _) if req.content_type.starts_with("application/apply-patch") => "APPLY",
        ("PATCH", _) => "PATCH",
        ("DELETE", true) => "DELETE",
        ("DELETE", false) => "DELETECOLLECTION",
        _ => "other",
    };
    let scope = if name.is_some() || req.method == "POST" {
        "resource"
    } else if in_ns {
        "namespace"
    } else {
        "cluster"
    };
    let dry_run = req
        .query
        .get("dryRun")
        .map(|d| {
            let mut v: Vec<&str> = d.split(',').filter(|s| !s.is_empty()).collect();
            v.sort_unstable();
            v.dedup();
            v.join(",")
        })
        .unwrap_or_default();
    Some(Labels {
        verb,
        dry_run,
        group: group.to_string(),
        version: version.to_string(),
        resource: plural.to_string(),
        subresource: sub.to_string(),
        scope,
        code,
    })
}
