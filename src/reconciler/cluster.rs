//! The Kubernetes side: which cluster, and the few verbs the reconciler uses.

use std::path::PathBuf;

use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::desired::FIELD_MANAGER;

/// A connected cluster and how to describe it in logs and `/readyz`.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    /// The same cluster without the client's retries (it retries a 503 up to 15 times, with
    /// back-off): for calls a person waits on, such as "try it" through the service proxy,
    /// where a 503 from the model must come back at once.
    pub client_once: kube::Client,
    pub description: String,
    /// The API server's URL as users may read it: scheme, host and port, never a
    /// credential (a kubeconfig's `server` may carry `user:password@`).
    pub server: String,
}

/// Why connecting to the cluster, or one reconcile, failed. [`ClusterError::metric_kind`]
/// is its label in [`crate::metrics::RECONCILE_ERRORS`].
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("no cluster named: pass --kubeconfig (and optionally --context), or run in a cluster")]
    NotNamed,
    #[error("cannot read the kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("cannot configure the Kubernetes client: {0}")]
    Config(String),
    #[error("Kubernetes: {0}")]
    Api(#[from] kube::Error),
    /// Postgres failed in the middle of a reconcile (not a cluster problem; retried).
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    /// One reconcile took longer than its budget; it is retried like any failure.
    #[error("the reconcile took longer than {0:?}")]
    TimedOut(std::time::Duration),
    /// A bug met while reconciling one record; only that record's attempt fails.
    #[error("internal error: {0}")]
    Panicked(String),
    /// The API server sent an object its type cannot hold (a newer schema, or a bug).
    #[error("cannot read the {kind} {name}: {message}")]
    Decode {
        kind: String,
        name: String,
        message: String,
    },
}

impl ClusterError {
    /// The `kind` label of the reconcile error metric: `forbidden` (the API server said no
    /// with 403: the worker's RBAC is too narrow), `api_refused` (it said no otherwise),
    /// `cluster_unreachable`, `timeout`, `database`, `internal` (a bug, or an object its type
    /// cannot hold), `config` (cannot connect at all).
    pub fn metric_kind(&self) -> &'static str {
        match self {
            Self::Api(kube::Error::Api(status)) if status.code == 403 => "forbidden",
            Self::Api(kube::Error::Api(status)) if status.code < 500 => "api_refused",
            Self::Api(_) => "cluster_unreachable",
            Self::TimedOut(_) => "timeout",
            Self::Database(_) => "database",
            Self::Panicked(_) | Self::Decode { .. } => "internal",
            Self::NotNamed | Self::Kubeconfig { .. } | Self::Config(_) => "config",
        }
    }

    /// Why the API server did not answer, in a user's words: the innermost cause (`connection
    /// refused`, `the connection timed out`, a name that does not resolve, `it answers 503
    /// ServiceUnavailable: …`), not the client's wrappers (`ServiceError: client error
    /// (Connect)`, whose Display hides the cause behind its `source()` chain).
    pub fn outage_cause(&self) -> String {
        match self {
            Self::Api(kube::Error::Api(status)) => format!(
                "it answers {} {}: {}",
                status.code, status.reason, status.message
            ),
            Self::TimedOut(after) => format!("no answer within {} s", after.as_secs()),
            Self::Api(err) => plain_cause(err),
            other => other.to_string(),
        }
    }

    /// The API server answered, and said no: not an outage.
    pub fn api_status(&self) -> Option<&kube::core::Status> {
        match self {
            Self::Api(kube::Error::Api(status)) => Some(status),
            _ => None,
        }
    }
}

/// The innermost cause of `err` in plain words: an I/O error by its kind, else the deepest
/// error's own text.
fn plain_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut deepest = err;
    let mut current = Some(err);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind;
            return match io.kind() {
                ErrorKind::ConnectionRefused => "connection refused".into(),
                ErrorKind::TimedOut => "the connection timed out".into(),
                ErrorKind::ConnectionReset
                | ErrorKind::ConnectionAborted
                | ErrorKind::BrokenPipe
                | ErrorKind::UnexpectedEof => "the connection was closed".into(),
                ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => {
                    "no route to the host".into()
                }
                // e.g. "failed to lookup address information: Name or service not known"
                _ => io.to_string(),
            };
        }
        deepest = e;
        current = e.source();
    }
    deepest.to_string()
}

/// Connects to the cluster named explicitly: a kubeconfig (and context), or in-cluster
/// credentials. Never a default kubeconfig picked up by accident. `client_id` is sent as
/// `X-Client-Id`, so a cluster's audit log (or the emulator's request log) can tell
/// workers apart.
pub async fn connect(
    kubeconfig: Option<&PathBuf>,
    context: Option<&str>,
    client_id: Option<&str>,
) -> Result<Cluster, ClusterError> {
    crate::install_crypto_provider();
    let (mut config, description) = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ClusterError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            let chosen = context
                .map(str::to_owned)
                .or_else(|| file.current_context.clone())
                .unwrap_or_default();
            let options = KubeConfigOptions {
                context: context.map(str::to_owned),
                ..KubeConfigOptions::default()
            };
            let config = kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|e| ClusterError::Config(e.to_string()))?;
            let description = format!(
                "context `{chosen}` at {} (kubeconfig {})",
                server_url(&config.cluster_url),
                path.display()
            );
            (config, description)
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
            let config =
                kube::Config::incluster().map_err(|e| ClusterError::Config(e.to_string()))?;
            let description = format!("in-cluster at {}", server_url(&config.cluster_url));
            (config, description)
        }
        None => return Err(ClusterError::NotNamed),
    };
    if let Some(id) = client_id {
        let value = http::HeaderValue::from_str(id)
            .map_err(|e| ClusterError::Config(format!("client id: {e}")))?;
        config
            .headers
            .push((http::HeaderName::from_static("x-client-id"), value));
    }
    let server = server_url(&config.cluster_url);
    let mut once = config.clone();
    once.default_retry = false;
    let client_once = kube::Client::try_from(once).map_err(ClusterError::Api)?;
    let client = kube::Client::try_from(config).map_err(ClusterError::Api)?;
    Ok(Cluster {
        client,
        client_once,
        description,
        server,
    })
}

/// `scheme://host[:port]` of `uri`: no user information, path or query.
fn server_url(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("https");
    let host = uri.host().unwrap_or_default();
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

/// A kind of object the reconciler reads or writes, as a type (`k8s_openapi`,
/// `gateway_api`): its API resource comes from the type, declared nowhere else.
pub trait Object:
    Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + Serialize
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Object for K where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// The kind's name, for logs, metrics and messages.
pub fn kind_of<K: Object>() -> String {
    K::kind(&()).into_owned()
}

fn decode<K: Object>(object: DynamicObject) -> Result<K, ClusterError> {
    let name = object.metadata.name.clone().unwrap_or_default();
    object.try_parse::<K>().map_err(|e| ClusterError::Decode {
        kind: kind_of::<K>(),
        name,
        message: e.to_string(),
    })
}

impl Cluster {
    /// Objects of kind `K`: in one namespace, or across the cluster (and cluster-scoped
    /// kinds) for `None`. Untyped on the wire so one function serves both scopes.
    fn api<K: Object>(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource::erase::<K>(&());
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// Server-side applies the complete object, forcing ownership of its fields; returns
    /// the object as the API server stored it.
    #[tracing::instrument(name = "kubernetes", skip_all, fields(verb = "apply", kind = %kind_of::<K>(), name = object.meta().name.as_deref().unwrap_or_default()))]
    pub async fn apply<K: Object>(&self, object: &K) -> Result<K, ClusterError> {
        let meta = object.meta();
        let name = meta.name.as_deref().unwrap_or_default();
        count("apply", kind_of::<K>());
        let applied = self
            .api::<K>(meta.namespace.as_deref())
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(object),
            )
            .await?;
        decode(applied)
    }

    #[tracing::instrument(name = "kubernetes", skip(self), fields(verb = "get", kind = %kind_of::<K>()))]
    pub async fn get<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<K>, ClusterError> {
        count("get", kind_of::<K>());
        let object = self.api::<K>(namespace).get_opt(name).await?;
        object.map(decode).transpose()
    }

    #[tracing::instrument(name = "kubernetes", skip(self), fields(verb = "list", kind = %kind_of::<K>()))]
    pub async fn list<K: Object>(
        &self,
        namespace: Option<&str>,
        labels: &str,
    ) -> Result<Vec<K>, ClusterError> {
        count("list", kind_of::<K>());
        let list = self
            .api::<K>(namespace)
            .list(&ListParams::default().labels(labels))
            .await?;
        list.items.into_iter().map(decode).collect()
    }

    #[tracing::instrument(name = "kubernetes", skip(self), fields(verb = "delete", kind = %kind_of::<K>()))]
    pub async fn delete<K: Object>(
        &self,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), ClusterError> {
        count("delete", kind_of::<K>());
        match self
            .api::<K>(namespace)
            .delete(name, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn count(verb: &'static str, kind: String) {
    metrics::counter!(crate::metrics::KUBERNETES_REQUESTS, "verb" => verb, "kind" => kind)
        .increment(1);
}

/// True when every field of `desired` has the same value in `live` (which may hold more:
/// defaults the API server added, fields other managers own). Lists compare item by item.
pub fn contains(live: &Value, desired: &Value) -> bool {
    contains_at(live, desired, false)
}

/// `quantity`: the values here are quantities, which the API server stores in canonical
/// form (`0.5` reads back `500m`); the same amount in another spelling is not drift.
fn contains_at(live: &Value, desired: &Value, quantity: bool) -> bool {
    match (live, desired) {
        (Value::String(l), Value::String(d)) if quantity && l != d => {
            crate::domain::Quantity::nano_value(l)
                .is_some_and(|n| Some(n) == crate::domain::Quantity::nano_value(d))
        }
        (Value::Object(l), Value::Object(d)) => d.iter().all(|(k, v)| {
            let holds_quantities = matches!(k.as_str(), "requests" | "limits" | "sizeLimit");
            l.get(k).is_some_and(|lv| {
                contains_at(lv, v, holds_quantities || (quantity && !v.is_object()))
            })
        }),
        (Value::Array(l), Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(lv, dv)| contains_at(lv, dv, false))
        }
        (Value::String(l), Value::Number(d)) | (Value::Number(d), Value::String(l)) => {
            *l == d.to_string()
        }
        (l, d) => l == d,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::contains;

    #[test]
    fn the_server_url_shown_carries_no_credential() {
        let uri: http::Uri = "https://admin:s3cret@k8s.example.com:6443/prefix?x=1"
            .parse()
            .unwrap();
        assert_eq!(super::server_url(&uri), "https://k8s.example.com:6443");
        let uri: http::Uri = "http://127.0.0.1".parse().unwrap();
        assert_eq!(super::server_url(&uri), "http://127.0.0.1");
    }

    #[test]
    fn live_objects_may_hold_more_but_not_less_or_other() {
        let desired = json!({"spec": {"replicas": 2, "ports": [{"name": "http", "port": 8000}]}});
        let live = json!({"spec": {"replicas": 2, "revisionHistoryLimit": 10, "ports": [{"name": "http", "port": 8000, "protocol": "TCP"}]}});
        assert!(contains(&live, &desired));
        assert!(!contains(
            &json!({"spec": {"replicas": 3, "ports": [{"name": "http", "port": 8000}]}}),
            &desired
        ));
        assert!(!contains(
            &json!({"spec": {"replicas": 2, "ports": []}}),
            &desired
        ));
        assert!(!contains(&json!({}), &desired));
    }

    #[test]
    fn the_servers_canonical_quantities_are_not_drift() {
        let desired = json!({"resources": {"requests": {"cpu": "0.5", "memory": "1.5Gi"}},
                             "emptyDir": {"sizeLimit": "0.5Gi"}, "name": "0.5"});
        let live = json!({"resources": {"requests": {"cpu": "500m", "memory": "1536Mi"}},
                          "emptyDir": {"sizeLimit": "512Mi"}, "name": "0.5"});
        assert!(contains(&live, &desired));
        let changed = json!({"resources": {"requests": {"cpu": "600m", "memory": "1536Mi"}},
                             "emptyDir": {"sizeLimit": "512Mi"}, "name": "0.5"});
        assert!(!contains(&changed, &desired));
        // Only quantity fields compare by value.
        assert!(!contains(&json!({"name": "500m"}), &json!({"name": "0.5"})));
    }
}
