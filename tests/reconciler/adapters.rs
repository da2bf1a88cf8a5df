//! LoRA adapters on `sim` pods: loaded through the engine's runtime adapter API by the
//! worker's loader, never by rolling the pods.
//!
//! The emulator's sim engine serves llm-d-inference-sim's adapter API
//! (pkg/llm-d-inference-sim/lora.go: `POST /v1/load_lora_adapter` and
//! `/v1/unload_lora_adapter`, 200 with an empty body; `GET /v1/models` lists each adapter
//! with the base model as its parent) and answers a request naming an unknown model 404
//! `NotFoundError`, as vLLM's OpenAI server does. The kubelet holds a pod with a readiness
//! gate out of Ready until the gate's condition is True (`generatePodReadyCondition`,
//! kubernetes pkg/kubelet/status/generate.go).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sqlx::PgPool;

use super::load::{cluster, openai, ready};
use super::{Harness, create_with, harness_on, sim_spec, wait_for};

const PATH: &str = "/api/v1/projects/team-a/deployments/tuned";

fn spec() -> Value {
    let mut spec = sim_spec();
    spec["replicas"] = json!(2);
    spec["adapters"] = json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}]);
    spec
}

/// The live model server pods of `tuned`, by name.
async fn live_tuned(h: &Harness) -> Vec<kube::api::DynamicObject> {
    let list = h.api("v1", "Pod").list(&Default::default()).await.unwrap();
    let mut pods: Vec<kube::api::DynamicObject> = list
        .items
        .into_iter()
        .filter(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("tuned-"))
                && p.metadata.deletion_timestamp.is_none()
        })
        .collect();
    pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    pods
}

/// The model server pods of `tuned`: name → (uid, restart count).
async fn pods(h: &Harness) -> Vec<(String, String, i64)> {
    live_tuned(h)
        .await
        .into_iter()
        .map(|p| {
            let restarts = p.data["status"]["containerStatuses"][0]["restartCount"]
                .as_i64()
                .unwrap_or(0);
            (
                p.metadata.name.clone().unwrap(),
                p.metadata.uid.clone().unwrap(),
                restarts,
            )
        })
        .collect()
}

fn adapter<'a>(record: &'a Value, name: &str) -> Option<&'a Value> {
    record["status"]["adapters"]
        .as_array()?
        .iter()
        .find(|a| a["name"] == name)
}

/// Waits until `name` is loaded on `n` of `n` serving pods.
async fn loaded_on(h: &Harness, name: &str, n: i64) {
    wait_for(
        &format!("adapter {name} on {n} pods"),
        Duration::from_secs(30),
        || async {
            let record = h.deployment("tuned").await;
            adapter(&record, name).is_some_and(|a| a["loaded"] == n && a["pods"] == n)
        },
    )
    .await;
}

async fn complete(base: &str, model: &str) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}/completions"))
        .json(&json!({"model": model, "prompt": "one two three", "max_tokens": 2}))
        .send()
        .await
        .unwrap()
}

#[sqlx::test(migrations = "./migrations")]
async fn adapters_load_and_unload_on_running_pods_without_a_restart(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.load_adapters();
    h.app.create_project("team-a").await;
    create_with(&h, "tuned", spec()).await;
    let record = ready(&h, "tuned").await;
    loaded_on(&h, "sql-lora", 2).await;
    let record_after = h.deployment("tuned").await;
    let condition = record_after["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "AdaptersLoaded")
        .cloned()
        .unwrap();
    assert_eq!(condition["status"], "True", "{condition}");

    // The pods were held out of Ready by the gate until the loader opened it.
    let live = h.api("v1", "Pod").list(&Default::default()).await.unwrap();
    for pod in live.items.iter().filter(|p| {
        p.metadata
            .name
            .as_deref()
            .unwrap_or("")
            .starts_with("tuned-")
    }) {
        let gates = &pod.data["spec"]["readinessGates"];
        assert_eq!(
            gates,
            &json!([{"conditionType": "modelplane.io/adapters-loaded"}])
        );
        let gate = pod.data["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "modelplane.io/adapters-loaded")
            .cloned()
            .unwrap();
        assert_eq!(gate["status"], "True", "{gate}");
    }

    // Served under its own name, by the model server, through the Gateway.
    let (base, base_model) = openai(&record).await;
    assert_eq!(base_model, "tuned");
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let lora = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "sql-lora")
        .cloned();
    assert_eq!(lora.unwrap()["parent"], "tuned", "{models}");
    let answer = complete(&base, "sql-lora").await;
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.headers().contains_key("x-emulator-pod"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["model"], "sql-lora");
    // An adapter nobody loaded is the model server's 404, not the Gateway's.
    let unknown = complete(&base, "chat-lora").await;
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert!(unknown.headers().contains_key("x-emulator-pod"));
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["type"], "NotFoundError", "{body}");

    // The engine's adapter API is the loader's, never a caller's: through the Gateway the
    // route's rule with no backendRefs answers 500 (the Gateway API's HTTPRouteNoBackendRefs
    // conformance case) without reaching a pod, trailing slash or not.
    for path in [
        "load_lora_adapter",
        "unload_lora_adapter",
        "load_lora_adapter/",
    ] {
        let refused = reqwest::Client::new()
            .post(format!("{base}/{path}"))
            .json(&json!({"lora_name": "evil", "lora_path": "hf://evil/evil"}))
            .send()
            .await
            .unwrap();
        assert_eq!(
            refused.status(),
            StatusCode::INTERNAL_SERVER_ERROR,
            "{path}"
        );
        assert!(!refused.headers().contains_key("x-emulator-pod"), "{path}");
    }
    let models: Value = reqwest::get(format!("{base}/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 2, "{models}");

    // Adding one loads it on the running pods: same pods, no restart.
    let before = pods(&h).await;
    assert_eq!(before.len(), 2);
    let added = h
        .app
        .post_json(
            &format!("{PATH}/adapters"),
            &json!({"name": "chat-lora", "source": "hf://acme/chat-lora"}),
        )
        .await;
    assert_eq!(added.status(), StatusCode::OK);
    loaded_on(&h, "chat-lora", 2).await;
    assert_eq!(complete(&base, "chat-lora").await.status(), StatusCode::OK);
    assert_eq!(
        pods(&h).await,
        before,
        "adding an adapter replaced or restarted a pod"
    );

    // Removing one unloads it, again without a restart.
    let removed = h
        .app
        .request(Method::DELETE, &format!("{PATH}/adapters/sql-lora"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    wait_for(
        "sql-lora to be unloaded",
        Duration::from_secs(30),
        || async { complete(&base, "sql-lora").await.status() == StatusCode::NOT_FOUND },
    )
    .await;
    let record = h.deployment("tuned").await;
    assert!(
        adapter(&record, "sql-lora").is_none(),
        "{}",
        record["status"]
    );
    assert_eq!(
        pods(&h).await,
        before,
        "removing an adapter replaced or restarted a pod"
    );

    // A replacement pod gets the whole list before it takes traffic.
    let (victim, _, _) = before[0].clone();
    h.api("v1", "Pod")
        .delete(&victim, &Default::default())
        .await
        .unwrap();
    wait_for("a replacement pod", Duration::from_secs(30), || async {
        let now = pods(&h).await;
        now.len() == 2 && !now.iter().any(|(n, _, _)| *n == victim)
    })
    .await;
    loaded_on(&h, "chat-lora", 2).await;
    for _ in 0..10 {
        assert_eq!(complete(&base, "chat-lora").await.status(), StatusCode::OK);
    }
}

/// Creates `name` with `spec`, which must be refused with a 422; the problem document.
async fn refused_create(h: &Harness, name: &str, spec: Value) -> Value {
    let refused = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments",
            &json!({"name": name, "spec": spec}),
        )
        .await;
    assert_eq!(refused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    refused.json().await.unwrap()
}

#[sqlx::test(migrations = "./migrations")]
async fn adapter_requests_name_the_field_they_get_wrong(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.app.create_project("team-a").await;
    create_with(&h, "tuned", spec()).await;
    let cases = [
        (
            json!({"name": "sql-lora", "source": "hf://acme/other"}),
            409,
            "name",
        ),
        (
            json!({"name": "has space", "source": "hf://acme/x"}),
            422,
            "name",
        ),
        (
            json!({"name": "tuned", "source": "hf://acme/x"}),
            422,
            "name",
        ),
        (
            json!({"name": "oci-lora", "source": "oci://registry.example/lora:1"}),
            422,
            "source",
        ),
        // The fetcher reads its list a line at a time.
        (
            json!({"name": "s3-lora", "source": "s3://bucket/lo\nra"}),
            422,
            "source",
        ),
        // Only the fetcher of s3:// adapters uses a Secret.
        (
            json!({"name": "hf-lora", "source": "hf://acme/x", "secretRef": {"name": "aws"}}),
            422,
            "secretRef",
        ),
        (
            json!({"name": "s3-lora", "source": "s3://bucket/lora", "secretRef": {"name": "Not_A_Name"}}),
            422,
            "secretRef.name",
        ),
        (json!({"name": "bad", "source": "ftp://x"}), 422, "source"),
    ];
    for (body, status, field) in cases {
        let response = h.app.post_json(&format!("{PATH}/adapters"), &body).await;
        assert_eq!(response.status().as_u16(), status, "{body}");
        let problem: Value = response.json().await.unwrap();
        let named = problem["errors"]
            .as_array()
            .map(|e| e.iter().any(|e| e["field"] == field))
            .unwrap_or(false)
            || problem["field"] == field;
        assert!(named, "{body}: {problem}");
    }
    let missing = h
        .app
        .request(Method::DELETE, &format!("{PATH}/adapters/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    // A tgi deployment cannot have adapters: the spec field is named.
    let mut tgi = spec();
    tgi["engine"] = json!({"kind": "tgi"});
    tgi["resources"]["gpu"] = json!({"count": 1});
    let problem = refused_create(&h, "tgi", tgi).await;
    assert!(problem.to_string().contains("spec.adapters"), "{problem}");
    // The variable that opens the engine's adapter API is modelplane's to set: by hand it
    // would open the API on a route that does not refuse it.
    let mut opened = sim_spec();
    opened["engine"]["env"] =
        json!([{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"}]);
    let problem = refused_create(&h, "opened", opened).await;
    assert_eq!(
        problem["errors"][0]["field"], "spec.engine.env[0].name",
        "{problem}"
    );
    // Adapters the engine starts with would be unloaded as not on the list.
    let mut clash = spec();
    clash["engine"]["args"] = json!(["--lora-modules", r#"{"name":"x","path":"/x"}"#]);
    let problem = refused_create(&h, "clash", clash).await;
    assert_eq!(
        problem["errors"][0]["field"], "spec.engine.args[0]",
        "{problem}"
    );
    // Nothing was half-written: the spec still lists exactly the one adapter.
    let record = h.deployment("tuned").await;
    assert_eq!(
        record["spec"]["adapters"],
        json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}])
    );
}

/// Four adapters' worth of S3 fetching, run for real: the fetcher's own script under
/// `/bin/sh`, with an `aws` on its PATH that does what `aws s3 sync SOURCE DIR` does for a
/// prefix (AWS CLI reference, `s3 sync`: copies every object under the prefix into the
/// directory, creating it; exit status non-zero when an object cannot be read) from a local
/// directory standing in for the bucket.
#[tokio::test]
async fn the_fetcher_copies_listed_adapters_whole_and_removes_unlisted_ones() {
    let root = tempfile::tempdir().unwrap();
    let path = |p: &str| root.path().join(p);
    for dir in [
        "bin",
        "bucket/loras/fin/v1",
        "bucket/loras/sql",
        "list",
        "adapters",
    ] {
        std::fs::create_dir_all(path(dir)).unwrap();
    }
    std::fs::write(
        path("bucket/loras/fin/v1/adapter_config.json"),
        "{\"r\": 8}",
    )
    .unwrap();
    std::fs::write(path("bucket/loras/sql/adapter_config.json"), "{\"r\": 16}").unwrap();
    let aws = path("bin/aws");
    std::fs::write(
        &aws,
        format!(
            "#!/bin/sh\n# aws s3 sync --only-show-errors s3://BUCKET/PREFIX DIR\nsrc=\"{}/${{4#s3://}}\"\n[ -d \"$src\" ] || {{ echo \"fatal error: no such prefix $4\" >&2; exit 1; }}\nmkdir -p \"$5\" && cp -R \"$src/.\" \"$5\"\n",
            path("bucket").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&aws, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let list = path("list/s3");
    let adapters = path("adapters");
    let write_list = |text: &str| std::fs::write(&list, text).unwrap();
    write_list("fin s3://loras/fin/v1\nmissing s3://loras/nowhere\n");
    let mut fetcher = tokio::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(modelplane::reconciler::desired::FETCH_SCRIPT)
        .arg("fetch-adapters")
        .arg(&list)
        .arg(&adapters)
        .env("PATH", format!("{}:/usr/bin:/bin", path("bin").display()))
        .env("FETCH_INTERVAL_SECONDS", "0.1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let read = |p: &str| std::fs::read_to_string(adapters.join(p)).ok();
    wait_for("fin fetched", Duration::from_secs(10), || async {
        read("fin/adapter_config.json").is_some()
    })
    .await;
    assert_eq!(
        read("fin/adapter_config.json").as_deref(),
        Some("{\"r\": 8}")
    );
    // A prefix that cannot be read leaves nothing behind, not half a directory.
    assert!(!adapters.join("missing").exists());

    // A new line is a new adapter; a changed source is fetched again; an unlisted one goes.
    std::fs::create_dir_all(path("bucket/loras/fin/v2")).unwrap();
    std::fs::write(
        path("bucket/loras/fin/v2/adapter_config.json"),
        "{\"r\": 4}",
    )
    .unwrap();
    write_list("fin s3://loras/fin/v2\nsql s3://loras/sql\n");
    wait_for(
        "sql fetched, fin replaced",
        Duration::from_secs(10),
        || async {
            read("sql/adapter_config.json").is_some()
                && read("fin/adapter_config.json").as_deref() == Some("{\"r\": 4}")
        },
    )
    .await;
    write_list("sql s3://loras/sql\n");
    wait_for("fin removed", Duration::from_secs(10), || async {
        !adapters.join("fin").exists()
    })
    .await;
    assert!(adapters.join("sql/adapter_config.json").exists());
    assert!(
        fetcher.try_wait().unwrap().is_none(),
        "the fetcher keeps running"
    );
    fetcher.kill().await.unwrap();
}

/// The pods' annotation the loader gives the fetcher (`modelplane.io/s3-adapters`).
async fn fetch_lists(h: &Harness) -> Vec<String> {
    live_tuned(h)
        .await
        .into_iter()
        .map(|p| {
            p.metadata
                .annotations
                .and_then(|mut a| a.remove("modelplane.io/s3-adapters"))
                .unwrap_or_default()
        })
        .collect()
}

/// s3:// adapters: a fetcher beside each engine (a native sidecar with the Secret's keys)
/// copies what its pod's annotation lists, read through a downward API volume the kubelet
/// refreshes in place; the engine loads each from the fetcher's directory. The emulator's
/// sim, like llm-d-inference-sim, does not read the path it is given, so what this shows
/// is the pods, the lists and the loading; the fetcher's copying is the test above.
#[sqlx::test(migrations = "./migrations")]
async fn s3_adapters_are_fetched_beside_the_engine_and_added_without_a_restart(pool: PgPool) {
    let h = harness_on(pool, cluster(), |_| {}).await;
    h.load_adapters();
    h.app.create_project("team-a").await;
    // The Secret is the team's, in its namespace, before the pods need it.
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(h.kube.clone());
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap(),
        )
        .await
        .unwrap();
    h.api("v1", "Secret")
        .create(
            &Default::default(),
            &serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "loras-s3"},
                "stringData": {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "example"}
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let mut spec = spec();
    spec["adapters"] = json!([
        {"name": "fin-lora", "source": "s3://loras/fin/v1", "secretRef": {"name": "loras-s3"}}
    ]);
    create_with(&h, "tuned", spec).await;
    let record = ready(&h, "tuned").await;
    loaded_on(&h, "fin-lora", 2).await;

    let live = h
        .live("apps/v1", "Deployment", "tuned")
        .await
        .expect("the Deployment");
    let template = &live["spec"]["template"]["spec"];
    let fetcher = &template["initContainers"][0];
    assert_eq!(fetcher["name"], "fetch-adapters");
    assert_eq!(fetcher["restartPolicy"], "Always", "a native sidecar");
    assert_eq!(
        fetcher["envFrom"],
        json!([{"secretRef": {"name": "loras-s3"}}])
    );
    // PodSecurity `restricted`, like every container of the pod.
    assert_eq!(
        fetcher["securityContext"],
        json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}})
    );
    assert!(
        template["volumes"].as_array().unwrap().contains(&json!({
            "name": "adapters-s3-list",
            "downwardAPI": {"defaultMode": 420, "items": [{"path": "s3", "fieldRef": {
                "apiVersion": "v1",
                "fieldPath": "metadata.annotations['modelplane.io/s3-adapters']"
            }}]}
        })),
        "{template}"
    );
    assert!(
        template["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(
                &json!({"name": "adapters-s3", "mountPath": "/adapters-s3", "readOnly": true})
            ),
        "{template}"
    );
    assert_eq!(
        live["metadata"]["annotations"]["modelplane.io/adapters"],
        json!(
            r#"[{"name":"fin-lora","path":"/adapters-s3/fin-lora","fetch":"s3://loras/fin/v1"}]"#
        )
    );
    assert_eq!(fetch_lists(&h).await, ["fin-lora s3://loras/fin/v1\n"; 2]);
    let (base, _) = openai(&record).await;
    assert_eq!(complete(&base, "fin-lora").await.status(), StatusCode::OK);

    // Another s3:// adapter: the fetch lists grow and it loads, on the same pods.
    let before = pods(&h).await;
    let added = h
        .app
        .post_json(
            &format!("{PATH}/adapters"),
            &json!({"name": "sql-s3", "source": "s3://loras/sql", "secretRef": {"name": "loras-s3"}}),
        )
        .await;
    assert_eq!(added.status(), StatusCode::OK);
    loaded_on(&h, "sql-s3", 2).await;
    assert_eq!(
        fetch_lists(&h).await,
        ["fin-lora s3://loras/fin/v1\nsql-s3 s3://loras/sql\n"; 2]
    );
    assert_eq!(complete(&base, "sql-s3").await.status(), StatusCode::OK);
    assert_eq!(
        pods(&h).await,
        before,
        "adding an s3:// adapter rolled the pods"
    );

    // One fetcher, one environment: another Secret is refused, naming the field.
    let other = h
        .app
        .post_json(
            &format!("{PATH}/adapters"),
            &json!({"name": "x", "source": "s3://other/x", "secretRef": {"name": "other-s3"}}),
        )
        .await;
    assert_eq!(other.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: Value = other.json().await.unwrap();
    assert_eq!(problem["errors"][0]["field"], "secretRef.name", "{problem}");

    // Removing one takes it off the lists (the fetcher deletes its copy) and unloads it.
    let removed = h
        .app
        .request(Method::DELETE, &format!("{PATH}/adapters/fin-lora"))
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), StatusCode::OK);
    wait_for(
        "fin-lora off the fetch lists",
        Duration::from_secs(30),
        || async { fetch_lists(&h).await == ["sql-s3 s3://loras/sql\n"; 2] },
    )
    .await;
    wait_for("fin-lora unloaded", Duration::from_secs(30), || async {
        complete(&base, "fin-lora").await.status() == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(
        pods(&h).await,
        before,
        "removing an s3:// adapter rolled the pods"
    );
}
