//! Answers a real Kubernetes v1.36 API server gives and the emulator must give too (issue
//! #12's differential suite). Each test states the real server's answer and names the
//! Kubernetes source it comes from; requests go over plain HTTP so status codes, content
//! types and Status documents are seen exactly as a client sees them.

use std::time::{Duration, Instant};

mod wire;

use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::{Value, json};
use wire::{post, request, start};

fn causes(status: &Value) -> Vec<(String, String)> {
    status["details"]["causes"]
        .as_array()
        .unwrap_or_else(|| panic!("no causes in {status}"))
        .iter()
        .map(|c| {
            (
                c["field"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn fields(status: &Value) -> Vec<String> {
    causes(status).into_iter().map(|(f, _)| f).collect()
}

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
const SVCS: &str = "/api/v1/namespaces/default/services";
const ROUTES: &str = "/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes";

fn deployment(name: &str, selector: Option<Value>, labels: Value) -> Value {
    let mut d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "img:1"}]},
            },
        },
    });
    if let Some(s) = selector {
        d["spec"]["selector"] = s;
    }
    d
}

fn route(name: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name},
        "spec": {"parentRefs": [{"name": "gw"}], "rules": [{"backendRefs": [{"name": "svc", "port": 80}]}]},
    })
}

// ---------------------------------------------------------------------------------------
// Class 2: built-in validation.

/// pkg/apis/core/validation/validation.go `validateServiceClusterIPsRelatedFields`: every
/// `spec.clusterIPs` entry must be an IP (IsValidIP), reported on `spec.clusterIPs[i]`; the
/// service allocator runs the same validation on create before allocating.
#[tokio::test]
async fn service_cluster_ip_is_validated_on_create() {
    let emu = start().await;
    let svc = json!({"metadata": {"name": "bad-ip"}, "spec": {"clusterIP": "not-an-ip",
        "ports": [{"port": 80}]}});
    let r = post(&emu, SVCS, svc).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let s = r.json();
    assert_eq!(
        causes(&s),
        [(
            "spec.clusterIPs[0]".to_string(),
            "FieldValueInvalid".to_string()
        )]
    );
    assert_eq!(s["details"]["kind"], "Service");
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .contains("must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"),
        "{s}"
    );
    // A real address of the range is taken as given.
    let svc = json!({"metadata": {"name": "fixed-ip"}, "spec": {"clusterIP": "10.96.100.100",
        "ports": [{"port": 80}]}});
    let r = post(&emu, SVCS, svc).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(r.json()["spec"]["clusterIPs"], json!(["10.96.100.100"]));
}

/// Service names are DNS-1123 labels in 1.36 (the RelaxedServiceNameValidation feature,
/// KEP-5311, `ValidateServiceName = NameIsDNSLabel`), so they may start with a digit; they
/// still may not end with '-' or exceed 63 characters.
#[tokio::test]
async fn service_names_may_start_with_a_digit() {
    let emu = start().await;
    let svc = |name: &str| json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}});
    let r = post(&emu, SVCS, svc("1web")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = post(&emu, SVCS, svc("web-")).await;
    assert_eq!(r.status, 422);
    assert_eq!(fields(&r.json()), ["metadata.name"]);
    let r = post(&emu, SVCS, svc(&"a".repeat(64))).await;
    assert_eq!(r.status, 422);
    assert!(
        r.body.contains("must be no more than 63 characters"),
        "{}",
        r.body
    );
}

/// apimachinery `IsDNS1123Subdomain`: at most 253 characters in all; the dot-separated
/// parts have no length limit of their own (the regex has none).
#[tokio::test]
async fn dns_subdomain_names_may_be_253_characters() {
    let emu = start().await;
    let cm = |name: &str| json!({"metadata": {"name": name}, "data": {"k": "v"}});
    let r = post(&emu, CMS, cm(&"a".repeat(253))).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = post(&emu, CMS, cm(&format!("{}.b", "a".repeat(100)))).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = post(&emu, CMS, cm(&"a".repeat(254))).await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(fields(&s), ["metadata.name"]);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .ends_with("must be no more than 253 characters"),
        "{s}"
    );
}

/// pkg/apis/apps/validation/validation.go `ValidateDeploymentSpec` and
/// `ValidatePodTemplateSpecForReplicaSet`: a missing selector is Required on `spec.selector`
/// and, being `labels.Nothing()`, matches no template labels; a selector that does not match
/// is reported on `spec.template.metadata.labels` only; an invalid matchLabels value on
/// `spec.selector.matchLabels` (ValidateLabelSelector); an unknown strategy type is
/// NotSupported on `spec.strategy` (ValidateDeploymentStrategy).
#[tokio::test]
async fn deployment_selector_and_strategy_errors_name_the_real_fields() {
    let emu = start().await;
    let labels = json!({"app": "web"});
    let r = post(&emu, DEPLOYS, deployment("none", None, labels.clone())).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        causes(&r.json()),
        [
            (
                "spec.selector".to_string(),
                "FieldValueRequired".to_string()
            ),
            (
                "spec.template.metadata.labels".to_string(),
                "FieldValueInvalid".to_string()
            ),
        ]
    );

    let sel = json!({"matchLabels": {"app": "other"}});
    let r = post(
        &emu,
        DEPLOYS,
        deployment("mismatch", Some(sel), labels.clone()),
    )
    .await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(fields(&s), ["spec.template.metadata.labels"]);
    assert!(
        s["message"].as_str().unwrap().contains(
            r#"Invalid value: map[string]string{"app":"web"}: `selector` does not match template `labels`"#
        ),
        "{s}"
    );

    let sel = json!({"matchLabels": {"app": "-bad-"}});
    let r = post(
        &emu,
        DEPLOYS,
        deployment("badsel", Some(sel), json!({"app": "-bad-"})),
    )
    .await;
    assert_eq!(r.status, 422);
    let f = fields(&r.json());
    assert_eq!(f[0], "spec.selector.matchLabels", "{f:?}");

    let mut d = deployment(
        "bogus",
        Some(json!({"matchLabels": labels.clone()})),
        labels.clone(),
    );
    d["spec"]["strategy"] = json!({"type": "Bogus"});
    let r = post(&emu, DEPLOYS, d).await;
    assert_eq!(r.status, 422);
    assert_eq!(
        causes(&r.json()),
        [(
            "spec.strategy".to_string(),
            "FieldValueNotSupported".to_string()
        )]
    );
}

/// apimachinery `pkg/labels/selector.go` `NewRequirement` validates every value as a label
/// value; the list and watch handlers answer the parse error as 400 BadRequest.
#[tokio::test]
async fn label_selectors_with_invalid_values_are_bad_requests() {
    let emu = start().await;
    for path in [
        format!("{CMS}?labelSelector=app%3D-bad-"),
        format!("{CMS}?watch=true&labelSelector=app%20in%20(ok,-bad-)"),
    ] {
        let r = request(&emu, "GET", &path, None, "").await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        let s = r.json();
        assert_eq!(s["reason"], "BadRequest");
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .starts_with("unable to parse requirement: values[")
                && s["message"]
                    .as_str()
                    .unwrap()
                    .contains("[app]: Invalid value: \"-bad-\""),
            "{s}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Class 3: Status documents.

/// apimachinery `pkg/api/errors/errors.go`: NewInvalid names the Kind, NewNotFound,
/// NewAlreadyExists and NewConflict the resource; StatusDetails' group is omitempty.
/// A failed delete precondition is `rest.BeforeDelete`'s NewConflict on the Kind.
#[tokio::test]
async fn status_details_name_the_kind_or_the_resource() {
    let emu = start().await;
    let r = post(&emu, CMS, json!({"metadata": {"name": "Bad"}})).await;
    assert_eq!(r.status, 422);
    let s = r.json();
    assert_eq!(s["details"]["kind"], "ConfigMap");
    assert!(s["details"].get("group").is_none(), "{s}");

    let r = request(&emu, "GET", &format!("{CMS}/missing"), None, "").await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["details"],
        json!({"name": "missing", "kind": "configmaps"})
    );

    let r = post(&emu, CMS, json!({"metadata": {"name": "a"}})).await;
    assert_eq!(r.status, 201);
    let uid = r.json()["metadata"]["uid"].as_str().unwrap().to_string();
    let r = post(&emu, CMS, json!({"metadata": {"name": "a"}})).await;
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["details"]["kind"], "configmaps");

    let r = request(
        &emu,
        "DELETE",
        &format!("{CMS}/a"),
        Some("application/json"),
        &json!({"preconditions": {"uid": "not-the-uid"}}).to_string(),
    )
    .await;
    assert_eq!(r.status, 409);
    let s = r.json();
    assert_eq!(s["reason"], "Conflict");
    assert_eq!(s["details"], json!({"name": "a", "kind": "ConfigMap"}));
    assert_eq!(
        s["message"],
        format!(
            "Operation cannot be fulfilled on ConfigMap \"a\": the UID in the precondition (not-the-uid) does not match the UID in record ({uid}). The object might have been deleted and then recreated"
        )
    );

    // A deployment of apps: the group is named.
    let r = request(&emu, "GET", &format!("{DEPLOYS}/missing"), None, "").await;
    assert_eq!(
        r.json()["details"],
        json!({"name": "missing", "group": "apps", "kind": "deployments"})
    );
}

/// apimachinery `errors.NewApplyConflict`: the details carry the causes only.
#[tokio::test]
async fn apply_conflicts_have_no_details_name_or_kind() {
    let emu = start().await;
    let emu = &emu;
    let apply = |manager: &str, value: &str| {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shared"}, "data": {"k": value}});
        let path = format!("{CMS}/shared?fieldManager={manager}");
        async move {
            request(
                emu,
                "PATCH",
                &path,
                Some("application/apply-patch+yaml"),
                &body.to_string(),
            )
            .await
        }
    };
    assert_eq!(apply("one", "1").await.status, 201);
    let r = apply("two", "2").await;
    assert_eq!(r.status, 409);
    let d = r.json()["details"].clone();
    assert!(d.get("name").is_none() && d.get("kind").is_none(), "{d}");
    assert_eq!(d["causes"][0]["reason"], "FieldManagerConflict");
}

/// pkg/registry/apps/deployment/storage/storage.go `scaleUpdatedObjectInfo`: an invalid
/// Scale is `errors.NewInvalid(autoscaling.Kind("Scale"), ...)`, and a missing object is
/// NotFound on `deployments/scale`.
#[tokio::test]
async fn scale_errors_name_autoscaling_scale() {
    let emu = start().await;
    let labels = json!({"app": "web"});
    let d = deployment("web", Some(json!({"matchLabels": labels})), labels.clone());
    assert_eq!(post(&emu, DEPLOYS, d).await.status, 201);
    let r = request(
        &emu,
        "PATCH",
        &format!("{DEPLOYS}/web/scale"),
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":-1}}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let s = r.json();
    assert_eq!(s["details"]["group"], "autoscaling");
    assert_eq!(s["details"]["kind"], "Scale");
    assert_eq!(fields(&s), ["spec.replicas"]);
    assert!(
        s["message"]
            .as_str()
            .unwrap()
            .starts_with("Scale.autoscaling \"web\" is invalid: spec.replicas"),
        "{s}"
    );
    let r = request(
        &emu,
        "PATCH",
        &format!("{DEPLOYS}/gone/scale"),
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":1}}"#,
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json()["details"],
        json!({"name": "gone", "group": "apps", "kind": "deployments/scale"})
    );
}

/// apimachinery `pkg/apis/meta/v1/validation/validation.go` (ValidateCreateOptions,
/// ValidatePatchOptions, ValidateDeleteOptions), answered by the handlers as
/// `errors.NewInvalid` on the options kind in group `meta.k8s.io` with no name.
#[tokio::test]
async fn bad_request_options_are_invalid_options() {
    let emu = start().await;
    let r = post(
        &emu,
        &format!("{CMS}?dryRun=bogus"),
        json!({"metadata": {"name": "x"}}),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let s = r.json();
    assert_eq!(
        s["details"],
        json!({"group": "meta.k8s.io", "kind": "CreateOptions", "causes": [{
            "reason": "FieldValueNotSupported", "field": "dryRun",
            "message": "Unsupported value: []string{\"bogus\"}: supported values: \"All\""}]})
    );
    assert_eq!(
        s["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: []string{\"bogus\"}: supported values: \"All\""
    );

    assert_eq!(
        post(&emu, CMS, json!({"metadata": {"name": "x"}}))
            .await
            .status,
        201
    );
    let r = request(
        &emu,
        "PATCH",
        &format!("{CMS}/x?force=true"),
        Some("application/merge-patch+json"),
        r#"{"data":{"a":"b"}}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let s = r.json();
    assert_eq!(s["details"]["kind"], "PatchOptions");
    assert_eq!(s["details"]["group"], "meta.k8s.io");
    assert_eq!(
        causes(&s),
        [("force".to_string(), "FieldValueForbidden".to_string())]
    );

    // Apply without a fieldManager.
    let r = request(
        &emu,
        "PATCH",
        &format!("{CMS}/x"),
        Some("application/apply-patch+yaml"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(
        causes(&r.json()),
        [("fieldManager".to_string(), "FieldValueRequired".to_string())]
    );

    let r = request(
        &emu,
        "DELETE",
        &format!("{CMS}/x?propagationPolicy=Sometimes"),
        None,
        "",
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.json()["details"]["kind"], "DeleteOptions");
}

/// handlers/patch.go: `jsonpatch.DecodePatch` accepts any list of operations; applying an
/// unknown one fails, answered with `NewGenericServerResponse(422, ...)`.
#[tokio::test]
async fn an_unknown_json_patch_operation_is_invalid() {
    let emu = start().await;
    assert_eq!(
        post(&emu, CMS, json!({"metadata": {"name": "x"}}))
            .await
            .status,
        201
    );
    let r = request(
        &emu,
        "PATCH",
        &format!("{CMS}/x"),
        Some("application/json-patch+json"),
        r#"[{"op":"bogus","path":"/data/a","value":"b"}]"#,
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.body);
    let s = r.json();
    assert_eq!(s["reason"], "Invalid");
    assert_eq!(
        s["message"],
        "the server rejected our request due to an error in our request"
    );
}

/// A path under an API group the server does not serve reaches no go-restful WebService and
/// is answered by the mux's NotFound handler: plain text, not a Status.
#[tokio::test]
async fn unknown_api_groups_are_a_plain_404() {
    let emu = start().await;
    for path in [
        "/apis/nothing.example.com/v1/namespaces/default/things",
        "/apis/nothing.example.com/v1",
        "/apis/nothing.example.com",
        "/apis/apps/v9/deployments",
    ] {
        let r = request(&emu, "GET", path, None, "").await;
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.content_type, "text/plain; charset=utf-8", "{path}");
        assert_eq!(r.body, "404 page not found\n", "{path}");
    }
    // An unknown resource of a served group-version is go-restful's 404, as a Status.
    let r = request(&emu, "GET", "/api/v1/nothings", None, "").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["reason"], "NotFound");
}

/// handlers/create.go negotiates the body's serializer (`NegotiateInputSerializer`); a
/// patch media type is none of them: 415 with the accepted types.
#[tokio::test]
async fn a_post_with_a_patch_content_type_is_unsupported() {
    let emu = start().await;
    let r = request(
        &emu,
        "POST",
        CMS,
        Some("application/merge-patch+json"),
        r#"{"metadata":{"name":"x"}}"#,
    )
    .await;
    assert_eq!(r.status, 415, "{}", r.body);
    let s = r.json();
    assert_eq!(s["reason"], "UnsupportedMediaType");
    assert_eq!(
        s["message"],
        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    );
}

// ---------------------------------------------------------------------------------------
// Class 5: watch.

/// storage/cacher/cache_watcher.go: `nextBookmarkTime` schedules a bookmark 2 s before the
/// watch's deadline, and `processInterval` sends only events newer than the version the
/// watch started from; custom resources are served by the same cacher.
#[tokio::test]
async fn a_bookmark_arrives_before_the_watch_times_out() {
    let emu = start().await;
    for (path, obj) in [
        (CMS, json!({"metadata": {"name": "b1"}})),
        (ROUTES, route("b1")),
    ] {
        let created = post(&emu, path, obj).await.json();
        let rv = created["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let watch = format!(
            "{path}?watch=true&allowWatchBookmarks=true&timeoutSeconds=4&resourceVersion={rv}"
        );
        let started = Instant::now();
        let (resp, ()) = tokio::join!(request(&emu, "GET", &watch, None, ""), async {
            // A newer resourceVersion: another object written after the watch began.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let other =
                json!({"metadata": {"name": format!("other-{}", started.elapsed().as_nanos())}});
            assert_eq!(post(&emu, CMS, other).await.status, 201);
        });
        let elapsed = started.elapsed();
        assert_eq!(resp.status, 200);
        let events = resp.events();
        let bookmarks: Vec<&Value> = events.iter().filter(|e| e["type"] == "BOOKMARK").collect();
        assert_eq!(bookmarks.len(), 1, "{path}: {events:?}");
        let brv: u64 = bookmarks[0]["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(brv > rv.parse::<u64>().unwrap(), "{path}: {events:?}");
        assert!(
            elapsed >= Duration::from_millis(3900) && elapsed < Duration::from_secs(6),
            "{elapsed:?}"
        );
    }
}

/// Without a newer resourceVersion no bookmark is sent (cache_watcher.go `processInterval`).
#[tokio::test]
async fn no_bookmark_without_a_newer_resource_version() {
    let emu = start().await;
    let created = post(&emu, ROUTES, route("quiet")).await.json();
    let rv = created["metadata"]["resourceVersion"].as_str().unwrap();
    let watch = format!(
        "{ROUTES}?watch=true&allowWatchBookmarks=true&timeoutSeconds=3&resourceVersion={rv}"
    );
    let resp = request(&emu, "GET", &watch, None, "").await;
    assert_eq!(resp.status, 200);
    assert!(resp.events().is_empty(), "{}", resp.body);
}

/// A watch from a version older than the watch cache's window answers 200 with one ERROR
/// event carrying a 410 Expired Status (`errors.NewResourceExpired`), and ends.
#[tokio::test]
async fn a_watch_from_an_old_version_of_a_custom_resource_expires() {
    let emu = start().await;
    assert_eq!(post(&emu, ROUTES, route("r")).await.status, 201);
    let started = Instant::now();
    let resp = request(
        &emu,
        "GET",
        &format!("{ROUTES}?watch=true&resourceVersion=1&timeoutSeconds=30"),
        None,
        "",
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the watch ended"
    );
    assert_eq!(resp.status, 200);
    let events = resp.events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["type"], "ERROR");
    assert_eq!(events[0]["object"]["code"], 410);
    assert_eq!(events[0]["object"]["reason"], "Expired");
}

// ---------------------------------------------------------------------------------------
// Class 6: lists.

/// storage/etcd3/store.go `GetList`: remainingItemCount is computed only when the
/// predicate is empty; with a label or field selector it is absent.
#[tokio::test]
async fn remaining_item_count_only_without_selectors() {
    let emu = start().await;
    for n in ["a", "b", "c"] {
        let cm = json!({"metadata": {"name": n, "labels": {"set": "x"}}});
        assert_eq!(post(&emu, CMS, cm).await.status, 201);
    }
    let plain = request(&emu, "GET", &format!("{CMS}?limit=1"), None, "")
        .await
        .json();
    assert!(plain["metadata"]["continue"].is_string());
    assert!(plain["metadata"]["remainingItemCount"].is_u64(), "{plain}");
    for q in [
        "labelSelector=set%3Dx",
        "fieldSelector=metadata.namespace%3Ddefault",
    ] {
        let l = request(&emu, "GET", &format!("{CMS}?limit=1&{q}"), None, "")
            .await
            .json();
        assert!(l["metadata"]["continue"].is_string(), "{q}: {l}");
        assert!(
            l["metadata"].get("remainingItemCount").is_none(),
            "{q}: {l}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Class 8: discovery.

/// Built-in resources list the verbs their storage implements, sorted (endpoints/
/// installer.go); the namespace storage has no DeleteCollection. Custom resources list
/// apiextensions' fixed verbs and the CRD's names: the InferencePool CRD has the short name
/// `infpool` and no categories. Every resource carries its storageVersionHash.
#[tokio::test]
async fn discovery_lists_the_real_verbs_and_categories() {
    let emu = start().await;
    let core = request(&emu, "GET", "/api/v1", None, "").await.json();
    let find = |doc: &Value, name: &str| {
        doc["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap()
    };
    let ns = find(&core, "namespaces");
    assert_eq!(
        ns["verbs"],
        json!([
            "create", "delete", "get", "list", "patch", "update", "watch"
        ])
    );
    assert!(ns.get("categories").is_none());
    let pods = find(&core, "pods");
    assert_eq!(pods["categories"], json!(["all"]));
    // discovery.StorageVersionHash("", "v1", "Pod").
    assert_eq!(pods["storageVersionHash"], "xPOwRZ+Yhw8=");
    let pools = request(
        &emu,
        "GET",
        "/apis/inference.networking.k8s.io/v1",
        None,
        "",
    )
    .await
    .json();
    let pool = find(&pools, "inferencepools");
    assert!(pool.get("categories").is_none(), "{pool}");
    assert_eq!(pool["shortNames"], json!(["infpool"]));
    assert_eq!(
        pool["verbs"],
        json!([
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "create",
            "update",
            "watch"
        ])
    );
}

// ---------------------------------------------------------------------------------------
// Class 7: controllers and defaults.

/// Polls `path` until `cond` holds on its JSON (bounded).
async fn wait_for(
    emu: &RunningEmulator,
    path: &str,
    what: &str,
    cond: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = request(emu, "GET", path, None, "").await;
        if r.status == 200 {
            let v = r.json();
            if cond(&v) {
                return v;
            }
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn start_cluster() -> RunningEmulator {
    Emulator::builder()
        .nodes(1)
        .start_delay(Duration::from_millis(50))
        .start()
        .await
        .expect("emulator starts")
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

/// pkg/controller/deployment/sync.go calculateStatus and replicaset/replica_set_utils.go
/// calculateStatus set terminatingReplicas (DeploymentReplicaSetTerminatingReplicas), 0
/// included; the pods a ReplicaSet makes carry the defaults of SetDefaults_PodSpec, the
/// ServiceAccount admission plugin (serviceAccount(Name), the kube-api-access projected
/// volume and its mount), the Priority plugin (priority, preemptionPolicy), the
/// DefaultTolerationSeconds plugin and the scheduler's nodeName — the real key set.
#[tokio::test]
async fn replica_set_pods_and_deployment_status_have_the_real_fields() {
    let emu = start_cluster().await;
    let labels = json!({"app": "web"});
    let d = deployment("web", Some(json!({"matchLabels": labels})), labels.clone());
    assert_eq!(post(&emu, DEPLOYS, d).await.status, 201);
    let d = wait_for(
        &emu,
        &format!("{DEPLOYS}/web"),
        "an available deployment",
        |d| d["status"]["availableReplicas"] == 1,
    )
    .await;
    assert_eq!(d["status"]["terminatingReplicas"], 0, "{}", d["status"]);
    let rs = request(
        &emu,
        "GET",
        "/apis/apps/v1/namespaces/default/replicasets",
        None,
        "",
    )
    .await
    .json();
    assert_eq!(rs["items"][0]["status"]["terminatingReplicas"], 0);
    let pods = request(&emu, "GET", "/api/v1/namespaces/default/pods", None, "")
        .await
        .json();
    let spec = &pods["items"][0]["spec"];
    assert_eq!(
        keys(spec),
        [
            "containers",
            "dnsPolicy",
            "enableServiceLinks",
            "nodeName",
            "preemptionPolicy",
            "priority",
            "restartPolicy",
            "schedulerName",
            "securityContext",
            "serviceAccount",
            "serviceAccountName",
            "terminationGracePeriodSeconds",
            "tolerations",
            "volumes",
        ]
    );
    assert_eq!(spec["priority"], 0);
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
    let volume = &spec["volumes"][0];
    assert!(
        volume["name"]
            .as_str()
            .unwrap()
            .starts_with("kube-api-access-")
    );
    assert_eq!(
        volume["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt"
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"],
        json!([{"name": volume["name"], "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
}

/// pkg/controller/certificates/rootcacertpublisher/publisher.go: every namespace gets the
/// kube-root-ca.crt ConfigMap, written by kube-controller-manager.
#[tokio::test]
async fn every_namespace_gets_kube_root_ca_crt() {
    let emu = start().await;
    assert_eq!(
        post(
            &emu,
            "/api/v1/namespaces",
            json!({"metadata": {"name": "team"}})
        )
        .await
        .status,
        201
    );
    let cm = wait_for(
        &emu,
        "/api/v1/namespaces/team/configmaps/kube-root-ca.crt",
        "kube-root-ca.crt",
        |_| true,
    )
    .await;
    assert!(
        cm["data"]["ca.crt"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----\n")
    );
    assert_eq!(
        cm["metadata"]["annotations"]["kubernetes.io/description"],
        "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
    );
    assert_eq!(
        cm["metadata"]["managedFields"][0]["manager"],
        "kube-controller-manager"
    );
}

/// pkg/controller/namespace/deletion/status_condition_utils.go: a terminating namespace
/// whose content has finalizers reports NamespaceFinalizersRemaining True
/// (SomeFinalizersRemain) and NamespaceContentRemaining True (SomeResourcesRemain); the
/// NamespaceLifecycle admission plugin refuses creates there with a NamespaceTerminating
/// cause on `metadata.namespace`.
#[tokio::test]
async fn terminating_namespaces_report_finalizers_and_refuse_creates() {
    let emu = start().await;
    assert_eq!(
        post(
            &emu,
            "/api/v1/namespaces",
            json!({"metadata": {"name": "gone"}})
        )
        .await
        .status,
        201
    );
    let cms = "/api/v1/namespaces/gone/configmaps";
    let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
    assert_eq!(post(&emu, cms, held).await.status, 201);
    let r = request(&emu, "DELETE", "/api/v1/namespaces/gone", None, "").await;
    assert_eq!(r.status, 200);
    let ns = wait_for(
        &emu,
        "/api/v1/namespaces/gone",
        "finalizer conditions",
        |ns| {
            ns["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "NamespaceFinalizersRemaining")
            })
        },
    )
    .await;
    let cond = |ty: &str| {
        ns["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == ty)
            .cloned()
            .unwrap()
    };
    let f = cond("NamespaceFinalizersRemaining");
    assert_eq!(f["status"], "True");
    assert_eq!(f["reason"], "SomeFinalizersRemain");
    assert_eq!(
        f["message"],
        "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
    );
    let c = cond("NamespaceContentRemaining");
    assert_eq!(c["reason"], "SomeResourcesRemain");
    assert_eq!(
        c["message"],
        "Some resources are remaining: configmaps. has 1 resource instances"
    );
    assert_eq!(cond("NamespaceDeletionDiscoveryFailure")["status"], "False");

    let r = post(&emu, cms, json!({"metadata": {"name": "late"}})).await;
    assert_eq!(r.status, 403, "{}", r.body);
    let s = r.json();
    assert_eq!(
        s["details"]["causes"],
        json!([{"reason": "NamespaceTerminating", "message": "namespace gone is being terminated",
            "field": "metadata.namespace"}])
    );

    // Releasing the finalizer lets the namespace go.
    let r = request(
        &emu,
        "PATCH",
        &format!("{cms}/held"),
        Some("application/merge-patch+json"),
        r#"{"metadata":{"finalizers":null}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while request(&emu, "GET", "/api/v1/namespaces/gone", None, "")
        .await
        .status
        != 404
    {
        assert!(Instant::now() < deadline, "the namespace is removed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// registry/generic/registry/store.go Delete: a dry run answers with the object as the
/// delete would leave it; a pod's deletion is always graceful (pod strategy
/// CheckGracefulDelete), so even an unscheduled pod comes back with deletionTimestamp and
/// deletionGracePeriodSeconds 0, and stays.
#[tokio::test]
async fn dry_run_deletes_answer_with_the_object_as_it_would_be() {
    let emu = start().await;
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "img:1"}]}});
    assert_eq!(post(&emu, pods, pod).await.status, 201);
    let r = request(&emu, "DELETE", &format!("{pods}/p?dryRun=All"), None, "").await;
    assert_eq!(r.status, 200);
    let o = r.json();
    assert_eq!(o["kind"], "Pod");
    assert!(o["metadata"]["deletionTimestamp"].is_string(), "{o}");
    assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
    let still = request(&emu, "GET", &format!("{pods}/p"), None, "").await;
    assert_eq!(still.status, 200);
    assert!(still.json()["metadata"].get("deletionTimestamp").is_none());
}

/// pkg/registry/apps/deployment/strategy.go deploymentStatusStrategy.PrepareForUpdate
/// resets only the spec and the labels: a `/status` write keeps annotation changes, and
/// the generation (bumped by the main endpoint's strategy only) stays.
#[tokio::test]
async fn deployment_status_writes_keep_annotation_changes() {
    let emu = start().await;
    let labels = json!({"app": "web"});
    let d = deployment("web", Some(json!({"matchLabels": labels})), labels.clone());
    let created = post(&emu, DEPLOYS, d).await.json();
    let mut new = created.clone();
    new["metadata"]["annotations"] = json!({"example.com/note": "kept"});
    new["metadata"]["labels"] = json!({"dropped": "yes"});
    new["spec"]["replicas"] = json!(5);
    new["status"] = json!({"observedGeneration": 1, "replicas": 0});
    let r = request(
        &emu,
        "PUT",
        &format!("{DEPLOYS}/web/status"),
        Some("application/json"),
        &new.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let got = r.json();
    assert_eq!(got["metadata"]["annotations"]["example.com/note"], "kept");
    assert!(got["metadata"].get("labels").is_none(), "{got}");
    assert_eq!(got["spec"]["replicas"], 1);
    assert_eq!(got["metadata"]["generation"], 1);
    assert_eq!(got["status"]["observedGeneration"], 1);
}
