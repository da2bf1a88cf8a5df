//! Raw requests through the `kube` client, for the proxy tests (a proxied answer is the
//! pod's, not an API object).

use kube::Client;
use serde_json::Value;

/// One raw answer through the `kube` client (status, lower-case headers, body).
pub struct Answer {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    pub fn pod(&self) -> &str {
        self.headers
            .get("x-emulator-pod")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

pub async fn send(client: &Client, method: &str, path: &str, body: Option<Value>) -> Answer {
    let mut req = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
    let res = client
        .send(req.body(kube::client::Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect_bytes().await.unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

/// The Status of a failed request made with `Client::request_text`.
pub async fn failure(client: &Client, method: &str, path: &str) -> kube::core::Status {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(Vec::new())
        .unwrap();
    match client.request_text(req).await {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("{method} {path}: expected a Status, got {other:?}"),
    }
}
