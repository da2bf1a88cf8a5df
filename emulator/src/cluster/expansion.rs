//! Kubernetes `$(VAR)` expansion of a container's `command`/`args` from its env, as the
//! kubelet does before it starts the container: `ExpandContainerCommandAndArgs`
//! (kubernetes pkg/kubelet/container/helpers.go) with the mapping of
//! `expansion.MappingFuncFor` over the container's environment, whose values are
//! themselves expanded in order (`makeEnvironmentVariables`, pkg/kubelet/kubelet_pods.go).
//! The syntax is kubernetes `third_party/forked/golang/expansion/expand.go` `Expand`:
//! `$(VAR)` is replaced when VAR is defined and left as is otherwise, `$$` is an escaped
//! `$`, and any other `$` is kept.
//!
//! Only literal `env[].value`s define variables here (`valueFrom` and `envFrom` are not
//! resolved: their references stay unexpanded).

use std::collections::HashMap;

use serde_json::Value;

/// `Expand` (expand.go): `input` with each `$(NAME)` replaced by `mapping(NAME)`, `$$`
/// by `$`; an unterminated `$(` and a `$` before anything else are copied as they are.
pub(crate) fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.push_str(&input[checkpoint..cursor]);
            let rest = &input[cursor + 1..];
            // tryReadVariableName
            let advance = match rest.as_bytes()[0] {
                b'$' => {
                    out.push('$');
                    1
                }
                b'(' => match rest[1..].find(')') {
                    Some(close) => {
                        let name = &rest[1..1 + close];
                        // MappingFuncFor: an undefined name is put back as `$(NAME)`.
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        close + 2
                    }
                    None => {
                        // Incomplete reference: `$(` is returned, one byte consumed.
                        out.push_str("$(");
                        1
                    }
                },
                _ => {
                    // Not an expression: the operator and the next character.
                    let ch = rest.chars().next().expect("not empty");
                    out.push('$');
                    out.push(ch);
                    ch.len_utf8()
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    if checkpoint < input.len() {
        out.push_str(&input[checkpoint..]);
    }
    out
}

/// The variables a container's `$(VAR)` references resolve against: its literal
/// `env[].value`s, each expanded with those defined before it (later ones win).
pub(crate) fn container_env(container: &Value) -> HashMap<String, String> {
    let mut vars = HashMap::new();
    for e in container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(name) = e.get("name").and_then(Value::as_str) else {
            continue;
        };
        if e.get("valueFrom").is_some() {
            continue;
        }
        let value = e.get("value").and_then(Value::as_str).unwrap_or("");
        let value = expand(value, &vars);
        vars.insert(name.to_string(), value);
    }
    vars
}

/// The container's `command` then `args`, expanded (`ExpandContainerCommandAndArgs`).
pub(crate) fn command_and_args(container: &Value) -> Vec<String> {
    let vars = container_env(container);
    ["command", "args"]
        .iter()
        .flat_map(|f| {
            container
                .get(*f)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .filter_map(Value::as_str)
        .map(|a| expand(a, &vars))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars() -> HashMap<String, String> {
        HashMap::from([
            ("VAR_A".to_string(), "A".to_string()),
            ("VAR_B".to_string(), "B".to_string()),
            ("LWS_WORKER_INDEX".to_string(), "1".to_string()),
        ])
    }

    /// The cases of kubernetes third_party/forked/golang/expansion/expand_test.go
    /// `TestMapReference`/`doExpansionTest` this syntax covers.
    #[test]
    fn expands_like_the_kubelet() {
        let v = vars();
        for (input, want) in [
            ("$(VAR_A)", "A"),
            ("___$(VAR_B)___", "___B___"),
            ("$(VAR_A)-$(VAR_A)", "A-A"),
            ("$(VAR_A)$(VAR_B)", "AB"),
            // An undefined variable stays as written.
            ("$(VAR_DNE)", "$(VAR_DNE)"),
            // `$$` escapes the operator.
            ("$$(VAR_A)", "$(VAR_A)"),
            ("$$$(VAR_A)", "$A"),
            ("$$$$(VAR_A)", "$$(VAR_A)"),
            ("f000-$$VAR_A", "f000-$VAR_A"),
            // An incomplete reference and a bare operator are kept.
            ("$(VAR_A", "$(VAR_A"),
            ("$VAR_A", "$VAR_A"),
            ("$", "$"),
            ("foo$", "foo$"),
            ("$()", "$()"),
            ("--node-rank=$(LWS_WORKER_INDEX)", "--node-rank=1"),
        ] {
            assert_eq!(expand(input, &v), want, "{input}");
        }
    }

    #[test]
    fn env_values_expand_in_order_and_args_use_them() {
        let c = json!({
            "env": [
                {"name": "LWS_LEADER_ADDRESS", "value": "vllm-0.vllm.default"},
                {"name": "ADDR", "value": "$(LWS_LEADER_ADDRESS):29501"},
                {"name": "LATER", "value": "$(AFTER)"},
                {"name": "AFTER", "value": "x"},
                {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ],
            "command": ["vllm", "serve"],
            "args": ["--master-addr", "$(LWS_LEADER_ADDRESS)", "$(ADDR)", "$(LATER)", "$(FROM)"],
        });
        assert_eq!(
            command_and_args(&c),
            [
                "vllm",
                "serve",
                "--master-addr",
                "vllm-0.vllm.default",
                "vllm-0.vllm.default:29501",
                "$(AFTER)",
                "$(FROM)"
            ]
        );
    }
}
