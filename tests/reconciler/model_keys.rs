//! Model keys enforced at the Gateway, on the emulator with the Gateway API's experimental
//! channel: a deployment with `access: keys` (what new deployments get where the key check
//! runs) has the ExternalAuth filter on its route, the emulator's Gateway asks the API's key
//! check over real HTTP (`emulator/src/cluster/external_auth/`), or over gRPC as Envoy's
//! ext_authz when the worker writes `protocol: GRPC`, and only a key of the project gets
//! through its Gateway URL; one with `access: public` stays open.

use std::time::Duration;

use modelplane_emulator::Crds;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::PgPool;

use super::{Harness, create_with, harness_with, resource_of, sim_spec, wait_for};

fn cluster() -> modelplane_emulator::EmulatorBuilder {
    let crds = modelplane_emulator::experimental_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    super::load::cluster().crds(Crds::Manifests(crds))
}

async fn keys_harness(pool: PgPool) -> Harness {
    harness_with(pool, cluster(), |_| {}, |o| o.model_keys = true).await
}

/// The deployment's Gateway URL once it is Ready.
async fn ready_base(h: &Harness, name: &str) -> String {
    wait_for(
        &format!("{name} Ready"),
        Duration::from_secs(60),
        || async {
            let d = h.deployment(name).await;
            d["status"]["phase"] == "Ready" && d["status"]["endpoints"]["openaiBase"].is_string()
        },
    )
    .await;
    h.deployment(name).await["status"]["endpoints"]["openaiBase"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn new_key(h: &Harness, project: &str, body: Value) -> (String, String) {
    let created: Value = h
        .app
        .post_json(&format!("/api/v1/projects/{project}/keys"), &body)
        .await
        .json()
        .await
        .unwrap();
    (
        created["secret"].as_str().unwrap().to_owned(),
        created["id"].as_str().unwrap().to_owned(),
    )
}

async fn complete(base: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/completions"))
        .json(&json!({"model": "qwen", "prompt": "hello there", "max_tokens": 2}));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

#[sqlx::test]
async fn only_a_key_of_the_project_gets_through_the_gateway(pool: PgPool) {
    let h = keys_harness(pool).await;
    h.app.create_project("team-a").await;
    h.app.create_project("team-b").await;
    create_with(&h, "qwen", sim_spec()).await;
    // Where the key check runs, a new deployment asks for keys.
    assert_eq!(h.deployment("qwen").await["spec"]["access"], "keys");
    let base = ready_base(&h, "qwen").await;

    // The route carries the filter; the project has the key check's Service and slice.
    let routes: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &resource_of("gateway.networking.k8s.io/v1", "HTTPRoute"),
    );
    let route = routes.get("qwen").await.unwrap();
    let id = h.deployment("qwen").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let filter = &route.data["spec"]["rules"][0]["filters"][0];
    assert_eq!(filter["type"], "ExternalAuth", "{route:?}");
    assert_eq!(filter["externalAuth"]["protocol"], "HTTP");
    assert_eq!(
        filter["externalAuth"]["backendRef"]["name"],
        "modelplane-authz"
    );
    assert_eq!(
        filter["externalAuth"]["http"]["path"],
        format!("/check/{id}")
    );
    let services: kube::Api<k8s_openapi::api::core::v1::Service> =
        kube::Api::namespaced(h.kube.clone(), "team-a");
    assert!(
        services
            .get_opt("modelplane-authz")
            .await
            .unwrap()
            .is_some()
    );

    // No key: 401 in OpenAI's shape, from the key check, through the Gateway.
    let refused = complete(&base, None).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key", "{body}");

    // The portal's "Try it" (the chat proxy) still answers a signed-in member of the project:
    // it reaches the model inside the cluster as that user, with no model key.
    let viewer = h.app.token_for("team-a", "viewer", "viewer").await;
    let tried = h
        .app
        .request_as(
            Some(&viewer),
            reqwest::Method::POST,
            "/api/v1/projects/team-a/deployments/qwen/chat/completions",
        )
        .json(&json!({"messages": [{"role": "user", "content": "Hello"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(tried.status(), StatusCode::OK);
    let tried: Value = tried.json().await.unwrap();
    assert!(
        tried["choices"][0]["message"]["content"].is_string(),
        "{tried}"
    );

    // The project's key: the model answers (the simulated pod says so).
    let (key, key_id) = new_key(&h, "team-a", json!({"name": "app"})).await;
    wait_for(
        "the new key let through",
        Duration::from_secs(10),
        || async { complete(&base, Some(&key)).await.status() == StatusCode::OK },
    )
    .await;
    let answered = complete(&base, Some(&key)).await;
    assert_eq!(answered.status(), StatusCode::OK);
    assert!(answered.headers().contains_key("x-emulator-pod"));
    // Streaming goes through the filter too.
    let mut streamed = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .bearer_auth(&key)
        .json(&json!({"model": "qwen", "stream": true, "max_tokens": 3,
                      "messages": [{"role": "user", "content": "one two three"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), StatusCode::OK);
    let mut text = String::new();
    while let Some(chunk) = streamed.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    theirs_refused_and_revoked_refused(&h, &base, &key, &key_id).await;
}

/// Another project's key gets 403; once `key` (of team-a) is revoked, it gets 401 again.
async fn theirs_refused_and_revoked_refused(h: &Harness, base: &str, key: &str, key_id: &str) {
    let (theirs, _) = new_key(h, "team-b", json!({"name": "other"})).await;
    wait_for(
        "the other project's key refused",
        Duration::from_secs(10),
        || async { complete(base, Some(&theirs)).await.status() == StatusCode::FORBIDDEN },
    )
    .await;
    let revoked = h
        .app
        .request(
            reqwest::Method::DELETE,
            &format!("/api/v1/projects/team-a/keys/{key_id}"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), StatusCode::OK);
    wait_for(
        "the revoked key refused",
        Duration::from_secs(10),
        || async { complete(base, Some(key)).await.status() == StatusCode::UNAUTHORIZED },
    )
    .await;
}

#[sqlx::test]
async fn a_public_deployment_stays_open_and_limits_answer_429(pool: PgPool) {
    let h = keys_harness(pool).await;
    h.app.create_project("team-a").await;
    let mut open = sim_spec();
    open["access"] = json!("public");
    create_with(&h, "qwen", open).await;
    let base = ready_base(&h, "qwen").await;
    assert_eq!(complete(&base, None).await.status(), StatusCode::OK);

    // Switched to keys: closed to callers without one; a key's limit answers 429.
    let patched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"access": "keys"}}),
            None,
        )
        .await;
    assert_eq!(patched.status(), StatusCode::OK);
    wait_for("the route guarded", Duration::from_secs(20), || async {
        complete(&base, None).await.status() == StatusCode::UNAUTHORIZED
    })
    .await;
    let (key, _) = new_key(
        &h,
        "team-a",
        json!({"name": "slow", "requestsPerMinute": 2}),
    )
    .await;
    wait_for("the key let through", Duration::from_secs(10), || async {
        complete(&base, Some(&key)).await.status() == StatusCode::OK
    })
    .await;
    let mut limited = None;
    for _ in 0..3 {
        let r = complete(&base, Some(&key)).await;
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(r.headers()["retry-after"].to_str().unwrap().to_owned());
            break;
        }
    }
    let retry: u64 = limited.expect("429 past the limit").parse().unwrap();
    assert!((1..=60).contains(&retry));
}

/// On a cluster with the Gateway API's standard channel the API server refuses the filter:
/// the deployment is Failed with the reason and what to do, and no route opens its URL.
#[sqlx::test]
async fn the_standard_channel_refuses_keys_and_the_status_says_what_to_do(pool: PgPool) {
    let h = harness_with(
        pool,
        super::load::cluster(),
        |_| {},
        |o| o.model_keys = true,
    )
    .await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    wait_for(
        "the refusal in the status",
        Duration::from_secs(60),
        || async {
            let d = h.deployment("qwen").await;
            (d["status"]["phase"] == "Failed" || d["status"]["phase"] == "Degraded")
                && d["status"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("experimental channel"))
        },
    )
    .await;
    let d = h.deployment("qwen").await;
    let message = d["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("Kubernetes rejected the HTTPRoute"),
        "{message}"
    );
    assert!(message.contains("spec.access: public"), "{message}");
    let routes: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &resource_of("gateway.networking.k8s.io/v1", "HTTPRoute"),
    );
    assert!(
        routes.get_opt("qwen").await.unwrap().is_none(),
        "no route, no open URL"
    );
}

/// `MODELPLANE_AUTHZ_PROTOCOL=grpc`: the routes' filter says GRPC, the Gateway calls Envoy's
/// `Check` on the same key check, which finds the deployment from the request's path.
#[sqlx::test]
async fn the_grpc_protocol_guards_the_gateway_url_the_same_way(pool: PgPool) {
    let h = harness_with(
        pool,
        cluster(),
        |c| c.build.key_check_grpc = true,
        |o| o.model_keys = true,
    )
    .await;
    h.app.create_project("team-a").await;
    h.app.create_project("team-b").await;
    create_with(&h, "qwen", sim_spec()).await;
    let base = ready_base(&h, "qwen").await;
    let routes: kube::Api<kube::api::DynamicObject> = kube::Api::namespaced_with(
        h.kube.clone(),
        "team-a",
        &resource_of("gateway.networking.k8s.io/v1", "HTTPRoute"),
    );
    let route = routes.get("qwen").await.unwrap();
    let filter = &route.data["spec"]["rules"][0]["filters"][0]["externalAuth"];
    assert_eq!(filter["protocol"], "GRPC", "{route:?}");
    assert_eq!(
        filter["grpc"]["allowedHeaders"],
        json!(["authorization", "x-api-key"])
    );
    assert!(filter.get("http").is_none());

    let refused = complete(&base, None).await;
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_api_key"
    );
    let (key, key_id) = new_key(&h, "team-a", json!({"name": "app"})).await;
    wait_for("the key let through", Duration::from_secs(10), || async {
        complete(&base, Some(&key)).await.status() == StatusCode::OK
    })
    .await;
    theirs_refused_and_revoked_refused(&h, &base, &key, &key_id).await;
}

/// The worker asks the key check whether it answers: while it does not, a deployment with
/// keys says so (`KeysChecked=False`, Degraded: the Gateway refuses every request it cannot
/// have checked), and once it does, the condition turns True and the deployment Ready.
#[sqlx::test]
async fn the_status_says_when_the_key_check_does_not_answer(pool: PgPool) {
    // A port nothing listens on yet, where the worker is told the key check is.
    let port = std::net::TcpListener::bind("0.0.0.0:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = modelplane_testkit::server::host_address();
    let h = harness_with(
        pool,
        cluster(),
        |c| {
            c.build.key_check = Some(modelplane::reconciler::desired::ActivatorAddress {
                addresses: vec![address],
                port,
            });
        },
        |o| o.model_keys = true,
    )
    .await;
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    let condition = |d: &Value| {
        d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "KeysChecked")
            .cloned()
    };
    wait_for(
        "the unanswered check in the status",
        Duration::from_secs(60),
        || async {
            let d = h.deployment("qwen").await;
            d["status"]["phase"] == "Degraded"
                && condition(&d).is_some_and(|c| c["status"] == "False")
        },
    )
    .await;
    let d = h.deployment("qwen").await;
    let message = d["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{address}:{port} refuses connections")),
        "{message}"
    );
    assert!(message.contains("fail closed"), "{message}");
    assert_eq!(condition(&d).unwrap()["reason"], "KeyCheckUnreachable");

    // The key check comes up there (the app's own, reached through a forwarding port): the
    // condition turns True and the deployment Ready.
    let target = std::net::SocketAddr::new(address, h.app.authz_port.unwrap());
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    wait_for(
        "the check answering in the status",
        Duration::from_secs(30),
        || async {
            let d = h.deployment("qwen").await;
            d["status"]["phase"] == "Ready" && condition(&d).is_some_and(|c| c["status"] == "True")
        },
    )
    .await;
    let base = ready_base(&h, "qwen").await;
    let (key, _) = new_key(&h, "team-a", json!({"name": "app"})).await;
    wait_for("the key let through", Duration::from_secs(10), || async {
        complete(&base, Some(&key)).await.status() == StatusCode::OK
    })
    .await;
}
