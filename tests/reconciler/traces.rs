//! Traces over OTLP: with `MODELPLANE_OTLP_ENDPOINT` set, one create is one trace, from
//! the HTTP request through the service and the work queue to the worker's Kubernetes
//! calls. An in-process OTLP/HTTP receiver (protobuf, as the OTLP specification's
//! `POST /v1/traces` takes it) collects what the real binary exports.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;
use serde_json::json;
use sqlx::PgPool;

use super::{ServeProcess, sim_spec, wait_for};

#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    attributes: Vec<(String, String)>,
}

type Received = Arc<Mutex<Vec<Span>>>;

async fn receive(State(received): State<Received>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf request");
    let mut spans = received.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            for span in scope.spans {
                spans.push(Span {
                    name: span.name,
                    trace: span.trace_id,
                    id: span.span_id,
                    parent: span.parent_span_id,
                    attributes: span
                        .attributes
                        .into_iter()
                        .map(|kv| {
                            let value = kv
                                .value
                                .and_then(|v| v.value)
                                .map(|v| format!("{v:?}"))
                                .unwrap_or_default();
                            (kv.key, value)
                        })
                        .collect(),
                });
            }
        }
    }
    ExportTraceServiceResponse::default().encode_to_vec()
}

#[sqlx::test]
async fn one_create_is_one_trace_from_the_request_to_the_kubernetes_calls(pool: PgPool) {
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(receive))
        .with_state(received.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let emulator = super::emulator().nodes(1).start().await.unwrap();
    let serve = ServeProcess::start(
        &pool,
        &emulator,
        &[
            ("MODELPLANE_OTLP_ENDPOINT", &collector),
            // The batch exporter's delay (OpenTelemetry's standard variable), short for a test.
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("MODELPLANE_SHUTDOWN_DRAIN_SECS", "0"),
            ("MODELPLANE_LOG", "info"),
        ],
    )
    .await;
    let (client, base) = (&serve.client, &serve.base);
    let created = client
        .post(format!("{base}/api/v1/projects"))
        .json(&json!({"name": "team-a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = client
        .post(format!("{base}/api/v1/projects/team-a/deployments"))
        .json(&json!({"name": "qwen", "spec": sim_spec()}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    // The create's HTTP span, the service's span under it, the reconcile the queue carried
    // it to, and that reconcile's server-side apply of the Deployment: one trace.
    let is_create = |s: &Span| {
        s.name == "http"
            && s.attributes
                .iter()
                .any(|(k, v)| k == "route" && v.contains("/api/v1/projects/{project}/deployments"))
            && s.attributes
                .iter()
                .any(|(k, v)| k == "method" && v.contains("POST"))
    };
    wait_for(
        "the create's whole trace",
        Duration::from_secs(30),
        || async {
            let spans = received.lock().unwrap().clone();
            let Some(request) = spans.iter().find(|s| is_create(s)) else {
                return false;
            };
            let in_trace: Vec<&Span> = spans.iter().filter(|s| s.trace == request.trace).collect();
            let reconcile = in_trace.iter().find(|s| s.name == "reconcile");
            let applied = reconcile.is_some_and(|r| {
                in_trace.iter().any(|s| {
                    s.name == "kubernetes"
                        && s.parent == r.id
                        && s.attributes
                            .iter()
                            .any(|(k, v)| k == "kind" && v.contains("Deployment"))
                        && s.attributes
                            .iter()
                            .any(|(k, v)| k == "verb" && v.contains("apply"))
                })
            });
            in_trace.iter().any(|s| s.name == "create_deployment") && applied
        },
    )
    .await;
    let spans = received.lock().unwrap().clone();
    let request = spans.iter().find(|s| is_create(s)).unwrap();
    let service = spans
        .iter()
        .find(|s| s.name == "create_deployment" && s.trace == request.trace)
        .unwrap();
    assert_eq!(
        service.parent, request.id,
        "the service span is the request's child"
    );
    let reconcile = spans
        .iter()
        .find(|s| s.name == "reconcile" && s.trace == request.trace)
        .unwrap();
    assert_eq!(
        reconcile.parent, service.id,
        "the reconcile continues the trace where the service queued it"
    );

    serve.terminate();
    let mut child = serve.child;
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
}
