//! Validation of a [`DeploymentSpec`]: every rule, each problem named by its field path.
//! [`DeploymentSpec::parse`] (in `serving`) runs them all.

use super::*;

impl DeploymentSpec {
    pub(crate) fn validate_model(&self, errors: &mut FieldErrors) {
        errors.check("spec.model.source", ModelSource::parse(&self.model.source));
        if let Some(served) = &self.model.served_name
            && (served.is_empty()
                || served.len() > 256
                || served.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            errors.push(
                "spec.model.servedName",
                "must be 1 to 256 characters without whitespace",
            );
        }
        if let Some(rev) = &self.model.revision
            && (rev.is_empty()
                || rev.len() > 255
                || rev.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            errors.push(
                "spec.model.revision",
                "must be 1 to 255 characters without whitespace",
            );
        }
        if let Some(secret) = &self.model.secret_ref {
            validate_secret_ref(errors, "spec.model.secretRef", secret);
        }
    }

    /// Every rule of `spec.engine`, one after the other in the order of its fields (~90
    /// lines: a list, not a flow).
    pub(crate) fn validate_engine(&self, errors: &mut FieldErrors) {
        let engine = &self.engine;
        if let Some(image) = &engine.image
            && !IMAGE_REFERENCE.is_match(image)
        {
            errors.push(
                "spec.engine.image",
                format!(
                    "`{image}` is not a valid image reference (e.g. `vllm/vllm-openai:v0.11.0`)"
                ),
            );
        }
        if let Some(port) = engine.port
            && !(1..=65535).contains(&port)
        {
            errors.push("spec.engine.port", "must be between 1 and 65535");
        }
        validate_args(errors, "spec.engine.args", &engine.args);
        validate_env(errors, "spec.engine.env", &engine.env);
        if let Some(len) = engine.max_model_len
            && len < 1
        {
            errors.push("spec.engine.maxModelLen", "must be at least 1");
        }
        if let Some(tp) = engine.tensor_parallel_size
            && !(1..=MAX_TENSOR_PARALLEL).contains(&tp)
        {
            errors.push(
                "spec.engine.tensorParallelSize",
                format!("must be between 1 and {MAX_TENSOR_PARALLEL}"),
            );
        }
    }

    /// `spec.disaggregation`: two roles behind an InferencePool, each bounded like the spec.
    pub(crate) fn validate_disaggregation(&self, limits: &SpecLimits, errors: &mut FieldErrors) {
        let Some(roles) = &self.disaggregation else {
            return;
        };
        if !matches!(self.engine.kind, EngineKind::Vllm | EngineKind::Sim) {
            errors.push(
                "spec.disaggregation",
                format!(
                    "prefill/decode disaggregation needs engine kind vllm or sim (whose KV-cache transfer and routing sidecar modelplane configures), not {}",
                    self.engine.kind.as_str()
                ),
            );
        }
        if self.routing.mode != Some(RoutingMode::InferencePool) {
            errors.push(
                "spec.disaggregation",
                "needs spec.routing.mode: InferencePool (its endpoint picker sends each request to a prefill and a decode pod)",
            );
        }
        let fallback = self
            .routing
            .inference_pool
            .as_ref()
            .and_then(|p| p.when_unavailable);
        if fallback == Some(PoolFallback::Service) {
            errors.push(
                "spec.routing.inferencePool.whenUnavailable",
                "must be Fail with spec.disaggregation: without an InferencePool the decode pods' routing sidecar has no pool to serve",
            );
        }
        if self.autoscaling.is_some() {
            errors.push(
                "spec.autoscaling",
                "not yet with spec.disaggregation: scale each role with POST …/scale and its `role`",
            );
        }
        let count = |r: &RoleSpec| r.replicas.unwrap_or(DEFAULT_REPLICAS);
        if count(&roles.decode) == 0 && count(&roles.prefill) > 0 {
            errors.push(
                "spec.disaggregation.decode.replicas",
                "must be at least 1 while prefill pods run: decode pods take every request (scale prefill to 0 first)",
            );
        }
        for (i, arg) in self.engine.args.iter().enumerate() {
            if arg == "--port" || arg.starts_with("--port=") {
                errors.push(
                    format!("spec.engine.args[{i}]"),
                    "the port is spec.engine.port's: with spec.disaggregation the decode engine listens behind the routing sidecar",
                );
            }
        }
        if !self.adapters.is_empty() {
            errors.push(
                "spec.adapters",
                "not yet with spec.disaggregation: LoRA adapters are loaded on one set of pods",
            );
        }
        for (role, spec) in [("prefill", &roles.prefill), ("decode", &roles.decode)] {
            let path = format!("spec.disaggregation.{role}");
            if let Some(n) = spec.replicas
                && !(0..=limits.max_replicas).contains(&n)
            {
                errors.push(
                    format!("{path}.replicas"),
                    format!("must be between 0 and {}", limits.max_replicas),
                );
            }
            if let Some(resources) = &spec.resources {
                let tp = self.engine.tensor_parallel_size;
                validate_resource_spec(errors, &format!("{path}.resources"), resources, tp);
                let gpu = resources.gpu.as_ref();
                if gpu.is_some_and(|g| g.resource_name.is_some() || g.product.is_some()) {
                    errors.push(
                        format!("{path}.resources.gpu"),
                        "may set only `count`: both roles use spec.resources.gpu's resourceName and product",
                    );
                }
            }
            validate_args(errors, &format!("{path}.args"), &spec.args);
            for (i, arg) in spec.args.iter().enumerate() {
                if arg == "--port" || arg.starts_with("--port=") {
                    errors.push(
                        format!("{path}.args[{i}]"),
                        "the port is spec.engine.port's (the decode role's engine listens behind the routing sidecar)",
                    );
                }
            }
            validate_env(errors, &format!("{path}.env"), &spec.env);
            if !limits.allow_plaintext_credentials {
                for (i, var) in spec.env.iter().enumerate() {
                    if var.value.as_ref().is_some_and(|v| !v.is_empty())
                        && looks_like_a_credential(&var.name)
                    {
                        errors.push(
                            format!("{path}.env[{i}].value"),
                            format!("`{}` looks like a credential: put it in a Secret and use `secretRef`", var.name),
                        );
                    }
                }
            }
        }
    }

    /// Specs whose parts contradict each other, or that would put a secret where every
    /// viewer can read it.
    /// `spec.adapters`: a bounded list of distinct names, none the base model's, each from a
    /// source the engine can load at run time, on an engine whose adapter API modelplane drives.
    pub(crate) fn validate_adapters(&self, errors: &mut FieldErrors) {
        let adapters = &self.adapters;
        if adapters.is_empty() {
            return;
        }
        if !matches!(self.engine.kind, EngineKind::Vllm | EngineKind::Sim) {
            errors.push(
                "spec.adapters",
                format!(
                    "LoRA adapters need engine kind vllm or sim (whose runtime adapter API modelplane drives), not {}",
                    self.engine.kind.as_str()
                ),
            );
        }
        if adapters.len() > MAX_ADAPTERS {
            errors.push(
                "spec.adapters",
                format!(
                    "must have at most {MAX_ADAPTERS} items (has {})",
                    adapters.len()
                ),
            );
        }
        // Adapters the engine is started with would be unloaded as not on the list.
        if let Some(i) = self
            .engine
            .args
            .iter()
            .position(|a| a == "--lora-modules" || a.starts_with("--lora-modules="))
        {
            errors.push(
                format!("spec.engine.args[{i}]"),
                "--lora-modules and spec.adapters both list adapters: list them in spec.adapters only",
            );
        }
        let mut seen = HashSet::new();
        for (i, adapter) in adapters.iter().enumerate() {
            let name = &adapter.name;
            if !ADAPTER_NAME.is_match(name) {
                errors.push(
                    format!("spec.adapters[{i}].name"),
                    "must be 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter or digit",
                );
            } else if !seen.insert(name.as_str()) {
                errors.push(
                    format!("spec.adapters[{i}].name"),
                    format!("`{name}` is listed twice"),
                );
            } else if self.model.served_name.as_deref() == Some(name.as_str()) {
                errors.push(
                    format!("spec.adapters[{i}].name"),
                    format!("`{name}` is the base model's served name; an adapter needs its own"),
                );
            }
            let field = format!("spec.adapters[{i}].source");
            let s3 = match ModelSource::parse(&adapter.source) {
                Ok(ModelSource::HuggingFace { .. } | ModelSource::Pvc { .. }) => false,
                Ok(ModelSource::S3 { key, .. }) => {
                    // The fetcher reads its list a line at a time.
                    if key.chars().any(char::is_control) {
                        errors.push(
                            field,
                            "the S3 key must not contain control characters (line breaks, tabs)",
                        );
                    }
                    true
                }
                Ok(ModelSource::Oci { .. }) => {
                    errors.push(
                        field,
                        format!(
                            "`{}`: adapters load at run time from hf://, pvc:// or s3:// (the engine cannot read an oci:// image itself)",
                            adapter.source
                        ),
                    );
                    false
                }
                Err(message) => {
                    errors.push(field, message);
                    false
                }
            };
            let Some(secret) = &adapter.secret_ref else {
                continue;
            };
            let field = format!("spec.adapters[{i}].secretRef");
            if !s3 {
                errors.push(
                    field,
                    "only s3:// adapters take a secretRef (hf:// adapters are downloaded with spec.model.secretRef's token)",
                );
            } else if !is_dns1123_subdomain(&secret.name) {
                errors.push(format!("{field}.name"), "must be a valid Secret name");
            } else if let Some((j, other)) = adapters[..i]
                .iter()
                .enumerate()
                .find_map(|(j, a)| Some((j, a.secret_ref.as_ref()?)))
                .filter(|(_, other)| other.name != secret.name)
            {
                // One fetcher per pod, with one environment.
                errors.push(
                    format!("{field}.name"),
                    format!(
                        "every s3:// adapter of a deployment is fetched with one Secret: `{}` differs from `{}` of spec.adapters[{j}]",
                        secret.name, other.name
                    ),
                );
            }
        }
    }

    pub(crate) fn validate_contradictions(&self, limits: &SpecLimits, errors: &mut FieldErrors) {
        let port = self.engine.port.unwrap_or(DEFAULT_PORT);
        let args = &self.engine.args;
        for (i, arg) in args.iter().enumerate() {
            let value = match arg.strip_prefix("--port") {
                Some(rest) if rest.starts_with('=') => Some(rest[1..].to_owned()),
                Some("") => args.get(i + 1).cloned(),
                _ => None,
            };
            if let Some(value) = value
                && value != port.to_string()
            {
                errors.push(
                    format!("spec.engine.args[{i}]"),
                    format!(
                        "sets the port to {value}, but spec.engine.port is {port}: the probes and the Service \
                         would miss the server; set spec.engine.port instead"
                    ),
                );
            }
        }
        let gpus = self.resources.gpu.as_ref().and_then(|g| g.count);
        // (With a tensor-parallel size, a count of 0 is already refused above.)
        if gpus == Some(0)
            && self.engine.tensor_parallel_size.is_none()
            && self.engine.kind != EngineKind::Sim
            && self.engine.image.is_none()
        {
            errors.push(
                "spec.resources.gpu.count",
                format!(
                    "{} needs a GPU with its default image; set spec.engine.image to a CPU build, or use engine kind `sim`",
                    self.engine.kind.as_str()
                ),
            );
        }
        if !limits.allow_plaintext_credentials {
            for (i, var) in self.engine.env.iter().enumerate() {
                if var.value.as_ref().is_some_and(|v| !v.is_empty())
                    && looks_like_a_credential(&var.name)
                {
                    errors.push(
                        format!("spec.engine.env[{i}].value"),
                        format!(
                            "`{}` looks like a credential, and a literal value is readable by every viewer: \
                             put it in a Secret and use `secretRef`",
                            var.name
                        ),
                    );
                }
            }
        }
    }

    pub(crate) fn validate_resources(&self, errors: &mut FieldErrors) {
        // A group's pods each hold a share of the parallel GPUs (`validate_multinode`).
        let world = self.parallel_gpus().filter(|_| self.nodes() == 1);
        validate_resource_spec(errors, "spec.resources", &self.resources, world);
    }

    pub(crate) fn validate_scheduling(&self, errors: &mut FieldErrors) {
        let sched = &self.scheduling;
        if sched.node_selector.len() > MAX_NODE_SELECTOR {
            errors.push(
                "spec.scheduling.nodeSelector",
                format!("must have at most {MAX_NODE_SELECTOR} entries"),
            );
        }
        if sched.tolerations.len() > MAX_TOLERATIONS {
            errors.push(
                "spec.scheduling.tolerations",
                format!("must have at most {MAX_TOLERATIONS} items"),
            );
        }
        for (key, value) in &sched.node_selector {
            let path = format!("spec.scheduling.nodeSelector.{key}");
            errors.check(&path, validate_label_key(key));
            errors.check(&path, validate_label_value(value));
        }
        for (i, t) in sched.tolerations.iter().enumerate() {
            validate_toleration(errors, &format!("spec.scheduling.tolerations[{i}]"), t);
        }
        if let Some(name) = &sched.scheduler_name
            && !is_dns1123_subdomain(name)
        {
            errors.push(
                "spec.scheduling.schedulerName",
                "must be a DNS-1123 subdomain",
            );
        }
        if let Some(name) = &sched.priority_class_name
            && !is_dns1123_subdomain(name)
        {
            errors.push(
                "spec.scheduling.priorityClassName",
                "must be a DNS-1123 subdomain",
            );
        }
    }

    pub(crate) fn validate_storage(&self, errors: &mut FieldErrors) {
        if let Some(cache) = &self.storage.cache {
            match (&cache.claim_name, &cache.size_limit) {
                (Some(_), Some(_)) => errors.push(
                    "spec.storage.cache",
                    "set either `claimName` (a PVC) or `sizeLimit` (an emptyDir), not both",
                ),
                (Some(claim), None) if !is_dns1123_subdomain(claim) => errors.push(
                    "spec.storage.cache.claimName",
                    format!("`{claim}` is not a valid PVC name"),
                ),
                (None, Some(size)) => {
                    errors.check("spec.storage.cache.sizeLimit", Quantity::parse(size));
                }
                _ => {}
            }
        }
    }

    pub(crate) fn validate_routing(&self, errors: &mut FieldErrors) {
        let routing = &self.routing;
        if let Some(gateway) = &routing.gateway {
            errors.check(
                "spec.routing.gateway",
                parse_gateway_ref(gateway).map(|_| ()),
            );
        }
        if let Some(host) = &routing.hostname {
            let plain = host.strip_prefix("*.").unwrap_or(host);
            if crate::domain::names::is_ip_literal(plain) {
                errors.push(
                    "spec.routing.hostname",
                    format!(
                        "`{host}` is an IP address; a hostname must be a DNS name (the Gateway API allows no IPs here)"
                    ),
                );
            } else if !is_dns1123_subdomain(plain) || !plain.contains('.') {
                errors.push(
                    "spec.routing.hostname",
                    format!("`{host}` is not a valid hostname (e.g. `qwen.models.example.com`)"),
                );
            }
        }
        if let Some(prefix) = &routing.path_prefix {
            errors.check(
                "spec.routing.pathPrefix",
                crate::domain::names::validate_path_prefix(prefix),
            );
        }
        if let Some(pool) = &routing.inference_pool {
            if routing.mode != Some(RoutingMode::InferencePool) {
                errors.push(
                    "spec.routing.inferencePool",
                    "only with `mode: InferencePool`",
                );
            }
            if let Some(scorers) = &pool.scorers {
                for (field, weight) in [
                    ("queue", scorers.queue),
                    ("kvCache", scorers.kv_cache),
                    ("prefixCache", scorers.prefix_cache),
                ] {
                    if let Some(weight) = weight
                        && !(0..=100).contains(&weight)
                    {
                        errors.push(
                            format!("spec.routing.inferencePool.scorers.{field}"),
                            "must be between 0 and 100",
                        );
                    }
                }
                if scorers.resolved() == (0, 0, 0) {
                    errors.push(
                        "spec.routing.inferencePool.scorers",
                        "at least one scorer needs a weight above 0",
                    );
                }
            }
        }
    }

    /// The rollout counts are checked where they are resolved ([`DeploymentSpec::serving`]).
    pub(crate) fn validate_rollout_and_shutdown(&self, errors: &mut FieldErrors) {
        let shutdown = &self.shutdown;
        if let Some(drain) = shutdown.drain_seconds
            && !(0..=600).contains(&drain)
        {
            errors.push("spec.shutdown.drainSeconds", "must be between 0 and 600");
        }
        if let Some(grace) = shutdown.grace_period_seconds {
            if !(1..=3600).contains(&grace) {
                errors.push(
                    "spec.shutdown.gracePeriodSeconds",
                    "must be between 1 and 3600",
                );
            } else if let Some(drain) = shutdown.drain_seconds
                && drain >= grace
            {
                errors.push(
                    "spec.shutdown.gracePeriodSeconds",
                    format!("must be more than spec.shutdown.drainSeconds ({drain})"),
                );
            }
        }
    }

    pub(crate) fn validate_probes(&self, errors: &mut FieldErrors) {
        if let Some(secs) = self.probes.startup_timeout_seconds
            && !(1..=MAX_STARTUP_SECONDS).contains(&secs)
        {
            errors.push(
                "spec.probes.startupTimeoutSeconds",
                format!("must be between 1 and {MAX_STARTUP_SECONDS}"),
            );
        }
        if let Some(path) = &self.probes.health_path
            && (!path.starts_with('/') || path.chars().any(|c| c.is_whitespace()))
        {
            errors.push(
                "spec.probes.healthPath",
                "must start with '/' and contain no whitespace",
            );
        }
    }
}

/// CPU, memory, shared memory and GPUs at `path` (`spec.resources`, or a role's).
pub(crate) fn validate_resource_spec(
    errors: &mut FieldErrors,
    path: &str,
    res: &ResourceSpec,
    tensor_parallel: Option<i64>,
) {
    for (field, value) in [
        ("cpu", &res.cpu),
        ("memory", &res.memory),
        ("sharedMemory", &res.shared_memory),
    ] {
        if let Some(v) = value {
            errors.check(&format!("{path}.{field}"), Quantity::parse(v));
        }
    }
    if let Some(gpu) = &res.gpu {
        if let Some(count) = gpu.count {
            if !(0..=MAX_GPUS).contains(&count) {
                errors.push(
                    format!("{path}.gpu.count"),
                    format!("must be between 0 and {MAX_GPUS}"),
                );
            } else if let Some(tp) = tensor_parallel
                && count < tp
            {
                errors.push(
                    format!("{path}.gpu.count"),
                    format!("must be at least tensorParallelSize × pipelineParallelSize ({tp})"),
                );
            }
        }
        if let Some(name) = &gpu.resource_name {
            errors.check(
                &format!("{path}.gpu.resourceName"),
                check_extended_resource_name(name),
            );
        }
        if let Some(product) = &gpu.product {
            if product.is_empty() {
                errors.push(format!("{path}.gpu.product"), "must not be empty");
            } else {
                errors.check(
                    &format!("{path}.gpu.product"),
                    validate_label_value(product),
                );
            }
        }
    }
}

/// A list of command-line arguments: bounded, each bounded and without NUL.
pub(crate) fn validate_args(errors: &mut FieldErrors, path: &str, args: &[String]) {
    if args.len() > MAX_ARGS {
        errors.push(
            path,
            format!("must have at most {MAX_ARGS} items (has {})", args.len()),
        );
    }
    for (i, arg) in args.iter().enumerate() {
        if arg.len() > MAX_ARG_BYTES || arg.contains('\0') {
            errors.push(
                format!("{path}[{i}]"),
                format!("must be at most {MAX_ARG_BYTES} characters without NUL"),
            );
        }
    }
}

/// Environment variables: bounded, valid distinct names, a literal or a Secret each.
pub(crate) fn validate_env(errors: &mut FieldErrors, list: &str, env: &[EnvVar]) {
    if env.len() > MAX_ENV {
        errors.push(
            list,
            format!("must have at most {MAX_ENV} items (has {})", env.len()),
        );
    }
    let mut seen = HashSet::new();
    for (i, var) in env.iter().enumerate() {
        let path = format!("{list}[{i}]");
        if !ENV_NAME.is_match(&var.name) {
            errors.push(
                format!("{path}.name"),
                format!("`{}` is not a valid environment variable name (letters, digits, '_', '-', '.'; not starting with a digit)", var.name),
            );
        } else if !seen.insert(var.name.as_str()) {
            errors.push(
                format!("{path}.name"),
                format!("`{}` is set twice", var.name),
            );
        } else if var.name == RUNTIME_LORA_ENV {
            // It opens the engine's adapter API, which the route refuses to callers only
            // for deployments with spec.adapters.
            errors.push(
                format!("{path}.name"),
                format!("`{RUNTIME_LORA_ENV}` is modelplane's: it is set when spec.adapters lists adapters"),
            );
        }
        if var
            .value
            .as_ref()
            .is_some_and(|v| v.len() > MAX_ENV_VALUE_BYTES)
        {
            errors.push(
                format!("{path}.value"),
                format!("must be at most {MAX_ENV_VALUE_BYTES} bytes"),
            );
        }
        match (&var.value, &var.secret_ref) {
            (Some(_), Some(_)) => {
                errors.push(path.clone(), "set either `value` or `secretRef`, not both")
            }
            (None, Some(secret)) => {
                validate_secret_ref(errors, &format!("{path}.secretRef"), secret)
            }
            _ => {}
        }
    }
}

/// Parses `namespace/name[/section]`.
pub fn parse_gateway_ref(s: &str) -> Result<(String, String, Option<String>), String> {
    let parts: Vec<&str> = s.split('/').collect();
    let bad = || format!("`{s}` must be `namespace/name` or `namespace/name/section`");
    match parts.as_slice() {
        [ns, name] | [ns, name, _] if is_dns1123_label(ns) && is_dns1123_subdomain(name) => {
            let section = parts.get(2).map(|s| (*s).to_owned());
            if let Some(sec) = &section
                && !is_dns1123_subdomain(sec)
            {
                return Err(bad());
            }
            Ok(((*ns).to_owned(), (*name).to_owned(), section))
        }
        _ => Err(bad()),
    }
}

fn validate_secret_ref(errors: &mut FieldErrors, path: &str, secret: &SecretKeyRef) {
    if !is_dns1123_subdomain(&secret.name) {
        errors.push(format!("{path}.name"), "must be a valid Secret name");
    }
    if !SECRET_KEY.is_match(&secret.key) {
        errors.push(
            format!("{path}.key"),
            "must consist of letters, digits, '-', '_' or '.'",
        );
    }
}

fn validate_toleration(errors: &mut FieldErrors, path: &str, t: &Toleration) {
    if let Some(key) = t.key.as_deref().filter(|k| !k.is_empty()) {
        errors.check(&format!("{path}.key"), validate_label_key(key));
    }
    let operator = t.operator.as_deref().unwrap_or("Equal");
    match operator {
        "Exists" => {
            if t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                errors.push(
                    format!("{path}.value"),
                    "must be empty when operator is `Exists`",
                );
            }
        }
        "Equal" => {
            if t.key.as_deref().unwrap_or("").is_empty() {
                errors.push(
                    format!("{path}.key"),
                    "is required when operator is `Equal`",
                );
            }
            if let Some(v) = &t.value {
                errors.check(&format!("{path}.value"), validate_label_value(v));
            }
        }
        other => errors.push(
            format!("{path}.operator"),
            format!("`{other}` is not supported; use `Equal` or `Exists`"),
        ),
    }
    let effect = t.effect.as_deref().unwrap_or("");
    if !["", "NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        errors.push(
            format!("{path}.effect"),
            format!(
                "`{effect}` is not supported; use `NoSchedule`, `PreferNoSchedule` or `NoExecute`"
            ),
        );
    }
    if t.toleration_seconds.is_some() && effect != "NoExecute" {
        errors.push(
            format!("{path}.tolerationSeconds"),
            "may only be set when effect is `NoExecute`",
        );
    }
}

/// Reports every string (value or key) below `value` that contains a NUL character.
pub(crate) fn find_nul_characters(value: &serde_json::Value, path: &str, errors: &mut FieldErrors) {
    match value {
        serde_json::Value::String(s) if s.contains('\0') => {
            errors.push(path, "must not contain NUL characters");
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_nul_characters(item, &format!("{path}[{i}]"), errors);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map {
                let child = format!("{path}.{key}");
                if key.contains('\0') {
                    errors.push(&child, "keys must not contain NUL characters");
                } else {
                    find_nul_characters(item, &child, errors);
                }
            }
        }
        _ => {}
    }
}

/// Names that conventionally hold secrets: hub tokens, API keys, passwords.
fn looks_like_a_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN"].contains(&upper.as_str())
        || ["_KEY", "_TOKEN", "_SECRET", "_PASSWORD", "_PASSWD"]
            .iter()
            .any(|suffix| upper.ends_with(suffix))
}

fn is_reserved_key(key: &str) -> bool {
    let domain = key.split_once('/').map(|(d, _)| d);
    RESERVED_LABEL_KEYS.contains(&key)
        || domain.is_some_and(|d| d == RESERVED_DOMAIN || d.ends_with(".modelplane.io"))
}

pub(crate) fn validate_user_map(
    errors: &mut FieldErrors,
    path: &str,
    map: &BTreeMap<String, String>,
    values_are_labels: bool,
) {
    let max_entries = if values_are_labels {
        MAX_LABELS
    } else {
        MAX_ANNOTATIONS
    };
    if map.len() > max_entries {
        // Reported once for the map: thousands of per-key errors help nobody.
        errors.push(
            path,
            format!(
                "must have at most {max_entries} entries (has {})",
                map.len()
            ),
        );
        return;
    }
    let mut total = 0;
    for (key, value) in map {
        let field = format!("{path}.{key}");
        if errors.check(&field, validate_label_key(key)).is_none() {
            continue;
        }
        if is_reserved_key(key) {
            errors.push(&field, format!("`{key}` is reserved for modelplane"));
        }
        if values_are_labels {
            errors.check(&field, validate_label_value(value));
        }
        total += key.len() + value.len();
    }
    if !values_are_labels && total > MAX_ANNOTATION_BYTES {
        errors.push(
            path,
            format!(
                "annotations must total at most {} KiB",
                MAX_ANNOTATION_BYTES / 1024
            ),
        );
    }
}
