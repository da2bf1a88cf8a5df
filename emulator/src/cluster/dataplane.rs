//! The Gateway data plane: a real local port that routes HTTP requests by the HTTPRoutes
//! the emulator's Gateway controller accepted (hostname, path match, URL rewrite, backend
//! weights) to ready backend pods. Pods of modelplane's `sim` engine answer with a
//! built-in OpenAI-compatible simulator; any other backend answers 503, since no real
//! model server runs in the emulator.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{GATEWAY_CONTROLLER, is_true};
use crate::resources::meta_str;
use crate::store::Store;

#[derive(Clone)]
struct Plane {
    store: Store,
    next: std::sync::Arc<AtomicUsize>,
}

pub(crate) async fn serve(listener: tokio::net::TcpListener, store: Store) {
    let plane = Plane {
        store,
        next: Default::default(),
    };
    let app = Router::new().fallback(handle).with_state(plane);
    let _ = axum::serve(listener, app).await;
}

fn text(code: StatusCode, msg: &str) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "text/plain")],
        format!("{msg}\n"),
    )
        .into_response()
}

fn json_resp(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A route rule that matched: where to send the request and the rewritten path.
struct Matched {
    namespace: String,
    backends: Vec<Value>,
    path: String,
}

fn host_matches(pattern: &str, host: &str) -> bool {
    match pattern.strip_prefix("*.") {
        Some(suffix) => host.ends_with(&format!(".{suffix}")),
        None => pattern.eq_ignore_ascii_case(host),
    }
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

/// Finds the most specific accepted rule for the request (Exact over longest prefix).
fn route(store: &Store, host: &str, method: &Method, path: &str) -> Option<Matched> {
    let kind = store
        .kinds()
        .by_resource("gateway.networking.k8s.io", "v1", "httproutes")?;
    let mut best: Option<(usize, Matched)> = None;
    for r in store.list(kind, None) {
        let accepted = r
            .pointer("/status/parents")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|p| {
                p["controllerName"] == GATEWAY_CONTROLLER
                    && p["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Accepted" && c["status"] == "True")
                    })
            });
        if !accepted {
            continue;
        }
        let hostnames: Vec<&str> = r
            .pointer("/spec/hostnames")
            .and_then(Value::as_array)
            .map(|h| h.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !hostnames.is_empty() && !hostnames.iter().any(|h| host_matches(h, host)) {
            continue;
        }
        let ns = meta_str(&r, "namespace").unwrap_or("").to_string();
        for rule in r
            .pointer("/spec/rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let default = vec![json!({"path": {"type": "PathPrefix", "value": "/"}})];
            let matches = rule
                .get("matches")
                .and_then(Value::as_array)
                .filter(|m| !m.is_empty())
                .unwrap_or(&default);
            for m in matches {
                if let Some(want) = m.get("method").and_then(Value::as_str)
                    && want != method.as_str()
                {
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
                let (ok, score, prefix) = match ty {
                    "Exact" => (path == value, usize::MAX, None),
                    "PathPrefix" => (prefix_matches(value, path), value.len(), Some(value)),
                    _ => (false, 0, None),
                };
                if !ok || best.as_ref().is_some_and(|(s, _)| *s >= score) {
                    continue;
                }
                let mut new_path = path.to_string();
                for f in rule
                    .get("filters")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if f["type"] == "URLRewrite" {
                        new_path = rewrite(f, prefix, path);
                    }
                }
                let backends = rule
                    .get("backendRefs")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                best = Some((
                    score,
                    Matched {
                        namespace: ns.clone(),
                        backends,
                        path: new_path,
                    },
                ));
            }
        }
    }
    best.map(|(_, m)| m)
}

/// Ready pods behind a Service.
fn ready_pods(store: &Store, ns: &str, name: &str) -> Option<Vec<Value>> {
    let kinds = store.kinds();
    let svc = store.get(kinds.by_resource("", "v1", "services")?, ns, name)?;
    let pods = store.list(kinds.by_resource("", "v1", "pods")?, Some(ns));
    Some(
        super::networking::selected_pods(&pods, &svc)
            .into_iter()
            .filter(|p| is_true(p, "Ready") && p.pointer("/metadata/deletionTimestamp").is_none())
            .cloned()
            .collect(),
    )
}

/// The served model name of a `sim` engine pod (its `--model` argument), or None for
/// pods that run anything else.
pub(crate) fn sim_model(pod: &Value) -> Option<String> {
    let labelled = pod
        .pointer("/metadata/labels/modelplane.io~1engine")
        .and_then(Value::as_str)
        == Some("sim");
    let c = pod.pointer("/spec/containers/0")?;
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    if !labelled && !image.contains("llm-d-inference-sim") {
        return None;
    }
    let args: Vec<&str> = ["command", "args"]
        .iter()
        .flat_map(|f| c.get(*f).and_then(Value::as_array).into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    let model = args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix("--model=").map(String::from).or_else(|| {
            (*a == "--model")
                .then(|| args.get(i + 1).map(|s| s.to_string()))
                .flatten()
        })
    });
    Some(model.unwrap_or_else(|| "sim-model".into()))
}

async fn handle(State(plane): State<Plane>, req: Request) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .split(':')
        .next()
        .unwrap_or("")
        .to_string();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let body = match axum::body::to_bytes(req.into_body(), 16 << 20).await {
        Ok(b) => b,
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large"),
    };
    let Some(m) = route(&plane.store, &host, &method, &path) else {
        return text(StatusCode::NOT_FOUND, "no HTTPRoute matches this request");
    };
    // Weighted choice among the backends (weight defaults to 1).
    let weights: Vec<i64> = m
        .backends
        .iter()
        .map(|b| b.get("weight").and_then(Value::as_i64).unwrap_or(1).max(0))
        .collect();
    let total: i64 = weights.iter().sum();
    if total == 0 {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the matched HTTPRoute rule has no usable backendRefs",
        );
    }
    let mut pick = (plane.next.fetch_add(1, Ordering::Relaxed) as i64) % total;
    let mut backend = &m.backends[0];
    for (b, w) in m.backends.iter().zip(&weights) {
        if pick < *w {
            backend = b;
            break;
        }
        pick -= w;
    }
    let ns = backend
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or(&m.namespace);
    let name = backend.get("name").and_then(Value::as_str).unwrap_or("");
    let Some(pods) = ready_pods(&plane.store, ns, name) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("backend Service {ns}/{name} not found"),
        );
    };
    if pods.is_empty() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "no healthy upstream");
    }
    let pod = &pods[plane.next.fetch_add(1, Ordering::Relaxed) % pods.len()];
    let pod_name = meta_str(pod, "name").unwrap_or("");
    match sim_model(pod) {
        Some(model) => openai(&model, &method, &m.path, &body),
        None => {
            let image = pod
                .pointer("/spec/containers/0/image")
                .and_then(Value::as_str)
                .unwrap_or("");
            let msg = format!(
                "no real model server runs in the Kubernetes emulator: pod {ns}/{pod_name} runs {image}; only pods of the sim engine answer"
            );
            json_resp(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({"error": {"message": msg, "type": "ServiceUnavailable", "code": 503}}),
            )
        }
    }
}

fn words(s: &str) -> usize {
    s.split_whitespace().count().max(1)
}

fn openai_error(code: StatusCode, ty: &str, msg: &str) -> Response {
    json_resp(
        code,
        &json!({"error": {"message": msg, "type": ty, "param": null, "code": code.as_u16()}}),
    )
}

/// The OpenAI-compatible simulator (as llm-d-inference-sim in echo mode: the answer
/// repeats the last user message, cut to max_tokens words).
fn openai(model: &str, method: &Method, path: &str, body: &Bytes) -> Response {
    let created = chrono::Utc::now().timestamp();
    match (method.as_str(), path) {
        ("GET", "/health" | "/ready") => text(StatusCode::OK, "OK"),
        ("GET", "/v1/models") => json_resp(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "modelplane-emulator", "root": model, "parent": null}]}),
        ),
        ("POST", "/v1/chat/completions" | "/v1/completions") => {
            let chat = path == "/v1/chat/completions";
            let Ok(req) = serde_json::from_slice::<Value>(body) else {
                return openai_error(
                    StatusCode::BAD_REQUEST,
                    "BadRequestError",
                    "the request body is not valid JSON",
                );
            };
            let asked = req.get("model").and_then(Value::as_str).unwrap_or("");
            if asked != model {
                return openai_error(
                    StatusCode::NOT_FOUND,
                    "NotFoundError",
                    &format!("The model `{asked}` does not exist."),
                );
            }
            let (prompt_text, last) = if chat {
                let msgs = req
                    .get("messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let content = |m: &Value| match &m["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => parts
                        .iter()
                        .filter_map(|p| p["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                let all: Vec<String> = msgs.iter().map(content).collect();
                let last = msgs
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user")
                    .map(content)
                    .unwrap_or_default();
                (all.join(" "), last)
            } else {
                let p = match req.get("prompt") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" "),
                    _ => String::new(),
                };
                (p.clone(), p)
            };
            let max = req
                .get("max_completion_tokens")
                .or_else(|| req.get("max_tokens"))
                .and_then(Value::as_u64)
                .map(|m| m as usize);
            let mut tokens: Vec<&str> = last.split_whitespace().collect();
            if tokens.is_empty() {
                tokens.push("Hello!");
            }
            let finish = match max {
                Some(m) if m < tokens.len() => {
                    tokens.truncate(m);
                    "length"
                }
                _ => "stop",
            };
            let answer = tokens.join(" ");
            let prompt_tokens = words(&prompt_text);
            let completion_tokens = tokens.len();
            let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens});
            let id = format!(
                "{}-{}",
                if chat { "chatcmpl" } else { "cmpl" },
                uuid::Uuid::new_v4().simple()
            );
            let object = if chat {
                "chat.completion"
            } else {
                "text_completion"
            };
            if req.get("stream").and_then(Value::as_bool) != Some(true) {
                let choice = if chat {
                    json!({"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": finish, "logprobs": null})
                } else {
                    json!({"index": 0, "text": answer, "finish_reason": finish, "logprobs": null})
                };
                return json_resp(
                    StatusCode::OK,
                    &json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice], "usage": usage}),
                );
            }
            // Server-sent events: a role chunk (chat), one chunk per token, the finish
            // chunk, optional usage, then [DONE].
            let object = if chat {
                "chat.completion.chunk"
            } else {
                "text_completion"
            };
            let chunk = |choice: Value| json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice]});
            let mut events: Vec<Value> = Vec::new();
            if chat {
                events.push(chunk(json!({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})));
            }
            for (i, t) in tokens.iter().enumerate() {
                let piece = if i == 0 {
                    t.to_string()
                } else {
                    format!(" {t}")
                };
                events.push(chunk(if chat {
                    json!({"index": 0, "delta": {"content": piece}, "finish_reason": null})
                } else {
                    json!({"index": 0, "text": piece, "finish_reason": null, "logprobs": null})
                }));
            }
            events.push(chunk(if chat {
                json!({"index": 0, "delta": {}, "finish_reason": finish})
            } else {
                json!({"index": 0, "text": "", "finish_reason": finish, "logprobs": null})
            }));
            if req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true)
            {
                events.push(json!({"id": id, "object": object, "created": created, "model": model, "choices": [], "usage": usage}));
            }
            let mut frames: Vec<Result<Bytes, Infallible>> = events
                .iter()
                .map(|e| Ok(Bytes::from(format!("data: {e}\n\n"))))
                .collect();
            frames.push(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/event-stream")
                .header(header::CACHE_CONTROL, "no-cache")
                .body(Body::from_stream(futures::stream::iter(frames)))
                .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response"))
        }
        _ => openai_error(
            StatusCode::NOT_FOUND,
            "NotFoundError",
            &format!("{method} {path} is not served by the simulator"),
        ),
    }
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
    fn sim_pods_are_recognised_with_their_model() {
        let pod = json!({"metadata": {"labels": {"modelplane.io/engine": "sim"}},
                         "spec": {"containers": [{"image": "x", "args": ["--model", "qwen-small", "--port", "8000"]}]}});
        assert_eq!(sim_model(&pod).as_deref(), Some("qwen-small"));
        let other = json!({"spec": {"containers": [{"image": "vllm/vllm-openai:v0.9", "args": ["--model", "m"]}]}});
        assert_eq!(sim_model(&other), None);
    }
}
