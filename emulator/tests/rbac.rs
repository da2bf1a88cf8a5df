//! rbac.authorization.k8s.io/v1 over HTTP: CRUD, list/watch and server-side apply with the
//! real `kube` client, and the real validation, defaulting, discovery and table answers
//! over raw HTTP. Each test cites the Kubernetes source it follows.

mod wire;

use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::{Client, Config};
use serde_json::{Value, json};
use wire::{post, request, start};

const G: &str = "rbac.authorization.k8s.io";

fn client(emu: &modelplane_emulator::RunningEmulator) -> Client {
    Client::try_from(Config::new(emu.url().parse().unwrap())).unwrap()
}

fn role(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]})
}

fn binding(name: &str, ref_kind: &str, ref_name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": G, "kind": ref_kind, "name": ref_name},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}]})
}

fn causes(body: &Value) -> Vec<(String, String, String)> {
    body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["reason"].as_str().unwrap().to_string(),
                c["field"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// CRUD, list and watch of all four kinds with the `kube` client's typed APIs; the
/// storage is pkg/registry/rbac/{role,rolebinding,clusterrole,clusterrolebinding}
/// (plain generic registries: no generation, no status, RoleBinding/Role namespaced).
#[tokio::test]
async fn crud_list_watch_with_kube_client() {
    let emu = start().await;
    let client = client(&emu);
    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    let cluster_bindings: Api<ClusterRoleBinding> = Api::all(client.clone());

    let r: Role = serde_json::from_value(role("reader")).unwrap();
    let created = roles.create(&PostParams::default(), &r).await.unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some("default"));
    assert!(created.metadata.generation.is_none());
    let rb: RoleBinding = serde_json::from_value(binding("read", "Role", "reader")).unwrap();
    bindings.create(&PostParams::default(), &rb).await.unwrap();

    let cr: ClusterRole = serde_json::from_value(json!({"metadata": {"name": "nodes-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                  {"nonResourceURLs": ["/healthz", "/metrics"], "verbs": ["get"]}]}))
    .unwrap();
    cluster_roles
        .create(&PostParams::default(), &cr)
        .await
        .unwrap();
    let crb: ClusterRoleBinding = serde_json::from_value(json!({"metadata": {"name": "nodes"},
        "roleRef": {"apiGroup": G, "kind": "ClusterRole", "name": "nodes-reader"},
        "subjects": [{"kind": "Group", "name": "system:nodes"},
                     {"kind": "ServiceAccount", "name": "agent", "namespace": "kube-system"}]}))
    .unwrap();
    let got = cluster_bindings
        .create(&PostParams::default(), &crb)
        .await
        .unwrap();
    // pkg/apis/rbac/v1/defaults.go SetDefaults_Subject: a Group gets the RBAC apiGroup.
    let subjects = got.subjects.unwrap();
    assert_eq!(subjects[0].api_group.as_deref(), Some(G));
    assert_eq!(subjects[1].api_group, None);

    assert_eq!(
        roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    assert_eq!(
        bindings.get("read").await.unwrap().role_ref.name,
        "reader".to_string()
    );
    assert_eq!(
        cluster_roles
            .get("nodes-reader")
            .await
            .unwrap()
            .rules
            .unwrap()[1]
            .non_resource_urls
            .as_ref()
            .unwrap()
            .len(),
        2
    );
    let names: Vec<String> = cluster_bindings
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|b| b.metadata.name.unwrap())
        .collect();
    assert_eq!(names, ["nodes"]);

    // Update (rules may change), then watch from the list's resourceVersion sees the delete.
    let mut r = roles.get("reader").await.unwrap();
    r.rules.as_mut().unwrap()[0].verbs.push("watch".into());
    let r = roles
        .replace("reader", &PostParams::default(), &r)
        .await
        .unwrap();
    assert_eq!(r.rules.unwrap()[0].verbs, ["get", "list", "watch"]);
    let list = roles.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.unwrap();
    roles
        .delete("reader", &DeleteParams::default())
        .await
        .unwrap();
    use futures::StreamExt;
    let mut stream = roles
        .watch(&WatchParams::default().timeout(2), &rv)
        .await
        .unwrap()
        .boxed();
    let ev = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(ev, kube::core::WatchEvent::Deleted(ref o) if o.metadata.name.as_deref() == Some("reader")),
        "{ev:?}"
    );
    bindings
        .delete("read", &DeleteParams::default())
        .await
        .unwrap();
    cluster_bindings
        .delete("nodes", &DeleteParams::default())
        .await
        .unwrap();
    cluster_roles
        .delete("nodes-reader", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        cluster_roles
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    emu.shutdown().await;
}

/// Server-side apply of a Role and RoleBinding: roleRef is an atomic struct
/// (`x-kubernetes-map-type: atomic` in the rbac/v1 OpenAPI, k8s.io/api rbac/v1 types.go
/// `+structType=atomic`), `rules` an atomic list; re-applying changes nothing.
#[tokio::test]
async fn server_side_apply_role_and_binding() {
    let emu = start().await;
    let client = client(&emu);
    let roles: Api<Role> = Api::namespaced(client.clone(), "default");
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), "default");
    let pp = PatchParams::apply("rbac-test");
    let a = roles
        .patch("reader", &pp, &Patch::Apply(role("reader")))
        .await
        .unwrap();
    let b = roles
        .patch("reader", &pp, &Patch::Apply(role("reader")))
        .await
        .unwrap();
    assert_eq!(a.metadata.resource_version, b.metadata.resource_version);
    let mf = &b.metadata.managed_fields.unwrap()[0];
    assert_eq!(mf.manager.as_deref(), Some("rbac-test"));
    assert_eq!(mf.operation.as_deref(), Some("Apply"));
    assert_eq!(mf.fields_v1.as_ref().unwrap().0, json!({"f:rules": {}}));
    let rb = bindings
        .patch(
            "read",
            &pp,
            &Patch::Apply(binding("read", "Role", "reader")),
        )
        .await
        .unwrap();
    assert_eq!(
        rb.metadata.managed_fields.unwrap()[0]
            .fields_v1
            .as_ref()
            .unwrap()
            .0,
        json!({"f:roleRef": {}, "f:subjects": {}})
    );
    // Applying a different roleRef is an update, and roleRef is immutable.
    let err = bindings
        .patch(
            "read",
            &pp,
            &Patch::Apply(binding("read", "ClusterRole", "view")),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert!(
                s.message.ends_with("cannot change roleRef"),
                "{}",
                s.message
            );
        }
        other => panic!("{other:?}"),
    }
    emu.shutdown().await;
}

/// pkg/apis/rbac/validation/validation.go `ValidatePolicyRule`: a rule without verbs is
/// `Required value: verbs must contain at least one value` at `rules[0].verbs`; a
/// resource rule needs apiGroups and resources; nonResourceURLs are refused in a Role and
/// when mixed with resources (field.Invalid with the `[]string` printed by %#v).
#[tokio::test]
async fn role_rules_are_validated() {
    let emu = start().await;
    let path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
    let mut r = role("bad");
    r["rules"][0]["verbs"] = json!([]);
    let resp = post(&emu, path, r).await;
    assert_eq!(resp.status, 422, "{}", resp.body);
    let body = resp.json();
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(
        body["message"],
        "Role.rbac.authorization.k8s.io \"bad\" is invalid: rules[0].verbs: Required value: verbs must contain at least one value"
    );
    assert_eq!(body["details"]["group"], G);
    assert_eq!(body["details"]["kind"], "Role");
    assert_eq!(
        causes(&body),
        [(
            "FieldValueRequired".into(),
            "rules[0].verbs".into(),
            "Required value: verbs must contain at least one value".into()
        )]
    );

    let r = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "bad"},
        "rules": [{"resources": ["pods"], "verbs": ["get"]},
                  {"verbs": ["get"], "nonResourceURLs": ["/healthz"], "resources": ["pods"]}]});
    let body = post(&emu, path, r).await.json();
    assert_eq!(
        causes(&body),
        [
            (
                "FieldValueRequired".into(),
                "rules[0].apiGroups".into(),
                "Required value: resource rules must supply at least one api group".into()
            ),
            (
                "FieldValueInvalid".into(),
                "rules[1].nonResourceURLs".into(),
                "Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs".into()
            ),
            (
                "FieldValueInvalid".into(),
                "rules[1].nonResourceURLs".into(),
                "Invalid value: []string{\"/healthz\"}: rules cannot apply to both regular resources and non-resource URLs".into()
            ),
        ]
    );

    // ClusterRoles may have nonResourceURLs; the names are path segments
    // (ValidateRBACName = path.IsValidPathSegmentName), so ':' is fine and '/' is not.
    let cpath = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
    let ok = post(
        &emu,
        cpath,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:Metrics_Reader"},
            "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
    )
    .await;
    assert_eq!(ok.status, 201, "{}", ok.body);
    // A ClusterRole without rules is stored with `rules: null` (no omitempty on Rules).
    assert_eq!(ok.json()["rules"][0]["verbs"], json!(["get"]));
    let empty = post(
        &emu,
        cpath,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "empty"}}),
    )
    .await;
    assert_eq!(empty.status, 201, "{}", empty.body);
    assert_eq!(empty.json().get("rules"), Some(&Value::Null));
    let bad = post(
        &emu,
        cpath,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "a%b"}, "aggregationRule": {}}),
    )
    .await
    .json();
    assert_eq!(
        causes(&bad),
        [
            (
                "FieldValueInvalid".into(),
                "metadata.name".into(),
                "Invalid value: \"a%b\": may not contain '%'".into()
            ),
            (
                "FieldValueRequired".into(),
                "aggregationRule.clusterRoleSelectors".into(),
                "Required value: at least one clusterRoleSelector required if aggregationRule is non-nil".into()
            ),
        ]
    );
    emu.shutdown().await;
}

/// validation.go `ValidateRoleBinding`/`ValidateClusterRoleBinding` and
/// `ValidateRoleBindingSubject`, after the defaults of pkg/apis/rbac/v1/defaults.go
/// (roleRef.apiGroup, User/Group subject apiGroup).
#[tokio::test]
async fn bindings_are_validated() {
    let emu = start().await;
    let crb_path = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings";
    // A ClusterRoleBinding can only bind a ClusterRole.
    let resp = post(
        &emu,
        crb_path,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "roleRef": {"apiGroup": G, "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa"}]}),
    )
    .await;
    assert_eq!(resp.status, 422);
    let body = resp.json();
    assert_eq!(
        body["message"],
        "ClusterRoleBinding.rbac.authorization.k8s.io \"b\" is invalid: [roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\", subjects[0].namespace: Required value]"
    );
    assert_eq!(
        causes(&body),
        [
            (
                "FieldValueNotSupported".into(),
                "roleRef.kind".into(),
                "Unsupported value: \"Role\": supported values: \"ClusterRole\"".into()
            ),
            (
                "FieldValueRequired".into(),
                "subjects[0].namespace".into(),
                "Required value".into()
            ),
        ]
    );

    // roleRef without a name and a foreign apiGroup; subjects of every wrong shape.
    let rb_path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    let body = post(
        &emu,
        rb_path,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "b"},
        "roleRef": {"apiGroup": "example.com", "kind": "Role"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "Bad_SA", "apiGroup": "v1"},
            {"kind": "User", "name": "alice", "apiGroup": "example.com"},
            {"kind": "Robot", "name": "r2"},
            {"kind": "Group"}
        ]}),
    )
    .await
    .json();
    let fields: Vec<String> = causes(&body).into_iter().map(|c| c.1).collect();
    assert_eq!(
        fields,
        [
            "roleRef.apiGroup",
            "roleRef.name",
            "subjects[0].name",
            "subjects[0].apiGroup",
            "subjects[1].apiGroup",
            "subjects[2].kind",
            "subjects[3].name",
        ]
    );
    let c = causes(&body);
    assert_eq!(
        c[0].2,
        "Unsupported value: \"example.com\": supported values: \"rbac.authorization.k8s.io\""
    );
    assert_eq!(c[1].2, "Required value");
    assert!(
        c[2].2
            .starts_with("Invalid value: \"Bad_SA\": a lowercase RFC 1123 subdomain")
    );
    assert_eq!(c[3].2, "Unsupported value: \"v1\": supported values: \"\"");
    assert_eq!(
        c[5].2,
        "Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""
    );

    // Defaults: a roleRef without apiGroup gets the RBAC group, a User subject too.
    let resp = post(
        &emu,
        rb_path,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "ok"},
            "roleRef": {"kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "User", "name": "alice"}]}),
    )
    .await;
    assert_eq!(resp.status, 201, "{}", resp.body);
    let got = resp.json();
    assert_eq!(got["roleRef"]["apiGroup"], G);
    assert_eq!(got["subjects"][0]["apiGroup"], G);
    emu.shutdown().await;
}

/// validation.go `ValidateRoleBindingUpdate`: `field.Invalid(roleRef, <rbac.RoleRef>,
/// "cannot change roleRef")`, the value printed with %#v (the message kubectl users know:
/// `roleRef: Invalid value: rbac.RoleRef{APIGroup:..., Kind:..., Name:...}: cannot change roleRef`).
#[tokio::test]
async fn role_ref_is_immutable() {
    let emu = start().await;
    let rb_path = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
    assert_eq!(
        post(&emu, rb_path, binding("read", "Role", "reader"))
            .await
            .status,
        201
    );
    let mut changed = binding("read", "ClusterRole", "view");
    let resp = request(
        &emu,
        "PUT",
        &format!("{rb_path}/read"),
        Some("application/json"),
        &changed.to_string(),
    )
    .await;
    assert_eq!(resp.status, 422, "{}", resp.body);
    let body = resp.json();
    assert_eq!(
        body["message"],
        "RoleBinding.rbac.authorization.k8s.io \"read\" is invalid: roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef"
    );
    assert_eq!(
        causes(&body),
        [(
            "FieldValueInvalid".into(),
            "roleRef".into(),
            "Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"ClusterRole\", Name:\"view\"}: cannot change roleRef".into()
        )]
    );
    // Subjects may change.
    changed = binding("read", "Role", "reader");
    changed["subjects"] = json!([{"kind": "Group", "name": "devs"}]);
    let resp = request(
        &emu,
        "PUT",
        &format!("{rb_path}/read"),
        Some("application/json"),
        &changed.to_string(),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.body);
    // A merge patch changing the roleRef name is refused the same way.
    let resp = request(
        &emu,
        "PATCH",
        &format!("{rb_path}/read"),
        Some("application/merge-patch+json"),
        &json!({"roleRef": {"name": "other"}}).to_string(),
    )
    .await;
    assert_eq!(resp.status, 422, "{}", resp.body);
    assert!(resp.json()["message"].as_str().unwrap().contains(
        "rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"other\"}: cannot change roleRef"
    ));
    emu.shutdown().await;
}

/// Discovery: the four resources of pkg/registry/rbac/rest/storage_rbac.go, with the
/// standard verbs and no shortNames or categories (none are declared for RBAC kinds).
#[tokio::test]
async fn discovery_lists_rbac() {
    let emu = start().await;
    let doc = request(&emu, "GET", "/apis/rbac.authorization.k8s.io/v1", None, "")
        .await
        .json();
    assert_eq!(doc["groupVersion"], "rbac.authorization.k8s.io/v1");
    let resources = doc["resources"].as_array().unwrap();
    let names: Vec<&str> = resources
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "clusterrolebindings",
            "clusterroles",
            "rolebindings",
            "roles"
        ]
    );
    for r in resources {
        assert!(r.get("shortNames").is_none() && r.get("categories").is_none());
        assert_eq!(
            r["verbs"],
            json!([
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch"
            ])
        );
        assert_eq!(
            r["namespaced"],
            json!(r["name"] == "roles" || r["name"] == "rolebindings")
        );
    }
    let groups = request(&emu, "GET", "/apis", None, "").await.json();
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == G && g["preferredVersion"]["version"] == "v1")
    );
    emu.shutdown().await;
}

/// Tables: RoleBindings print Name, Role (`Kind/name`), Age and, with -o wide, Users,
/// Groups and ServiceAccounts (pkg/printers/internalversion/printers.go
/// `printRoleBinding`, `rbac.SubjectsStrings`); Roles have no printer and get the default
/// table convertor's Name and "Created At" (apiserver pkg/registry/rest/table.go).
#[tokio::test]
async fn tables() {
    let emu = start().await;
    let ns = "/apis/rbac.authorization.k8s.io/v1/namespaces/default";
    post(&emu, &format!("{ns}/roles"), role("reader")).await;
    let mut b = binding("read", "Role", "reader");
    b["subjects"] = json!([
        {"kind": "User", "name": "alice"},
        {"kind": "User", "name": "bob"},
        {"kind": "Group", "name": "devs"},
        {"kind": "ServiceAccount", "name": "default", "namespace": "default"}
    ]);
    post(&emu, &format!("{ns}/rolebindings"), b).await;
    let get_table = |path: String| {
        let emu = &emu;
        async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let host = emu
                .url()
                .strip_prefix("http://")
                .unwrap()
                .trim_end_matches('/')
                .to_string();
            let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
            let req = format!(
                "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: application/json;as=Table;v=v1;g=meta.k8s.io\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.unwrap();
            let mut raw = Vec::new();
            s.read_to_end(&mut raw).await.unwrap();
            let raw = String::from_utf8_lossy(&raw).into_owned();
            let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
            let body = if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
            {
                wire::dechunk(rest)
            } else {
                rest.to_string()
            };
            serde_json::from_str::<Value>(&body).unwrap()
        }
    };
    let t = get_table(format!("{ns}/rolebindings")).await;
    let cols: Vec<(&str, i64)> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["priority"].as_i64().unwrap()))
        .collect();
    assert_eq!(
        cols,
        [
            ("Name", 0),
            ("Role", 0),
            ("Age", 0),
            ("Users", 1),
            ("Groups", 1),
            ("ServiceAccounts", 1)
        ]
    );
    let cells = &t["rows"][0]["cells"];
    assert_eq!(cells[0], "read");
    assert_eq!(cells[1], "Role/reader");
    assert_eq!(cells[3], "alice, bob");
    assert_eq!(cells[4], "devs");
    assert_eq!(cells[5], "default/default");

    let t = get_table(format!("{ns}/roles")).await;
    let defs = t["columnDefinitions"].as_array().unwrap();
    assert_eq!(defs.len(), 2);
    assert_eq!(defs[1]["name"], "Created At");
    assert_eq!(defs[1]["type"], "date");
    let created = t["rows"][0]["object"]["metadata"]["creationTimestamp"].clone();
    assert_eq!(t["rows"][0]["cells"], json!(["reader", created]));
    emu.shutdown().await;
}
