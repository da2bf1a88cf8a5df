//! A pinned kubectl (v1.35, see tests/kubectl/package-lock.json and scripts/install-kubectl.sh)
//! against the emulator, with kubectl's default flags.
//!
//! Without kubectl these tests fail, saying how to install it (`scripts/test.sh` does).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use modelplane_emulator::{Crds, Emulator, RunningEmulator};
use serde_json::{Value, json};

fn kubectl_path() -> PathBuf {
    let candidate = std::env::var_os("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/kubectl/bin/kubectl")
        });
    // A missing kubectl is a failure, never a silent pass.
    assert!(
        candidate.is_file(),
        "kubectl not found at {}: run emulator/scripts/install-kubectl.sh (scripts/test.sh does) or set KUBECTL",
        candidate.display()
    );
    candidate
}

struct Env {
    emu: RunningEmulator,
    kubectl: PathBuf,
    dir: PathBuf,
}

impl Env {
    async fn start(kubectl: PathBuf) -> Env {
        Env::start_with(kubectl, Emulator::builder()).await
    }

    async fn start_with(kubectl: PathBuf, builder: modelplane_emulator::EmulatorBuilder) -> Env {
        let emu = builder.start().await.expect("emulator starts");
        let dir = std::env::temp_dir().join(format!("emulator-kubectl-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kubeconfig"), emu.kubeconfig_yaml()).unwrap();
        Env { emu, kubectl, dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.kubectl);
        c.args(args)
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("HOME", &self.dir)
            .env_remove("KUBECTL_EXTERNAL_DIFF");
        c
    }

    /// Runs kubectl off the async runtime (the emulator serves on it).
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(args);
        let input = stdin.map(String::from);
        tokio::task::spawn_blocking(move || {
            cmd.stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = cmd.spawn().expect("kubectl runs");
            if let Some(i) = input {
                use std::io::Write;
                child.stdin.take().unwrap().write_all(i.as_bytes()).unwrap();
            }
            child.wait_with_output().unwrap()
        })
        .await
        .unwrap()
    }

    async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run(args, stdin).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubectl {args:?} failed: {stderr}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn rv(&self, kind_plural: &str, group: &str, name: &str) -> String {
        let kind = self
            .emu
            .store()
            .kinds()
            .by_resource(group, "v1", kind_plural)
            .unwrap();
        let obj = self
            .emu
            .store()
            .get(kind, "default", name)
            .expect("object exists");
        obj["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

const MANIFEST: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        ports:
        - {name: http, containerPort: 80}
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata:
  name: web
spec:
  parentRefs: [{name: gw}]
  rules:
  - backendRefs: [{name: web, port: 80}]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_version_is_within_one_minor() {
    let k = kubectl_path();
    let env = Env::start(k).await;
    let out = env.ok(&["version", "-o", "json"], None).await;
    let v: Value = serde_json::from_str(&out).unwrap();
    let client: i64 = v["clientVersion"]["minor"]
        .as_str()
        .unwrap()
        .trim_end_matches('+')
        .parse()
        .unwrap();
    let server: i64 = v["serverVersion"]["minor"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (client - server).abs() <= 1,
        "client {client} server {server}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_server_side_is_idempotent_and_get_yaml_shows_defaults() {
    let k = kubectl_path();
    let env = Env::start(k).await;
    let out = env
        .ok(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;
    assert!(
        out.contains("deployment.apps/web serverside-applied"),
        "{out}"
    );
    assert!(
        out.contains("httproute.gateway.networking.k8s.io/web serverside-applied"),
        "{out}"
    );
    let before = (
        env.rv("deployments", "apps", "web"),
        env.rv("services", "", "web"),
        env.rv("httproutes", "gateway.networking.k8s.io", "web"),
    );
    env.ok(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;
    let after = (
        env.rv("deployments", "apps", "web"),
        env.rv("services", "", "web"),
        env.rv("httproutes", "gateway.networking.k8s.io", "web"),
    );
    assert_eq!(
        before, after,
        "re-applying the same manifest writes nothing"
    );

    let yaml = env
        .ok(&["get", "deployment", "web", "-o", "yaml"], None)
        .await;
    for needle in [
        "imagePullPolicy: IfNotPresent",
        "terminationMessagePolicy: File",
        "revisionHistoryLimit: 10",
        "protocol: TCP",
    ] {
        assert!(yaml.contains(needle), "missing {needle} in:\n{yaml}");
    }
    let json_out = env
        .ok(
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "json",
                "--show-managed-fields",
            ],
            None,
        )
        .await;
    let d: Value = serde_json::from_str(&json_out).unwrap();
    assert_eq!(d["metadata"]["managedFields"][0]["manager"], "kubectl");
    assert_eq!(d["metadata"]["managedFields"][0]["operation"], "Apply");

    // Tables: the default `kubectl get` output.
    let table = env.ok(&["get", "deploy,svc"], None).await;
    assert!(
        table.contains("deployment.apps/web") && table.contains("service/web"),
        "{table}"
    );

    // A conflicting apply from another manager is refused without --force-conflicts.
    let changed = MANIFEST.replace("replicas: 2", "replicas: 4");
    let out = env
        .run(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                "-",
            ],
            Some(&changed),
        )
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conflict") && stderr.contains(".spec.replicas"),
        "{stderr}"
    );
    env.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&changed),
    )
    .await;
    let replicas = env
        .ok(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
            None,
        )
        .await;
    assert_eq!(replicas, "4");

    // kubectl validates strictly by default: a typo is a server-side error naming the field.
    let typo = MANIFEST.replace(
        "image: nginx:1.27",
        "image: nginx:1.27\n        imagePullPolicyy: Always",
    );
    let out = env
        .run(&["apply", "--server-side", "-f", "-"], Some(&typo))
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown field \"spec.template.spec.containers[0].imagePullPolicyy\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_and_delete() {
    let k = kubectl_path();
    let env = Env::start(k).await;
    env.ok(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;

    // `kubectl get -w` prints the existing objects, then changes as they happen.
    let cm_kind = env
        .emu
        .store()
        .kinds()
        .by_resource("", "v1", "configmaps")
        .unwrap();
    let opts = modelplane_emulator::ops::WriteOptions {
        default_manager: "test".into(),
        ..Default::default()
    };
    modelplane_emulator::ops::create(
        env.emu.store(),
        cm_kind,
        "default",
        json!({"metadata": {"name": "existing"}}),
        &opts,
    )
    .unwrap();
    let mut watch = env
        .command(&["get", "configmaps", "-w"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    // The initial list is printed once the watch is being established.
    while !lines.iter().any(|l: &String| l.starts_with("existing")) {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) => lines.push(l),
            Err(_) => panic!("kubectl get -w printed no initial list: {lines:?}"),
        }
    }
    modelplane_emulator::ops::create(
        env.emu.store(),
        cm_kind,
        "default",
        json!({"metadata": {"name": "watched"}}),
        &opts,
    )
    .unwrap();
    let found = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(remaining) {
            Ok(l) if l.starts_with("watched") => break true,
            Ok(l) => lines.push(l),
            Err(_) => break false,
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();
    assert!(
        found,
        "kubectl get -w did not show the new configmap; saw {lines:?}"
    );

    // `kubectl delete` (background cascade, waits for deletion).
    let out = env.ok(&["delete", "deployment", "web"], None).await;
    assert!(out.contains("deleted"), "{out}");
    let out = env.run(&["get", "deployment", "web"], None).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("NotFound"));
    env.ok(
        &["delete", "-f", "-"],
        Some(MANIFEST.split("---").nth(1).unwrap()),
    )
    .await;

    // Scale subresource.
    env.ok(&["apply", "--server-side", "-f", "-"], Some(MANIFEST))
        .await;
    env.ok(&["scale", "deployment", "web", "--replicas=3"], None)
        .await;
    assert_eq!(
        env.ok(
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"],
            None
        )
        .await,
        "3"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_imperative_create_commands_send_protobuf() {
    let k = kubectl_path();
    let env = Env::start(k).await;
    env.ok(&["create", "namespace", "demo"], None).await;
    env.ok(
        &[
            "create",
            "configmap",
            "cfg",
            "-n",
            "demo",
            "--from-literal=a=b",
        ],
        None,
    )
    .await;
    env.ok(
        &[
            "create",
            "secret",
            "generic",
            "sec",
            "-n",
            "demo",
            "--from-literal=pw=hunter2",
        ],
        None,
    )
    .await;
    env.ok(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "demo",
            "--image=nginx:1.27",
            "--replicas=3",
            "--port=80",
        ],
        None,
    )
    .await;
    env.ok(
        &[
            "create",
            "service",
            "clusterip",
            "web",
            "-n",
            "demo",
            "--tcp=80:8080",
        ],
        None,
    )
    .await;
    env.ok(&["run", "pod1", "-n", "demo", "--image=busybox:1.36"], None)
        .await;
    let d: Value = serde_json::from_str(
        &env.ok(&["get", "deploy", "web", "-n", "demo", "-o", "json"], None)
            .await,
    )
    .unwrap();
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0],
        json!({"containerPort": 80, "protocol": "TCP"})
    );
    let s: Value = serde_json::from_str(
        &env.ok(&["get", "svc", "web", "-n", "demo", "-o", "json"], None)
            .await,
    )
    .unwrap();
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 8080);
    let secret = env
        .ok(
            &[
                "get",
                "secret",
                "sec",
                "-n",
                "demo",
                "-o",
                "jsonpath={.data.pw}",
            ],
            None,
        )
        .await;
    assert_eq!(secret, "aHVudGVyMg==");
    let cm = env
        .ok(
            &[
                "get",
                "configmap",
                "cfg",
                "-n",
                "demo",
                "-o",
                "jsonpath={.data.a}",
            ],
            None,
        )
        .await;
    assert_eq!(cm, "b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_client_side_then_server_side_apply_migrates_ownership() {
    let k = kubectl_path();
    let env = Env::start(k).await;
    let deployment = MANIFEST.split("---").next().unwrap();
    env.ok(&["apply", "-f", "-"], Some(deployment)).await;
    env.ok(&["apply", "--server-side", "-f", "-"], Some(deployment))
        .await;
    let d: Value = serde_json::from_str(
        &env.ok(
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "json",
                "--show-managed-fields",
            ],
            None,
        )
        .await,
    )
    .unwrap();
    let managers: Vec<(&str, &str)> = d["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["manager"].as_str().unwrap(),
                m["operation"].as_str().unwrap(),
            )
        })
        .collect();
    // kubectl rewrites the client-side-apply ownership (a JSON patch of managedFields).
    assert!(
        !managers
            .iter()
            .any(|(m, _)| *m == "kubectl-client-side-apply"),
        "{managers:?}"
    );
    assert!(managers.contains(&("kubectl", "Apply")), "{managers:?}");
}

/// `kubectl apply --server-side` of a Role and a RoleBinding, then `kubectl get
/// role,rolebinding` (Roles print the default table convertor's NAME and CREATED AT,
/// apiserver pkg/registry/rest/table.go; RoleBindings NAME, ROLE, AGE from
/// pkg/printers/internalversion/printers.go `printRoleBinding`) and `-o wide`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_and_get_roles_and_bindings() {
    let env = Env::start(kubectl_path()).await;
    let manifest = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: reader
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: read
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: reader
subjects:
- kind: User
  name: alice
- kind: ServiceAccount
  name: default
  namespace: default
"#;
    let out = env
        .ok(&["apply", "--server-side", "-f", "-"], Some(manifest))
        .await;
    assert_eq!(
        out,
        "role.rbac.authorization.k8s.io/reader serverside-applied\nrolebinding.rbac.authorization.k8s.io/read serverside-applied\n"
    );
    let out = env.ok(&["get", "role,rolebinding"], None).await;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines[0], ["NAME", "CREATED", "AT"], "{out}");
    assert_eq!(
        lines[1][0], "role.rbac.authorization.k8s.io/reader",
        "{out}"
    );
    assert!(lines[1][1].ends_with('Z'), "{out}");
    assert_eq!(lines[3], ["NAME", "ROLE", "AGE"], "{out}");
    assert_eq!(
        lines[4][..2],
        ["rolebinding.rbac.authorization.k8s.io/read", "Role/reader"],
        "{out}"
    );
    let out = env
        .ok(&["get", "rolebinding", "read", "-o", "wide"], None)
        .await;
    let lines: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"],
        "{out}"
    );
    assert_eq!(lines[1][..2], ["read", "Role/reader"], "{out}");
    assert_eq!(lines[1][3..], ["alice", "default/default"], "{out}");
    // Changing the roleRef is refused with the real message.
    let out = env
        .run(
            &["apply", "--server-side", "-f", "-"],
            Some(&manifest.replace(
                "kind: Role\n  name: reader",
                "kind: ClusterRole\n  name: view",
            )),
        )
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot change roleRef"), "{stderr}");
    env.ok(&["delete", "rolebinding", "read"], None).await;
    env.ok(&["delete", "role", "reader"], None).await;
    env.emu.shutdown().await;
}

fn published_crds() -> PathBuf {
    modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}"))
}

const LEADER_WORKER_SET: &str = r#"
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: big}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 4
    workerTemplate:
      spec:
        containers: [{name: vllm, image: vllm/vllm-openai:v0.11.0}]
"#;

/// `kubectl apply -f DIR` of the published manifests on a cluster without them, as a
/// user installs them on a real one: each CRD is established (apiextensions-apiserver's
/// naming and establishing controllers, `pkg/controller/status` and
/// `pkg/controller/establish`), its versions appear in discovery, instances print the
/// CRD's additionalPrinterColumns (`pkg/registry/customresource/tableconvertor`), the
/// scale subresource reads and writes `specReplicasPath`, a non-storage version reads the
/// same object (conversion None), and deleting the CRD removes its instances and stops
/// serving it (`pkg/controller/finalizer/crd_finalizer.go`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_of_the_published_crds_serves_them_until_they_are_deleted() {
    let builder = Emulator::builder()
        .crds(Crds::BuiltIn)
        .gateway_api(false)
        .inference_api(false);
    let env = Env::start_with(kubectl_path(), builder).await;
    let none = env.run(&["get", "httproutes"], None).await;
    assert!(!none.status.success(), "no HTTPRoute kind before the CRDs");

    let dir = published_crds();
    let lws_file = dir.join("leaderworkerset.x-k8s.io_leaderworkersets.yaml");
    // Client-side apply keeps the whole manifest in an annotation, and LeaderWorkerSet's is
    // over the 256 KiB that ValidateAnnotationsSize allows (apimachinery
    // pkg/api/validation/objectmeta.go): a real server refuses it the same way, which is
    // why the lws project installs with `kubectl apply --server-side`.
    let too_big = env
        .run(&["apply", "-f", lws_file.to_str().unwrap()], None)
        .await;
    assert!(!too_big.status.success());
    assert!(
        String::from_utf8_lossy(&too_big.stderr)
            .contains("metadata.annotations: Too long: may not be more than 262144 bytes"),
        "{}",
        String::from_utf8_lossy(&too_big.stderr)
    );
    let out = env
        .ok(
            &["apply", "--server-side", "-f", dir.to_str().unwrap()],
            None,
        )
        .await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/httproutes.gateway.networking.k8s.io serverside-applied"),
        "{out}"
    );
    env.ok(
        &[
            "wait",
            "--for",
            "condition=Established",
            "crd",
            "--all",
            "--timeout=10s",
        ],
        None,
    )
    .await;
    let groups = env
        .ok(
            &[
                "api-resources",
                "--api-group=gateway.networking.k8s.io",
                "-o",
                "name",
            ],
            None,
        )
        .await;
    for resource in ["gateways", "httproutes", "grpcroutes", "referencegrants"] {
        assert!(
            groups.contains(&format!("{resource}.gateway.networking.k8s.io")),
            "{groups}"
        );
    }
    let versions = env.ok(&["api-versions"], None).await;
    assert!(
        versions.contains("gateway.networking.k8s.io/v1beta1"),
        "{versions}"
    );

    env.ok(&["apply", "-f", "-"], Some(LEADER_WORKER_SET)).await;
    // The CRD's printer columns: READY (.status.readyReplicas), DESIRED (.spec.replicas),
    // UP-TO-DATE and AGE.
    let table = env.ok(&["get", "lws", "big"], None).await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "READY", "DESIRED", "UP-TO-DATE", "AGE"],
        "{table}"
    );
    assert!(table.lines().nth(1).unwrap().contains(" 2 "), "{table}");
    env.ok(&["scale", "lws", "big", "--replicas=3"], None).await;
    let replicas = env
        .ok(
            &["get", "lws", "big", "-o", "jsonpath={.spec.replicas}"],
            None,
        )
        .await;
    assert_eq!(replicas, "3");

    env.ok(&["apply", "-f", "-"], Some(MANIFEST)).await;
    let beta = env
        .ok(
            &[
                "get",
                "httproutes.v1beta1.gateway.networking.k8s.io",
                "web",
                "-o",
                "json",
            ],
            None,
        )
        .await;
    let beta: Value = serde_json::from_str(&beta).unwrap();
    assert_eq!(beta["apiVersion"], "gateway.networking.k8s.io/v1beta1");
    assert_eq!(beta["spec"]["rules"][0]["backendRefs"][0]["name"], "web");

    let out = env
        .ok(
            &["delete", "crd", "leaderworkersets.leaderworkerset.x-k8s.io"],
            None,
        )
        .await;
    assert!(out.contains("deleted"), "{out}");
    let gone = env.run(&["get", "lws"], None).await;
    assert!(!gone.status.success());
    // kubectl's discovery cache still knows the kind; the server no longer serves it.
    assert!(
        String::from_utf8_lossy(&gone.stderr)
            .contains("the server could not find the requested resource"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    let lws_kind =
        env.emu
            .store()
            .kinds()
            .by_resource("leaderworkerset.x-k8s.io", "v1", "leaderworkersets");
    assert!(lws_kind.is_none(), "no longer served");
    // Applying it again serves it again, with no instance left from before.
    env.ok(
        &["apply", "--server-side", "-f", lws_file.to_str().unwrap()],
        None,
    )
    .await;
    env.ok(
        &[
            "wait",
            "--for",
            "condition=Established",
            "crd/leaderworkersets.leaderworkerset.x-k8s.io",
        ],
        None,
    )
    .await;
    let empty = env.ok(&["get", "lws", "-o", "name"], None).await;
    assert_eq!(empty, "");
}

// `kubectl get --raw` through the Pods' proxy subresource (pkg/registry/core/pod/rest/
// subresources.go): a sim pod's vLLM-style /metrics, on the first declared container port
// as ResourceLocation (pkg/registry/core/pod/strategy.go) picks it, and the real NotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_raw_reads_a_sim_pods_metrics_through_the_pod_proxy() {
    let builder = Emulator::builder()
        .nodes(1)
        .start_delay(Duration::from_millis(100));
    let env = Env::start_with(kubectl_path(), builder).await;
    let pod = r#"
apiVersion: v1
kind: Pod
metadata:
  name: qwen-0
  labels: {modelplane.io/engine: sim}
spec:
  containers:
  - name: server
    image: ghcr.io/llm-d/llm-d-inference-sim:v0.5.1
    args: [--model, qwen, --port, "8000"]
    ports:
    - {name: http, containerPort: 8000}
"#;
    env.ok(&["apply", "-f", "-"], Some(pod)).await;
    env.ok(
        &[
            "wait",
            "--for=condition=Ready",
            "pod/qwen-0",
            "--timeout=30s",
        ],
        None,
    )
    .await;
    let metrics = env
        .ok(
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/qwen-0/proxy/metrics",
            ],
            None,
        )
        .await;
    assert!(
        metrics.contains("vllm:num_requests_running{model_name=\"qwen\"} 0"),
        "{metrics}"
    );
    let out = env
        .run(
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/pods/nope:8000/proxy/metrics",
            ],
            None,
        )
        .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Error from server (NotFound): pods \"nope\" not found"),
        "{stderr}"
    );
    env.emu.shutdown().await;
}
