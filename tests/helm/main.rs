//! The Helm chart (`deploy/helm/modelplane`): what it renders is what Kubernetes accepts.

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams, ValidationDirective};
use kube::core::GroupVersionKind;
use modelplane_emulator::{Crds, Emulator};
use modelplane_testkit::chart::{EVERYTHING, object, render, try_render};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The fields of `value` that `T` does not know, as paths (`spec.ports[0].nmae`).
fn unknown_fields<T: DeserializeOwned>(value: &Value) -> Result<Vec<String>, String> {
    fn render(path: &serde_ignored::Path, out: &mut String) {
        use serde_ignored::Path;
        match path {
            Path::Root => {}
            Path::Seq { parent, index } => {
                render(parent, out);
                out.push_str(&format!("[{index}]"));
            }
            Path::Map { parent, key } => {
                render(parent, out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Some { parent }
            | Path::NewtypeStruct { parent }
            | Path::NewtypeVariant { parent } => render(parent, out),
        }
    }
    let mut ignored = Vec::new();
    serde_ignored::deserialize::<_, _, T>(value.clone(), |path| {
        let mut rendered = String::new();
        render(&path, &mut rendered);
        ignored.push(rendered);
    })
    .map_err(|e| e.to_string())?;
    Ok(ignored)
}

/// The Prometheus Operator's ServiceMonitor, as far as the chart uses it (no Rust type
/// ships with k8s-openapi; these field names are the CRD's).
#[derive(Deserialize)]
#[allow(dead_code)]
struct ServiceMonitor {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: ObjectMeta,
    spec: ServiceMonitorSpec,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ServiceMonitorSpec {
    selector: LabelSelector,
    endpoints: Vec<ServiceMonitorEndpoint>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct ServiceMonitorEndpoint {
    port: String,
    path: String,
    interval: String,
}

/// Decodes a rendered object into its type; the unknown fields, or why it does not decode.
fn check(object: &Value) -> Result<Vec<String>, String> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    match (api_version, object["kind"].as_str().unwrap_or_default()) {
        ("v1", "ServiceAccount") => unknown_fields::<ServiceAccount>(object),
        ("v1", "ConfigMap") => unknown_fields::<ConfigMap>(object),
        ("v1", "Secret") => unknown_fields::<Secret>(object),
        ("v1", "Service") => unknown_fields::<Service>(object),
        ("apps/v1", "Deployment") => unknown_fields::<Deployment>(object),
        ("policy/v1", "PodDisruptionBudget") => unknown_fields::<PodDisruptionBudget>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => unknown_fields::<ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            unknown_fields::<ClusterRoleBinding>(object)
        }
        ("networking.k8s.io/v1", "NetworkPolicy") => unknown_fields::<NetworkPolicy>(object),
        ("monitoring.coreos.com/v1", "ServiceMonitor") => unknown_fields::<ServiceMonitor>(object),
        (api_version, kind) => Err(format!(
            "{api_version} {kind}: a kind this test does not know"
        )),
    }
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn every_rendered_object_is_its_kubernetes_type_with_no_unknown_field() {
    for values in [&[][..], &[EVERYTHING][..]] {
        let objects = render(values);
        for object in &objects {
            let name = format!("{} {}", object["kind"], object["metadata"]["name"]);
            assert_eq!(check(object), Ok(vec![]), "{name} with values {values:?}");
        }
        let optional = ["Secret", "NetworkPolicy", "ServiceMonitor"];
        let expected: BTreeSet<String> = [
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "Deployment",
            "PodDisruptionBudget",
            "ClusterRole",
            "ClusterRoleBinding",
        ]
        .into_iter()
        .chain(
            if values.is_empty() {
                &[][..]
            } else {
                &optional[..]
            }
            .iter()
            .copied(),
        )
        .map(String::from)
        .collect();
        assert_eq!(kinds(&objects), expected, "values {values:?}");
    }
}

#[test]
fn a_misspelt_or_mistyped_field_is_caught() {
    let mut objects = render(&[]);
    let deployment = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["imagee"] = json!("x");
    assert_eq!(
        check(deployment),
        Ok(vec!["spec.template.spec.containers[0].imagee".to_owned()])
    );
    deployment["spec"]["replicas"] = json!("two");
    assert!(check(deployment).is_err());
}

#[test]
fn values_the_schema_does_not_know_or_allow_are_refused() {
    let err = try_render(&[], &["api.replicaz=3"]).unwrap_err();
    assert!(err.contains("replicaz"), "{err}");
    let err = try_render(&[], &["bootstrapToken.value=too-short"]).unwrap_err();
    assert!(err.contains("bootstrapToken"), "{err}");
    let err = try_render(&[], &["database.existingSecret="]).unwrap_err();
    assert!(
        err.contains("database.existingSecret or database.url"),
        "{err}"
    );
}

/// The key check: its port on the API pods behind a Service of its own, and the protocol
/// the routes' filter uses passed to both roles (only `http` or `grpc`).
#[test]
fn the_key_check_has_a_service_and_its_protocol_is_configured() {
    let objects = try_render(&[], &["keys.protocol=grpc"]).unwrap();
    let service = object(&objects, "Service", "modelplane-authz");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "authz");
    assert_eq!(service["spec"]["ports"][0]["port"], 8083);
    assert_eq!(
        service["spec"]["selector"]["app.kubernetes.io/component"],
        "api"
    );
    let config = objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
    assert_eq!(config["data"]["MODELPLANE_AUTHZ_PROTOCOL"], "grpc");
    let err = try_render(&[], &["keys.protocol=soap"]).unwrap_err();
    assert!(err.contains("protocol"), "{err}");
    let off = try_render(&[], &["keys.enabled=false"]).unwrap();
    assert!(
        !off.iter()
            .any(|o| o["metadata"]["name"] == "modelplane-authz"),
        "no key check, no Service"
    );
}

#[test]
fn both_roles_run_from_one_image_with_restricted_pods_and_probes() {
    let objects = render(&[EVERYTHING]);
    let mut images = BTreeSet::new();
    for role in ["api", "worker"] {
        let value = object(&objects, "Deployment", &format!("modelplane-{role}"));
        let deployment: Deployment = serde_json::from_value(value.clone()).unwrap();
        let pod = deployment.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some(&*format!("modelplane-{role}"))
        );
        assert_eq!(pod.automount_service_account_token, Some(role == "worker"));
        let pod_security = pod.security_context.unwrap();
        assert_eq!(pod_security.run_as_non_root, Some(true));
        assert_eq!(
            pod_security.seccomp_profile.unwrap().type_,
            "RuntimeDefault"
        );
        let [container] = &pod.containers[..] else {
            panic!("one container")
        };
        images.insert(container.image.clone().unwrap());
        let env = container.env.as_ref().unwrap();
        let role_env = env.iter().find(|e| e.name == "MODELPLANE_ROLE").unwrap();
        assert_eq!(role_env.value.as_deref(), Some(role));
        for secret in ["DATABASE_URL", "MODELPLANE_BOOTSTRAP_TOKEN"] {
            let var = env.iter().find(|e| e.name == secret).unwrap();
            assert!(
                var.value.is_none() && var.value_from.as_ref().unwrap().secret_key_ref.is_some(),
                "{secret} from a Secret"
            );
        }
        let security = container.security_context.clone().unwrap();
        assert_eq!(security.allow_privilege_escalation, Some(false));
        assert_eq!(security.read_only_root_filesystem, Some(true));
        assert_eq!(security.run_as_non_root, Some(true));
        assert_eq!(
            security.capabilities.unwrap().drop,
            Some(vec!["ALL".to_owned()])
        );
        let path = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
            probe
                .as_ref()
                .unwrap()
                .http_get
                .as_ref()
                .unwrap()
                .path
                .clone()
                .unwrap()
        };
        assert_eq!(path(&container.liveness_probe), "/healthz");
        assert_eq!(path(&container.startup_probe), "/healthz");
        assert_eq!(path(&container.readiness_probe), "/readyz");
        let requests = container
            .resources
            .as_ref()
            .unwrap()
            .requests
            .as_ref()
            .unwrap();
        assert!(requests.contains_key("cpu") && requests.contains_key("memory"));
        let budget = object(
            &objects,
            "PodDisruptionBudget",
            &format!("modelplane-{role}"),
        );
        assert_eq!(
            budget["spec"]["selector"], value["spec"]["selector"],
            "the {role} budget covers the {role} pods"
        );
    }
    assert_eq!(images.len(), 1, "{images:?}");
    // Only the worker's ServiceAccount is bound to anything.
    for binding in objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().ends_with("Binding"))
    {
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "modelplane-worker", "namespace": "modelplane-system"}])
        );
    }
}

/// The kinds the emulator does not serve, whose dry run is left to a real cluster. The
/// ServiceMonitor is checked against the Prometheus Operator's published CRD.
const NOT_EMULATED: [&str; 1] = ["NetworkPolicy"];

#[tokio::test]
async fn the_rendered_objects_pass_a_server_side_dry_run_apply() {
    let emulator = Emulator::builder()
        .crds(Crds::Manifests(
            modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}")),
        ))
        .start()
        .await
        .unwrap();
    let client =
        kube::Client::try_from(kube::Config::new(emulator.url().parse().unwrap())).unwrap();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "modelplane-system"}})).unwrap(),
        )
        .await
        .unwrap();
    let objects = render(&[EVERYTHING]);
    let mut not_served = BTreeSet::new();
    let mut applied = 0;
    for object in &objects {
        let kind = object["kind"].as_str().unwrap();
        let name = object["metadata"]["name"].as_str().unwrap();
        let (group, version) = match object["apiVersion"].as_str().unwrap().split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", object["apiVersion"].as_str().unwrap()),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let Ok((resource, capabilities)) = kube::discovery::pinned_kind(&client, &gvk).await else {
            not_served.insert(kind.to_owned());
            continue;
        };
        let api: Api<DynamicObject> = match capabilities.scope {
            kube::discovery::Scope::Namespaced => {
                Api::namespaced_with(client.clone(), "modelplane-system", &resource)
            }
            kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let mut params = PatchParams::apply("helm").dry_run();
        params.field_validation = Some(ValidationDirective::Strict);
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .unwrap_or_else(|e| panic!("dry run of {kind} {name}: {e}"));
        assert!(
            api.get_opt(name).await.unwrap().is_none(),
            "the dry run of {kind} {name} stored it"
        );
        applied += 1;
    }
    assert_eq!(
        not_served,
        NOT_EMULATED.iter().map(|k| k.to_string()).collect()
    );
    assert_eq!(
        applied,
        objects.len()
            - objects
                .iter()
                .filter(|o| NOT_EMULATED.contains(&o["kind"].as_str().unwrap()))
                .count()
    );
    emulator.shutdown().await;
}
