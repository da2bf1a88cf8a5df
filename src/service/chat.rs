//! "Try it": one OpenAI chat completion sent to a deployment's model server on behalf of a
//! caller who may read the deployment.
//!
//! The portal runs in a browser on modelplane's origin; the model answers on the Gateway's
//! origin, which sends no CORS headers (and should not have to). So modelplane forwards the
//! call, and only ever to the deployment's own Service, by an address it builds from the
//! project's namespace, the deployment's name and its port: never from a hostname or path a
//! user chose (a route's hostname can name any address, another tenant's model included).
//!
//! - `MODELPLANE_CHAT_VIA=api-server` (the default; modelplane outside the cluster): through
//!   the Kubernetes API server's service proxy,
//!   `/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/v1/chat/completions`, with the
//!   cluster credentials modelplane already has (RBAC: `create` on `services/proxy`).
//! - `MODELPLANE_CHAT_VIA=cluster` (modelplane in the cluster): straight to
//!   `http://{name}.{ns}.svc.cluster.local:{port}`, connecting to the address that name
//!   resolves to, which must not be loopback, link-local or a cloud metadata address unless
//!   `MODELPLANE_CHAT_ALLOW_LOCAL_ADDRESSES` is set.
//!
//! Redirects are not followed, the answer is bounded in size and time, and a failed answer's
//! body is never passed back (only its status).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde_json::Value;
use tracing::instrument;

use super::access::authorize;
use super::{Actor, Context, ServiceError, deployments::get_deployment_in};
pub use crate::config::ChatVia;
use crate::domain::{FieldErrors, Role};

/// The most of a model's answer that is passed back.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// Calls model servers; one per process (it keeps a connection pool).
#[derive(Clone)]
pub struct ModelClient {
    http: reqwest::Client,
    /// Without a bound on the whole answer (a token stream may take minutes), for the
    /// activator's forwarded requests (`forward.rs`).
    pub(super) stream_http: reqwest::Client,
    pub(super) via: ChatVia,
    /// The cluster's API server, for `api-server`.
    pub(super) kube: Option<kube::Client>,
    pub(super) timeout: Duration,
    pub(super) allow_local: bool,
}

impl std::fmt::Debug for ModelClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelClient")
            .field("via", &self.via)
            .field("cluster", &self.kube.is_some())
            .finish()
    }
}

impl ModelClient {
    /// `kube`: the cluster's client, which `api-server` needs; `allow_local` lets `cluster`
    /// connect to loopback and link-local addresses (a test cluster on this machine).
    pub fn new(
        via: ChatVia,
        timeout: Duration,
        kube: Option<kube::Client>,
        allow_local: bool,
    ) -> Self {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with no TLS configuration builds");
        let stream_http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with no TLS configuration builds");
        Self {
            http,
            stream_http,
            via,
            kube,
            timeout,
            allow_local,
        }
    }
}

/// The deployment's own Service: what a chat call may reach, and nothing else.
struct Target {
    namespace: String,
    service: String,
    port: i64,
}

/// Sends `request` (an OpenAI chat-completions body) to the deployment's model server and
/// returns its JSON answer. `model` defaults to the served name; streaming is refused.
#[instrument(skip(ctx, client, actor, request), fields(via = ?client.via))]
pub async fn chat_completion(
    ctx: &Context,
    client: &ModelClient,
    actor: &Actor,
    project: &str,
    name: &str,
    mut request: Value,
) -> Result<Value, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    let deployment = get_deployment_in(ctx, &project, name).await?;
    let body = request
        .as_object_mut()
        .ok_or_else(|| FieldErrors::single("body", "must be a JSON object"))?;
    if !body.get("messages").is_some_and(Value::is_array) {
        return Err(FieldErrors::single("messages", "a list of chat messages is required").into());
    }
    if body.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err(FieldErrors::single(
            "stream",
            "streaming is not forwarded; call the deployment's endpoint directly to stream",
        )
        .into());
    }
    if !body.contains_key("model") {
        let served = deployment
            .spec
            .model
            .served_name
            .clone()
            .unwrap_or_else(|| deployment.name.clone());
        body.insert("model".into(), Value::String(served));
    }
    // The worker writes the in-cluster URL once the Service exists and a replica serves:
    // only a readiness signal here, never the address used.
    let endpoints = &deployment.status.endpoints;
    if endpoints.cluster.is_none() {
        return Err(ServiceError::conflict(
            None,
            format!(
                "deployment `{name}` has no endpoint yet: {}",
                endpoints
                    .reason
                    .as_deref()
                    .unwrap_or("it is not serving (see its phase and conditions)")
            ),
        ));
    }
    let serving = deployment
        .spec
        .serving(&deployment.name)
        .map_err(ServiceError::Invalid)?;
    let target = Target {
        namespace: project.namespace.clone(),
        service: deployment.name.clone(),
        port: i64::from(serving.port),
    };
    let body = serde_json::to_vec(&request).expect("JSON serialises");
    let (status, bytes) = match client.via {
        ChatVia::ApiServer => via_api_server(client, &target, body).await?,
        ChatVia::Cluster => via_cluster(client, &target, body).await?,
    };
    let unreachable = |message: String| ServiceError::ModelUnreachable { message };
    if !(200..300).contains(&status) {
        // The body is not passed back: it is the model server's (or whatever answered).
        return Err(unreachable(format!(
            "the model server of `{name}` answered HTTP {status}"
        )));
    }
    serde_json::from_slice(&bytes).map_err(|_| {
        unreachable(format!(
            "the model server of `{name}` answered with something other than JSON"
        ))
    })
}

async fn via_api_server(
    client: &ModelClient,
    target: &Target,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ServiceError> {
    let Some(kube) = &client.kube else {
        return Err(ServiceError::ModelUnreachable {
            message: "\"try it\" needs a cluster connection (MODELPLANE_KUBECONFIG), or \
                      MODELPLANE_CHAT_VIA=cluster when modelplane runs in the cluster"
                .into(),
        });
    };
    // Every part is a DNS label or a number modelplane validated: nothing to escape.
    let path = format!(
        "/api/v1/namespaces/{}/services/{}:{}/proxy/v1/chat/completions",
        target.namespace, target.service, target.port
    );
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .expect("a valid request");
    let unreachable = |why: &str| ServiceError::ModelUnreachable {
        message: format!(
            "the model server of `{}` could not be reached through the Kubernetes API: {why}",
            target.service
        ),
    };
    let call = async {
        let response = kube
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|_| unreachable("the API server did not answer"))?;
        let status = response.status().as_u16();
        let bytes = read_bounded_body(response.into_body())
            .await
            .map_err(|e| unreachable(&e))?;
        Ok::<_, ServiceError>((status, bytes))
    };
    tokio::time::timeout(client.timeout, call)
        .await
        .map_err(|_| unreachable("no answer in time"))?
}

async fn via_cluster(
    client: &ModelClient,
    target: &Target,
    body: Vec<u8>,
) -> Result<(u16, Vec<u8>), ServiceError> {
    let host = format!("{}.{}.svc.cluster.local", target.service, target.namespace);
    let unreachable = |why: &str| ServiceError::ModelUnreachable {
        message: format!(
            "the model server of `{}` could not be reached: {why}",
            target.service
        ),
    };
    let (address, port) = client
        .service_address(&host, target.port)
        .await
        .map_err(unreachable)?;
    let response = client
        .http
        .post(format!("http://{address}/v1/chat/completions"))
        .header(reqwest::header::HOST, format!("{host}:{port}"))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| {
            unreachable(if e.is_timeout() {
                "no answer in time"
            } else {
                "the connection failed"
            })
        })?;
    let status = response.status().as_u16();
    let bytes = read_bounded(response).await.map_err(|e| unreachable(&e))?;
    Ok((status, bytes))
}

impl ModelClient {
    /// The address a Service's in-cluster name resolves to that modelplane may call, and
    /// its port; the caller connects to this address, not to a name that could resolve anew.
    /// `Err`: why not, in words.
    pub(super) async fn service_address(
        &self,
        host: &str,
        port: i64,
    ) -> Result<(SocketAddr, u16), &'static str> {
        let port = u16::try_from(port).map_err(|_| "its port is out of range")?;
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| "its Service name does not resolve")?
            .collect();
        let address = addresses
            .into_iter()
            .find(|a| self.allow_local || !is_forbidden_address(a.ip()))
            .ok_or("its Service resolves to no address modelplane may call")?;
        Ok((address, port))
    }
}

/// Addresses "try it" never connects to unless allowed: loopback, link-local (the cloud
/// metadata services live at 169.254.169.254 and fd00:ec2::254), unspecified, and Alibaba's
/// metadata address.
pub fn is_forbidden_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.octets() == [100, 100, 100, 200]
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_forbidden_address(IpAddr::V4(v4));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80
                || v6 == std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)
        }
    }
}

async fn read_bounded_body(body: kube::client::Body) -> Result<Vec<u8>, String> {
    use http_body_util::BodyExt;
    let limited = http_body_util::Limited::new(body, MAX_ANSWER_BYTES);
    match limited.collect().await {
        Ok(collected) => Ok(collected.to_bytes().to_vec()),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => Err(format!(
            "the answer is larger than {MAX_ANSWER_BYTES} bytes"
        )),
        Err(_) => Err("the answer broke off".into()),
    }
}

async fn read_bounded(mut response: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!(
                "the answer is larger than {MAX_ANSWER_BYTES} bytes"
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::is_forbidden_address;

    #[test]
    fn loopback_link_local_and_metadata_addresses_are_forbidden() {
        for ip in [
            "127.0.0.1",
            "127.8.9.10",
            "169.254.169.254",
            "0.0.0.0",
            "100.100.100.200",
            "::1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(is_forbidden_address(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["10.96.0.12", "172.20.1.1", "192.168.1.5", "fd12::1"] {
            assert!(!is_forbidden_address(ip.parse().unwrap()), "{ip}");
        }
    }
}
