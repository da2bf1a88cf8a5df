//! Prefill/decode disaggregation as llm-d runs it (llm-d-inference-scheduler): the
//! endpoint picker's P/D profiles and a decode pod's routing sidecar.
//!
//! The picker (`pkg/epp/framework/plugins/scheduling`): a pool's picker runs P/D when its
//! configuration (an `EndpointPickerConfig`, the file its `--config-file` names) has a
//! profile with a `prefill-filter` and one with a `decode-filter`, and a
//! `disagg-headers-handler` (or its deprecated alias `prefill-header-handler`). The filters
//! keep pods by their `llm-d.ai/role` label (`filter/bylabel/roles.go`: decode takes
//! `decode`, `prefill-decode`, `both`, `encode-prefill-decode` and pods without the label;
//! prefill takes `prefill`, `encode-prefill`, `prefill-decode`, `both`,
//! `encode-prefill-decode`). The `prefix-based-pd-decider` (`profilehandler/disagg`) runs
//! the prefill profile only when the prompt's uncached tokens reach `nonCachedTokens` (0
//! turns it off), counting a prompt's tokens as its characters / 4; the emulator keeps no
//! prefix cache, so every token is uncached. The headers handler first clears any
//! `x-prefiller-host-port` the caller sent, then sets it to the prefill pod's `ip:port`.
//! Where the emulator scores, the real picker's scorers would: the least busy pod of each
//! role.
//!
//! The sidecar (`pkg/sidecar/proxy/chat_completions.go`, flags in `options.go`): the
//! container listening on the served port with `--vllm-port`; given the header it checks
//! the target's host against the pods of its `--inference-pool` when
//! `--enable-ssrf-protection` is on (`allowlist.go`: by IP or name, any port; 403
//! `Forbidden: prefill target not allowed by SSRF protection` otherwise), sends the
//! request to the prefill pod, then has its own engine decode. The emulator names the
//! prefill pod in `x-emulator-prefill-pod`.

use serde_json::Value;

use crate::store::Store;

/// The header naming the prefill pod to a decode pod's sidecar.
pub(crate) const PREFILLER_HEADER: &str = "x-prefiller-host-port";
/// The emulator's answer header naming the prefill pod that computed the prompt.
pub(super) const PREFILL_POD_HEADER: &str = "x-emulator-prefill-pod";

const ROLE_LABEL: &str = "llm-d.ai/role";
const DECODE_ROLES: [&str; 4] = ["decode", "prefill-decode", "both", "encode-prefill-decode"];
const PREFILL_ROLES: [&str; 5] = [
    "prefill",
    "encode-prefill",
    "prefill-decode",
    "both",
    "encode-prefill-decode",
];
/// `AverageCharactersPerToken` of the prefix-based decider.
const CHARACTERS_PER_TOKEN: usize = 4;

/// A picker configured for prefill/decode disaggregation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PdPicker {
    /// The decider's `nonCachedTokens` (0: never disaggregate).
    non_cached_tokens: usize,
}

fn role(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/labels")
        .and_then(|l| l.get(ROLE_LABEL))
        .and_then(Value::as_str)
}

/// The pods the decode profile's filter keeps.
pub(super) fn decode_pods(pods: &[Value]) -> Vec<Value> {
    pods.iter()
        .filter(|p| role(p).is_none_or(|r| DECODE_ROLES.contains(&r)))
        .cloned()
        .collect()
}

/// The pods the prefill profile's filter keeps.
pub(super) fn prefill_pods(pods: &[Value]) -> Vec<Value> {
    pods.iter()
        .filter(|p| role(p).is_some_and(|r| PREFILL_ROLES.contains(&r)))
        .cloned()
        .collect()
}

impl PdPicker {
    /// Whether this request's prompt is long enough to be prefilled elsewhere.
    pub(super) fn disaggregates(&self, body: &[u8]) -> bool {
        if self.non_cached_tokens == 0 {
            return false;
        }
        let Ok(request) = serde_json::from_slice::<Value>(body) else {
            return false;
        };
        // Completions: the prompt's characters; chat: the messages' (the decider renders
        // them as the template would; their content is what counts here).
        let characters = match request.get("prompt") {
            Some(Value::String(p)) => p.chars().count(),
            _ => request
                .get("messages")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|m| m.get("content").and_then(Value::as_str))
                .map(|c| c.chars().count())
                .sum(),
        };
        characters / CHARACTERS_PER_TOKEN >= self.non_cached_tokens
    }
}

/// The P/D picker of a pool whose endpoint picker is Service `ns/epp` (its pods
/// `picker_pods`), read from its configuration file; `None`: no P/D profiles.
pub(super) fn pd_picker(store: &Store, ns: &str, picker_pods: &[Value]) -> Option<PdPicker> {
    let config = picker_config(store, ns, picker_pods.first()?)?;
    let plugins: Vec<(String, &Value)> = config
        .get("plugins")?
        .as_array()?
        .iter()
        .filter_map(|p| {
            let ty = p.get("type")?.as_str()?;
            let name = p.get("name").and_then(Value::as_str).unwrap_or(ty);
            Some((name.to_owned(), p))
        })
        .collect();
    let type_of = |name: &str| {
        plugins
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, p)| p.get("type")?.as_str())
    };
    let has_type = |ty: &str| plugins.iter().any(|(_, p)| p["type"] == ty);
    let profile_with = |filter: &str| {
        config["schedulingProfiles"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|profile| {
                profile["plugins"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("pluginRef").and_then(Value::as_str))
                    .any(|r| type_of(r) == Some(filter))
            })
    };
    let headers = has_type("disagg-headers-handler") || has_type("prefill-header-handler");
    if !(headers && profile_with("prefill-filter") && profile_with("decode-filter")) {
        return None;
    }
    // The profile handler names the decider of the prefill profile.
    let decider = plugins
        .iter()
        .find(|(_, p)| p["type"] == "disagg-profile-handler")
        .and_then(|(_, p)| p.pointer("/parameters/deciders/prefill")?.as_str())
        .and_then(|name| plugins.iter().find(|(n, _)| n == name))
        .filter(|(_, p)| p["type"] == "prefix-based-pd-decider")
        .map(|(_, p)| p);
    let non_cached_tokens = decider
        .and_then(|p| p.pointer("/parameters/nonCachedTokens")?.as_u64())
        .unwrap_or(0) as usize;
    Some(PdPicker { non_cached_tokens })
}

/// The picker's configuration: the file its container's `--config-file` names, read from
/// the ConfigMap volume mounted over that path.
fn picker_config(store: &Store, ns: &str, pod: &Value) -> Option<Value> {
    let spec = pod.get("spec")?;
    for container in spec.get("containers")?.as_array()? {
        let args = args_of(container);
        let Some(path) = flag(&args, "config-file") else {
            continue;
        };
        let mount = container
            .get("volumeMounts")?
            .as_array()?
            .iter()
            .find(|m| {
                m.get("mountPath")
                    .and_then(Value::as_str)
                    .is_some_and(|dir| path.starts_with(&format!("{}/", dir.trim_end_matches('/'))))
            })?;
        let dir = mount["mountPath"].as_str()?.trim_end_matches('/');
        let key = path.strip_prefix(dir)?.trim_start_matches('/');
        let volume = spec
            .get("volumes")?
            .as_array()?
            .iter()
            .find(|v| v.get("name") == mount.get("name"))?;
        let map_name = volume.pointer("/configMap/name")?.as_str()?;
        let kind = store.kinds().by_resource("", "v1", "configmaps")?;
        let map = store.get(kind, ns, map_name)?;
        let text = map.pointer(&format!(
            "/data/{}",
            key.replace('~', "~0").replace('/', "~1")
        ))?;
        return crate::yaml::decode_apply_body(text.as_str()?.as_bytes()).ok();
    }
    None
}

/// A container's arguments.
fn args_of(container: &Value) -> Vec<&str> {
    container
        .get("args")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect()
}

/// `--name value` or `--name=value`.
fn flag(args: &[&str], name: &str) -> Option<String> {
    let long = format!("--{name}");
    args.iter().enumerate().find_map(|(i, a)| {
        a.strip_prefix(&format!("{long}="))
            .map(String::from)
            .or_else(|| (*a == long).then(|| args.get(i + 1).map(|s| s.to_string()))?)
    })
}

/// A pod's routing sidecar, as its flags describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sidecar {
    /// `namespace/name` of the InferencePool whose pods it may send prefills to, with
    /// SSRF protection on; `None`: off.
    allowlist_pool: Option<(String, String)>,
}

/// The routing sidecar of `pod`: a container (a native sidecar among the init containers,
/// or a regular one) started with `--vllm-port`.
pub(super) fn sidecar(pod: &Value) -> Option<Sidecar> {
    let containers = ["initContainers", "containers"]
        .into_iter()
        .filter_map(|list| pod.pointer(&format!("/spec/{list}"))?.as_array())
        .flatten();
    for c in containers {
        let args = args_of(c);
        if flag(&args, "vllm-port").is_none() {
            continue;
        }
        let ssrf = flag(&args, "enable-ssrf-protection").is_some_and(|v| v == "true")
            || args.contains(&"--enable-ssrf-protection");
        let pool = flag(&args, "inference-pool").map(|p| match p.split_once('/') {
            Some((ns, name)) => (ns.to_owned(), name.to_owned()),
            // "A single name implies the 'default' namespace."
            None => ("default".to_owned(), p),
        });
        return Some(Sidecar {
            allowlist_pool: if ssrf { pool } else { None },
        });
    }
    None
}

impl Sidecar {
    /// Whether the sidecar may send a prefill to `host_port`: always without SSRF
    /// protection; with it, only to a host that is a pod of its pool, by IP or name, on any
    /// port (`allowlist.go` `IsAllowed` compares the host part only).
    pub(super) fn allows(&self, store: &Store, host_port: &str) -> bool {
        let Some((ns, name)) = &self.allowlist_pool else {
            return true;
        };
        let Some(pool) = store
            .kinds()
            .by_resource(super::INFERENCE_GROUP, "v1", "inferencepools")
            .and_then(|k| store.get(k, ns, name))
        else {
            return false;
        };
        let host = host_port
            .rsplit_once(':')
            .map_or(host_port, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        super::pool_pods(store, &pool).iter().any(|pod| {
            pod.pointer("/status/podIP").and_then(Value::as_str) == Some(host)
                || pod.pointer("/metadata/name").and_then(Value::as_str) == Some(host)
        })
    }
}

/// The request the sidecar sends the prefill pod: the caller's, for one token and not
/// streamed (the KV cache is what it is for).
pub(super) fn prefill_request(body: &[u8]) -> axum::body::Bytes {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(mut request)) => {
            request.insert("max_tokens".into(), 1.into());
            request.insert("stream".into(), false.into());
            request.remove("stream_options");
            serde_json::to_vec(&request).unwrap_or_default().into()
        }
        _ => axum::body::Bytes::copy_from_slice(body),
    }
}

/// The pod at `ip` in `ns`.
pub(super) fn pod_at(store: &Store, ns: &str, ip: &str) -> Option<Value> {
    let kind = store.kinds().by_resource("", "v1", "pods")?;
    store
        .list(kind, Some(ns))
        .into_iter()
        .find(|p| p.pointer("/status/podIP").and_then(Value::as_str) == Some(ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(role: Option<&str>) -> Value {
        json!({"metadata": {"name": "p", "labels": role.map(|r| json!({ROLE_LABEL: r})).unwrap_or(json!({}))}})
    }

    #[test]
    fn the_filters_keep_pods_by_role_as_upstreams_do() {
        let pods = vec![
            pod(Some("prefill")),
            pod(Some("decode")),
            pod(Some("both")),
            pod(None),
            pod(Some("encode")),
        ];
        let roles = |kept: Vec<Value>| -> Vec<Option<String>> {
            kept.iter().map(|p| role(p).map(String::from)).collect()
        };
        assert_eq!(
            roles(decode_pods(&pods)),
            [Some("decode".into()), Some("both".into()), None]
        );
        assert_eq!(
            roles(prefill_pods(&pods)),
            [Some("prefill".into()), Some("both".into())]
        );
    }

    #[test]
    fn the_decider_counts_a_prompt_as_characters_over_four() {
        let picker = PdPicker {
            non_cached_tokens: 16,
        };
        let body = |prompt: &str| serde_json::to_vec(&json!({"prompt": prompt})).unwrap();
        assert!(!picker.disaggregates(&body(&"x".repeat(63))));
        assert!(picker.disaggregates(&body(&"x".repeat(64))));
        let chat =
            serde_json::to_vec(&json!({"messages": [{"role": "user", "content": "y".repeat(80)}]}))
                .unwrap();
        assert!(picker.disaggregates(&chat));
        let off = PdPicker {
            non_cached_tokens: 0,
        };
        assert!(!off.disaggregates(&body(&"x".repeat(1000))));
    }
}
