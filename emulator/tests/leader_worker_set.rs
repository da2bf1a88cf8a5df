//! The LeaderWorkerSet controller (leaderworkerset.x-k8s.io/v1, kubernetes-sigs/lws
//! v0.10.0, CRD installed from the published manifest) and the `sim` engine's multi-node
//! serving (vLLM's `--nnodes`/`--node-rank`/`--master-addr`/`--headless`), through the
//! real `kube` client.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use modelplane_emulator::{Crds, Emulator, RunningEmulator};
use serde_json::{Value, json};

#[path = "support/wait.rs"]
mod wait;
use wait::wait_for;

const SIM: &str = "ghcr.io/llm-d/llm-d-inference-sim:v0.5.1";
const NAME: &str = "leaderworkerset.sigs.k8s.io/name";

async fn start() -> (RunningEmulator, Client) {
    let crds = modelplane_emulator::published_crds_dir().unwrap_or_else(|e| panic!("{e}"));
    let emu = Emulator::builder()
        .crds(Crds::Manifests(crds))
        .nodes(2)
        .start_delay(Duration::from_millis(100))
        .restart_backoff(Duration::from_millis(200))
        .start()
        .await
        .expect("emulator starts");
    let mut config = Config::new(emu.url().parse().unwrap());
    config.default_retry = false;
    (emu, Client::try_from(config).unwrap())
}

fn lws_api(client: &Client) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet");
    let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, "leaderworkersets");
    Api::namespaced_with(client.clone(), "default", &ar)
}

/// Pods of LeaderWorkerSet `name`, as JSON, by name.
async fn pods(client: &Client, name: &str) -> Vec<Value> {
    let list = Api::<Pod>::default_namespaced(client.clone())
        .list(&ListParams::default().labels(&format!("{NAME}={name}")))
        .await
        .unwrap();
    let mut pods: Vec<Value> = list
        .items
        .into_iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect();
    pods.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    pods
}

fn names(pods: &[Value]) -> Vec<String> {
    pods.iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

async fn lws_status(client: &Client, name: &str) -> Value {
    let o = lws_api(client).get(name).await.unwrap();
    serde_json::to_value(o).unwrap()["status"].clone()
}

fn cond<'a>(status: &'a Value, ty: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == ty)
}

async fn create_lws(client: &Client, obj: Value) {
    let o: DynamicObject = serde_json::from_value(obj).unwrap();
    lws_api(client)
        .create(&PostParams::default(), &o)
        .await
        .expect("LeaderWorkerSet created");
}

/// The upstream example's shape (docs/examples/vllm/GPU/lws.yaml): `replicas` groups of
/// `size` pods, plain containers.
fn plain_lws(name: &str, replicas: i64, size: i64) -> Value {
    json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": size,
            "leaderTemplate": {"metadata": {"labels": {"role": "leader"}},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                    "env": [{"name": "LWS_GROUP_SIZE", "value": "user"}]}]}},
            "workerTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}})
}

/// Group pods (names `<lws>-<i>`, `<lws>-<i>-<j>`), their labels, annotations,
/// hostname/subdomain and env (`AddLWSVariables`), the headless Service
/// (`CreateHeadlessServiceIfNotExists`), the status and conditions (`updateStatus`,
/// `updateConditions`), scaling, and the owner-reference cascade on deletion.
#[tokio::test]
async fn groups_service_status_scaling_and_deletion() {
    let (_emu, client) = start().await;
    create_lws(&client, plain_lws("vllm", 2, 3)).await;
    let all = wait_for("2 groups of 3 pods", || {
        let c = client.clone();
        async move {
            let p = pods(&c, "vllm").await;
            (p.len() == 6).then_some(p)
        }
    })
    .await;
    assert_eq!(
        names(&all),
        [
            "vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"
        ]
    );
    let leader = &all[3];
    let labels = &leader["metadata"]["labels"];
    assert_eq!(labels["role"], "leader");
    assert_eq!(labels["leaderworkerset.sigs.k8s.io/group-index"], "1");
    assert_eq!(labels["leaderworkerset.sigs.k8s.io/worker-index"], "0");
    // genGroupUniqueKey: sha1("default/vllm-1").
    assert_eq!(
        labels["leaderworkerset.sigs.k8s.io/group-key"],
        "e6a61a33965cdc1b5d2bd5672fa0b88b1518a5a7"
    );
    assert!(labels["leaderworkerset.sigs.k8s.io/template-revision-hash"].is_string());
    assert_eq!(
        leader["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/size"],
        "3"
    );
    assert_eq!(leader["spec"]["hostname"], "vllm-1");
    assert_eq!(leader["spec"]["subdomain"], "vllm");
    // The LWS variables come first, and replace a user variable of the same name.
    assert_eq!(
        leader["spec"]["containers"][0]["env"],
        json!([
            {"name": "LWS_LEADER_ADDRESS", "value": "vllm-1.vllm.default"},
            {"name": "LWS_GROUP_SIZE", "value": "3"},
            {"name": "LWS_WORKER_INDEX", "value": "0"},
        ])
    );
    let worker = &all[5];
    assert_eq!(
        worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"],
        "2"
    );
    assert_eq!(
        worker["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-key"],
        labels["leaderworkerset.sigs.k8s.io/group-key"]
    );
    assert!(worker["metadata"]["labels"].get("role").is_none());
    assert_eq!(
        worker["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/leader-name"],
        "vllm-1"
    );
    assert_eq!(worker["spec"]["subdomain"], "vllm");
    assert_eq!(worker["spec"]["containers"][0]["env"][2]["value"], "2");
    assert_eq!(
        worker["metadata"]["ownerReferences"][0]["kind"],
        "LeaderWorkerSet"
    );

    let svc = Api::<Service>::default_namespaced(client.clone())
        .get("vllm")
        .await
        .expect("headless Service vllm");
    let svc = serde_json::to_value(svc).unwrap();
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    assert_eq!(svc["spec"]["selector"], json!({NAME: "vllm"}));
    assert!(svc["spec"].get("ports").is_none());
    assert_eq!(
        svc["metadata"]["ownerReferences"][0]["kind"],
        "LeaderWorkerSet"
    );

    // All groups ready: Available (AllGroupsReady), Progressing turned False.
    let status = wait_for("Available", || {
        let c = client.clone();
        async move {
            let s = lws_status(&c, "vllm").await;
            (cond(&s, "Available").is_some_and(|a| a["status"] == "True")).then_some(s)
        }
    })
    .await;
    assert_eq!(status["replicas"], 2);
    assert_eq!(status["readyReplicas"], 2);
    assert_eq!(status["updatedReplicas"], 2);
    assert_eq!(
        status["hpaPodSelector"],
        "leaderworkerset.sigs.k8s.io/name=vllm,leaderworkerset.sigs.k8s.io/worker-index=0"
    );
    let available = cond(&status, "Available").unwrap();
    assert_eq!(available["reason"], "AllGroupsReady");
    assert_eq!(available["message"], "All replicas are ready");
    let progressing = cond(&status, "Progressing").unwrap();
    assert_eq!(progressing["status"], "False");
    assert_eq!(progressing["reason"], "GroupsProgressing");

    // Scale down to 1: the highest group goes; up to 3: group 2 comes.
    let patch = |r: i64| json!({"spec": {"replicas": r}});
    lws_api(&client)
        .patch("vllm", &PatchParams::default(), &Patch::Merge(&patch(1)))
        .await
        .unwrap();
    wait_for("group 1 removed", || {
        let c = client.clone();
        async move {
            let p = names(&pods(&c, "vllm").await);
            (p == ["vllm-0", "vllm-0-1", "vllm-0-2"]).then_some(())
        }
    })
    .await;
    lws_api(&client)
        .patch("vllm", &PatchParams::default(), &Patch::Merge(&patch(3)))
        .await
        .unwrap();
    wait_for("3 ready groups", || {
        let c = client.clone();
        async move {
            let s = lws_status(&c, "vllm").await;
            (s["readyReplicas"] == 3 && pods(&c, "vllm").await.len() == 9).then_some(())
        }
    })
    .await;

    // Deleting the LeaderWorkerSet garbage-collects its pods and Service.
    lws_api(&client)
        .delete("vllm", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("pods and Service collected", || {
        let c = client.clone();
        async move {
            let gone = Api::<Service>::default_namespaced(c.clone())
                .get_opt("vllm")
                .await
                .unwrap()
                .is_none();
            (gone && pods(&c, "vllm").await.is_empty()).then_some(())
        }
    })
    .await;
}

/// RecreateGroupOnPodRestart (`handleRestartPolicy`, `PodDeleted`): deleting one worker
/// recreates the whole group (new uids for every pod); restartPolicy None replaces only
/// the deleted pod.
#[tokio::test]
async fn a_deleted_pod_recreates_its_group() {
    let (_emu, client) = start().await;
    create_lws(&client, plain_lws("grp", 1, 3)).await;
    let mut none = plain_lws("solo", 1, 3);
    none["spec"]["leaderWorkerTemplate"]["restartPolicy"] = json!("None");
    create_lws(&client, none).await;
    let uids = |p: &[Value]| -> Vec<String> {
        p.iter()
            .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
            .collect()
    };
    for name in ["grp", "solo"] {
        wait_for("ready", || {
            let c = client.clone();
            async move { (lws_status(&c, name).await["readyReplicas"] == 1).then_some(()) }
        })
        .await;
    }
    let before = uids(&pods(&client, "grp").await);
    let solo_before = uids(&pods(&client, "solo").await);
    let api = Api::<Pod>::default_namespaced(client.clone());
    api.delete("grp-0-2", &DeleteParams::default())
        .await
        .unwrap();
    api.delete("solo-0-2", &DeleteParams::default())
        .await
        .unwrap();
    let after = wait_for("group recreated", || {
        let c = client.clone();
        let before = before.clone();
        async move {
            let p = pods(&c, "grp").await;
            let u = uids(&p);
            (p.len() == 3 && u.iter().all(|x| !before.contains(x))).then_some(p)
        }
    })
    .await;
    assert_eq!(names(&after), ["grp-0", "grp-0-1", "grp-0-2"]);
    let solo_after = wait_for("worker replaced", || {
        let c = client.clone();
        let before = solo_before.clone();
        async move {
            let u = uids(&pods(&c, "solo").await);
            (u.len() == 3 && !u.contains(&before[2])).then_some(u)
        }
    })
    .await;
    assert_eq!(
        solo_after[..2],
        solo_before[..2],
        "the leader and worker 1 stay"
    );
}

/// vLLM multi-node with LWS: the leader (`--nnodes 2 --node-rank 0`) is not Ready (its
/// API server waits for the rendezvous) until the headless worker whose expanded
/// `--master-addr $(LWS_LEADER_ADDRESS)` resolves to it through the headless Service
/// joined; LeaderReady then holds the workers back for good (the deadlock the LWS docs
/// warn about), LeaderCreated does not. The leader's answers name the group.
#[tokio::test]
async fn a_sim_leader_is_ready_only_once_its_workers_joined() {
    let (emu, client) = start().await;
    let sim_lws = |name: &str, startup: &str| {
        let args = |rank: &str, headless: bool| {
            let mut a = vec![
                "--model",
                "m",
                "--port",
                "8000",
                "--tensor-parallel-size",
                "2",
                "--distributed-executor-backend",
                "mp",
                "--nnodes",
                "$(LWS_GROUP_SIZE)",
                "--node-rank",
                rank,
                "--master-addr",
                "$(LWS_LEADER_ADDRESS)",
                "--master-port",
                "29501",
            ];
            if headless {
                a.push("--headless");
            }
            json!(a)
        };
        let container = |args: Value| {
            json!({"name": "engine", "image": SIM, "args": args,
            "ports": [{"name": "http", "containerPort": 8000}]})
        };
        json!({"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "startupPolicy": startup, "leaderWorkerTemplate": {"size": 2,
                "leaderTemplate": {"metadata": {"labels": {"modelplane.io/engine": "sim"}},
                    "spec": {"containers": [container(args("0", false))]}},
                "workerTemplate": {"metadata": {"labels": {"modelplane.io/engine": "sim"}},
                    "spec": {"containers": [container(args("$(LWS_WORKER_INDEX)", true))]}}}}})
    };
    let ready = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    };
    // LeaderReady: no worker is ever created, so the leader stays running but not ready.
    create_lws(&client, sim_lws("stuck", "LeaderReady")).await;
    create_lws(&client, sim_lws("vllm", "LeaderCreated")).await;
    let group = wait_for("leader and worker ready", || {
        let c = client.clone();
        async move {
            let p = pods(&c, "vllm").await;
            (p.len() == 2 && p.iter().all(ready)).then_some(p)
        }
    })
    .await;
    // The worker joined: it became Running before the leader turned Ready.
    let running_at = |p: &Value| {
        p["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let ready_at = |p: &Value| {
        p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["lastTransitionTime"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(ready_at(&group[0]) >= running_at(&group[1]));
    let stuck = pods(&client, "stuck").await;
    assert_eq!(names(&stuck), ["stuck-0"]);
    assert_eq!(stuck[0]["status"]["phase"], "Running");
    assert!(
        !ready(&stuck[0]),
        "a leader without its workers is not ready"
    );
    assert_eq!(
        cond(&lws_status(&client, "stuck").await, "Progressing").unwrap()["status"],
        "True"
    );

    // The leader answers with its group; the headless worker refuses HTTP.
    let http = reqwest::Client::new();
    let url = |pod: &str| {
        format!(
            "{}/api/v1/namespaces/default/pods/{pod}:8000/proxy/v1/models",
            emu.url()
        )
    };
    let r = http.get(url("vllm-0")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("x-emulator-group")
            .map(|v| v.to_str().unwrap().to_string()),
        Some("vllm-0-1".to_string())
    );
    let r = http.get(url("vllm-0-1")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let r = http.get(url("stuck-0")).send().await.unwrap();
    assert_eq!(r.status(), 503);
}
