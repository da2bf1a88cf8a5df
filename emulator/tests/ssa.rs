//! Server-side apply and managedFields as a real Kubernetes v1.36 API server records them
//! (issue #12, class 4). Each test states the real server's answer and cites the source it
//! follows: sigs.k8s.io/structured-merge-diff (`typed/compare.go`, `typed/tofieldset.go`,
//! `typed/merge.go`, `merge/update.go`, `fieldpath/serialize.go`) and k8s.io/apimachinery
//! `pkg/util/managedfields/internal` (`structuredmerge.go`, `managedfieldsupdater.go`,
//! `stripmeta.go`, `managedfields.go`).

#![allow(dead_code)]

mod wire;

use modelplane_emulator::RunningEmulator;
use serde_json::{Value, json};
use wire::{Resp, request, start};

const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

async fn apply(emu: &RunningEmulator, name: &str, query: &str, body: &str) -> Resp {
    request(
        emu,
        "PATCH",
        &format!("{DEPLOYS}/{name}?{query}"),
        Some("application/apply-patch+yaml"),
        body,
    )
    .await
}

/// The entries of `managedFields` as (manager, operation, fieldsV1).
fn managed(obj: &Value) -> Vec<(String, String, Value)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .unwrap_or_else(|| panic!("no managedFields: {obj}"))
        .iter()
        .map(|e| {
            (
                e["manager"].as_str().unwrap().to_string(),
                e["operation"].as_str().unwrap().to_string(),
                e["fieldsV1"].clone(),
            )
        })
        .collect()
}

/// A create (an Update operation) owns every path the write added compared with the empty
/// Deployment (`Creater.New`, handlers/create.go; `typed.Compare` in
/// structured-merge-diff typed/compare.go inserts each path present only on the new side
/// into Added, maps and list items included). Paths that the empty Deployment already has
/// (`spec.strategy`, `spec.template`, `spec.template.metadata`, `spec.template.spec`: structs
/// that are not pointers; `containers`: null) get no `.`; maps, pointer structs and list
/// items do (`fieldpath/serialize.go` writes `.` for a member that has children);
/// `metadata` itself is stripped (stripmeta.go); defaulted fields belong to the creator.
/// This is what a real v1.36 server records for this body (`kubectl create deployment`).
#[tokio::test]
async fn a_create_owns_maps_pointer_structs_and_list_items_with_dot_entries() {
    let emu = start().await;
    let body = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "nginx", "image": "nginx",
                    "ports": [{"containerPort": 80}]}]}}}});
    let r = request(
        &emu,
        "POST",
        &format!("{DEPLOYS}?fieldManager=kubectl-create"),
        Some("application/json"),
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let entries = managed(&r.json());
    assert_eq!(entries.len(), 1);
    assert_eq!(
        (entries[0].0.as_str(), entries[0].1.as_str()),
        ("kubectl-create", "Update")
    );
    assert_eq!(
        entries[0].2,
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:progressDeadlineSeconds": {},
                "f:replicas": {},
                "f:revisionHistoryLimit": {},
                "f:selector": {},
                "f:strategy": {
                    "f:rollingUpdate": {".": {}, "f:maxSurge": {}, "f:maxUnavailable": {}},
                    "f:type": {}
                },
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        "f:containers": {
                            "k:{\"name\":\"nginx\"}": {
                                ".": {},
                                "f:image": {},
                                "f:imagePullPolicy": {},
                                "f:name": {},
                                "f:ports": {
                                    ".": {},
                                    "k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                                        ".": {}, "f:containerPort": {}, "f:protocol": {}
                                    }
                                },
                                "f:resources": {},
                                "f:terminationMessagePath": {},
                                "f:terminationMessagePolicy": {}
                            }
                        },
                        "f:dnsPolicy": {},
                        "f:restartPolicy": {},
                        "f:schedulerName": {},
                        "f:securityContext": {},
                        "f:terminationGracePeriodSeconds": {}
                    }
                }
            }
        })
    );

    // An update that adds an annotation map and a pointer struct: the map and the struct
    // are Added (`.`), the changed scalar only Modified.
    let mut d = r.json();
    d["metadata"]["annotations"] = json!({"team": "a"});
    d["spec"]["replicas"] = json!(2);
    d["spec"]["template"]["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1"}});
    let r = request(
        &emu,
        "PUT",
        &format!("{DEPLOYS}/web?fieldManager=editor"),
        Some("application/json"),
        &d.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let entries = managed(&r.json());
    let editor = entries.iter().find(|e| e.0 == "editor").unwrap();
    assert_eq!(
        editor.2,
        json!({
            "f:metadata": {"f:annotations": {".": {}, "f:team": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                    "f:resources": {"f:limits": {".": {}, "f:cpu": {}}}
                }}}}
            }
        })
    );
    // The creator lost what the editor modified (merge/update.go: forced conflicts), but
    // keeps `resources`: it existed before (`{}`), so it is neither Added nor Modified.
    let creator = entries.iter().find(|e| e.0 == "kubectl-create").unwrap();
    assert!(creator.2["f:spec"].get("f:replicas").is_none());
    assert_eq!(
        creator.2["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]["f:resources"],
        json!({})
    );
}

/// An applier owns what its configuration specifies (`TypedValue.ToFieldSet`,
/// typed/tofieldset.go): list items are members (so `.` when they have children), fields
/// of structs and of maps with declared fields are not, and `metav1.OwnerReference` is an
/// atomic struct (`+structType=atomic`), so an owner reference item has no children.
#[tokio::test]
async fn an_applier_owns_list_items_with_dot_entries_and_atomic_owner_references() {
    let emu = start().await;
    let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                "uid": "0b8f6a57-7d4c-4c1e-9d0a-3f8f0b0c1d2e"}]},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx",
                    "env": [{"name": "A", "value": "1"}]}]}}}});
    let r = apply(&emu, "web", "fieldManager=mp", &cfg.to_string()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let entries = managed(&r.json());
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].2,
        json!({
            "f:metadata": {
                "f:labels": {"f:app": {}},
                "f:ownerReferences": {
                    "k:{\"uid\":\"0b8f6a57-7d4c-4c1e-9d0a-3f8f0b0c1d2e\"}": {}
                }
            },
            "f:spec": {
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                        ".": {},
                        "f:env": {"k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}}},
                        "f:image": {},
                        "f:name": {}
                    }}}
                }
            }
        })
    );
}

/// Two appliers in one associative list: the merged order is that of
/// `mergingWalker.visitListItems` (typed/merge.go). With live items [A, B, C] and a second
/// applier naming [C, A], B (which the configuration does not name) keeps its place, C
/// comes next, and A waits for its turn in the configuration: [B, C, A]. Same values are
/// shared, not conflicts (merge/update.go compares values, not positions).
#[tokio::test]
async fn two_appliers_merge_an_associative_list_in_the_real_order() {
    let emu = start().await;
    let env = |names: &[&str]| -> Value {
        names
            .iter()
            .map(|n| json!({"name": n, "value": n.to_lowercase()}))
            .collect()
    };
    let cfg = |env: Value| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx", "env": env}]}}}})
        .to_string()
    };
    let r = apply(&emu, "web", "fieldManager=one", &cfg(env(&["A", "B", "C"]))).await;
    assert_eq!(r.status, 201, "{}", r.body);
    let r = apply(&emu, "web", "fieldManager=two", &cfg(env(&["C", "A"]))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<String> = r.json()["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["B", "C", "A"]);
    // A new item of the second applier goes before the shared item it precedes:
    // live [B, C, A], configuration [D, A] gives [B, C, D, A].
    let r = apply(&emu, "web", "fieldManager=two", &cfg(env(&["D", "A"]))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let names: Vec<String> = r.json()["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["B", "C", "D", "A"]);
}

/// A dry-run apply answers with the object and the managers exactly as the write would
/// leave them (the dry-run flag only skips the storage write, registry/generic/registry
/// store.go), and stores nothing. Entries are ordered as `sortEncodedManagedFields`
/// (managedfields.go): Apply before Update, then by time, then by manager.
#[tokio::test]
async fn a_dry_run_apply_reports_the_managers_the_write_would_leave() {
    let emu = start().await;
    let cfg = |replicas: i64, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": image}]}}}})
        .to_string()
    };
    let r = apply(&emu, "web", "fieldManager=one", &cfg(1, "nginx")).await;
    assert_eq!(r.status, 201, "{}", r.body);
    // A third party scales with an Update.
    let r = request(
        &emu,
        "PATCH",
        &format!("{DEPLOYS}/web?fieldManager=scaler"),
        Some("application/merge-patch+json"),
        r#"{"spec":{"replicas":3}}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let before = r.json();
    // Without force, the second applier conflicts with `scaler` on replicas.
    let r = apply(&emu, "web", "fieldManager=two", &cfg(5, "nginx")).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let dry = apply(
        &emu,
        "web",
        "fieldManager=two&force=true&dryRun=All",
        &cfg(5, "nginx"),
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.body);
    let stored = request(&emu, "GET", &format!("{DEPLOYS}/web"), None, "")
        .await
        .json();
    assert_eq!(
        stored["metadata"]["managedFields"],
        before["metadata"]["managedFields"]
    );
    assert_eq!(stored["spec"]["replicas"], 3);
    let real = apply(&emu, "web", "fieldManager=two&force=true", &cfg(5, "nginx")).await;
    assert_eq!(real.status, 200, "{}", real.body);
    assert_eq!(managed(&dry.json()), managed(&real.json()));
    let order: Vec<(String, String)> = managed(&real.json())
        .into_iter()
        .map(|(m, o, _)| (m, o))
        .collect();
    // `scaler` lost replicas, its only field, and is gone; both appliers share the rest.
    assert_eq!(
        order,
        [
            ("one".to_string(), "Apply".to_string()),
            ("two".to_string(), "Apply".to_string())
        ]
    );
    let two = &managed(&real.json())[1].2;
    assert_eq!(two["f:spec"]["f:replicas"], json!({}));
    let one = &managed(&real.json())[0].2;
    assert!(one["f:spec"].get("f:replicas").is_none(), "{one}");
}

/// `application/apply-patch+yaml` bodies are YAML (handlers/patch.go: the apply patcher
/// decodes with k8s.io/apimachinery pkg/util/yaml.Unmarshal, i.e. sigs.k8s.io/yaml over
/// go-yaml v2): block style, comments, and YAML 1.1 scalars (`on` is true, so a label
/// value `on` is refused as a boolean where a string is wanted, while `"on"` is a string).
#[tokio::test]
async fn apply_bodies_may_be_real_yaml() {
    let emu = start().await;
    let cms = "/api/v1/namespaces/default/configmaps";
    let body = "# applied by hand\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n  labels:\n    enabled: \"on\"\ndata:\n  replicas: \"3\"\n  script: |\n    echo hi\n";
    let r = request(
        &emu,
        "PATCH",
        &format!("{cms}/cfg?fieldManager=hand"),
        Some("application/apply-patch+yaml"),
        body,
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let cm = r.json();
    assert_eq!(cm["metadata"]["labels"]["enabled"], "on");
    assert_eq!(cm["data"], json!({"replicas": "3", "script": "echo hi\n"}));
    assert_eq!(
        managed(&cm)[0].2,
        // `data` and `labels` are declared fields, so only their entries are members
        // (tofieldset.go), unlike an Update that adds them (they would get `.`).
        json!({"f:data": {"f:replicas": {}, "f:script": {}},
            "f:metadata": {"f:labels": {"f:enabled": {}}}})
    );
    // Unquoted, `on` is a boolean, and a ConfigMap's data values must be strings.
    let r = request(
        &emu,
        "PATCH",
        &format!("{cms}/cfg?fieldManager=hand"),
        Some("application/apply-patch+yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  flag: on\n",
    )
    .await;
    assert_eq!(r.status / 100, 4, "{}", r.body);
    // Malformed YAML is a 400 "error decoding patch".
    let r = request(
        &emu,
        "PATCH",
        &format!("{cms}/cfg?fieldManager=hand"),
        Some("application/apply-patch+yaml"),
        "apiVersion: v1\nkind: [ConfigMap\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding patch: error converting YAML to JSON: yaml: "),
        "{}",
        r.body
    );
}
