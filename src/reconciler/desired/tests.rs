use chrono::{TimeZone, Utc};
use serde_json::json;
use uuid::Uuid;

use super::*;
use crate::domain::{DeploymentSpec, DeploymentStatus, SpecLimits};

fn config() -> BuildConfig {
    BuildConfig {
        installation: "test".into(),
        engines: EngineDefaults {
            vllm_image: "vllm/vllm-openai:v0.11.0".into(),
            sglang_image: "lmsysorg/sglang:v0.5.4".into(),
            tgi_image: "ghcr.io/huggingface/text-generation-inference:3.3.6".into(),
            sim_image: "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1".into(),
            vllm_multinode_image: "vllm/vllm-openai:v0.11.1".into(),
            gpu_resource_name: "nvidia.com/gpu".into(),
            startup_timeout_seconds: 1800,
            pods: crate::domain::PodDefaults::default(),
        },
        default_gateway: Some("gateway-system/inference/http".into()),
        gpu_product_label: "nvidia.com/gpu.product".into(),
        s3_downloader_image: "amazon/aws-cli:2.22.0".into(),
        epp_image: "registry.k8s.io/gateway-api-inference-extension/epp:v1.4.0".into(),
        pd_epp_image: "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.8.0".into(),
        pd_sidecar_image: "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.8.0".into(),
        pod_monitor_interval_secs: None,
        activator: None,
        key_check: None,
        key_check_grpc: false,
    }
}

/// A record and its resolved spec, as the worker holds them.
#[derive(Clone)]
struct Rec {
    record: Deployment,
    serving: ServingSpec,
}

impl Rec {
    fn target(&self) -> Target<'_> {
        Target {
            record: &self.record,
            serving: &self.serving,
            canary_track: false,
            role: None,
        }
    }

    fn objects(&self, config: &BuildConfig) -> DesiredObjects {
        desired_objects(&self.target(), "team-a", false, config, None)
    }
}

fn record(name: &str, spec: serde_json::Value) -> Rec {
    let spec: DeploymentSpec = serde_json::from_value(spec).unwrap();
    let serving = spec.parse(name, &SpecLimits::default()).unwrap();
    let record = Deployment {
        id: Uuid::parse_str("01a200c1-83bb-709a-83d2-8acee715d77e").unwrap(),
        project: "team-a".into(),
        name: name.into(),
        generation: 3,
        status: DeploymentStatus::pending(i64::from(serving.replicas)),
        spec: serving.spec.clone(),
        restarted_at: None,
        deletion_requested_at: None,
        canary: None,
        created_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
        updated_at: Utc.with_ymd_and_hms(2026, 11, 22, 0, 0, 0).unwrap(),
        warnings: Vec::new(),
    };
    Rec { record, serving }
}

/// The objects as the API server receives them (JSON), and typed.
struct Built {
    typed: DesiredObjects,
    namespace: Value,
    deployment: Value,
    service: Value,
    http_route: Option<Value>,
    disruption_budget: Option<Value>,
}

impl Built {
    fn digest(&self) -> String {
        self.typed.digest()
    }
}

fn built(typed: DesiredObjects) -> Built {
    Built {
        namespace: as_json(&typed.namespace),
        deployment: as_json(&typed.deployment),
        service: as_json(&typed.service),
        http_route: typed.http_route.as_ref().map(as_json),
        disruption_budget: typed.disruption_budget.as_ref().map(as_json),
        typed,
    }
}

fn config_without_gateway() -> BuildConfig {
    BuildConfig {
        default_gateway: None,
        ..config()
    }
}

fn build(name: &str, spec: serde_json::Value) -> Built {
    built(record(name, spec).objects(&config()))
}

#[test]
fn vllm_on_gpus_with_everything() {
    let objects = build(
        "qwen",
        json!({
            "model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct", "revision": "main", "secretRef": {"name": "hf", "key": "token"}},
            "engine": {"kind": "vllm", "args": ["--enable-prefix-caching"], "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}, {"name": "API_KEY", "secretRef": {"name": "keys", "key": "api"}}],
                       "maxModelLen": 8192, "tensorParallelSize": 2},
            "replicas": 2,
            "resources": {"cpu": "8", "memory": "64Gi", "gpu": {"product": "NVIDIA-A100-SXM4-80GB"}, "sharedMemory": "8Gi"},
            "scheduling": {"nodeSelector": {"pool": "a100"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                           "priorityClassName": "inference"},
            "storage": {"cache": {"sizeLimit": "100Gi"}},
            "labels": {"team": "nlp"},
            "annotations": {"example.com/owner": "nlp"}
        }),
    );
    insta::assert_yaml_snapshot!("vllm_deployment", objects.deployment);
    insta::assert_yaml_snapshot!("vllm_service", objects.service);
    insta::assert_yaml_snapshot!("vllm_route", objects.http_route);
    insta::assert_yaml_snapshot!("namespace", objects.namespace);
}

#[test]
fn a_canary_is_its_own_track_on_the_shared_route() {
    let stable = record(
        "qwen",
        json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"}, "replicas": 2}),
    );
    let canary = crate::domain::Canary {
        spec: serde_json::from_value(json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
            "engine": {"kind": "sim", "image": "ghcr.io/llm-d/llm-d-inference-sim:v0.6.0"}, "replicas": 1})).unwrap(),
        weight: 20,
        header: crate::domain::CanaryHeader::default(),
        from_revision: None,
        promoting: false,
        started_by: "token:ci".into(),
        started_at: Utc.with_ymd_and_hms(2026, 11, 25, 0, 0, 0).unwrap(),
    };
    let canary_rec = canary_record(&stable.record, &canary);
    let canary_serving = canary.spec.serving("qwen").unwrap();
    let plan = CanaryPlan {
        target: Target {
            record: &canary_rec,
            serving: &canary_serving,
            canary_track: true,
            role: None,
        },
        routed_weight: 20,
        header: &canary.header,
    };
    let objects = desired_objects(&stable.target(), "team-a", false, &config(), Some(&plan));
    let track = objects.canary.as_ref().unwrap();
    let deployment = as_json(&track.deployment);
    let service = as_json(&track.service);
    // Its own selector: the stable selector's keys with its own instance, plus the track,
    // so neither track's Service or Deployment selects the other's pods.
    let stable_selector = as_json(&objects.deployment)["spec"]["selector"].clone();
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        json!({"app.kubernetes.io/instance": "qwen-canary", "app.kubernetes.io/name": "model-server",
               "modelplane.io/deployment-id": "01a200c1-83bb-709a-83d2-8acee715d77e", "modelplane.io/track": "canary"})
    );
    assert_eq!(
        stable_selector["matchLabels"]["app.kubernetes.io/instance"],
        "qwen"
    );
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // It serves the deployment's model name.
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("\"qwen\""), "{args}");
    insta::assert_yaml_snapshot!("canary_route", objects.http_route);
    insta::assert_yaml_snapshot!("canary_service", service);
    // No canary: the one rule again, and a different digest.
    let without = stable.objects(&config());
    assert_ne!(without.digest(), objects.digest());
    assert_eq!(
        as_json(&without.http_route)["spec"]["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn inference_pool_mode_makes_the_pool_its_picker_and_a_route_to_the_pool() {
    let objects = build(
        "qwen",
        json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"},
               "routing": {"mode": "InferencePool", "inferencePool": {"scorers": {"prefixCache": 0}}}}),
    );
    let pool = objects.typed.pool.as_ref().unwrap();
    insta::assert_yaml_snapshot!("pool_route", objects.http_route);
    insta::assert_yaml_snapshot!("pool", pool.pool);
    insta::assert_yaml_snapshot!("pool_picker", pool.picker);
    insta::assert_yaml_snapshot!(
        "pool_picker_rbac",
        (
            &pool.role,
            &pool.role_binding,
            &pool.metrics_auth_role,
            &pool.metrics_auth_binding
        )
    );
    insta::assert_yaml_snapshot!("pool_picker_config", pool.config_map);
    // The picker's pods are not model servers: neither the pool nor the Service selects them.
    let picker_labels = as_json(&pool.picker)["spec"]["template"]["metadata"]["labels"].clone();
    assert_eq!(picker_labels["app.kubernetes.io/name"], "endpoint-picker");
    assert_eq!(
        as_json(&pool.pool)["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"],
        "model-server"
    );
    // A scorer weighted 0 is left out of the profile.
    let config = as_json(&pool.config_map)["data"]["epp.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!config.contains("prefix-cache-scorer"), "{config}");
    assert!(objects.typed.fallback_route.is_none());
    // The same spec without a Gateway makes nothing of the mode.
    let no_gateway = config_without_gateway();
    let rec = record(
        "qwen",
        json!({"model": {"source": "hf://Qwen/Qwen2.5-0.5B-Instruct"}, "engine": {"kind": "sim"}, "routing": {"mode": "InferencePool"}}),
    );
    assert!(rec.objects(&no_gateway).pool.is_none());
}

#[test]
fn sglang_from_a_pvc() {
    let objects = build(
        "llama",
        json!({"model": {"source": "pvc://models/llama-3-8b"}, "engine": {"kind": "sglang"}, "resources": {"gpu": {"count": 1, "resourceName": "amd.com/gpu"}}}),
    );
    insta::assert_yaml_snapshot!(
        "sglang_pvc_pod",
        objects.deployment["spec"]["template"]["spec"]
    );
}

#[test]
fn tgi_from_s3_with_a_pvc_cache() {
    let objects = build(
        "mistral",
        json!({"model": {"source": "s3://models/mistral-7b", "secretRef": {"name": "s3-creds", "key": "unused"}}, "engine": {"kind": "tgi", "tensorParallelSize": 2}, "storage": {"cache": {"claimName": "hf-cache"}}}),
    );
    insta::assert_yaml_snapshot!("tgi_s3_pod", objects.deployment["spec"]["template"]["spec"]);
}

/// The Pod Security Standards' `restricted` profile (kubernetes.io/docs/concepts/security/
/// pod-security-standards): no privilege escalation, all capabilities dropped, non-root,
/// a RuntimeDefault seccomp profile, and only the allowed volume types.
#[test]
fn pods_pass_the_restricted_pod_security_standard_unless_relaxed() {
    let allowed_volumes = [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ];
    for spec in [
        json!({"model": {"source": "hf://a/b"}}),
        json!({"model": {"source": "s3://models/x", "secretRef": {"name": "s", "key": "k"}}, "storage": {"cache": {"claimName": "c"}}}),
        json!({"model": {"source": "pvc://models/x"}, "security": {"profile": "restricted"}}),
    ] {
        let objects = build("qwen", spec.clone());
        let pod = &objects.deployment["spec"]["template"]["spec"];
        let security = &pod["securityContext"];
        assert_eq!(security["runAsNonRoot"], true, "{spec}");
        assert_ne!(security["runAsUser"], 0);
        assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
        for list in ["containers", "initContainers"] {
            for container in pod[list].as_array().into_iter().flatten() {
                assert_eq!(
                    container["securityContext"]["allowPrivilegeEscalation"],
                    false
                );
                assert_eq!(
                    container["securityContext"]["capabilities"]["drop"],
                    json!(["ALL"])
                );
            }
        }
        for volume in pod["volumes"].as_array().into_iter().flatten() {
            let kind = volume
                .as_object()
                .unwrap()
                .keys()
                .find(|k| *k != "name")
                .unwrap();
            assert!(allowed_volumes.contains(&kind.as_str()), "{kind} in {spec}");
        }
    }
    let relaxed = build(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "security": {"profile": "image-default"}}),
    );
    let pod = &relaxed.deployment["spec"]["template"]["spec"];
    assert!(pod["securityContext"].is_null());
    assert!(pod["containers"][0]["securityContext"].is_null());
}

#[test]
fn gpu_pods_roll_one_at_a_time_without_surge_unless_the_spec_says_otherwise() {
    let strategy = |spec: serde_json::Value| {
        build("qwen", spec).deployment["spec"]["strategy"]["rollingUpdate"].clone()
    };
    assert_eq!(
        strategy(json!({"model": {"source": "hf://a/b"}, "resources": {"gpu": {"count": 1}}})),
        json!({"maxSurge": 0, "maxUnavailable": 1})
    );
    assert_eq!(
        strategy(json!({"model": {"source": "hf://a/b"}, "engine": {"kind": "sim"}})),
        json!({"maxSurge": "25%", "maxUnavailable": "25%"})
    );
    // Never below `replicas`: then the rollout needs a pod of surge.
    assert_eq!(
        strategy(
            json!({"model": {"source": "hf://a/b"}, "resources": {"gpu": {"count": 1}}, "rollout": {"maxUnavailable": 0}})
        ),
        json!({"maxSurge": 1, "maxUnavailable": 0})
    );
    assert_eq!(
        strategy(
            json!({"model": {"source": "hf://a/b"}, "rollout": {"maxSurge": "50%", "maxUnavailable": 2}})
        ),
        json!({"maxSurge": "50%", "maxUnavailable": 2})
    );
}

#[test]
fn several_replicas_get_a_disruption_budget_and_one_does_not() {
    let one = build("qwen", json!({"model": {"source": "hf://a/b"}}));
    assert!(one.disruption_budget.is_none());
    let three = build(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "replicas": 3}),
    );
    let budget = three.disruption_budget.clone().expect("a budget");
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"],
        three.deployment["spec"]["selector"]["matchLabels"]
    );
    assert_ne!(one.digest(), three.digest());
}

#[test]
fn pods_drain_before_they_stop_and_spread_over_nodes() {
    let one = build("qwen", json!({"model": {"source": "hf://a/b"}}));
    let pod = &one.deployment["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 120);
    assert_eq!(
        pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"],
        10
    );
    assert_eq!(pod["containers"][0]["resources"]["requests"]["cpu"], "2");
    assert!(pod["containers"][0]["resources"]["limits"]["cpu"].is_null());
    let several = build(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "replicas": 3, "shutdown": {"drainSeconds": 0, "gracePeriodSeconds": 600}}),
    );
    let pod = &several.deployment["spec"]["template"]["spec"];
    assert_eq!(pod["terminationGracePeriodSeconds"], 600);
    assert!(pod["containers"][0]["lifecycle"].is_null());
    assert_eq!(
        pod["topologySpreadConstraints"][0]["topologyKey"],
        "kubernetes.io/hostname"
    );
}

#[test]
fn sim_from_oci_on_a_hostname() {
    let objects = build(
        "demo",
        json!({"model": {"source": "oci://registry.example.com/models/tiny:1", "servedName": "tiny"}, "engine": {"kind": "sim"}, "routing": {"hostname": "demo.models.example.com", "gateway": "gw/edge"}}),
    );
    insta::assert_yaml_snapshot!(
        "sim_oci_pod",
        objects.deployment["spec"]["template"]["spec"]
    );
    insta::assert_yaml_snapshot!("sim_route", objects.http_route);
}

#[test]
fn the_selector_is_stable_and_never_holds_user_labels() {
    let a = build(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "labels": {"team": "x"}}),
    );
    let b = build(
        "qwen",
        json!({"model": {"source": "hf://c/d"}, "engine": {"kind": "sglang"}, "labels": {"team": "y"}}),
    );
    let selector = &a.deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(selector, &b.deployment["spec"]["selector"]["matchLabels"]);
    assert_eq!(selector, &a.service["spec"]["selector"]);
    assert_eq!(selector.as_object().unwrap().len(), 3);
    assert_eq!(selector["app.kubernetes.io/name"], "model-server");
    // The user's labels stay off the pods; its podLabels go on them.
    assert!(a.deployment["spec"]["template"]["metadata"]["labels"]["team"].is_null());
    assert_eq!(a.deployment["metadata"]["labels"]["team"], "x");
    let with_pod_labels = build(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "podLabels": {"mesh": "on"}}),
    );
    assert_eq!(
        with_pod_labels.deployment["spec"]["template"]["metadata"]["labels"]["mesh"],
        "on"
    );
    assert!(with_pod_labels.deployment["metadata"]["labels"]["mesh"].is_null());
}

#[test]
fn a_restart_or_a_pod_change_changes_the_config_hash_but_a_label_does_not() {
    let hash = |r: &Rec| {
        let objects = built(r.objects(&config()));
        assert_eq!(
            objects.deployment["spec"]["template"]["metadata"]["annotations"]
                [ANNOTATION_CONFIG_HASH],
            objects.typed.config_hash.as_str()
        );
        objects.typed.config_hash
    };
    let base = record("qwen", json!({"model": {"source": "hf://a/b"}}));
    let mut restarted = base.clone();
    restarted.record.restarted_at = Some(Utc.with_ymd_and_hms(2026, 11, 22, 1, 0, 0).unwrap());
    let changed = record(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "engine": {"maxModelLen": 4096}}),
    );
    let relabelled = record(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "labels": {"x": "y"}}),
    );
    assert_ne!(hash(&base), hash(&restarted));
    assert_ne!(hash(&base), hash(&changed));
    assert_eq!(hash(&base), hash(&relabelled));
    // Nor does a relabelling touch the pod template, so the Deployment rolls nothing.
    let template = |r: &Rec| built(r.objects(&config())).deployment["spec"]["template"].clone();
    assert_eq!(template(&base), template(&relabelled));
}

#[test]
fn no_gateway_means_no_route_and_gpus_follow_tensor_parallelism() {
    let mut cfg = config();
    cfg.default_gateway = None;
    let r = record(
        "qwen",
        json!({"model": {"source": "hf://a/b"}, "engine": {"tensorParallelSize": 4}}),
    );
    let objects = built(r.objects(&cfg));
    assert!(objects.http_route.is_none());
    let limits =
        &objects.deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpu"], "4");
    assert_eq!(route_path_prefix(&r.target()), "/team-a/qwen");
}

#[test]
fn adapters_enable_lora_and_gate_the_pods_but_their_list_stays_out_of_the_template() {
    let with = |adapters: serde_json::Value| {
        build(
            "qwen",
            json!({
                "model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct"},
                "resources": {"gpu": {"count": 1}},
                "adapters": adapters,
            }),
        )
    };
    let one = with(json!([{"name": "sql-lora", "source": "hf://acme/sql-lora"}]));
    let pod = &one.deployment["spec"]["template"]["spec"];
    let args = pod["containers"][0]["args"].as_array().unwrap();
    assert!(args.contains(&json!("--enable-lora")), "{args:?}");
    let env = pod["containers"][0]["env"].as_array().unwrap();
    assert!(env.contains(&json!({"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"})));
    assert_eq!(
        pod["readinessGates"],
        json!([{"conditionType": "modelplane.io/adapters-loaded"}])
    );
    assert_eq!(
        one.deployment["metadata"]["annotations"]["modelplane.io/adapters"],
        json!(r#"[{"name":"sql-lora","path":"acme/sql-lora"}]"#)
    );

    // Another hf:// adapter changes the annotation, never the pods.
    let two = with(json!([
        {"name": "sql-lora", "source": "hf://acme/sql-lora"},
        {"name": "chat-lora", "source": "hf://acme/chat-lora"},
    ]));
    assert_eq!(
        two.deployment["spec"]["template"],
        one.deployment["spec"]["template"]
    );
    assert_ne!(one.digest(), two.digest());

    // A pvc:// adapter mounts its claim read-only (a new claim is a template change).
    let pvc = with(json!([{"name": "fin", "source": "pvc://loras/fin/v2"}]));
    let pod = &pvc.deployment["spec"]["template"]["spec"];
    assert!(
        pod["volumes"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "adapters-0", "persistentVolumeClaim": {"claimName": "loras", "readOnly": true}}))
    );
    assert!(
        pod["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .contains(
                &json!({"name": "adapters-0", "mountPath": "/adapters/loras", "readOnly": true})
            )
    );
    assert_eq!(
        pvc.deployment["metadata"]["annotations"]["modelplane.io/adapters"],
        json!(r#"[{"name":"fin","path":"/adapters/loras/fin/v2"}]"#)
    );

    // Without adapters, none of it.
    let none = build(
        "qwen",
        json!({"model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct"}, "resources": {"gpu": {"count": 1}}}),
    );
    let pod = &none.deployment["spec"]["template"]["spec"];
    assert!(pod.get("readinessGates").is_none());
    assert!(
        !pod["containers"][0]["args"]
            .as_array()
            .unwrap()
            .contains(&json!("--enable-lora"))
    );
    assert!(
        none.deployment["metadata"]["annotations"]
            .get("modelplane.io/adapters")
            .is_none()
    );
}

#[test]
fn disaggregation_makes_a_deployment_per_role_behind_one_pool_and_a_sidecar_on_decode() {
    let with_prefill = |replicas: i64| {
        build(
            "big",
            json!({
                "model": {"source": "hf://Qwen/Qwen2.5-7B-Instruct"},
                "resources": {"gpu": {"count": 1}},
                "routing": {"mode": "InferencePool"},
                "disaggregation": {
                    "prefill": {"replicas": replicas, "resources": {"gpu": {"count": 2}}},
                    "decode": {"replicas": 3, "args": ["--max-num-seqs=256"]},
                },
            }),
        )
    };
    let objects = with_prefill(1);
    // The decode role: `<name>-decode`, its pods labelled with the role the picker filters by.
    let decode = &objects.deployment;
    assert_eq!(decode["metadata"]["name"], "big-decode");
    assert_eq!(decode["spec"]["replicas"], 3);
    assert_eq!(
        decode["spec"]["selector"]["matchLabels"]["llm-d.ai/role"],
        "decode"
    );
    let pod = &decode["spec"]["template"]["spec"];
    assert_eq!(
        decode["spec"]["template"]["metadata"]["labels"]["llm-d.ai/role"],
        "decode"
    );
    // The engine listens behind the sidecar, which has the serving port (`http`).
    let server = &pod["containers"][0];
    let args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.windows(2).any(|w| w == ["--port", "8200"]), "{args:?}");
    assert!(args.contains(&"--max-num-seqs=256"), "{args:?}");
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--kv-transfer-config" && w[1].contains("NixlConnector")),
        "{args:?}"
    );
    assert_eq!(server["ports"][0]["name"], "engine");
    assert_eq!(server["readinessProbe"]["httpGet"]["port"], "engine");
    assert_eq!(server["resources"]["limits"]["nvidia.com/gpu"], "1");
    let sidecar = &pod["initContainers"][0];
    assert_eq!(sidecar["name"], "routing-sidecar");
    assert_eq!(sidecar["restartPolicy"], "Always");
    assert_eq!(
        sidecar["ports"][0],
        json!({"name": "http", "containerPort": 8000, "protocol": "TCP"})
    );
    let sidecar_args = sidecar["args"].as_array().unwrap();
    for flag in [
        "--port=8000",
        "--vllm-port=8200",
        "--enable-ssrf-protection=true",
        "--inference-pool=team-a/big",
    ] {
        assert!(sidecar_args.contains(&json!(flag)), "{sidecar_args:?}");
    }
    assert_eq!(
        sidecar["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    // A ServiceAccount of its own, which may only read pools and pods.
    assert_eq!(pod["serviceAccountName"], "big-routing-sidecar");
    let access = objects.typed.sidecar_access.as_ref().unwrap();
    assert_eq!(
        as_json(&access.role)["rules"],
        json!([{"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": ["get", "list", "watch"]},
               {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}])
    );
    assert_eq!(
        as_json(&access.role_binding)["subjects"][0]["name"],
        "big-routing-sidecar"
    );
    assert_eq!(
        as_json(&access.service_account)["metadata"]["labels"]["modelplane.io/deployment-id"],
        "01a200c1-83bb-709a-83d2-8acee715d77e"
    );
    // Only the sidecar holds the ServiceAccount's token; the engine never sees it.
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        sidecar["volumeMounts"][0]["mountPath"],
        "/var/run/secrets/kubernetes.io/serviceaccount"
    );
    assert!(
        server["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|m| m["name"] != "routing-sidecar-token")
    );

    // The prefill role: its own count and GPUs, the engine on the serving port, no sidecar.
    let prefill = as_json(&objects.typed.prefill.as_ref().unwrap().deployment);
    assert_eq!(prefill["metadata"]["name"], "big-prefill");
    assert_eq!(prefill["spec"]["replicas"], 1);
    let pod = &prefill["spec"]["template"]["spec"];
    assert!(pod["initContainers"].is_null());
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["containers"][0]["ports"][0]["containerPort"], 8000);
    assert_eq!(
        pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
        "2"
    );
    assert_eq!(
        prefill["spec"]["selector"]["matchLabels"]["llm-d.ai/role"],
        "prefill"
    );

    // One pool over both roles; the Service reaches decode pods only.
    let pool = objects.typed.pool.as_ref().unwrap();
    let selector = &as_json(&pool.pool)["spec"]["selector"]["matchLabels"];
    assert!(selector.get("llm-d.ai/role").is_none(), "{selector}");
    assert_eq!(
        objects.service["spec"]["selector"]["llm-d.ai/role"],
        "decode"
    );
    // llm-d's picker with the prefill/decode profiles.
    assert_eq!(
        as_json(&pool.picker)["spec"]["template"]["spec"]["containers"][0]["image"],
        "ghcr.io/llm-d/llm-d-router-endpoint-picker:v0.8.0"
    );
    let config = as_json(&pool.config_map)["data"]["epp.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    for part in [
        "- name: prefill",
        "- name: decode",
        "pluginRef: prefill-filter",
        "pluginRef: decode-filter",
        "type: disagg-headers-handler",
        "prefill: prefix-based-pd-decider",
    ] {
        assert!(config.contains(part), "{part} not in {config}");
    }
    // A change to one role's count leaves the other's Deployment as it was.
    let scaled = with_prefill(2);
    assert_eq!(scaled.deployment, objects.deployment);
    assert_ne!(
        as_json(&scaled.typed.prefill.as_ref().unwrap().deployment),
        prefill
    );
}

#[test]
fn a_replica_that_spans_nodes_is_a_leader_worker_set_group_served_by_its_leader() {
    let mut spec = json!({
        "model": {"source": "hf://meta-llama/Llama-3.1-405B-Instruct"},
        "engine": {"kind": "vllm", "tensorParallelSize": 8, "pipelineParallelSize": 2},
        "resources": {"gpu": {}},
        "replicas": 2,
        "nodesPerReplica": 2,
        "routing": {"mode": "InferencePool"}
    });
    let rec = record("llama", spec.clone());
    let mut config = config();
    config.pod_monitor_interval_secs = Some(15);
    let d = rec.objects(&config);
    let group = d.group.as_ref().expect("a LeaderWorkerSet");
    let set = as_json(group);
    assert_eq!(set["apiVersion"], "leaderworkerset.x-k8s.io/v1");
    assert_eq!(set["metadata"]["name"], "llama-group");
    assert_eq!(set["spec"]["replicas"], 2);
    let template = &set["spec"]["leaderWorkerTemplate"];
    assert_eq!(template["size"], 2);
    assert_eq!(template["restartPolicy"], "RecreateGroupOnPodRestart");
    let leader = &template["leaderTemplate"]["spec"]["containers"][0];
    let worker = &template["workerTemplate"]["spec"]["containers"][0];
    // vLLM >= 0.11.1 (multi-node multiprocessing), each pod with its share of 8 x 2 GPUs.
    assert_eq!(leader["image"], "vllm/vllm-openai:v0.11.1");
    assert_eq!(leader["resources"]["limits"]["nvidia.com/gpu"], "8");
    assert_eq!(worker["resources"]["limits"]["nvidia.com/gpu"], "8");
    let args = |c: &Value| -> Vec<String> {
        c["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_owned())
            .collect()
    };
    let joined = |c: &Value| args(c).join(" ");
    assert!(joined(leader).contains("--tensor-parallel-size 8 --pipeline-parallel-size 2"));
    assert!(joined(leader).contains(
        "--nnodes 2 --node-rank 0 --master-addr $(LWS_LEADER_ADDRESS) --master-port 29500"
    ));
    assert!(!args(leader).contains(&"--headless".to_owned()));
    assert!(joined(worker).contains("--node-rank $(LWS_WORKER_INDEX)"));
    assert!(args(worker).contains(&"--headless".to_owned()));
    // The leader serves the API and is probed; a headless worker serves nothing to probe.
    assert!(leader["readinessProbe"].is_object());
    assert!(worker.get("readinessProbe").is_none() && worker.get("startupProbe").is_none());
    // Service, pool and PodMonitor select leaders only; no budget for groups.
    let leader_only = |labels: &Value| labels[WORKER_INDEX_LABEL] == "0";
    assert!(leader_only(&as_json(&d.service)["spec"]["selector"]));
    let pool = as_json(&d.pool.as_ref().unwrap().pool);
    assert!(leader_only(&pool["spec"]["selector"]["matchLabels"]));
    let monitor = as_json(d.pod_monitor.as_ref().unwrap());
    assert!(leader_only(&monitor["spec"]["selector"]["matchLabels"]));
    assert!(d.disruption_budget.is_none());
    // The pods carry the selector's labels, so the record still finds all of them.
    let pod_labels = &template["workerTemplate"]["metadata"]["labels"];
    assert_eq!(pod_labels[LABEL_DEPLOYMENT_ID], rec.record.id.to_string());

    // One node per replica stays a Deployment.
    spec["nodesPerReplica"] = json!(1);
    spec["engine"]["pipelineParallelSize"] = json!(1);
    let single = record("llama", spec).objects(&config);
    assert!(single.group.is_none());
    assert!(
        as_json(&single.service)["spec"]["selector"]
            .get(WORKER_INDEX_LABEL)
            .is_none()
    );
}
