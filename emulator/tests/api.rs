//! The emulator driven by the real `kube` client over HTTP.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Pod, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Config};
use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};

async fn start() -> (RunningEmulator, Client) {
    start_with(Emulator::builder()).await
}

/// An emulator with the published CRD manifests installed (`scripts/crds.sh`); their
/// absence fails the test, naming the script.
async fn start_with_published_crds() -> (RunningEmulator, Client) {
    let crds = modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    start_with(Emulator::builder().crds(modelplane_emulator::Crds::Manifests(crds))).await
}

async fn start_with(b: modelplane_emulator::EmulatorBuilder) -> (RunningEmulator, Client) {
    let emu = b
        .bookmark_interval(Duration::from_millis(200))
        .start()
        .await
        .expect("emulator starts");
    let config = Config::new(emu.url().parse().expect("url"));
    let client = Client::try_from(config).expect("client");
    (emu, client)
}

/// Waits (bounded) until `cond` holds, polling the API.
async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn api_err(e: kube::Error) -> Box<kube::core::Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn cm(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn deployment(name: &str, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "server", "image": image,
                    "ports": [{"name": "http", "containerPort": 8000}],
                    "env": [{"name": "MODEL", "value": "m"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},
                }]},
            },
        },
    }))
    .unwrap()
}

fn service(name: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))
    .unwrap()
}

fn httproute_api(client: &Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "httproutes"),
    )
}

fn httproute(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {
            "parentRefs": [{"name": "gw"}],
            "rules": [{"matches": [{"path": {"value": "/v1"}}], "backendRefs": [{"name": "svc", "port": 80}]}],
        },
    }))
    .unwrap()
}

#[tokio::test]
async fn crud_conflicts_and_not_found() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({"x": "1"})))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    let rv: u64 = meta.resource_version.as_deref().unwrap().parse().unwrap();

    let err = api_err(
        cms.create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(err.message, "configmaps \"a\" already exists");

    let mut stale = created.clone();
    stale.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = cms
        .replace("a", &PostParams::default(), &stale)
        .await
        .unwrap();
    let rv2: u64 = updated
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv);
    let err = api_err(
        cms.replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    let err = api_err(cms.get("missing").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.details.as_ref().unwrap().kind, "configmaps");

    // generateName
    let gen_cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let g = cms.create(&PostParams::default(), &gen_cm).await.unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    // Namespaced object in a namespace that does not exist.
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    let err = api_err(
        other
            .create(&PostParams::default(), &cm("a", json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
    assert_eq!(err.message, "namespaces \"nope\" not found");

    // dryRun=All does not persist.
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("dry", json!({}))).await.unwrap();
    assert!(cms.get_opt("dry").await.unwrap().is_none());

    // Delete with a stale precondition, then for real.
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("wrong".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let err = api_err(cms.delete("a", &dp).await.unwrap_err());
    assert_eq!(err.code, 409);
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(cms.get_opt("a").await.unwrap().is_none());
}

#[tokio::test]
async fn list_label_selectors_and_paging() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for (i, tier) in ["web", "web", "db", "cache", "web"].iter().enumerate() {
        let labels = if i == 3 {
            json!({"tier": tier})
        } else {
            json!({"tier": tier, "team": "a"})
        };
        cms.create(&PostParams::default(), &cm(&format!("cm{i}"), labels))
            .await
            .unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(
        names(cms.list(&q("tier=web")).await.unwrap()),
        ["cm0", "cm1", "cm4"]
    );
    assert_eq!(names(cms.list(&q("tier==db")).await.unwrap()), ["cm2"]);
    // Every namespace also holds the root CA publisher's kube-root-ca.crt (no labels).
    const ROOT_CA: &str = "kube-root-ca.crt";
    assert_eq!(
        names(cms.list(&q("tier!=web")).await.unwrap()),
        ["cm2", "cm3", ROOT_CA]
    );
    assert_eq!(
        names(cms.list(&q("tier in (db,cache)")).await.unwrap()),
        ["cm2", "cm3"]
    );
    assert_eq!(
        names(cms.list(&q("tier notin (web)")).await.unwrap()),
        ["cm2", "cm3", ROOT_CA]
    );
    assert_eq!(
        names(cms.list(&q("!team")).await.unwrap()),
        ["cm3", ROOT_CA]
    );
    assert_eq!(
        names(cms.list(&q("team,tier=web")).await.unwrap()),
        ["cm0", "cm1", "cm4"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=cm2"))
                .await
                .unwrap()
        ),
        ["cm2"]
    );

    // Paging with limit/continue.
    let first = cms.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let token = first.metadata.continue_.clone().unwrap();
    let second = cms
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    let third = cms
        .list(
            &ListParams::default()
                .limit(2)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(names(second), ["cm2", "cm3"]);
    assert_eq!(names(third.clone()), ["cm4", ROOT_CA]);
    assert!(third.metadata.continue_.is_none());

    // All namespaces: ours and the kube-root-ca.crt of default, kube-system, kube-public
    // and kube-node-lease.
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        5 + 4
    );
}

#[tokio::test]
async fn field_selectors_on_events() {
    let (_emu, client) = start().await;
    let events: Api<Event> = Api::default_namespaced(client.clone());
    for (i, (kind, name)) in [("Pod", "p1"), ("Pod", "p2"), ("Deployment", "p1")]
        .iter()
        .enumerate()
    {
        let ev: Event = serde_json::from_value(json!({
            "metadata": {"name": format!("ev{i}")},
            "involvedObject": {"kind": kind, "name": name, "namespace": "default", "uid": format!("uid-{i}")},
            "reason": "Test", "message": "m", "type": "Normal",
        }))
        .unwrap();
        events.create(&PostParams::default(), &ev).await.unwrap();
    }
    let count = |s: &'static str| {
        let events = events.clone();
        async move {
            events
                .list(&ListParams::default().fields(s))
                .await
                .unwrap()
                .items
                .len()
        }
    };
    assert_eq!(count("involvedObject.name=p1").await, 2);
    assert_eq!(
        count("involvedObject.name=p1,involvedObject.kind=Pod").await,
        1
    );
    assert_eq!(count("involvedObject.uid=uid-1").await, 1);
    assert_eq!(
        count("involvedObject.namespace=default,involvedObject.kind!=Pod").await,
        1
    );
    let err = api_err(
        events
            .list(&ListParams::default().fields("spec.foo=bar"))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 400);
}

#[tokio::test]
async fn watch_resume_selectors_bookmarks_and_expiry() {
    let (_emu, client) = start_with(Emulator::builder().watch_history(50)).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms
        .create(&PostParams::default(), &cm("w", json!({"app": "x"})))
        .await
        .unwrap();
    let rv0 = c.metadata.resource_version.clone().unwrap();

    // Changes after rv0, watched from rv0 (resume), with a label selector.
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    cms.create(&PostParams::default(), &cm("other", json!({"app": "x"})))
        .await
        .unwrap();
    cms.delete("other", &DeleteParams::default()).await.unwrap();

    let wp = WatchParams::default().labels("app=x").timeout(5);
    let mut stream = cms.watch(&wp, &rv0).await.unwrap().boxed();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        match stream.try_next().await.unwrap().expect("event") {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.metadata.name.unwrap())),
            WatchEvent::Modified(o) => seen.push(format!("MODIFIED {}", o.metadata.name.unwrap())),
            WatchEvent::Deleted(o) => seen.push(format!("DELETED {}", o.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("unexpected error {e:?}"),
        }
    }
    // The relabel makes "w" stop matching: it arrives as DELETED.
    assert_eq!(
        seen,
        ["MODIFIED w", "DELETED w", "ADDED other", "DELETED other"]
    );
    // Then a bookmark (allowWatchBookmarks is on by default in kube).
    loop {
        if let WatchEvent::Bookmark(b) = stream.try_next().await.unwrap().expect("event") {
            assert!(!b.metadata.resource_version.is_empty());
            break;
        }
    }

    // Fill the history window, then a too-old resourceVersion is Expired (HTTP 200 + ERROR event).
    for i in 0..60 {
        cms.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"i": i.to_string()}})),
        )
        .await
        .unwrap();
    }
    let mut stream = cms
        .watch(&WatchParams::default(), &rv0)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().expect("event") {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected Expired, got {other:?}"),
    }

    // timeoutSeconds ends the stream.
    let cur = cms
        .get("w")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = cms
        .watch(&WatchParams::default().timeout(1).disable_bookmarks(), &cur)
        .await
        .unwrap();
    let events: Vec<_> = tokio::time::timeout(Duration::from_secs(5), stream.collect::<Vec<_>>())
        .await
        .expect("watch ends");
    assert!(events.is_empty());
}

#[tokio::test]
async fn runtime_watcher_list_watch_and_streaming_lists() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("pre", json!({})))
        .await
        .unwrap();
    for config in [
        watcher::Config::default(),
        watcher::Config::default().streaming_lists(),
    ] {
        let mut stream = watcher(cms.clone(), config).boxed();
        let mut initial = Vec::new();
        loop {
            match stream.try_next().await.unwrap().unwrap() {
                watcher::Event::Init => {}
                watcher::Event::InitApply(o) => initial.push(o.metadata.name.unwrap()),
                watcher::Event::InitDone => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(initial.contains(&"pre".to_string()));
        let name = format!("live-{}", initial.len());
        cms.create(&PostParams::default(), &cm(&name, json!({})))
            .await
            .unwrap();
        loop {
            if let watcher::Event::Apply(o) = stream.try_next().await.unwrap().unwrap() {
                assert_eq!(o.metadata.name.as_deref(), Some(name.as_str()));
                break;
            }
        }
    }
}

#[tokio::test]
async fn defaulting_like_the_real_server() {
    let (_emu, client) = start_with_published_crds().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let d = deps
        .create(
            &PostParams::default(),
            &deployment("web", "vllm/vllm-openai:v0.9"),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&d).unwrap();
    assert_eq!(v["metadata"]["generation"], 1);
    assert_eq!(
        v["spec"]["strategy"],
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
    );
    assert_eq!(v["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(v["spec"]["progressDeadlineSeconds"], 600);
    let ps = &v["spec"]["template"]["spec"];
    assert_eq!(ps["restartPolicy"], "Always");
    assert_eq!(ps["dnsPolicy"], "ClusterFirst");
    assert_eq!(ps["schedulerName"], "default-scheduler");
    assert_eq!(ps["terminationGracePeriodSeconds"], 30);
    let c = &ps["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(c["terminationMessagePolicy"], "File");
    assert_eq!(c["ports"][0]["protocol"], "TCP");
    assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTP");
    assert_eq!(c["readinessProbe"]["periodSeconds"], 10);

    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let s = serde_json::to_value(
        svcs.create(&PostParams::default(), &service("web"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["sessionAffinity"], "None");
    assert_eq!(s["spec"]["ipFamilies"], json!(["IPv4"]));
    assert_eq!(s["spec"]["ipFamilyPolicy"], "SingleStack");
    assert_eq!(s["spec"]["internalTrafficPolicy"], "Cluster");
    assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    assert!(
        s["spec"]["clusterIP"]
            .as_str()
            .unwrap()
            .starts_with("10.96.")
    );

    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})).unwrap();
    let p = serde_json::to_value(pods.create(&PostParams::default(), &pod).await.unwrap()).unwrap();
    assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
    assert_eq!(p["spec"]["enableServiceLinks"], true);
    assert_eq!(p["spec"]["serviceAccountName"], "default");
    assert_eq!(p["status"]["phase"], "Pending");
    assert_eq!(p["status"]["qosClass"], "BestEffort");

    let routes = httproute_api(&client);
    let r = serde_json::to_value(
        routes
            .create(&PostParams::default(), &httproute("r"))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        r["spec"]["parentRefs"][0],
        json!({"name": "gw", "group": "gateway.networking.k8s.io", "kind": "Gateway"})
    );
    assert_eq!(
        r["spec"]["rules"][0]["matches"][0]["path"],
        json!({"type": "PathPrefix", "value": "/v1"})
    );
    assert_eq!(
        r["spec"]["rules"][0]["backendRefs"][0],
        json!({"name": "svc", "port": 80, "group": "", "kind": "Service", "weight": 1})
    );
}

#[tokio::test]
async fn validation_errors_name_the_field() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut bad = deployment("bad", "img:1");
    bad.spec
        .as_mut()
        .unwrap()
        .template
        .metadata
        .as_mut()
        .unwrap()
        .labels = Some([("app".into(), "other".into())].into());
    let err = api_err(deps.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    let causes = &err.details.as_ref().unwrap().causes;
    assert_eq!(causes[0].field, "spec.template.metadata.labels");
    assert!(
        err.message
            .contains("`selector` does not match template `labels`"),
        "{}",
        err.message
    );

    let mut no_image = deployment("noimage", "");
    no_image
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0]
        .image = None;
    let err = api_err(
        deps.create(&PostParams::default(), &no_image)
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].field,
        "spec.template.spec.containers[0].image"
    );

    // Selector is immutable.
    deps.create(&PostParams::default(), &deployment("web", "img:1"))
        .await
        .unwrap();
    let patch = json!({"spec": {"selector": {"matchLabels": {"app": "web", "x": "y"}}, "template": {"metadata": {"labels": {"x": "y"}}}}});
    let err = api_err(
        deps.patch("web", &PatchParams::default(), &Patch::Strategic(patch))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert!(
        err.details
            .as_ref()
            .unwrap()
            .causes
            .iter()
            .any(|c| c.field == "spec.selector" && c.message.contains("field is immutable"))
    );

    // Service names must be DNS-1123 labels (a leading digit is fine since the relaxed
    // Service name validation, see tests/fidelity.rs); ports in range; port names unique.
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let err = api_err(
        svcs.create(&PostParams::default(), &service("web-"))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].field,
        "metadata.name"
    );
    let s: Service = serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"ports": [
        {"name": "a", "port": 70000}, {"name": "a", "port": 80}]}}))
    .unwrap();
    let err = api_err(svcs.create(&PostParams::default(), &s).await.unwrap_err());
    let fields: Vec<&str> = err
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    assert!(
        fields.contains(&"spec.ports[0].port") && fields.contains(&"spec.ports[1].name"),
        "{fields:?}"
    );

    // Bad label values.
    let err = api_err(
        Api::<ConfigMap>::default_namespaced(client.clone())
            .create(&PostParams::default(), &cm("l", json!({"k": "-bad-"})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].field,
        "metadata.labels"
    );

    // Duplicate container port names.
    let mut dup = deployment("dup", "img:1");
    let c = &mut dup
        .spec
        .as_mut()
        .unwrap()
        .template
        .spec
        .as_mut()
        .unwrap()
        .containers[0];
    c.ports
        .as_mut()
        .unwrap()
        .push(serde_json::from_value(json!({"name": "http", "containerPort": 9000})).unwrap());
    let err = api_err(deps.create(&PostParams::default(), &dup).await.unwrap_err());
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].field,
        "spec.template.spec.containers[0].ports[1].name"
    );
}

#[tokio::test]
async fn patches_merge_json_strategic() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", "img:1"))
        .await
        .unwrap();
    let pp = PatchParams::default();

    // Strategic: containers and env merge by name.
    let sp = json!({"spec": {"template": {"spec": {"containers": [{"name": "server", "env": [{"name": "EXTRA", "value": "1"}]}]}}}});
    let d = deps.patch("web", &pp, &Patch::Strategic(sp)).await.unwrap();
    let c = &d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(c.image.as_deref(), Some("img:1"));
    assert_eq!(c.env.as_ref().unwrap().len(), 2);
    assert_eq!(d.metadata.generation, Some(2));

    // Merge patch replaces lists.
    let mp = json!({"spec": {"template": {"spec": {"containers": [{"name": "other", "image": "img:2"}]}}}});
    let d = deps.patch("web", &pp, &Patch::Merge(mp)).await.unwrap();
    let cs = &d
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers;
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].name, "other");

    // JSON patch.
    let req = http::Request::patch("/apis/apps/v1/namespaces/default/deployments/web")
        .header("content-type", "application/json-patch+json")
        .body(
            serde_json::to_vec(&json!([{"op": "replace", "path": "/spec/replicas", "value": 5}]))
                .unwrap(),
        )
        .unwrap();
    let d: Deployment = client.request(req).await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(5));

    // Strategic merge on a custom resource: 415 like the real server.
    let routes = httproute_api(&client);
    routes
        .create(&PostParams::default(), &httproute("r"))
        .await
        .unwrap();
    let err = api_err(
        routes
            .patch("r", &pp, &Patch::Strategic(json!({"spec": {}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
}

#[tokio::test]
async fn status_subresource_isolation_and_generation() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", "img:1"))
        .await
        .unwrap();
    let pp = PatchParams::default();
    // Status through the main endpoint is ignored.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"status": {"replicas": 7}})),
        )
        .await
        .unwrap();
    assert!(d.status.is_none_or(|s| s.replicas.is_none()));
    // Spec through /status is ignored; status lands; generation is not bumped.
    let d = deps
        .patch_status("web", &pp, &Patch::Merge(json!({"spec": {"replicas": 9}, "status": {"replicas": 2, "observedGeneration": 1}})))
        .await
        .unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(d.status.as_ref().unwrap().replicas, Some(2));
    assert_eq!(d.metadata.generation, Some(1));
    // Annotations bump a Deployment's generation.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
    // Labels do not.
    let d = deps
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"l": "v"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(2));
}

#[tokio::test]
async fn server_side_apply_is_idempotent_for_modelplane_objects() {
    let (emu, client) = start().await;
    let pp = PatchParams::apply("modelplane");
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let svcs: Api<Service> = Api::default_namespaced(client.clone());
    let routes = httproute_api(&client);

    let d1 = deps
        .patch("web", &pp, &Patch::Apply(deployment("web", "img:1")))
        .await
        .unwrap();
    let s1 = svcs
        .patch("web", &pp, &Patch::Apply(service("web")))
        .await
        .unwrap();
    let r1 = routes
        .patch("r", &pp, &Patch::Apply(httproute("r")))
        .await
        .unwrap();
    let writes_before = emu.store().lock().current_rv();
    let d2 = deps
        .patch("web", &pp, &Patch::Apply(deployment("web", "img:1")))
        .await
        .unwrap();
    let s2 = svcs
        .patch("web", &pp, &Patch::Apply(service("web")))
        .await
        .unwrap();
    let r2 = routes
        .patch("r", &pp, &Patch::Apply(httproute("r")))
        .await
        .unwrap();
    assert_eq!(d1.metadata.resource_version, d2.metadata.resource_version);
    assert_eq!(s1.metadata.resource_version, s2.metadata.resource_version);
    assert_eq!(r1.metadata.resource_version, r2.metadata.resource_version);
    assert_eq!(
        emu.store().lock().current_rv(),
        writes_before,
        "a no-op apply writes nothing"
    );

    let mf = d2.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("modelplane"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    let fields = serde_json::to_value(&mf[0].fields_v1).unwrap();
    assert!(fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"server\"}"]["f:image"].is_object(), "{fields}");

    // Apply with missing kind is a 400.
    let err = api_err(
        deps.patch(
            "web",
            &pp,
            &Patch::Apply(json!({"apiVersion": "apps/v1", "metadata": {"name": "web"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 400);
}

#[tokio::test]
async fn server_side_apply_removal_and_conflicts() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let a = PatchParams::apply("alpha");
    let b = PatchParams::apply("beta");

    let mut d = deployment("web", "img:1");
    d.metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("extra".into(), "yes".into());
    deps.patch("web", &a, &Patch::Apply(&d)).await.unwrap();
    // Dropping the label from the applied config removes it.
    let applied = deps
        .patch("web", &a, &Patch::Apply(deployment("web", "img:1")))
        .await
        .unwrap();
    assert!(!applied.metadata.labels.unwrap().contains_key("extra"));

    // Another manager changing an owned field conflicts without force...
    let other = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
    let err = api_err(
        deps.patch("web", &b, &Patch::Apply(&other))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    let causes = &err.details.as_ref().unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".spec.replicas");
    // ...and takes ownership with force.
    let forced = deps
        .patch("web", &b.clone().force(), &Patch::Apply(&other))
        .await
        .unwrap();
    assert_eq!(forced.spec.as_ref().unwrap().replicas, Some(5));
    let mf = forced.metadata.managed_fields.unwrap();
    let beta = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("beta"))
        .unwrap();
    assert!(serde_json::to_value(&beta.fields_v1).unwrap()["f:spec"]["f:replicas"].is_object());
    let alpha = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("alpha"))
        .unwrap();
    assert!(
        serde_json::to_value(&alpha.fields_v1).unwrap()["f:spec"]
            .get("f:replicas")
            .is_none()
    );

    // alpha no longer owns replicas, so its next apply (still at 2) conflicts with beta.
    let err = api_err(
        deps.patch("web", &a, &Patch::Apply(deployment("web", "img:1")))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // An Update by another manager takes fields silently.
    let d = deps
        .patch(
            "web",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    let editor = d
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("editor"))
        .unwrap();
    assert_eq!(editor.operation.as_deref(), Some("Update"));

    // fieldValidation=Strict rejects unknown fields.
    let unknown = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "bogus": 1});
    let err = api_err(
        deps.patch(
            "web",
            &PatchParams::apply("alpha").validation_strict(),
            &Patch::Apply(&unknown),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("unknown field \"bogus\""),
        "{}",
        err.message
    );
    let mut typo = serde_json::to_value(deployment("web", "img:1")).unwrap();
    typo["spec"]["template"]["spec"]["containers"][0]["imagee"] = json!("x");
    let err = api_err(
        deps.patch(
            "web",
            &PatchParams::apply("alpha").validation_strict(),
            &Patch::Apply(&typo),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        err.message
            .contains("unknown field \"spec.template.spec.containers[0].imagee\""),
        "{}",
        err.message
    );
    // Without Strict the unknown field is dropped, not stored.
    let d = deps
        .patch(
            "web",
            &PatchParams::apply("alpha").force(),
            &Patch::Apply(&typo),
        )
        .await
        .unwrap();
    let stored = serde_json::to_value(&d).unwrap();
    assert!(
        stored["spec"]["template"]["spec"]["containers"][0]
            .get("imagee")
            .is_none()
    );
}

#[tokio::test]
async fn garbage_collection_and_finalizers() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner_ref = |o: &ConfigMap, block: bool| json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid, "blockOwnerDeletion": block}]);
    let make_child = |name: &str, owner: &ConfigMap, block: bool, finalizers: Value| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": owner_ref(owner, block), "finalizers": finalizers}})).unwrap()
    };
    let exists = |name: &'static str| {
        let cms = cms.clone();
        async move { cms.get_opt(name).await.unwrap().is_some() }
    };

    // Background: owner goes at once, dependent soon after.
    let owner = cms
        .create(&PostParams::default(), &cm("bg-owner", json!({})))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &make_child("bg-child", &owner, false, json!([])),
    )
    .await
    .unwrap();
    cms.delete("bg-owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(!exists("bg-owner").await);
    wait_until("background dependent deleted", || async {
        !exists("bg-child").await
    })
    .await;

    // Orphan: dependent stays without the owner reference.
    let owner = cms
        .create(&PostParams::default(), &cm("or-owner", json!({})))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &make_child("or-child", &owner, false, json!([])),
    )
    .await
    .unwrap();
    cms.delete("or-owner", &DeleteParams::orphan())
        .await
        .unwrap();
    wait_until("orphaning owner deleted", || async {
        !exists("or-owner").await
    })
    .await;
    let child = cms.get("or-child").await.unwrap();
    assert!(child.metadata.owner_references.is_none_or(|r| r.is_empty()));

    // Foreground: the owner waits (deletionTimestamp + foregroundDeletion) for a blocking
    // dependent held by a finalizer, and goes once the finalizer is removed.
    let owner = cms
        .create(&PostParams::default(), &cm("fg-owner", json!({})))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &make_child("fg-child", &owner, true, json!(["example.com/hold"])),
    )
    .await
    .unwrap();
    cms.delete("fg-owner", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_until("dependent marked for deletion", || async {
        cms.get("fg-child")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    })
    .await;
    let o = cms.get("fg-owner").await.unwrap();
    assert!(o.metadata.deletion_timestamp.is_some());
    assert_eq!(
        o.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    cms.patch(
        "fg-child",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_until("foreground owner deleted", || async {
        !exists("fg-owner").await && !exists("fg-child").await
    })
    .await;

    // An ownerReference is resolved by kind and name, then uid, like the real collector:
    // a reference whose name does not match its uid's object is dangling.
    let real = cms
        .create(&PostParams::default(), &cm("real-owner", json!({})))
        .await
        .unwrap();
    let dangling: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "dangling", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "someone-else", "uid": real.metadata.uid}]}}))
    .unwrap();
    cms.create(&PostParams::default(), &dangling).await.unwrap();
    wait_until("dangling dependent collected", || async {
        !exists("dangling").await
    })
    .await;
    assert!(exists("real-owner").await);

    // Finalizers hold a plain delete; new finalizers cannot be added while deleting.
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["example.com/x"]}}),
    )
    .unwrap();
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.delete("held", &DeleteParams::default()).await.unwrap();
    assert!(
        cms.get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let err = api_err(
        cms.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/x", "example.com/y"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(!exists("held").await);
}

#[tokio::test]
async fn namespaces_delete_their_contents() {
    let (_emu, client) = start().await;
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "team"}})).unwrap();
    let created = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    cms.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .unwrap();
    nss.delete("team", &DeleteParams::default()).await.unwrap();
    wait_until("namespace gone", || async {
        nss.get_opt("team").await.unwrap().is_none()
    })
    .await;
    let all: Api<ConfigMap> = Api::all(client.clone());
    assert!(
        all.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|c| c.metadata.namespace.as_deref() != Some("team"))
    );
}

#[tokio::test]
async fn optional_api_groups_can_be_switched_off() {
    let (_emu, client) =
        start_with(Emulator::builder().gateway_api(false).inference_api(false)).await;
    let routes = httproute_api(&client);
    let err = api_err(routes.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(err.code, 404);
    let groups = client.list_api_groups().await.unwrap();
    assert!(
        groups
            .groups
            .iter()
            .all(|g| g.name != "gateway.networking.k8s.io"
                && g.name != "inference.networking.k8s.io")
    );
    // Discovery still works for the rest.
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(discovery.has_group("apps"));
    assert!(!discovery.has_group("gateway.networking.k8s.io"));
}

#[tokio::test]
async fn request_log_counts_writes() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    emu.requests().clear();
    cms.patch(
        "x",
        &PatchParams::apply("mp"),
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})),
    )
    .await
    .unwrap();
    let log = emu.requests().snapshot();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (
            log[0].method.as_str(),
            log[0].field_manager.as_deref(),
            log[0].status
        ),
        ("PATCH", Some("mp"), 201)
    );
}

#[tokio::test]
async fn pod_binding_graceful_deletion_and_service_accounts() {
    let (_emu, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let pod = |name: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}})).unwrap()
    };
    let bind = |name: &'static str, node: &'static str| {
        let pods = pods.clone();
        async move {
            let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
            let _: Value = pods
                .create_subresource("binding", name, &PostParams::default(), &binding)
                .await
                .unwrap();
        }
    };

    // Unscheduled pods are deleted at once.
    pods.create(&PostParams::default(), &pod("p"))
        .await
        .unwrap();
    pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(pods.get_opt("p").await.unwrap().is_none());

    // A pod bound to a live node terminates gracefully (its kubelet finishes the deletion).
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("q"))
        .await
        .unwrap();
    bind("q", "n1").await;
    assert_eq!(
        pods.get("q")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("n1")
    );
    pods.delete("q", &DeleteParams::default()).await.unwrap();
    let q = pods.get("q").await.unwrap();
    assert!(q.metadata.deletion_timestamp.is_some());
    assert_eq!(q.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete(
        "q",
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(pods.get_opt("q").await.unwrap().is_none());

    // Pod specs are immutable except for a few fields; binding set PodScheduled.
    pods.create(&PostParams::default(), &pod("imm"))
        .await
        .unwrap();
    bind("imm", "n1").await;
    let bound = pods.get("imm").await.unwrap();
    let conditions = bound.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );
    let err = api_err(
        pods.patch(
            "imm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restartPolicy": "Never"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    assert_eq!(err.details.as_ref().unwrap().causes[0].field, "spec");
    let image = json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}});
    pods.patch("imm", &PatchParams::default(), &Patch::Strategic(image))
        .await
        .unwrap();

    // Pod GC force-deletes terminating pods bound to nodes that do not exist.
    pods.create(&PostParams::default(), &pod("r"))
        .await
        .unwrap();
    bind("r", "ghost").await;
    pods.delete("r", &DeleteParams::default()).await.unwrap();
    wait_until("orphaned terminating pod collected", || async {
        pods.get_opt("r").await.unwrap().is_none()
    })
    .await;

    // Every namespace gets a default ServiceAccount.
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap(),
    )
    .await
    .unwrap();
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "fresh");
    wait_until("default service account", || async {
        sas.get_opt("default").await.unwrap().is_some()
    })
    .await;
}

#[tokio::test]
async fn quantities_are_stored_in_canonical_form() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    let mut d = serde_json::to_value(deployment("q", "img:1")).unwrap();
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "1024Mi", "cpu": 1.5, "nvidia.com/gpu": 1}, "requests": {"cpu": "1000m"}});
    let pp = PatchParams::apply("modelplane");
    let first = deps.patch("q", &pp, &Patch::Apply(&d)).await.unwrap();
    let res = serde_json::to_value(
        &first
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0]
            .resources,
    )
    .unwrap();
    assert_eq!(
        res,
        json!({"limits": {"memory": "1Gi", "cpu": "1500m", "nvidia.com/gpu": "1"}, "requests": {"cpu": "1"}})
    );
    // Re-applying the non-canonical spelling is still a no-op.
    let second = deps.patch("q", &pp, &Patch::Apply(&d)).await.unwrap();
    assert_eq!(
        first.metadata.resource_version,
        second.metadata.resource_version
    );
}

#[tokio::test]
async fn events_k8s_io_is_a_view_of_core_events() {
    use kube::runtime::events::{Event as RecEvent, EventType, Recorder, Reporter};
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &cm("subject", json!({})))
        .await
        .unwrap();
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: owner.metadata.name.clone(),
        namespace: Some("default".into()),
        uid: owner.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "modelplane".into(),
            instance: None,
        },
    );
    let ev = RecEvent {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("all good".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap(); // a series update (merge patch)

    // Read back through core/v1 with the involvedObject field selectors.
    let core: Api<Event> = Api::default_namespaced(client.clone());
    let uid = owner.metadata.uid.clone().unwrap();
    let list = core
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.message.as_deref(), Some("all good"));
    assert_eq!(e.reporting_component.as_deref(), Some("modelplane"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client.clone());
    let listed = v1.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items[0].note.as_deref(), Some("all good"));
}

#[tokio::test]
async fn protocol_errors_dry_run_and_status_apply() {
    let (_emu, client) = start().await;
    let raw = |method: &str, path: &str, ct: &str, body: Value| {
        http::Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", ct)
            .body(serde_json::to_vec(&body).unwrap())
            .unwrap()
    };
    let err = |r: Result<Value, kube::Error>| api_err(r.unwrap_err());

    let e = err(client
        .request(raw(
            "PUT",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            json!({}),
        ))
        .await);
    assert_eq!((e.code, e.reason.as_str()), (405, "MethodNotAllowed"));
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("c", json!({})))
        .await
        .unwrap();
    let e = err(client
        .request(raw(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/c",
            "text/plain",
            json!({}),
        ))
        .await);
    assert_eq!((e.code, e.reason.as_str()), (415, "UnsupportedMediaType"));
    let e = err(client
        .request(raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            json!({"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
        ))
        .await);
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    let e = err(client
        .request(raw(
            "GET",
            "/apis/nope.example.com/v1/things",
            "application/json",
            json!({}),
        ))
        .await);
    assert_eq!(e.code, 404);
    let e = err(client
        .request(raw(
            "GET",
            "/api/v1/namespaces/default/configmaps?limit=1&continue=garbage",
            "application/json",
            json!({}),
        ))
        .await);
    assert_eq!(e.code, 400);

    // A wrong JSON type is a decode error (400), never stored.
    let e = err(client
        .request(raw(
            "POST",
            "/api/v1/namespaces/default/configmaps",
            "application/json",
            json!({"metadata": {"name": "t", "labels": {"x": 1}}}),
        ))
        .await);
    assert_eq!(e.code, 400);
    assert!(
        e.message.contains("cannot be handled as a ConfigMap")
            && e.message.contains("metadata.labels.x"),
        "{}",
        e.message
    );

    let bad_quantity = json!({"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]}});
    let e = err(client
        .request(raw(
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            bad_quantity,
        ))
        .await);
    assert_eq!(e.code, 400);
    assert!(e.message.contains("quantities must match"), "{}", e.message);

    // dryRun=All on update, patch and delete changes nothing.
    let before = cms.get("c").await.unwrap();
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let patched = cms
        .patch("c", &dry, &Patch::Merge(json!({"data": {"k": "dry"}})))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "dry");
    cms.delete(
        "c",
        &DeleteParams {
            dry_run: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let after = cms.get("c").await.unwrap();
    assert_eq!(
        before.metadata.resource_version,
        after.metadata.resource_version
    );
    assert_eq!(after.data.unwrap()["k"], "v");

    // Server-side apply of status through /status, owned with subresource "status".
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.patch(
        "web",
        &PatchParams::apply("mp"),
        &Patch::Apply(deployment("web", "img:1")),
    )
    .await
    .unwrap();
    let status = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "status": {"replicas": 2, "readyReplicas": 1}});
    let d = deps
        .patch_status("web", &PatchParams::apply("ctrl"), &Patch::Apply(&status))
        .await
        .unwrap();
    assert_eq!(d.status.as_ref().unwrap().ready_replicas, Some(1));
    let mf = d.metadata.managed_fields.unwrap();
    let ctrl = mf
        .iter()
        .find(|m| m.manager.as_deref() == Some("ctrl"))
        .unwrap();
    assert_eq!(ctrl.subresource.as_deref(), Some("status"));
    // The main endpoint's apply does not touch status, and re-applying is still a no-op.
    let again = deps
        .patch(
            "web",
            &PatchParams::apply("mp"),
            &Patch::Apply(deployment("web", "img:1")),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, d.metadata.resource_version);
    assert_eq!(again.status.unwrap().ready_replicas, Some(1));
}

fn dynamic_api(client: &Client, group: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, plural),
    )
}

#[tokio::test]
async fn gateway_api_and_inference_pool_schemas() {
    let (_emu, client) = start_with_published_crds().await;
    let pp = PatchParams::apply("modelplane");
    let gateways = dynamic_api(&client, "gateway.networking.k8s.io", "Gateway", "gateways");
    let gw = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "gw"},
        "spec": {"gatewayClassName": "envoy", "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}});
    let g =
        serde_json::to_value(gateways.patch("gw", &pp, &Patch::Apply(&gw)).await.unwrap()).unwrap();
    assert_eq!(
        g["spec"]["listeners"][0]["allowedRoutes"],
        json!({"namespaces": {"from": "Same"}})
    );
    let conditions: Vec<&str> = g["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(conditions, ["Accepted", "Programmed"]);
    assert_eq!(g["status"]["conditions"][0]["reason"], "Pending");
    // Required fields of the CRD schema.
    let bad = json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": {"name": "bad"},
        "spec": {"listeners": [{"name": "http", "protocol": "HTTP"}]}});
    let err = api_err(
        gateways
            .patch("bad", &pp, &Patch::Apply(&bad))
            .await
            .unwrap_err(),
    );
    let fields: Vec<&str> = err
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| c.field.as_str())
        .collect();
    // kube-openapi's objectValidator checks an object's properties before its `required`
    // list (pkg/validation/validate/object_validator.go), and the CEL rules are skipped on
    // an object with a Required error, said by a cause without a field
    // (apiextensions-apiserver pkg/registry/customresource/strategy.go, hasBlockingErr).
    assert_eq!(
        fields,
        ["spec.listeners[0].port", "spec.gatewayClassName", "<nil>"]
    );

    let routes = httproute_api(&client);
    let mut r = serde_json::to_value(httproute("r")).unwrap();
    // A redirect rule has no backends (the manifest's CEL rule on HTTPRouteRule refuses
    // "RequestRedirect filter must not be used together with backendRefs").
    r["spec"]["rules"][0]["filters"] =
        json!([{"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}]);
    r["spec"]["rules"][0]
        .as_object_mut()
        .unwrap()
        .remove("backendRefs");
    let created =
        serde_json::to_value(routes.patch("r", &pp, &Patch::Apply(&r)).await.unwrap()).unwrap();
    assert_eq!(
        created["spec"]["rules"][0]["filters"][0]["requestRedirect"]["statusCode"],
        302
    );
    let again =
        serde_json::to_value(routes.patch("r", &pp, &Patch::Apply(&r)).await.unwrap()).unwrap();
    assert_eq!(
        created["metadata"]["resourceVersion"],
        again["metadata"]["resourceVersion"]
    );

    let pools = dynamic_api(
        &client,
        "inference.networking.k8s.io",
        "InferencePool",
        "inferencepools",
    );
    let pool = json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "pool"},
        "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}],
                 "endpointPickerRef": {"name": "epp", "port": {"number": 9002}}}});
    let p = serde_json::to_value(
        pools
            .patch("pool", &pp, &Patch::Apply(&pool))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        p["spec"]["endpointPickerRef"],
        json!({"name": "epp", "port": {"number": 9002}, "group": "", "kind": "Service", "failureMode": "FailClose"})
    );
    assert_eq!(p["metadata"]["generation"], 1);
    let again = serde_json::to_value(
        pools
            .patch("pool", &pp, &Patch::Apply(&pool))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        p["metadata"]["resourceVersion"],
        again["metadata"]["resourceVersion"]
    );
    let err = api_err(
        pools.patch("bad", &pp, &Patch::Apply(json!({"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "bad"}, "spec": {}}))).await.unwrap_err(),
    );
    assert_eq!(err.code, 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_watched_in_order_and_shutdown_ends_watches() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let rv = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = cms
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .unwrap()
        .boxed();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let cms = cms.clone();
            tokio::spawn(async move {
                for i in 0..10 {
                    let name = format!("w{w}-{i}");
                    cms.create(&PostParams::default(), &cm(&name, json!({})))
                        .await
                        .unwrap();
                    cms.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"k": "x"}})),
                    )
                    .await
                    .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.await.unwrap();
    }
    let mut last = rv.parse::<u64>().unwrap();
    let (mut added, mut modified) = (0, 0);
    while added + modified < 80 {
        let (ty, obj) = match stream.try_next().await.unwrap().expect("event") {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            other => panic!("unexpected {other:?}"),
        };
        let rv: u64 = obj.metadata.resource_version.unwrap().parse().unwrap();
        assert!(
            rv > last,
            "resourceVersions must increase: {rv} after {last}"
        );
        last = rv;
        if ty == "ADDED" {
            added += 1
        } else {
            modified += 1
        }
    }
    assert_eq!((added, modified), (40, 40));
    // Shutting down ends open watches instead of waiting for their timeout.
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        emu.shutdown().await;
        while let Ok(Some(_)) = stream.try_next().await {}
    })
    .await;
    assert!(closed.is_ok(), "shutdown with an open watch took too long");
}

#[tokio::test]
async fn partial_object_metadata_lists_gets_and_watches() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("meta", json!({"a": "b"})))
        .await
        .unwrap();
    let got = cms.get_metadata("meta").await.unwrap();
    assert_eq!(got.metadata.labels.unwrap()["a"], "b");
    assert_eq!(got.types.unwrap().kind, "PartialObjectMetadata");
    // With the namespace's kube-root-ca.crt.
    let list = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    // `Api<PartialObjectMeta<K>>` makes metadata-only requests (Accept: as=PartialObjectMetadata).
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::default_namespaced(client.clone());
    let mut stream = watcher(meta_api, watcher::Config::default()).boxed();
    loop {
        if let watcher::Event::InitApply(o) = stream.try_next().await.unwrap().unwrap()
            && o.metadata.name.as_deref() == Some("meta")
        {
            assert_eq!(o.metadata.labels.unwrap()["a"], "b");
            break;
        }
    }
}

#[tokio::test]
async fn tables_and_delete_collection() {
    let (_emu, client) = start().await;
    let deps: Api<Deployment> = Api::default_namespaced(client.clone());
    deps.create(&PostParams::default(), &deployment("web", "img:1"))
        .await
        .unwrap();
    let req = http::Request::get("/apis/apps/v1/namespaces/default/deployments")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: Value = client.request(req).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let headers: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        headers,
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(table["rows"][0]["cells"][0], "web");
    assert_eq!(table["rows"][0]["cells"][1], "0/2");
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");

    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for (n, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        cms.create(&PostParams::default(), &cm(n, json!({"tier": tier})))
            .await
            .unwrap();
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("tier=x"),
    )
    .await
    .unwrap();
    let left: Vec<String> = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(left, ["c", "kube-root-ca.crt"]);
}

#[tokio::test]
async fn leases_for_leader_election() {
    use k8s_openapi::api::coordination::v1::Lease;
    let (_emu, client) = start().await;
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "modelplane"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}))
    .unwrap();
    let mut l = leases.create(&PostParams::default(), &lease).await.unwrap();
    let stale = l.clone();
    l.spec.as_mut().unwrap().holder_identity = Some("b".into());
    leases
        .replace("modelplane", &PostParams::default(), &l)
        .await
        .unwrap();
    // A second candidate racing with the old resourceVersion loses.
    let err = api_err(
        leases
            .replace("modelplane", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert_eq!(
        leases
            .get("modelplane")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("b")
    );
}

#[tokio::test]
async fn endpoint_slices() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let (_emu, client) = start().await;
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    let slice: EndpointSlice = serde_json::from_value(json!({
        "metadata": {"name": "web-abc", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": true}}],
        "ports": [{"port": 8000}],
    }))
    .unwrap();
    let created = slices.create(&PostParams::default(), &slice).await.unwrap();
    let port = &created.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.protocol.as_deref()),
        (Some(""), Some("TCP"))
    );
    assert_eq!(created.metadata.generation, Some(1));
    let listed = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let err = api_err(
        slices
            .patch(
                "web-abc",
                &PatchParams::default(),
                &Patch::Merge(json!({"addressType": "IPv6"})),
            )
            .await
            .unwrap_err(),
    );
    // As ValidateEndpointSliceUpdate: the addresses against the new type first, then the
    // type's immutability.
    let causes: Vec<(String, String)> = err
        .details
        .as_ref()
        .unwrap()
        .causes
        .iter()
        .map(|c| (c.field.clone(), c.message.clone()))
        .collect();
    assert_eq!(
        causes,
        [
            (
                "endpoints[0].addresses[0]".to_owned(),
                "Invalid value: \"10.0.0.5\": must be a valid IPv6 address".to_owned()
            ),
            (
                "addressType".to_owned(),
                "Invalid value: \"IPv6\": field is immutable".to_owned()
            ),
        ]
    );
    // Addresses nothing may be sent to are refused (ValidateEndpointIP): a Service without
    // a selector cannot point at the API server's own loopback.
    for (address, message) in [
        (
            "127.0.0.1",
            "may not be in the loopback range (127.0.0.0/8, ::1/128)",
        ),
        ("0.0.0.0", "may not be unspecified (0.0.0.0)"),
        (
            "169.254.169.254",
            "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
        ),
        (
            "224.0.0.5",
            "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
        ),
        ("10.0.0.256", "must be a valid IPv4 address"),
    ] {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "bad", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address]}],
        }))
        .unwrap();
        let err = api_err(
            slices
                .create(&PostParams::default(), &slice)
                .await
                .unwrap_err(),
        );
        assert_eq!(err.code, 422, "{address}");
        let cause = &err.details.as_ref().unwrap().causes[0];
        assert_eq!(cause.field, "endpoints[0].addresses[0]", "{address}");
        assert!(
            cause.message.ends_with(message),
            "{address}: {}",
            cause.message
        );
    }
}

#[tokio::test]
async fn pod_admission_priority_and_service_accounts() {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let (_emu, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pod = |name: &str, extra: Value| -> Pod {
        let mut p = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}});
        json_patch::merge(&mut p, &extra);
        serde_json::from_value(p).unwrap()
    };
    // The system classes exist; the class sets priority and preemptionPolicy.
    let p = pods
        .create(
            &PostParams::default(),
            &pod(
                "crit",
                json!({"spec": {"priorityClassName": "system-cluster-critical"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.spec.as_ref().unwrap().priority, Some(2_000_000_000));
    // A missing class or service account is refused (403).
    let err = api_err(
        pods.create(
            &PostParams::default(),
            &pod("nope", json!({"spec": {"priorityClassName": "nope"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    let err = api_err(
        pods.create(
            &PostParams::default(),
            &pod("nosa", json!({"spec": {"serviceAccountName": "ghost"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 403);
    assert!(
        err.message.contains("serviceaccount \"ghost\" not found"),
        "{}",
        err.message
    );
    // A global default class applies to pods without one.
    let pcs: Api<PriorityClass> = Api::all(client.clone());
    pcs.create(
        &PostParams::default(),
        &serde_json::from_value(
            json!({"metadata": {"name": "inference"}, "value": 1000, "globalDefault": true}),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let p = pods
        .create(&PostParams::default(), &pod("dflt", json!({})))
        .await
        .unwrap();
    let spec = p.spec.unwrap();
    assert_eq!(
        (spec.priority, spec.priority_class_name.as_deref()),
        (Some(1000), Some("inference"))
    );
    // Pods can be created in a namespace right after it is created (its default account exists).
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "fresh"}})).unwrap(),
    )
    .await
    .unwrap();
    let fresh: Api<Pod> = Api::namespaced(client.clone(), "fresh");
    fresh
        .create(&PostParams::default(), &pod("first", json!({})))
        .await
        .unwrap();
}

/// The Gateway API CRD's CEL rules on `HTTPPathMatch` (gateway-api `apis/v1/httproute_types.go`,
/// `+kubebuilder:validation:XValidation` on `HTTPPathMatch`), evaluated from the installed
/// manifest: a real API server answers 422 `spec.rules[0].matches[0].path: Invalid value:
/// must not contain '/../' when type one of ['Exact', 'PathPrefix']` (a failed rule on an
/// object shows no value: `field.OmitValueType` in apiextensions-apiserver
/// pkg/apiserver/schema/cel/validation.go), on create and on server-side apply alike.
#[tokio::test]
async fn httproute_path_values_are_checked_like_the_crds_cel_rules() {
    let (_emu, client) = start_with_published_crds().await;
    let routes = httproute_api(&client);
    for (value, message) in [
        (
            "/models/../admin",
            "must not contain '/../' when type one of ['Exact', 'PathPrefix']",
        ),
        (
            "/a/./b",
            "must not contain '/./' when type one of ['Exact', 'PathPrefix']",
        ),
        (
            "/a/..",
            "must not end with '/..' when type one of ['Exact', 'PathPrefix']",
        ),
        (
            "/a//b",
            "must not contain '//' when type one of ['Exact', 'PathPrefix']",
        ),
        (
            "/a%2fb",
            "must not contain '%2f' when type one of ['Exact', 'PathPrefix']",
        ),
        (
            "relative",
            "value must be an absolute path and start with '/' when type one of ['Exact', 'PathPrefix']",
        ),
        ("/a b", "must only contain valid characters"),
    ] {
        let mut route = httproute("bad");
        route.data["spec"]["rules"][0]["matches"][0]["path"] =
            json!({"type": "PathPrefix", "value": value});
        let err = api_err(
            routes
                .create(&PostParams::default(), &route)
                .await
                .unwrap_err(),
        );
        assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"), "{value}");
        assert!(
            err.message
                .contains("spec.rules[0].matches[0].path: Invalid value: ")
                && err.message.contains(message),
            "{value}: {}",
            err.message
        );
        let applied = routes
            .patch(
                "bad",
                &PatchParams::apply("test").force(),
                &Patch::Apply(&route),
            )
            .await;
        assert_eq!(api_err(applied.unwrap_err()).code, 422, "{value} by apply");
    }
    for value in ["/", "/v1", "/a/.b/", "/team-a/qwen", "/%7Euser"] {
        let mut route = httproute(&format!("ok-{}", value.len()));
        route.data["spec"]["rules"][0]["matches"][0]["path"] =
            json!({"type": "PathPrefix", "value": value});
        routes
            .create(&PostParams::default(), &route)
            .await
            .unwrap_or_else(|e| panic!("{value}: {e}"));
    }
}

/// A watch from a resourceVersion the store has not reached: the real watch cache waits up
/// to 3 s for it (`waitUntilFreshAndBlock`, blockTimeout), then answers 504 Timeout
/// "Too large resource version: X, current: Y" with the cause `ResourceVersionTooLarge`
/// (apiserver `pkg/storage/cacher/watch_cache.go`, `storage.NewTooLargeResourceVersionError`).
#[tokio::test]
async fn a_watch_from_a_future_resource_version_is_refused_as_too_large() {
    let (_emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let list = cms.list(&ListParams::default()).await.unwrap();
    let current: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    let ahead = current + 1000;
    // Raw HTTP: kube's client retries a 504 by itself, and this is about the answer.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(_emu.addr()).await.unwrap();
    stream
        .write_all(
            format!(
                "GET /api/v1/namespaces/default/configmaps?watch=true&resourceVersion={ahead} HTTP/1.1\r\n\
                 host: x\r\nconnection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 504"), "{response}");
    // The body may come chunked: look for the Status's parts in it.
    for part in [
        r#""reason":"Timeout""#.to_owned(),
        format!(r#""message":"Too large resource version: {ahead}, current: {current}""#),
        r#""reason":"ResourceVersionTooLarge""#.to_owned(),
    ] {
        assert!(response.contains(&part), "{part} not in {response}");
    }
}

/// resourceVersions only grow, across restarts too (as etcd's revision): a restarted
/// emulator's versions are above the last run's, and a watch from the last run's version is
/// older than anything it holds, so it is answered 410 Expired and the client relists.
#[tokio::test]
async fn after_a_restart_versions_keep_growing_and_old_watches_expire() {
    let (first, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let created = cms
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .unwrap();
    let old_rv = created.metadata.resource_version.unwrap();
    let addr = first.addr();
    first.shutdown().await;
    let (_second, client) = start_with(Emulator::builder().listen(addr)).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let list = cms.list(&ListParams::default()).await.unwrap();
    let new_rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        new_rv > old_rv.parse::<u64>().unwrap(),
        "{new_rv} after {old_rv}"
    );
    let mut events = cms
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(status))) => assert_eq!(status.code, 410, "{status:?}"),
        other => panic!("expected 410 Expired, got {other:?}"),
    }
}

#[tokio::test]
async fn metrics_count_requests_like_kube_apiserver() {
    let (emu, client) = start().await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("m1", json!({})))
        .await
        .unwrap();
    cms.get("m1").await.unwrap();
    cms.get("m1").await.unwrap();
    assert!(cms.get("missing").await.is_err());
    cms.list(&ListParams::default()).await.unwrap();
    let all: Api<ConfigMap> = Api::all(client.clone());
    all.list(&ListParams::default()).await.unwrap();
    let apply = PatchParams::apply("metrics-test");
    cms.patch(
        "m2",
        &apply,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m2"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "m1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "b"}})),
    )
    .await
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    cms.create(&dry, &cm("m3", json!({}))).await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.get("default").await.unwrap();
    cms.delete("m1", &DeleteParams::default()).await.unwrap();
    let mut w = cms
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    while w.try_next().await.unwrap().is_some() {}

    let text = http_get(&format!("{}/metrics", emu.url())).await;
    let has = |line: &str| {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        )
    };
    assert!(text.contains("# TYPE apiserver_request_total counter"));
    let series = |verb: &str, res: &str, scope: &str, code: u16, dry: &str, group: &str, n: u64| {
        format!(
            "apiserver_request_total{{code=\"{code}\",component=\"apiserver\",dry_run=\"{dry}\",group=\"{group}\",resource=\"{res}\",scope=\"{scope}\",subresource=\"\",verb=\"{verb}\",version=\"v1\"}} {n}"
        )
    };
    has(&series("POST", "configmaps", "resource", 201, "", "", 1));
    has(&series("POST", "configmaps", "resource", 201, "All", "", 1));
    has(&series("GET", "configmaps", "resource", 200, "", "", 2));
    has(&series("GET", "configmaps", "resource", 404, "", "", 1));
    has(&series("LIST", "configmaps", "namespace", 200, "", "", 1));
    has(&series("LIST", "configmaps", "cluster", 200, "", "", 1));
    has(&series("APPLY", "configmaps", "resource", 201, "", "", 1));
    has(&series("PATCH", "configmaps", "resource", 200, "", "", 1));
    has(&series("DELETE", "configmaps", "resource", 200, "", "", 1));
    has(&series("WATCH", "configmaps", "namespace", 200, "", "", 1));
    has(&series("GET", "namespaces", "resource", 200, "", "", 1));
    // Discovery and /metrics itself are non-resource requests: not counted.
    assert!(!text.contains(",resource=\"\""), "{text}");
}

/// A plain GET over a raw TCP connection (the tests need no HTTP client crate).
async fn http_get(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n").unwrap().1.to_string()
}
