//! The worker's ClusterRole in the Helm chart is proven, not guessed: a full reconcile
//! flow runs against the emulator, every request the worker made is turned into the
//! (group, resource, verb) the API server authorizes, and that set must equal the rules.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use reqwest::{Method, StatusCode};
use serde_json::json;
use sqlx::PgPool;

use super::{create_with, harness_on, resource_of, sim_spec, wait_for};

use modelplane_testkit::chart;

type Permission = (String, String, String);

/// What the API server authorizes a request as, the way k8s.io/apiserver's
/// `pkg/endpoints/request/requestinfo.go` (`NewRequestInfo`) reads it: `/api/{v}/…` is the
/// core group, `/apis/{group}/{v}/…` another; a `watch/` path prefix is the verb; in
/// `namespaces/{ns}/{resource}/…` the namespace is skipped unless what follows is a
/// namespace subresource (`status`, `finalize`); then `resource/name/subresource`, the
/// subresource written `resource/subresource`. POST is create, GET/HEAD get, PUT update,
/// PATCH patch, DELETE delete; a GET without a name is `watch` when `watch` is set (not
/// `false`/`0`), else `list`; a DELETE without a name is `deletecollection`. And, from
/// `pkg/endpoints/handlers/patch.go` (`createAuthorizerAttributes`): a PATCH that creates
/// the object (server-side apply of a new object, 201) is also authorized as `create`.
/// `None`: a non-resource request (`/version`, discovery).
fn permissions(method: &str, path: &str, query: &str, status: u16) -> Option<Vec<Permission>> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, mut rest) = match parts.as_slice() {
        ["api", _version, rest @ ..] if !rest.is_empty() => ("", rest),
        ["apis", group, _version, rest @ ..] if !rest.is_empty() => (*group, rest),
        _ => return None,
    };
    let mut verb = match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        other => panic!("method {other}"),
    };
    if rest[0] == "watch" {
        verb = "watch";
        rest = &rest[1..];
    }
    if rest[0] == "namespaces" && rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
        rest = &rest[2..];
    }
    let resource = match rest {
        [resource, _name, subresource, ..] => format!("{resource}/{subresource}"),
        [resource, ..] => (*resource).to_owned(),
        [] => unreachable!(),
    };
    let named = rest.len() >= 2;
    if !named && verb == "get" {
        let watch = form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == "watch")
            .is_some_and(|(_, v)| !matches!(v.to_ascii_lowercase().as_str(), "false" | "0"));
        verb = if watch { "watch" } else { "list" };
    }
    if !named && verb == "delete" {
        verb = "deletecollection";
    }
    let mut out = vec![(group.to_owned(), resource.clone(), verb.to_owned())];
    if method == "PATCH" && status == 201 {
        out.push((group.to_owned(), resource, "create".to_owned()));
    }
    Some(out)
}

#[test]
fn requests_map_to_the_verbs_the_api_server_authorizes() {
    let one = |g: &str, r: &str, v: &str| vec![(g.to_owned(), r.to_owned(), v.to_owned())];
    // (method, path, query, status) → the one (group, resource, verb) it is authorised as.
    #[rustfmt::skip]
    let cases = [
        ("GET", "/api/v1/namespaces/team-a", "", 200, ("", "namespaces", "get")),
        ("GET", "/api/v1/namespaces", "labelSelector=a", 200, ("", "namespaces", "list")),
        ("GET", "/api/v1/pods", "watch=true&resourceVersion=1", 200, ("", "pods", "watch")),
        ("GET", "/api/v1/pods", "watch=false", 200, ("", "pods", "list")),
        ("GET", "/api/v1/watch/namespaces/a/pods", "", 200, ("", "pods", "watch")),
        ("GET", "/apis/apps/v1/namespaces/a/deployments/q", "", 404, ("apps", "deployments", "get")),
        ("PUT", "/apis/apps/v1/namespaces/a/deployments/q/status", "", 200, ("apps", "deployments/status", "update")),
        ("PUT", "/api/v1/namespaces/a/finalize", "", 200, ("", "namespaces/finalize", "update")),
        ("DELETE", "/api/v1/namespaces/a/services", "", 200, ("", "services", "deletecollection")),
        ("DELETE", "/api/v1/namespaces/a/services/q", "", 200, ("", "services", "delete")),
        ("POST", "/api/v1/namespaces/a/services", "", 201, ("", "services", "create")),
        ("PATCH", "/api/v1/namespaces/a/services/q", "", 200, ("", "services", "patch")),
    ];
    for (method, path, query, status, (group, resource, verb)) in cases {
        assert_eq!(
            permissions(method, path, query, status),
            Some(one(group, resource, verb)),
            "{method} {path}?{query}"
        );
    }
    let mut created = one("", "services", "patch");
    created.extend(one("", "services", "create"));
    // An apply that creates the object is authorised as create too (handlers/patch.go).
    assert_eq!(
        permissions("PATCH", "/api/v1/namespaces/a/services/q", "", 201),
        Some(created)
    );
    assert_eq!(permissions("GET", "/version", "", 200), None);
    assert_eq!(permissions("GET", "/apis/apps/v1", "", 200), None);
}

/// The paths every authenticated user may read (the default ClusterRoles
/// `system:discovery` and `system:public-info-viewer`), so no rule of ours is needed.
fn allowed_to_everyone(path: &str) -> bool {
    matches!(
        path,
        "/api"
            | "/apis"
            | "/version"
            | "/version/"
            | "/healthz"
            | "/livez"
            | "/readyz"
            | "/openapi"
    ) || ["/api/", "/apis/", "/openapi/"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// The chart's worker ClusterRole, expanded into (group, resource, verb).
fn chart_worker_permissions() -> BTreeSet<Permission> {
    chart_role_permissions(&[])
}

/// The chart's worker ClusterRole rendered with `set`, expanded.
fn chart_role_permissions(set: &[&str]) -> BTreeSet<Permission> {
    let objects = chart::try_render(&[], set).unwrap();
    let role: ClusterRole =
        serde_json::from_value(chart::object(&objects, "ClusterRole", "modelplane-worker").clone())
            .unwrap();
    let mut out = BTreeSet::new();
    for rule in role.rules.unwrap() {
        assert!(
            rule.resource_names.is_none() && rule.non_resource_urls.is_none(),
            "{rule:?}"
        );
        for group in rule.api_groups.as_ref().unwrap() {
            for resource in rule.resources.as_ref().unwrap() {
                for verb in &rule.verbs {
                    assert!(
                        ![group, resource, verb].iter().any(|s| *s == "*"),
                        "no wildcards: {rule:?}"
                    );
                    out.insert((group.clone(), resource.clone(), verb.clone()));
                }
            }
        }
    }
    out
}

/// Create, update, scale up and down, drift of every kind repaired (one twice, so its
/// Kubernetes Event repeats), events about a pod that is not ours, delete, and the
/// project's namespace removed: with the simulated cluster and a Gateway, so every watch
/// and status read happens as in a real cluster.
#[sqlx::test]
async fn the_workers_cluster_role_is_exactly_what_a_full_reconcile_flow_uses(pool: PgPool) {
    let cluster = super::emulator()
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .gateway("gateway-system", "inference");
    let h = harness_on(pool, cluster, |_| {}).await;
    let emulator = h.emulator.as_ref().unwrap();
    // The test's own client: the harness's carries the worker's X-Client-Id.
    let client =
        kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let api = |api_version: &str, kind: &str| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), "team-a", &resource_of(api_version, kind))
    };
    let exists = |api_version: &'static str, kind: &'static str, name: &'static str| {
        let api = api(api_version, kind);
        async move { api.get_opt(name).await.unwrap().is_some() }
    };

    // The serving-metrics collector runs as the worker's (outside the cluster: through the
    // API server's pods/proxy).
    h.collect_load();
    // So does the LoRA adapter loader: the engines' adapter API through pods/proxy (POST:
    // create), its record on each pod (patch) and the pods' readiness gate (pods/status).
    h.load_adapters();
    h.app.create_project("team-a").await;
    let mut spec = sim_spec();
    spec["replicas"] = json!(2);
    spec["adapters"] = json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}]);
    create_with(&h, "qwen", spec).await;
    h.wait_applied("qwen", 1).await;
    // One that scales to zero: its activator Service and EndpointSlice (the slice created
    // and patched; removed with its Service by the garbage collector).
    let mut idle = sim_spec();
    idle["replicas"] = json!(0);
    idle["autoscaling"] = json!({"minReplicas": 0, "maxReplicas": 1,
                                 "target": {"metric": "waitingPerReplica", "value": 4}});
    create_with(&h, "idle", idle).await;
    h.wait_applied("idle", 1).await;
    wait_for(
        "the pods' metrics read",
        Duration::from_secs(30),
        || async { h.deployment("qwen").await["status"]["load"]["podsRead"] == json!(2) },
    )
    .await;
    wait_for("the adapter loaded", Duration::from_secs(30), || async {
        h.deployment("qwen").await["status"]["adapters"][0]["loaded"] == json!(2)
    })
    .await;

    // A pod that is not modelplane's, in a namespace of ours: its events reach the worker's
    // event watch, which reads the pod to find out whose it is (`get pods`). Pods elsewhere
    // are not read.
    let pods: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "team-a", &resource_of("v1", "Pod"));
    let foreign = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "someone-elses"},
                         "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(foreign).unwrap(),
    )
    .await
    .unwrap();
    let patched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/qwen",
            &json!({"spec": {"labels": {"tier": "gold"}}}),
            None,
        )
        .await;
    assert_eq!(patched.status(), StatusCode::OK);
    h.wait_applied("qwen", 2).await;
    let scale = |replicas: i64| {
        let app = &h.app;
        async move {
            let response = app
                .post_json(
                    "/api/v1/projects/team-a/deployments/qwen/scale",
                    &json!({"replicas": replicas}),
                )
                .await;
            assert_eq!(response.status(), StatusCode::OK);
        }
    };
    scale(3).await;
    h.wait_applied("qwen", 3).await;

    // Drift: each kind the worker owns, deleted or changed behind its back, comes back. The
    // Service twice: the second repair's Event is a repeat, counted into the first one's
    // series (a PATCH of the Event).
    for (api_version, kind) in [
        ("policy/v1", "PodDisruptionBudget"),
        ("v1", "Service"),
        ("v1", "Service"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
        ("apps/v1", "Deployment"),
    ] {
        api(api_version, kind)
            .delete("qwen", &DeleteParams::default())
            .await
            .unwrap();
        wait_for(
            &format!("the {kind} restored"),
            Duration::from_secs(15),
            || exists(api_version, kind, "qwen"),
        )
        .await;
    }
    let namespaces: Api<DynamicObject> =
        Api::all_with(client.clone(), &resource_of("v1", "Namespace"));
    let unlabel = json!({"metadata": {"labels": {"modelplane.io/project": null}}});
    namespaces
        .patch("team-a", &PatchParams::default(), &Patch::Merge(&unlabel))
        .await
        .unwrap();
    wait_for(
        "the namespace label restored",
        Duration::from_secs(15),
        || async {
            let ns = namespaces.get("team-a").await.unwrap();
            ns.metadata
                .labels
                .unwrap_or_default()
                .contains_key("modelplane.io/project")
        },
    )
    .await;

    // A model that spans nodes: its LeaderWorkerSet applied, read back (deleted behind the
    // worker's back, which the worker finds by reading it, then restores), and deleted with
    // the record.
    let mut big = sim_spec();
    big["nodesPerReplica"] = json!(2);
    big["engine"]["tensorParallelSize"] = json!(2);
    create_with(&h, "big", big).await;
    h.wait_applied("big", 1).await;
    let lws = ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet");
    assert!(exists(lws.0, lws.1, "big-group").await);
    api(lws.0, lws.1)
        .delete("big-group", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the LeaderWorkerSet restored",
        Duration::from_secs(15),
        || exists(lws.0, lws.1, "big-group"),
    )
    .await;
    h.delete_and_wait_gone("big").await;

    // InferencePool mode: the pool and its picker are made, then removed by a switch back.
    let mut pooled = sim_spec();
    pooled["routing"] = json!({"mode": "InferencePool"});
    create_with(&h, "pooled", pooled).await;
    wait_for(
        "the picker's objects made",
        Duration::from_secs(20),
        || async {
            exists("rbac.authorization.k8s.io/v1", "RoleBinding", "pooled-epp").await
                && exists("v1", "Service", "pooled-epp").await
        },
    )
    .await;
    // What the worker grants the picker, it must hold itself: Kubernetes refuses to create a
    // Role granting more than its creator has (RBAC privilege-escalation prevention,
    // https://kubernetes.io/docs/reference/access-authn-authz/rbac/#privilege-escalation-prevention-and-bootstrapping).
    let picker_role = api("rbac.authorization.k8s.io/v1", "Role")
        .get("pooled-epp")
        .await
        .unwrap();
    // And the ClusterRole its ServiceAccount is bound to, for its metrics endpoint.
    let cluster_roles: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource_of("rbac.authorization.k8s.io/v1", "ClusterRole"),
    );
    let metrics_auth = cluster_roles
        .get("modelplane:endpoint-picker-metrics-auth")
        .await
        .unwrap();
    let cluster_bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource_of("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    );
    let binding = cluster_bindings
        .get("modelplane:epp:team-a:pooled")
        .await
        .unwrap();
    assert_eq!(
        binding.data["subjects"],
        json!([{"kind": "ServiceAccount", "name": "pooled-epp", "namespace": "team-a"}])
    );
    let mut delegated = BTreeSet::new();
    let rules = picker_role.data["rules"].as_array().unwrap().iter();
    for rule in rules.chain(metrics_auth.data["rules"].as_array().unwrap()) {
        for group in rule["apiGroups"].as_array().unwrap() {
            for resource in rule["resources"].as_array().unwrap() {
                for verb in rule["verbs"].as_array().unwrap() {
                    delegated.insert((
                        group.as_str().unwrap().to_owned(),
                        resource.as_str().unwrap().to_owned(),
                        verb.as_str().unwrap().to_owned(),
                    ));
                }
            }
        }
    }
    let switched = h
        .app
        .patch(
            "/api/v1/projects/team-a/deployments/pooled",
            &json!({"spec": {"routing": {"mode": "Service"}}}),
            None,
        )
        .await;
    assert_eq!(switched.status(), StatusCode::OK);
    wait_for(
        "the pool's objects removed",
        Duration::from_secs(20),
        || async {
            !exists("inference.networking.k8s.io/v1", "InferencePool", "pooled").await
                && !exists("rbac.authorization.k8s.io/v1", "Role", "pooled-epp").await
                && cluster_bindings
                    .get_opt("modelplane:epp:team-a:pooled")
                    .await
                    .unwrap()
                    .is_none()
        },
    )
    .await;
    h.delete_and_wait_gone("pooled").await;

    scale(1).await;
    h.wait_applied("qwen", 4).await;
    wait_for("the budget removed", Duration::from_secs(15), || async {
        !exists("policy/v1", "PodDisruptionBudget", "qwen").await
    })
    .await;

    h.delete_and_wait_gone("qwen").await;
    h.delete_and_wait_gone("idle").await;
    wait_for(
        "the activator's EndpointSlice collected with its Service",
        Duration::from_secs(15),
        || async { !exists("discovery.k8s.io/v1", "EndpointSlice", "idle-activator").await },
    )
    .await;
    wait_for(
        "the PodMonitor collected with its owner",
        Duration::from_secs(15),
        || async { !exists("monitoring.coreos.com/v1", "PodMonitor", "qwen").await },
    )
    .await;
    let deleted = h
        .app
        .request(Method::DELETE, "/api/v1/projects/team-a")
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    wait_for("the namespace deleted", Duration::from_secs(20), || async {
        namespaces
            .get_opt("team-a")
            .await
            .unwrap()
            .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
    })
    .await;

    let log = emulator.requests().snapshot();
    let worker: Vec<_> = log
        .iter()
        .filter(|r| r.client_id.as_deref() == Some("worker-a"))
        .collect();
    let mut used = BTreeSet::new();
    for request in worker {
        match permissions(
            &request.method,
            &request.path,
            &request.query,
            request.status,
        ) {
            Some(permissions) => used.extend(permissions),
            None => assert!(
                allowed_to_everyone(&request.path),
                "non-resource request {}",
                request.path
            ),
        }
    }
    used.extend(delegated);
    let granted = chart_worker_permissions();
    let missing: Vec<_> = used.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&used).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the chart's worker ClusterRole differs from what the worker does:\n\
         missing (the worker would get 403): {missing:?}\n\
         extra (never used): {extra:?}"
    );
}

/// With `config.prometheusUrl` the chart grants exactly create and patch on PodMonitors more,
/// and a worker configured with a Prometheus uses exactly those: it applies one PodMonitor
/// per deployment (server-side apply of a new object is a create, then patches), accepted
/// by the published CRD, owned by the Deployment, and collected with it.
#[sqlx::test]
async fn with_prometheus_the_chart_adds_exactly_the_pod_monitor_rules_the_worker_uses(
    pool: PgPool,
) {
    let extra: BTreeSet<Permission> =
        chart_role_permissions(&["config.prometheusUrl=http://prometheus:9090"])
            .difference(&chart_role_permissions(&[]))
            .cloned()
            .collect();
    let pod_monitors = |verbs: &[&str]| -> BTreeSet<Permission> {
        verbs
            .iter()
            .map(|v| {
                (
                    "monitoring.coreos.com".to_owned(),
                    "podmonitors".to_owned(),
                    (*v).to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(extra, pod_monitors(&["create", "patch"]));

    let cluster = super::emulator()
        .nodes(1)
        .start_delay(Duration::from_millis(100));
    let h = harness_on(pool, cluster, |c| {
        c.build.pod_monitor_interval_secs = Some(15)
    })
    .await;
    let emulator = h.emulator.as_ref().unwrap();
    let client =
        kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let monitors: Api<DynamicObject> = Api::namespaced_with(
        client,
        "team-a",
        &resource_of("monitoring.coreos.com/v1", "PodMonitor"),
    );
    h.app.create_project("team-a").await;
    create_with(&h, "qwen", sim_spec()).await;
    h.wait_applied("qwen", 1).await;
    let monitor = monitors.get("qwen").await.unwrap();
    assert_eq!(
        monitor.metadata.owner_references.as_ref().unwrap()[0].kind,
        "Deployment"
    );
    assert_eq!(
        monitor.data["spec"]["podTargetLabels"],
        json!(["modelplane.io/deployment-id", "modelplane.io/track"])
    );
    // A second apply of the same spec is a patch of the existing object.
    let scaled = h
        .app
        .post_json(
            "/api/v1/projects/team-a/deployments/qwen/scale",
            &json!({"replicas": 2}),
        )
        .await;
    assert_eq!(scaled.status(), StatusCode::OK);
    h.wait_applied("qwen", 2).await;
    h.delete_and_wait_gone("qwen").await;
    wait_for(
        "the PodMonitor collected with its owner",
        Duration::from_secs(15),
        || async { monitors.get_opt("qwen").await.unwrap().is_none() },
    )
    .await;
    let used: BTreeSet<Permission> = emulator
        .requests()
        .snapshot()
        .iter()
        .filter(|r| r.client_id.as_deref() == Some("worker-a") && r.path.contains("/podmonitors"))
        .flat_map(|r| permissions(&r.method, &r.path, &r.query, r.status).unwrap())
        .collect();
    assert_eq!(used, pod_monitors(&["create", "patch"]));
}
