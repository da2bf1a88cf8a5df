//! HTTPRoute matching for the Gateway data plane (`mod.rs`): the accepted rule that takes
//! a request, by the hostnames of the route and its listeners, path, method, headers and
//! query params, and the path the rule's URLRewrite filter gives it.
//!
//! Precedence (HTTPRouteSpec.Hostnames and HTTPRouteRule.Matches in gateway-api
//! apis/v1/httproute_types.go) goes first by hostname: the route with the most characters
//! in a matching non-wildcard hostname, then in a matching hostname (so an exact hostname
//! beats a wildcard, a longer wildcard a shorter one, and any hostname a route without
//! hostnames), where a listener's hostname narrows the route's; then by the match (an
//! Exact path, the longest prefix, a method, the most header matches, the most query
//! param matches); then the oldest route, "{namespace}/{name}", and the first rule. Hosts
//! compare case-insensitively and without the Host header's port. All Gateways share this
//! one port, so listener isolation (a request reaching only the routes of its most
//! specific listener) is not modelled beyond that ranking.

use std::cmp::Ordering as Cmp;

use axum::http::{HeaderMap, Method, header};
use serde_json::{Value, json};

use crate::cluster::GATEWAY_CONTROLLER;
use crate::resources::meta_str;
use crate::store::Store;

/// A route rule that matched: where to send the request and the rewritten path.
pub(super) struct Matched {
    pub(super) namespace: String,
    pub(super) backends: Vec<Value>,
    pub(super) path: String,
    /// Identifies the rule (route uid, generation, index) for the weighted choice.
    pub(super) rule_key: String,
    /// The rule's `ExternalAuth` filter (`external_auth.rs`), if it has one.
    pub(super) external_auth: Option<Value>,
}

/// Whether a hostname of a route or listener matches the request's host. A wildcard
/// (`*.example.com`) is a suffix match of one or more labels: it matches `foo.example.com`
/// and `foo.bar.example.com` but not `example.com` (HTTPRouteSpec.Hostnames in gateway-api
/// apis/v1/httproute_types.go). Hosts compare case-insensitively (RFC 3986 3.2.2: "The
/// host subcomponent is case-insensitive"; Gateway API hostnames are lower case).
fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix('*') {
        Some(suffix) => {
            let (h, s) = (host.as_bytes(), suffix.as_bytes());
            suffix.starts_with('.')
                && h.len() > s.len()
                && h[h.len() - s.len()..].eq_ignore_ascii_case(s)
        }
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// The host a request is for, in lower case and without the port: "Implementations MUST
/// ignore any port value specified in the HTTP Host header while performing a match"
/// (HTTPRouteSpec.Hostnames). From the Host header, else the request target's authority.
pub(super) fn request_host(headers: &HeaderMap, uri: &axum::http::Uri) -> String {
    let authority = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| uri.authority().map(|a| a.as_str()))
        .unwrap_or("");
    let host = match authority.strip_prefix('[') {
        // An IPv6 literal: `[::1]:8080`.
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.to_ascii_lowercase()
}

fn prefix_matches(prefix: &str, path: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty() || path == p || path.starts_with(&format!("{p}/"))
}

/// Applies a URLRewrite filter's path modifier.
fn rewrite(filter: &Value, matched_prefix: Option<&str>, path: &str) -> String {
    let Some(m) = filter.pointer("/urlRewrite/path") else {
        return path.to_string();
    };
    match m.get("type").and_then(Value::as_str) {
        Some("ReplaceFullPath") => m["replaceFullPath"].as_str().unwrap_or("/").to_string(),
        Some("ReplacePrefixMatch") => {
            let prefix = matched_prefix.unwrap_or("/").trim_end_matches('/');
            let rest = &path[prefix.len().min(path.len())..];
            let repl = m["replacePrefixMatch"].as_str().unwrap_or("/");
            let joined = format!(
                "{}/{}",
                repl.trim_end_matches('/'),
                rest.trim_start_matches('/')
            );
            // "/" + "" must stay "/", and a non-root replacement keeps no trailing slash
            // unless the request had one.
            if rest.is_empty() && repl != "/" {
                joined.trim_end_matches('/').to_string()
            } else {
                joined
            }
        }
        _ => path.to_string(),
    }
}

/// Decodes `%XX` escapes and `+` of a query component.
fn percent_decode(s: &str) -> String {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h * 16 + l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Query parameters of a query string, in order.
pub(super) fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

/// The request as the matcher sees it.
pub(super) struct Req<'a> {
    pub(super) host: &'a str,
    pub(super) method: &'a Method,
    pub(super) path: &'a str,
    pub(super) headers: &'a HeaderMap,
    /// Query parameters in order (the first value of a repeated one is matched).
    pub(super) query: Vec<(String, String)>,
}

/// Whether the match's header conditions hold, and how many there are. Names are
/// case-insensitive and only the first entry of equivalent names counts (HTTPHeaderMatch
/// in gateway-api apis/v1/httproute_types.go). `Exact` (the default) compares the value;
/// `RegularExpression` (implementation-specific) is not supported: it never matches.
fn headers_match(m: &Value, req: &Req) -> Option<usize> {
    let mut seen: Vec<String> = Vec::new();
    for h in m
        .get("headers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = h.get("name").and_then(Value::as_str)?.to_ascii_lowercase();
        if seen.contains(&name) {
            continue;
        }
        seen.push(name.clone());
        let want = h.get("value").and_then(Value::as_str).unwrap_or("");
        let ty = h.get("type").and_then(Value::as_str).unwrap_or("Exact");
        let ok = ty == "Exact"
            && req
                .headers
                .get_all(name.as_str())
                .iter()
                .any(|v| v.to_str().is_ok_and(|v| v == want));
        if !ok {
            return None;
        }
    }
    Some(seen.len())
}

/// Query parameter conditions: names match exactly, `Exact` values against the first
/// value of the parameter (HTTPQueryParamMatch in apis/v1/httproute_types.go).
fn query_match(m: &Value, req: &Req) -> Option<usize> {
    let mut seen: Vec<&str> = Vec::new();
    for q in m
        .get("queryParams")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = q.get("name").and_then(Value::as_str)?;
        if seen.contains(&name) {
            continue;
        }
        seen.push(name);
        let want = q.get("value").and_then(Value::as_str).unwrap_or("");
        let ty = q.get("type").and_then(Value::as_str).unwrap_or("Exact");
        let first = req.query.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        if ty != "Exact" || first.is_none_or(|v| v != want) {
            return None;
        }
    }
    Some(seen.len())
}

/// How specific a hostname is, in the order of the Gateway API's precedence across
/// HTTPRoutes (HTTPRouteSpec.Hostnames in gateway-api apis/v1/httproute_types.go):
/// "precedence must be given to rules from the HTTPRoute with the largest number of:
///
/// * Characters in a matching non-wildcard hostname.
/// * Characters in a matching hostname."
///
/// A wildcard counts all its characters, `*.` included (the same two for every wildcard,
/// so only the order among wildcards matters: `*.b.example.com` before `*.example.com`);
/// no hostname (any host) is (0, 0). Larger is more specific.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct HostSpecificity {
    /// Characters of the matching hostname if it has no wildcard, else 0.
    exact: usize,
    /// Characters of the matching hostname.
    chars: usize,
}

impl HostSpecificity {
    fn of(hostname: Option<&str>) -> HostSpecificity {
        match hostname {
            None => HostSpecificity::default(),
            Some(h) if h.starts_with('*') => HostSpecificity {
                exact: 0,
                chars: h.len(),
            },
            Some(h) => HostSpecificity {
                exact: h.len(),
                chars: h.len(),
            },
        }
    }
}

/// How specific the hostnames are that let a route take a request: first the hostname
/// the listener and the route intersect in (the more specific of the two, since both
/// match the host: a route without hostnames on a `foo.example.com` listener serves that
/// host only, and is as specific as a route naming it), then the route's own hostname
/// (newer text of HTTPRouteSpec.Hostnames, the Extended feature
/// GatewayRouteHostnameIntersectionPrecedence: "When multiple HTTPRoutes attach to the
/// same Listener and yield identical Listener/Route intersected hostnames,
/// implementations SHOULD evaluate precedence using the original hostnames configured on
/// the Route"). Behind a listener without a hostname both are the route's hostname.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct HostRank {
    intersection: HostSpecificity,
    route: HostSpecificity,
}

/// The best hostname rank with which a route matches `host`, over the hostnames of the
/// listeners it is attached to (None: any host) and its own hostnames (none: any host);
/// None when no pair matches. Route hostnames the listener's hostname does not match are
/// ignored ("any HTTPRoute hostnames that do not match the Listener hostname MUST be
/// ignored"): a pair only counts when both match the host.
fn host_rank(listeners: &[Option<String>], hostnames: &[&str], host: &str) -> Option<HostRank> {
    let route_hosts: Vec<Option<&str>> = if hostnames.is_empty() {
        vec![None]
    } else {
        hostnames.iter().map(|h| Some(*h)).collect()
    };
    let mut best: Option<HostRank> = None;
    for l in listeners
        .iter()
        .map(Option::as_deref)
        .filter(|l| l.is_none_or(|l| host_matches(l, host)))
    {
        for h in route_hosts
            .iter()
            .copied()
            .filter(|h| h.is_none_or(|h| host_matches(h, host)))
        {
            let route = HostSpecificity::of(h);
            let rank = HostRank {
                intersection: route.max(HostSpecificity::of(l)),
                route,
            };
            best = best.max(Some(rank));
        }
    }
    best
}

/// The hostnames of the listeners a route is attached to through the parents of ours
/// that accepted it (None: a listener without a hostname). Empty when none did.
fn listener_hostnames(store: &Store, route: &Value) -> Vec<Option<String>> {
    let Some(gateways) = store
        .kinds()
        .by_resource("gateway.networking.k8s.io", "v1", "gateways")
    else {
        return Vec::new();
    };
    let route_ns = meta_str(route, "namespace").unwrap_or("");
    let mut out = Vec::new();
    for p in route
        .pointer("/status/parents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let accepted = p["controllerName"] == GATEWAY_CONTROLLER
            && p["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Accepted" && c["status"] == "True")
            });
        let parent = &p["parentRef"];
        let is_gateway = parent
            .get("group")
            .and_then(Value::as_str)
            .is_none_or(|g| g == "gateway.networking.k8s.io")
            && parent
                .get("kind")
                .and_then(Value::as_str)
                .is_none_or(|k| k == "Gateway");
        if !accepted || !is_gateway {
            continue;
        }
        let ns = parent
            .get("namespace")
            .and_then(Value::as_str)
            .unwrap_or(route_ns);
        let name = parent.get("name").and_then(Value::as_str).unwrap_or("");
        let Some(gw) = store.get(gateways, ns, name) else {
            continue;
        };
        let a = crate::cluster::networking::attach(store, route, parent, &gw);
        if a.accepted.0 {
            out.extend(a.hostnames);
        }
    }
    out
}

/// How specific a match is, in the order of the Gateway API's precedence (the
/// HTTPRouteRule doc comment in gateway-api apis/v1/httproute_types.go): an Exact path,
/// then the longest PathPrefix, then a method match, then the most header matches, then
/// the most query param matches. Larger is more specific.
type Specificity = (bool, usize, bool, usize, usize);

/// Where a match stands: its route's hostname rank, then its specificity ("If ties exist
/// across multiple Routes, the matching precedence rules for HTTPRouteMatches takes
/// over"), then the tie-breaks (the oldest route, then "{namespace}/{name}"
/// alphabetically, then the first rule in list order).
#[derive(PartialEq, Eq)]
struct Rank {
    host: HostRank,
    spec: Specificity,
    created: String,
    route: String,
    rule: usize,
}

impl Ord for Rank {
    /// Greater is preferred.
    fn cmp(&self, o: &Self) -> Cmp {
        self.host
            .cmp(&o.host)
            .then_with(|| self.spec.cmp(&o.spec))
            .then_with(|| o.created.cmp(&self.created))
            .then_with(|| o.route.cmp(&self.route))
            .then_with(|| o.rule.cmp(&self.rule))
    }
}

impl PartialOrd for Rank {
    fn partial_cmp(&self, o: &Self) -> Option<Cmp> {
        Some(self.cmp(o))
    }
}

/// Finds the accepted rule with the most specific match for the request: the routes
/// whose listeners and hostnames take the request's host, ranked by [`Rank`].
pub(super) fn route(store: &Store, req: &Req) -> Option<Matched> {
    let kind = store
        .kinds()
        .by_resource("gateway.networking.k8s.io", "v1", "httproutes")?;
    let mut best: Option<(Rank, Matched)> = None;
    for r in store.list(kind, None) {
        // Empty unless a parent of ours accepted the route.
        let listeners = listener_hostnames(store, &r);
        if listeners.is_empty() {
            continue;
        }
        let hostnames: Vec<&str> = r
            .pointer("/spec/hostnames")
            .and_then(Value::as_array)
            .map(|h| h.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(host) = host_rank(&listeners, &hostnames, req.host) else {
            continue;
        };
        let ns = meta_str(&r, "namespace").unwrap_or("").to_string();
        let name = meta_str(&r, "name").unwrap_or("");
        let created = r
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let generation = r
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let uid = meta_str(&r, "uid").unwrap_or("");
        for (ri, rule) in r
            .pointer("/spec/rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let default = vec![json!({"path": {"type": "PathPrefix", "value": "/"}})];
            let matches = rule
                .get("matches")
                .and_then(Value::as_array)
                .filter(|m| !m.is_empty())
                .unwrap_or(&default);
            for m in matches {
                let method = m.get("method").and_then(Value::as_str);
                if method.is_some_and(|want| want != req.method.as_str()) {
                    continue;
                }
                let ty = m
                    .pointer("/path/type")
                    .and_then(Value::as_str)
                    .unwrap_or("PathPrefix");
                let value = m
                    .pointer("/path/value")
                    .and_then(Value::as_str)
                    .unwrap_or("/");
                let (ok, exact, len, prefix) = match ty {
                    "Exact" => (req.path == value, true, value.len(), None),
                    "PathPrefix" => (
                        prefix_matches(value, req.path),
                        false,
                        value.len(),
                        Some(value),
                    ),
                    _ => (false, false, 0, None),
                };
                if !ok {
                    continue;
                }
                let (Some(nh), Some(nq)) = (headers_match(m, req), query_match(m, req)) else {
                    continue;
                };
                let rank = Rank {
                    host,
                    spec: (exact, len, method.is_some(), nh, nq),
                    created: created.clone(),
                    route: format!("{ns}/{name}"),
                    rule: ri,
                };
                // Of equally ranked matches (the same rule) the first is kept.
                if best.as_ref().is_some_and(|(b, _)| rank <= *b) {
                    continue;
                }
                let mut new_path = req.path.to_string();
                let mut external_auth = None;
                for f in rule
                    .get("filters")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if f["type"] == "URLRewrite" {
                        new_path = rewrite(f, prefix, req.path);
                    }
                    if f["type"] == "ExternalAuth" {
                        external_auth = f.get("externalAuth").cloned();
                    }
                }
                let backends = rule
                    .get("backendRefs")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                best = Some((
                    rank,
                    Matched {
                        namespace: ns.clone(),
                        backends,
                        path: new_path,
                        rule_key: format!("{uid}/{generation}/{ri}"),
                        external_auth,
                    },
                ));
            }
        }
    }
    best.map(|(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_rewrite_replaces_the_prefix() {
        let f = json!({"urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}});
        assert_eq!(
            rewrite(&f, Some("/team-a/qwen"), "/team-a/qwen/v1/models"),
            "/v1/models"
        );
        assert_eq!(rewrite(&f, Some("/team-a/qwen"), "/team-a/qwen"), "/");
        let g = json!({"urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/api"}}});
        assert_eq!(rewrite(&g, Some("/x/"), "/x/v1"), "/api/v1");
        assert!(prefix_matches("/team-a/qwen", "/team-a/qwen/v1"));
        assert!(!prefix_matches("/team-a/qwen", "/team-a/qwen2"));
    }

    #[test]
    fn query_strings_are_decoded() {
        assert_eq!(
            parse_query("a=1&b=x%20y+z&c&a=2"),
            vec![
                ("a".into(), "1".into()),
                ("b".into(), "x y z".into()),
                ("c".into(), "".into()),
                ("a".into(), "2".into())
            ]
        );
        assert_eq!(percent_decode("100%"), "100%");
    }
}

/// Hostname precedence across HTTPRoutes. The rules are quoted from the doc comment of
/// `HTTPRouteSpec.Hostnames` in gateway-api apis/v1/httproute_types.go (commit 4564255a,
/// whose CRDs the emulator serves); the listener cases follow the conformance tests
/// HTTPRouteListenerHostnameMatching and HTTPRouteHostnameIntersection.
#[cfg(test)]
mod hostname_tests {
    use super::*;
    use crate::ops;
    use crate::resources::{Kinds, ResourceKind};
    use axum::http::HeaderValue;

    const GW_NS: &str = "gateway-system";
    const GW: &str = "public";

    /// A store with one Gateway (`gateway-system/public`) and the routes added to it,
    /// whose status says what the emulator's Gateway controller would (`attach`).
    struct Cluster {
        store: Store,
    }

    impl Cluster {
        /// One HTTP listener `http`, with this hostname.
        fn new(listener_hostname: Option<&str>) -> Cluster {
            let mut l = json!({"name": "http", "protocol": "HTTP", "port": 80,
                               "allowedRoutes": {"namespaces": {"from": "All"}}});
            if let Some(h) = listener_hostname {
                l["hostname"] = json!(h);
            }
            Cluster::with_listeners(json!([l]))
        }

        fn with_listeners(listeners: Value) -> Cluster {
            let store = Store::new(Kinds::new(true, true), 64);
            let c = Cluster { store };
            let namespaces = c.store.kinds().by_resource("", "v1", "namespaces").unwrap();
            for ns in [GW_NS, "default", "team-a", "team-b"] {
                let body = json!({"metadata": {"name": ns}});
                ops::create(&c.store, namespaces, "", body, &c.opts()).unwrap();
            }
            let gw = json!({"metadata": {"name": GW, "namespace": GW_NS},
                            "spec": {"gatewayClassName": crate::cluster::GATEWAY_CLASS, "listeners": listeners}});
            ops::create(&c.store, c.kind("gateways"), GW_NS, gw, &c.opts()).unwrap();
            c
        }

        fn kind(&self, plural: &str) -> &'static ResourceKind {
            self.store
                .kinds()
                .by_resource("gateway.networking.k8s.io", "v1", plural)
                .unwrap()
        }

        fn opts(&self) -> ops::WriteOptions {
            crate::cluster::manager("test")
        }

        /// A route `ns/name` with these hostnames and one rule (`path` as `Exact:/x` or a
        /// PathPrefix) sending to Service `backend`, attached to `sections` of the
        /// Gateway (all listeners when empty). Create the route a test expects to lose
        /// first and give it the alphabetically first name: then the oldest-route and
        /// name tie-breaks would pick it, were hostnames not ranked first.
        fn route(&self, ns: &str, name: &str, hostnames: &[&str], path: &str, sections: &[&str]) {
            let m = match path.strip_prefix("Exact:") {
                Some(p) => json!({"path": {"type": "Exact", "value": p}}),
                None => json!({"path": {"type": "PathPrefix", "value": path}}),
            };
            let parents: Vec<Value> = if sections.is_empty() {
                vec![json!({"namespace": GW_NS, "name": GW})]
            } else {
                sections
                    .iter()
                    .map(|s| json!({"namespace": GW_NS, "name": GW, "sectionName": s}))
                    .collect()
            };
            let mut spec = json!({"parentRefs": parents, "rules": [{"matches": [m],
                "backendRefs": [{"name": format!("{name}-svc"), "port": 8000}]}]});
            if !hostnames.is_empty() {
                spec["hostnames"] = json!(hostnames);
            }
            let kind = self.kind("httproutes");
            let body = json!({"metadata": {"name": name, "namespace": ns}, "spec": spec});
            let created = ops::create(&self.store, kind, ns, body, &self.opts())
                .unwrap()
                .object;
            let gw = self.store.get(self.kind("gateways"), GW_NS, GW).unwrap();
            let parents: Vec<Value> = created["spec"]["parentRefs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let ok = crate::cluster::networking::attach(&self.store, &created, p, &gw)
                        .accepted
                        .0;
                    json!({"parentRef": p, "controllerName": GATEWAY_CONTROLLER,
                           "conditions": [{"type": "Accepted", "status": if ok { "True" } else { "False" },
                                           "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]})
                })
                .collect();
            assert!(crate::cluster::write_status(
                &self.store,
                kind,
                &created,
                json!({"parents": parents}),
                GATEWAY_CONTROLLER
            ));
        }

        /// `namespace/backend` of the rule a GET with this Host header and path goes to.
        fn pick(&self, host_header: &str, path: &str) -> Option<String> {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_str(host_header).unwrap());
            let uri: axum::http::Uri = path.parse().unwrap();
            let host = request_host(&headers, &uri);
            let req = Req {
                host: &host,
                method: &Method::GET,
                path,
                headers: &headers,
                query: Vec::new(),
            };
            route(&self.store, &req).map(|m| {
                let svc = m.backends[0]["name"].as_str().unwrap().to_string();
                format!("{}/{}", m.namespace, svc.trim_end_matches("-svc"))
            })
        }
    }

    // "precedence must be given to rules from the HTTPRoute with the largest number of:
    // * Characters in a matching non-wildcard hostname." An exact hostname has them, a
    // wildcard has none, so the exact route wins before paths are compared.
    #[test]
    fn an_exact_hostname_beats_a_wildcard_even_with_a_shorter_path() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-wildcard",
            &["*.example.com"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/b-exact")
        );
        // Other hosts under the wildcard still reach the wildcard route.
        assert_eq!(
            c.pick("other.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/a-wildcard")
        );
    }

    // "* Characters in a matching hostname." A route without hostnames matches any host
    // with no characters of a matching hostname, so a wildcard that matches beats it,
    // even against an Exact path ("If ties exist across multiple Routes, the matching
    // precedence rules for HTTPRouteMatches takes over": there is no tie here).
    #[test]
    fn a_wildcard_hostname_beats_no_hostnames_even_against_an_exact_path() {
        let c = Cluster::new(None);
        c.route("default", "a-any", &[], "Exact:/team-a/demo/v1/models", &[]);
        c.route("default", "b-wildcard", &["*.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/b-wildcard")
        );
        // A host the wildcard does not cover goes to the route for any host.
        assert_eq!(
            c.pick("127.0.0.1:8080", "/team-a/demo/v1/models")
                .as_deref(),
            Some("default/a-any")
        );
    }

    // "* Characters in a matching hostname.": between two wildcards that match, the
    // longer one. "`*.example.com` would match both `test.example.com`, and
    // `foo.test.example.com`, but not `example.com`."
    #[test]
    fn a_longer_wildcard_beats_a_shorter_one() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-short",
            &["*.example.com"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-long", &["*.b.example.com"], "/", &[]);
        assert_eq!(
            c.pick("x.b.example.com", "/team-a/demo").as_deref(),
            Some("default/b-long")
        );
        assert_eq!(
            c.pick("y.x.b.example.com", "/team-a/demo").as_deref(),
            Some("default/b-long")
        );
        // `*.b.example.com` does not match `b.example.com`; `*.example.com` does.
        assert_eq!(
            c.pick("b.example.com", "/team-a/demo").as_deref(),
            Some("default/a-short")
        );
        assert_eq!(
            c.pick("x.c.example.com", "/team-a/demo").as_deref(),
            Some("default/a-short")
        );
    }

    // "If ties exist across multiple Routes, the matching precedence rules for
    // HTTPRouteMatches takes over": the same hostname on both routes, so the longest
    // PathPrefix ("Prefix" path match with largest number of characters) wins.
    #[test]
    fn hostname_ties_fall_back_to_path_precedence() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-short-path",
            &["demo.example.com"],
            "/team-a",
            &[],
        );
        c.route(
            "default",
            "b-long-path",
            &["demo.example.com"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo/v1").as_deref(),
            Some("default/b-long-path")
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/other").as_deref(),
            Some("default/a-short-path")
        );
        // Two routes without hostnames tie too.
        let c = Cluster::new(None);
        c.route("default", "a-short-path", &[], "/team-a", &[]);
        c.route("default", "b-long-path", &[], "/team-a/demo", &[]);
        assert_eq!(
            c.pick("anything.example.com", "/team-a/demo/v1").as_deref(),
            Some("default/b-long-path")
        );
    }

    // "Hostnames defines a set of hostnames that should match against the HTTP Host
    // header": a route listing several is ranked by the best one that matches ("the
    // largest number of: * Characters in a matching non-wildcard hostname"), so it ties
    // with a route naming only that hostname and paths decide.
    #[test]
    fn a_route_ranks_by_its_best_matching_hostname() {
        let c = Cluster::new(None);
        c.route("default", "a-single", &["demo.example.com"], "/team-a", &[]);
        c.route(
            "default",
            "b-several",
            &["*.example.com", "demo.example.com", "demo.example.net"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-several")
        );
        // For another host only its wildcard matches, and the other route not at all.
        assert_eq!(
            c.pick("x.example.com", "/team-a/demo").as_deref(),
            Some("default/b-several")
        );
        // Hostnames that do not match the host count for nothing: here only the
        // wildcard does, so the exact route wins despite its shorter path.
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-wildcard-too",
            &["*.example.com", "x.example.net"],
            "/team-a/demo",
            &[],
        );
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-exact")
        );
    }

    // "Implementations MUST ignore any port value specified in the HTTP Host header
    // while performing a match"; hosts are case-insensitive (RFC 3986 3.2.2: "The host
    // subcomponent is case-insensitive"), while Gateway API hostnames are lower case
    // (the Hostname pattern in apis/v1/shared_types.go).
    #[test]
    fn hostnames_match_case_insensitively_and_without_the_port() {
        let c = Cluster::new(None);
        c.route("default", "a-any", &[], "/team-a/demo/v1", &[]);
        c.route("default", "b-exact", &["demo.example.com"], "/", &[]);
        c.route("default", "c-wildcard", &["*.b.example.com"], "/", &[]);
        for host in [
            "demo.example.com",
            "Demo.EXAMPLE.com",
            "demo.example.com:8080",
            "DEMO.example.COM:443",
        ] {
            assert_eq!(
                c.pick(host, "/team-a/demo/v1").as_deref(),
                Some("default/b-exact"),
                "{host}"
            );
        }
        for host in ["x.b.example.com", "X.B.Example.Com:80"] {
            assert_eq!(
                c.pick(host, "/team-a/demo/v1").as_deref(),
                Some("default/c-wildcard"),
                "{host}"
            );
        }
        let uri: axum::http::Uri = "/".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("[::1]:8080"));
        assert_eq!(request_host(&h, &uri), "::1");
        let absolute: axum::http::Uri = "http://Demo.Example.com:8080/x".parse().unwrap();
        assert_eq!(
            request_host(&HeaderMap::new(), &absolute),
            "demo.example.com"
        );
    }

    // "Hostnames defines a set of hostnames that should match against the HTTP Host
    // header to select a HTTPRoute": a route none of whose hostnames match is never
    // chosen, however specific its path; without another route the answer is a 404
    // ("When no rules matching a request have been successfully attached to the parent a
    // request is coming from, a HTTP 404 status code MUST be returned").
    #[test]
    fn a_route_whose_hostnames_do_not_match_is_never_chosen() {
        let c = Cluster::new(None);
        c.route(
            "default",
            "a-other",
            &["other.example.com", "*.example.net"],
            "Exact:/team-a/demo",
            &[],
        );
        assert_eq!(c.pick("demo.example.com", "/team-a/demo"), None);
        // `*.example.net` does not match `example.net` itself.
        assert_eq!(c.pick("example.net", "/team-a/demo"), None);
        c.route("default", "b-any", &[], "/", &[]);
        assert_eq!(
            c.pick("demo.example.com", "/team-a/demo").as_deref(),
            Some("default/b-any")
        );
        assert_eq!(
            c.pick("other.example.com", "/team-a/demo").as_deref(),
            Some("default/a-other")
        );
    }

    // The multi-tenant case: project A's route has no hostnames and the path
    // `/team-a/demo`; project B's names its own hostname with the same path. "precedence
    // must be given to rules from the HTTPRoute with the largest number of:
    // * Characters in a matching non-wildcard hostname": B's hostname, none for A. A
    // request to B's hostname goes to B although A's route is older and first by
    // "{namespace}/{name}"; any other host goes to A.
    #[test]
    fn a_projects_hostname_route_beats_another_projects_hostless_route_on_the_same_path() {
        let c = Cluster::new(None);
        c.route("team-a", "demo", &[], "/team-a/demo", &[]);
        c.route(
            "team-b",
            "demo",
            &["demo.b.example.com"],
            "/team-a/demo",
            &[],
        );
        assert_eq!(
            c.pick("demo.b.example.com", "/team-a/demo/v1/models")
                .as_deref(),
            Some("team-b/demo")
        );
        assert_eq!(
            c.pick("127.0.0.1:8080", "/team-a/demo/v1/models")
                .as_deref(),
            Some("team-a/demo")
        );
    }

    // Listener hostnames: "A Listener with `test.example.com` as the hostname matches
    // HTTPRoutes that have either not specified any hostnames, or have specified at least
    // one of `test.example.com` or `*.example.com`", and the route then serves the
    // listener's hosts only. As in the conformance test HTTPRouteListenerHostnameMatching,
    // routes without hostnames behind listeners `bar.com`, `foo.bar.com`, `*.bar.com` and
    // `*.foo.com` take the hosts of the most specific listener that matches.
    #[test]
    fn listener_hostnames_narrow_and_rank_the_routes_behind_them() {
        let l = |name: &str, host: &str| {
            json!({"name": name, "protocol": "HTTP", "port": 80, "hostname": host,
                   "allowedRoutes": {"namespaces": {"from": "All"}}})
        };
        let c = Cluster::with_listeners(json!([
            l("listener-1", "bar.com"),
            l("listener-2", "foo.bar.com"),
            l("listener-3", "*.bar.com"),
            l("listener-4", "*.foo.com"),
        ]));
        // "three" sorts before "two": the name tie-break alone would pick it.
        c.route("default", "three", &[], "/", &["listener-3", "listener-4"]);
        c.route("default", "one", &[], "/", &["listener-1"]);
        c.route("default", "two", &[], "/", &["listener-2"]);
        for (host, want) in [
            ("bar.com", Some("default/one")),
            ("foo.bar.com", Some("default/two")),
            ("baz.bar.com", Some("default/three")),
            ("multiple.prefixes.bar.com", Some("default/three")),
            ("multiple.prefixes.foo.com", Some("default/three")),
            ("foo.com", None),
            ("no.matching.host", None),
        ] {
            assert_eq!(c.pick(host, "/").as_deref(), want, "{host}");
        }
    }

    // "If both the Listener and HTTPRoute have specified hostnames, any HTTPRoute
    // hostnames that do not match the Listener hostname MUST be ignored. For example, if
    // a Listener specified `*.example.com`, and the HTTPRoute specified
    // `test.example.com` and `test.example.net`, `test.example.net` must not be
    // considered for a match."
    #[test]
    fn route_hostnames_outside_the_listener_hostname_are_ignored() {
        let c = Cluster::new(Some("*.example.com"));
        c.route(
            "default",
            "r",
            &["test.example.com", "test.example.net"],
            "/",
            &[],
        );
        assert_eq!(
            c.pick("test.example.com", "/").as_deref(),
            Some("default/r")
        );
        assert_eq!(c.pick("test.example.net", "/"), None);
        // A route without hostnames behind the listener takes its hosts only.
        c.route("default", "s", &[], "/", &[]);
        assert_eq!(
            c.pick("other.example.com", "/").as_deref(),
            Some("default/s")
        );
        assert_eq!(c.pick("example.com", "/"), None);
    }

    // Routes whose intersections with the listener's hostname are the same: the newer
    // text of HTTPRouteSpec.Hostnames (GatewayRouteHostnameIntersectionPrecedence, as in
    // the conformance test GRPCRouteMultipleRoutesAttachmentSameHostnameIntersection):
    // "implementations SHOULD evaluate precedence using the original hostnames
    // configured on the Route, not the calculated Listener/Route hostname intersection."
    #[test]
    fn equal_intersections_are_ranked_by_the_routes_own_hostnames() {
        let c = Cluster::new(Some("abc.example.com"));
        c.route("default", "a-wildcard-older", &["*.example.com"], "/", &[]);
        c.route("default", "b-exact-newer", &["abc.example.com"], "/", &[]);
        assert_eq!(
            c.pick("abc.example.com", "/").as_deref(),
            Some("default/b-exact-newer")
        );
        let c = Cluster::new(Some("*.example.com"));
        c.route("default", "a-any-older", &[], "/", &[]);
        c.route("default", "b-com", &["*.com"], "/", &[]);
        c.route("default", "c-example-newer", &["*.example.com"], "/", &[]);
        assert_eq!(
            c.pick("abc.example.com", "/").as_deref(),
            Some("default/c-example-newer")
        );
    }
}
