//! "Try it": one OpenAI chat completion sent to a deployment's model server on behalf of a
//! caller who may read the deployment.
//!
//! The portal runs in a browser on modelplane's origin; the model answers on the Gateway's
//! origin, which sends no CORS headers (and should not have to). So modelplane forwards the
//! call: the caller's role is checked here, the target URL comes only from the status the
//! worker wrote (never from the request), redirects are not followed, and the answer is
//! bounded in size and time.

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
#[derive(Debug, Clone)]
pub struct ModelClient {
    http: reqwest::Client,
    via: ChatVia,
}

impl ModelClient {
    pub fn new(via: ChatVia, timeout: Duration) -> Self {
        crate::install_crypto_provider();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("an HTTP client with no TLS configuration builds");
        Self { http, via }
    }
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
    let endpoints = &deployment.status.endpoints;
    let base = match client.via {
        ChatVia::External => endpoints.external.first().cloned(),
        ChatVia::Cluster => endpoints.cluster.clone(),
    }
    .ok_or_else(|| {
        ServiceError::conflict(
            None,
            format!(
                "deployment `{name}` has no {} endpoint yet: {}",
                match client.via {
                    ChatVia::External => "external",
                    ChatVia::Cluster => "in-cluster",
                },
                endpoints
                    .reason
                    .as_deref()
                    .unwrap_or("it is not serving (see its phase and conditions)")
            ),
        )
    })?;
    let url = format!("{}/v1/chat/completions", base.trim_end_matches('/'));
    let unreachable = |message: String| ServiceError::ModelUnreachable { message };
    let response = client
        .http
        .post(&url)
        .json(&request)
        .send()
        .await
        .map_err(|e| {
            unreachable(if e.is_timeout() {
                format!("the model server at {url} did not answer in time")
            } else {
                format!(
                    "the model server at {url} could not be reached: {}",
                    root_cause(&e)
                )
            })
        })?;
    let status = response.status();
    let bytes = read_bounded(response)
        .await
        .map_err(|e| unreachable(format!("reading the answer from {url}: {e}")))?;
    if !status.is_success() {
        let excerpt: String = String::from_utf8_lossy(&bytes).chars().take(300).collect();
        return Err(unreachable(format!(
            "the model server at {url} answered HTTP {}: {}",
            status.as_u16(),
            excerpt.trim()
        )));
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        unreachable(format!(
            "the model server at {url} answered with non-JSON: {e}"
        ))
    })
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

/// The innermost cause of a connection error ("Connection refused"), which is what helps.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
