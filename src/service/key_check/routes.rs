//! Which deployment a request is for, from its host and path: what the key check needs
//! when the Gateway calls it with the gRPC protocol. (With the HTTP protocol the route's
//! filter names the deployment in the check's path; Envoy's `CheckRequest` has only the
//! client's request, and Gateway API gives a route no way to add to it.)
//!
//! The check finds the route the Gateway matched the way the Gateway API orders rules
//! (`HTTPRouteRule`: "Characters in a matching non-wildcard hostname. Characters in a
//! matching hostname. Characters in a matching path."), over every deployment's route as
//! stored. Several deployments can share the best match only on different Gateways; the
//! check then lets a key through for the one of them it may call.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::is_path_prefix;
use crate::store;
use crate::store::model_keys::RouteAt;

/// How old the table may be before a check reads it again.
const FRESH: Duration = Duration::from_secs(1);
/// How soon after a read a request that matches no route makes another (a new
/// deployment's route can be programmed before the table's next read).
const MISS_AGAIN: Duration = Duration::from_millis(100);

/// Every deployment's route, read from the store at most every [`FRESH`].
#[derive(Debug)]
pub struct RouteTable {
    pool: PgPool,
    routes: RwLock<(Vec<RouteAt>, Option<Instant>)>,
    /// One read at a time; checks waiting for it use what it read.
    reading: tokio::sync::Mutex<()>,
}

impl RouteTable {
    pub fn new(pool: PgPool) -> Self {
        Self {
            pool,
            routes: RwLock::new((Vec::new(), None)),
            reading: tokio::sync::Mutex::new(()),
        }
    }

    /// The deployments whose route best matches `host` and `path` (none, one, or one per
    /// Gateway that has the same route).
    pub async fn deployments_at(&self, host: &str, path: &str) -> Result<Vec<Uuid>, sqlx::Error> {
        let host = strip_port(host).to_ascii_lowercase();
        let path = path.split(['?', '#']).next().unwrap_or("/");
        if self.age().is_none_or(|age| age >= FRESH) {
            self.read(FRESH).await?;
        }
        let found = self.best(&host, path);
        if !found.is_empty() {
            return Ok(found);
        }
        self.read(MISS_AGAIN).await?;
        Ok(self.best(&host, path))
    }

    fn age(&self) -> Option<Duration> {
        self.routes
            .read()
            .expect("not poisoned")
            .1
            .map(|at| at.elapsed())
    }

    /// Reads the routes again unless a read newer than `within` exists.
    async fn read(&self, within: Duration) -> Result<(), sqlx::Error> {
        let _reading = self.reading.lock().await;
        if self.age().is_some_and(|age| age < within) {
            return Ok(());
        }
        let routes = store::model_keys::routes(&self.pool).await?;
        *self.routes.write().expect("not poisoned") = (routes, Some(Instant::now()));
        Ok(())
    }

    fn best(&self, host: &str, path: &str) -> Vec<Uuid> {
        let routes = self.routes.read().expect("not poisoned");
        best_matches(&routes.0, host, path)
    }
}

/// `host` without a `:port`.
fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            name
        }
        _ => host,
    }
}

/// How well a route's hostname matches: exact beats wildcard beats none, longer beats
/// shorter (the Gateway API's order). `None`: it does not match.
fn hostname_rank(route: Option<&str>, host: &str) -> Option<(usize, usize)> {
    match route {
        None => Some((0, 0)),
        Some(name) if name.eq_ignore_ascii_case(host) => Some((name.len(), name.len())),
        Some(name) => {
            // `*.example.com` matches one or more labels in front of `.example.com`.
            let suffix = name.strip_prefix('*')?;
            let head = host.strip_suffix(&suffix.to_ascii_lowercase())?;
            (!head.is_empty()).then_some((0, name.len()))
        }
    }
}

fn best_matches(routes: &[RouteAt], host: &str, path: &str) -> Vec<Uuid> {
    let mut best: Option<(usize, usize, usize)> = None;
    let mut found = Vec::new();
    for route in routes {
        let Some((exact, any)) = hostname_rank(route.hostname.as_deref(), host) else {
            continue;
        };
        if !is_path_prefix(&route.path, path) {
            continue;
        }
        let rank = (exact, any, route.path.len());
        match best {
            Some(b) if rank < b => {}
            Some(b) if rank == b => found.push(route.id),
            _ => {
                best = Some(rank);
                found = vec![route.id];
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(n: u128, hostname: Option<&str>, path: &str) -> RouteAt {
        RouteAt {
            id: Uuid::from_u128(n),
            hostname: hostname.map(str::to_owned),
            path: path.to_owned(),
        }
    }

    #[test]
    fn the_gateway_api_order_picks_the_route() {
        let routes = [
            route(1, None, "/team/chat"),
            route(2, None, "/team"),
            route(3, Some("*.example.com"), "/"),
            route(4, Some("chat.example.com"), "/"),
            route(5, None, "/team/chat-v2"),
        ];
        let at = |host, path| best_matches(&routes, host, path);
        assert_eq!(at("gw", "/team/chat/v1/completions"), [Uuid::from_u128(1)]);
        assert_eq!(at("gw", "/team/chatty"), [Uuid::from_u128(2)]);
        assert_eq!(at("gw", "/team/chat-v2"), [Uuid::from_u128(5)]);
        // A matching exact hostname beats a longer path on no hostname.
        assert_eq!(at("chat.example.com", "/team/chat/x"), [Uuid::from_u128(4)]);
        assert_eq!(at("a.b.example.com", "/team/chat/x"), [Uuid::from_u128(3)]);
        // The wildcard needs a label in front.
        assert_eq!(at("example.com", "/team/chat"), [Uuid::from_u128(1)]);
        assert!(at("gw", "/other").is_empty());
    }

    #[test]
    fn equal_routes_on_two_gateways_are_both_found() {
        let routes = [route(1, None, "/shared"), route(2, None, "/shared")];
        assert_eq!(best_matches(&routes, "gw", "/shared/x").len(), 2);
    }

    #[test]
    fn ports_are_not_part_of_the_host() {
        assert_eq!(strip_port("gw.local:8080"), "gw.local");
        assert_eq!(strip_port("gw.local"), "gw.local");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
    }
}
