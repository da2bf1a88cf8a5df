//! Forwarding one held request to a deployment's own Service, the answer streamed back as
//! it comes (the activator's last step). The address is built as "try it" builds it
//! (`chat.rs`): from the project's namespace, the deployment's name and its port, through
//! the Kubernetes API server's service proxy or the cluster's DNS, never from anything the
//! request carries.

use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::{Bytes, Frame};

use super::ServiceError;
use super::chat::{ChatVia, ModelClient};

/// An answer's body as it streams from the model server.
pub type Streamed = UnsyncBoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// The request to forward: method, path and query (below the Service's root), the headers
/// worth passing on, and the body.
pub struct Forward<'a> {
    pub namespace: &'a str,
    pub service: &'a str,
    pub port: i64,
    pub method: http::Method,
    pub path_and_query: &'a str,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
}

/// Headers a proxy passes on: what the model server reads to answer (the rest, hop-by-hop
/// ones and credentials meant for the Gateway among them, stay behind).
const PASSED: [http::HeaderName; 3] = [
    http::header::CONTENT_TYPE,
    http::header::ACCEPT,
    http::header::ACCEPT_ENCODING,
];

impl ModelClient {
    /// Sends `request` to the deployment's Service and returns the answer as it streams.
    /// Only the connection is bounded in time: a stream of tokens may take minutes.
    pub async fn forward(
        &self,
        request: Forward<'_>,
    ) -> Result<http::Response<Streamed>, ServiceError> {
        let service = request.service;
        let unreachable = |why: &str| ServiceError::ModelUnreachable {
            message: format!("the model server of `{service}` could not be reached: {why}"),
        };
        if !request.path_and_query.starts_with('/')
            || request
                .path_and_query
                .split(['/', '?'])
                .any(|s| s == ".." || s == ".")
        {
            return Err(unreachable(
                "the path is not a plain path below the Service",
            ));
        }
        let answer = match self.via {
            ChatVia::ApiServer => self.via_api_server(request).await,
            ChatVia::Cluster => self.via_cluster(request).await,
        };
        answer.map_err(unreachable)
    }

    /// Through the Kubernetes API server's service proxy (modelplane outside the cluster).
    async fn via_api_server(
        &self,
        request: Forward<'_>,
    ) -> Result<http::Response<Streamed>, &'static str> {
        let Some(kube) = &self.kube else {
            return Err(
                "no cluster connection (MODELPLANE_KUBECONFIG), and MODELPLANE_CHAT_VIA is not cluster",
            );
        };
        let path = format!(
            "/api/v1/namespaces/{}/services/{}:{}/proxy{}",
            request.namespace, request.service, request.port, request.path_and_query
        );
        let mut builder = http::Request::builder().method(request.method).uri(path);
        for name in PASSED {
            if let Some(value) = request.headers.get(&name) {
                builder = builder.header(name, value);
            }
        }
        let outgoing = builder
            .body(kube::client::Body::from(request.body))
            .map_err(|_| "the request could not be built")?;
        let response = tokio::time::timeout(self.timeout, kube.send(outgoing))
            .await
            .map_err(|_| "no answer in time")?
            .map_err(|_| "the API server did not answer")?;
        Ok(response.map(|body| body.map_err(|e| Box::new(e) as _).boxed_unsync()))
    }

    /// Straight to the Service's in-cluster address (modelplane in the cluster).
    async fn via_cluster(
        &self,
        request: Forward<'_>,
    ) -> Result<http::Response<Streamed>, &'static str> {
        let host = format!(
            "{}.{}.svc.cluster.local",
            request.service, request.namespace
        );
        let (address, port) = self.service_address(&host, request.port).await?;
        let mut outgoing = self
            .stream_http
            .request(
                request.method,
                format!("http://{address}{}", request.path_and_query),
            )
            .header(reqwest::header::HOST, format!("{host}:{port}"))
            .body(request.body);
        for name in PASSED {
            if let Some(value) = request.headers.get(&name) {
                outgoing = outgoing.header(name, value);
            }
        }
        let upstream = tokio::time::timeout(self.timeout, outgoing.send())
            .await
            .map_err(|_| "no answer in time")?
            .map_err(|_| "the connection failed")?;
        let mut response = http::Response::builder().status(upstream.status());
        for (name, value) in upstream.headers() {
            if !is_hop_by_hop(name) {
                response = response.header(name, value);
            }
        }
        let body = http_body_util::StreamBody::new(futures::stream::unfold(
            Some(upstream),
            |upstream| async move {
                let mut upstream = upstream?;
                match upstream.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(Frame::data(chunk)), Some(upstream))),
                    Ok(None) => None,
                    Err(err) => Some((Err(Box::new(err) as _), None)),
                }
            },
        ));
        response
            .body(BodyExt::boxed_unsync(body))
            .map_err(|_| "its answer could not be passed on")
    }
}

fn is_hop_by_hop(name: &http::HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
    )
}
