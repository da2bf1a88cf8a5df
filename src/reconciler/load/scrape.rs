//! Reading one pod's metrics page: straight from the pod IP (the worker runs in the
//! cluster) or through the API server's `pods/{name}:{port}/proxy` subresource (the worker
//! runs outside, with a kubeconfig). Each read is time-boxed and capped in size.

use std::time::Duration;

use futures::AsyncReadExt;
use k8s_openapi::api::core::v1::Pod;

/// How a pod's page is reached.
#[derive(Clone)]
pub enum Via {
    /// `http://{pod IP}:{port}/metrics`.
    Direct(reqwest::Client),
    /// `GET /api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics` on the API server
    /// (needs `get` on `pods/proxy`).
    Proxy(kube::Client),
}

/// Why a pod's page could not be read, in one line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScrapeError {
    #[error("no answer within {0} s")]
    Timeout(u64),
    #[error("the metrics page is larger than {0} bytes; not read")]
    TooLarge(usize),
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("the metrics page is not UTF-8 text")]
    NotText,
    #[error("the pod has no IP yet")]
    NoAddress,
}

/// Reads `pod`'s metrics page on `port`: at most `max_bytes`, within `timeout`.
pub async fn scrape(
    via: &Via,
    pod: &Pod,
    port: i32,
    timeout: Duration,
    max_bytes: usize,
) -> Result<String, ScrapeError> {
    let read = async {
        match via {
            Via::Direct(http) => direct(http, pod, port, max_bytes).await,
            Via::Proxy(client) => proxy(client, pod, port, max_bytes).await,
        }
    };
    let bytes = tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ScrapeError::Timeout(timeout.as_secs()))??;
    String::from_utf8(bytes).map_err(|_| ScrapeError::NotText)
}

async fn direct(
    http: &reqwest::Client,
    pod: &Pod,
    port: i32,
    max_bytes: usize,
) -> Result<Vec<u8>, ScrapeError> {
    let host = pod_host(pod)?;
    let response = http
        .get(format!("http://{host}:{port}/metrics"))
        .send()
        .await
        .map_err(|e| ScrapeError::Unreachable(without_url(&e)))?;
    if !response.status().is_success() {
        return Err(ScrapeError::Status(response.status().as_u16()));
    }
    if response
        .content_length()
        .is_some_and(|n| n > max_bytes as u64)
    {
        return Err(ScrapeError::TooLarge(max_bytes));
    }
    let mut body = Vec::new();
    let mut response = response;
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| ScrapeError::Unreachable(without_url(&e)))?
    {
        if body.len() + chunk.len() > max_bytes {
            return Err(ScrapeError::TooLarge(max_bytes));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

async fn proxy(
    client: &kube::Client,
    pod: &Pod,
    port: i32,
    max_bytes: usize,
) -> Result<Vec<u8>, ScrapeError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics");
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| ScrapeError::Unreachable(e.to_string()))?;
    let stream = client.request_stream(request).await.map_err(|e| match e {
        kube::Error::Api(status) => ScrapeError::Status(status.code),
        other => ScrapeError::Unreachable(other.to_string()),
    })?;
    // One byte past the cap tells a page exactly at the cap from a larger one.
    let mut body = Vec::new();
    let read = stream
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut body)
        .await;
    read.map_err(|e| ScrapeError::Unreachable(e.to_string()))?;
    if body.len() > max_bytes {
        return Err(ScrapeError::TooLarge(max_bytes));
    }
    Ok(body)
}

/// The pod's IP as a URL's host (an IPv6 address needs brackets).
fn pod_host(pod: &Pod) -> Result<String, ScrapeError> {
    let ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .ok_or(ScrapeError::NoAddress)?;
    Ok(if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    })
}

/// reqwest's errors print the URL; the pod's address is in the message already.
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_connect() {
        "connection refused or no route"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "the answer broke off"
    } else {
        "request failed"
    };
    kind.to_owned()
}

/// The port of the model server's `http` container port (the page is served there).
pub fn metrics_port(pod: &Pod) -> Option<i32> {
    let containers = &pod.spec.as_ref()?.containers;
    let ports = || containers.iter().flat_map(|c| c.ports.iter().flatten());
    ports()
        .find(|p| p.name.as_deref() == Some("http"))
        .or_else(|| ports().next())
        .map(|p| p.container_port)
}

/// An answer from a pod: its status and (at most `max_bytes` of) its body.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// A request to a pod's server: `method path`, with a JSON body when given, answered
/// within `timeout` and in at most `max_bytes`.
#[derive(Debug, Clone)]
pub struct PodCall<'a> {
    pub method: http::Method,
    pub path: &'a str,
    pub body: Option<Vec<u8>>,
    pub timeout: Duration,
    pub max_bytes: usize,
}

/// Sends `request` to `pod`'s `port` the way [`scrape`] reads a page: straight or through
/// the API server's pod proxy (which needs `create` on `pods/proxy` for a POST). Any status
/// is an answer; only no answer, or one larger than `max_bytes`, is an error.
pub async fn call(
    via: &Via,
    pod: &Pod,
    port: i32,
    request: PodCall<'_>,
) -> Result<Answer, ScrapeError> {
    let PodCall {
        method,
        path,
        body,
        timeout,
        max_bytes,
    } = request;
    let send = async {
        match via {
            Via::Direct(client) => {
                let host = pod_host(pod)?;
                let mut request = client.request(method, format!("http://{host}:{port}{path}"));
                if let Some(body) = body {
                    request = request
                        .header(http::header::CONTENT_TYPE, "application/json")
                        .body(body);
                }
                let mut response = request
                    .send()
                    .await
                    .map_err(|e| ScrapeError::Unreachable(without_url(&e)))?;
                let status = response.status().as_u16();
                let mut bytes = Vec::new();
                while let Some(chunk) = response
                    .chunk()
                    .await
                    .map_err(|e| ScrapeError::Unreachable(without_url(&e)))?
                {
                    if bytes.len() + chunk.len() > max_bytes {
                        return Err(ScrapeError::TooLarge(max_bytes));
                    }
                    bytes.extend_from_slice(&chunk);
                }
                Ok(Answer {
                    status,
                    body: bytes,
                })
            }
            Via::Proxy(client) => {
                use http_body_util::BodyExt;
                let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                let uri = format!("/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy{path}");
                let mut request = http::Request::builder().method(method).uri(uri);
                if body.is_some() {
                    request = request.header(http::header::CONTENT_TYPE, "application/json");
                }
                let request = request
                    .body(kube::client::Body::from(body.unwrap_or_default()))
                    .map_err(|e| ScrapeError::Unreachable(e.to_string()))?;
                let response = client
                    .send(request)
                    .await
                    .map_err(|e| ScrapeError::Unreachable(e.to_string()))?;
                let status = response.status().as_u16();
                let collected = http_body_util::Limited::new(response.into_body(), max_bytes)
                    .collect()
                    .await
                    .map_err(|e| {
                        if e.downcast_ref::<http_body_util::LengthLimitError>()
                            .is_some()
                        {
                            ScrapeError::TooLarge(max_bytes)
                        } else {
                            ScrapeError::Unreachable(e.to_string())
                        }
                    })?;
                Ok(Answer {
                    status,
                    body: collected.to_bytes().to_vec(),
                })
            }
        }
    };
    tokio::time::timeout(timeout, send)
        .await
        .map_err(|_| ScrapeError::Timeout(timeout.as_secs()))?
}
