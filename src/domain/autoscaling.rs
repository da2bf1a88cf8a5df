//! `spec.autoscaling` and the decision taken from it every collection interval.
//!
//! The arithmetic is Kubernetes' HorizontalPodAutoscaler's (pkg/controller/podautoscaler):
//! `desired = ceil(ready × observed / target)` unless the ratio is within a tolerance of 0.1
//! (`--horizontal-pod-autoscaler-tolerance`, `Tolerances.isWithin` in replica_calculator.go);
//! a scale-up takes the *lowest* recommendation of its stabilization window and a scale-down
//! the *highest* of its delay (`stabilizeRecommendationWithBehaviors` in horizontal.go: 0 s up,
//! 300 s down by default); the unstabilized recommendation is what the window remembers.
//! Then clamps, in this order: min/max, the project's quota, what the cluster can place now.
//! Unlike the HPA, metrics that are stale or missing freeze the count: the HPA scales up on
//! partial metrics, but an inference server whose metrics are unreadable is as likely to be
//! overloaded as idle, and a wrong scale-down drops requests.
//!
//! Scaling to zero is its own rule, not a recommendation: after `scaleToZeroAfterSeconds`
//! without a request (nothing finished, running or waiting in every reading) the count goes
//! to 0, as Knative's `scale-to-zero-grace-period` does (pkg/reconciler/autoscaling/kpa/
//! scaler.go, `handleScaleToZero`). Until then, `minReplicas: 0` keeps one replica.

use std::fmt;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::errors::FieldErrors;
use super::load::Load;

/// How far the observed/target ratio may stray from 1 before the count changes (the HPA's).
pub const TOLERANCE: f64 = 0.1;
/// `scaleUpStabilizationSeconds` when unset (the HPA's scale-up window).
pub const DEFAULT_SCALE_UP_STABILIZATION_SECONDS: i64 = 0;
/// `scaleDownDelaySeconds` when unset (the HPA's downscale stabilization, 5 minutes).
pub const DEFAULT_SCALE_DOWN_DELAY_SECONDS: i64 = 300;
/// `scaleToZeroAfterSeconds` when unset and `minReplicas` is 0: idle for 15 minutes. A GPU
/// replica takes minutes to come back, so this is longer than Knative's 30 s.
pub const DEFAULT_SCALE_TO_ZERO_AFTER_SECONDS: i64 = 900;
/// `activationTimeoutSeconds` when unset: long enough for a large model to load.
pub const DEFAULT_ACTIVATION_TIMEOUT_SECONDS: i64 = 600;
/// The longest stabilization window or delay, and the longest idle time before zero.
pub const MAX_WINDOW_SECONDS: i64 = 3600;
pub const MAX_SCALE_TO_ZERO_AFTER_SECONDS: i64 = 86_400;
pub const MIN_SCALE_TO_ZERO_AFTER_SECONDS: i64 = 30;
/// How long a request may wait for a replica at zero: up to an hour (Knative allows 10 min).
pub const MAX_ACTIVATION_TIMEOUT_SECONDS: i64 = 3600;

/// How the replica count follows the load. `spec.replicas` is the starting point; the
/// count the autoscaler sets is in `status.autoscaling`, so the spec and its revisions do
/// not change with every decision. With a canary, only the stable track is scaled (by the
/// stable track's load); the canary keeps `canary.replicas`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AutoscalingSpec {
    /// The fewest replicas (0 allows scaling to zero when idle).
    pub min_replicas: i64,
    /// The most replicas.
    pub max_replicas: i64,
    /// The figure each replica should carry.
    pub target: ScalingTarget,
    /// Seconds a higher load must last before scaling up (its lowest recommendation in that
    /// window is taken). Default 0.
    #[serde(default)]
    pub scale_up_stabilization_seconds: Option<i64>,
    /// Seconds a lower load must last before scaling down (the highest recommendation in
    /// that window is taken). Default 300.
    #[serde(default)]
    pub scale_down_delay_seconds: Option<i64>,
    /// Seconds without a request before going to zero; only with `minReplicas: 0`.
    /// Default 900.
    #[serde(default)]
    pub scale_to_zero_after_seconds: Option<i64>,
    /// Seconds a request may wait at zero for the first replica to be ready; only with
    /// `minReplicas: 0`. Default 600.
    #[serde(default)]
    pub activation_timeout_seconds: Option<i64>,
}

/// The per-replica figure the autoscaler keeps each replica at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScalingTarget {
    pub metric: ScalingMetric,
    /// The figure per replica: requests (waiting or running), requests/s, or for
    /// `kvCacheUsage` a fraction of the cache (0 to 1).
    pub value: f64,
}

/// What the autoscaler measures.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum ScalingMetric {
    /// Requests waiting in the engines' queues, per ready replica.
    WaitingPerReplica,
    /// Requests being generated, per ready replica.
    RunningPerReplica,
    /// The engines' KV-cache use, averaged over ready replicas (0 to 1).
    KvCacheUsage,
    /// Requests finished per second, per ready replica.
    RequestsPerSecondPerReplica,
}

impl ScalingMetric {
    /// The figure per replica in `load`, over `ready` replicas.
    fn observed(self, load: &Load, ready: i64) -> Option<f64> {
        let per_replica = |total: Option<f64>| total.map(|t| t / ready as f64);
        let f = &load.figures;
        match self {
            Self::WaitingPerReplica => per_replica(f.waiting),
            Self::RunningPerReplica => per_replica(f.running),
            Self::KvCacheUsage => f.kv_cache_usage,
            Self::RequestsPerSecondPerReplica => per_replica(f.requests_per_second),
        }
    }

    /// "37 waiting per replica", "84% of the KV cache".
    fn describe(self, value: f64) -> String {
        let n = number(value);
        match self {
            Self::WaitingPerReplica => format!("{n} waiting per replica"),
            Self::RunningPerReplica => format!("{n} running per replica"),
            Self::KvCacheUsage => format!("{}% of the KV cache in use", number(value * 100.0)),
            Self::RequestsPerSecondPerReplica => format!("{n} requests/s per replica"),
        }
    }

    fn describe_target(self, value: f64) -> String {
        match self {
            Self::KvCacheUsage => format!("target {}%", number(value * 100.0)),
            _ => format!("target {}", number(value)),
        }
    }
}

/// A figure in a sentence: whole numbers bare, others to one decimal.
fn number(v: f64) -> String {
    if (v - v.round()).abs() < 0.05 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

impl AutoscalingSpec {
    pub fn scale_up_stabilization(&self) -> Duration {
        Duration::seconds(
            self.scale_up_stabilization_seconds
                .unwrap_or(DEFAULT_SCALE_UP_STABILIZATION_SECONDS),
        )
    }

    pub fn scale_down_delay(&self) -> Duration {
        Duration::seconds(
            self.scale_down_delay_seconds
                .unwrap_or(DEFAULT_SCALE_DOWN_DELAY_SECONDS),
        )
    }

    /// How long idle before zero; `None` when the count never goes below one.
    pub fn scale_to_zero_after(&self) -> Option<Duration> {
        (self.min_replicas == 0).then(|| {
            Duration::seconds(
                self.scale_to_zero_after_seconds
                    .unwrap_or(DEFAULT_SCALE_TO_ZERO_AFTER_SECONDS),
            )
        })
    }

    pub fn activation_timeout(&self) -> Duration {
        Duration::seconds(
            self.activation_timeout_seconds
                .unwrap_or(DEFAULT_ACTIVATION_TIMEOUT_SECONDS),
        )
    }

    /// Every rule, each problem named by its field. `replicas` is `spec.replicas` as the
    /// user gave it; `max_allowed` the server's limit on replicas.
    pub fn validate(&self, replicas: Option<i64>, max_allowed: i64, errors: &mut FieldErrors) {
        const AT: &str = "spec.autoscaling";
        if !(0..=max_allowed).contains(&self.min_replicas) {
            errors.push(
                format!("{AT}.minReplicas"),
                format!("must be between 0 and {max_allowed}"),
            );
        }
        if !(1..=max_allowed).contains(&self.max_replicas) {
            errors.push(
                format!("{AT}.maxReplicas"),
                format!("must be between 1 and {max_allowed}"),
            );
        } else if self.max_replicas < self.min_replicas {
            errors.push(
                format!("{AT}.maxReplicas"),
                format!(
                    "must be at least minReplicas ({}): it is {}",
                    self.min_replicas, self.max_replicas
                ),
            );
        }
        let value = self.target.value;
        let value_ok = match self.target.metric {
            ScalingMetric::KvCacheUsage => value.is_finite() && value > 0.0 && value <= 1.0,
            _ => value.is_finite() && value > 0.0 && value <= 1e6,
        };
        if !value_ok {
            let range = match self.target.metric {
                ScalingMetric::KvCacheUsage => {
                    "must be above 0 and at most 1 (a fraction of the KV cache, e.g. 0.8)"
                }
                _ => "must be above 0 and at most 1000000",
            };
            errors.push(format!("{AT}.target.value"), range);
        }
        for (field, value) in [
            (
                "scaleUpStabilizationSeconds",
                self.scale_up_stabilization_seconds,
            ),
            ("scaleDownDelaySeconds", self.scale_down_delay_seconds),
        ] {
            if let Some(v) = value
                && !(0..=MAX_WINDOW_SECONDS).contains(&v)
            {
                errors.push(
                    format!("{AT}.{field}"),
                    format!("must be between 0 and {MAX_WINDOW_SECONDS}"),
                );
            }
        }
        for (field, value, range) in [
            (
                "scaleToZeroAfterSeconds",
                self.scale_to_zero_after_seconds,
                MIN_SCALE_TO_ZERO_AFTER_SECONDS..=MAX_SCALE_TO_ZERO_AFTER_SECONDS,
            ),
            (
                "activationTimeoutSeconds",
                self.activation_timeout_seconds,
                1..=MAX_ACTIVATION_TIMEOUT_SECONDS,
            ),
        ] {
            let Some(v) = value else { continue };
            if self.min_replicas != 0 {
                errors.push(
                    format!("{AT}.{field}"),
                    "applies only with minReplicas: 0 (the deployment never scales to zero otherwise)",
                );
            } else if !range.contains(&v) {
                errors.push(
                    format!("{AT}.{field}"),
                    format!("must be between {} and {}", range.start(), range.end()),
                );
            }
        }
        let bounds_valid = (0..=max_allowed).contains(&self.min_replicas)
            && (1..=max_allowed).contains(&self.max_replicas)
            && self.min_replicas <= self.max_replicas;
        if let Some(r) = replicas
            && bounds_valid
            && !(self.min_replicas..=self.max_replicas).contains(&r)
        {
            errors.push(
                "spec.replicas",
                format!(
                    "is where the autoscaler starts, so it must be between minReplicas ({}) and maxReplicas ({}): it is {r}",
                    self.min_replicas, self.max_replicas
                ),
            );
        }
    }

    /// Why scaling by hand is refused while the autoscaler sets the count.
    pub fn no_manual_scale(&self) -> String {
        format!(
            "the deployment is autoscaled between {} and {} replicas: change spec.autoscaling to move that range, or remove it to scale by hand",
            self.min_replicas, self.max_replicas
        )
    }

    /// The count to run: the autoscaler's (`stored`) inside the bounds, else the start.
    pub fn live_replicas(&self, stored: Option<i64>, replicas: Option<i64>) -> i64 {
        stored.map_or_else(
            || self.starting_replicas(replicas),
            |r| r.clamp(self.min_replicas, self.max_replicas),
        )
    }

    /// The count a new or newly autoscaled deployment starts at: `spec.replicas` inside the
    /// bounds, else the nearest bound (`minReplicas: 0` starts at one replica unless the
    /// spec asks for zero).
    pub fn starting_replicas(&self, replicas: Option<i64>) -> i64 {
        let floor = self.min_replicas.max(1).min(self.max_replicas);
        match replicas {
            Some(r) => r.clamp(self.min_replicas, self.max_replicas),
            None => floor,
        }
    }
}

/// What bounded a decision below (or above) what the load asked for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, strum::IntoStaticStr,
)]
#[serde(rename_all = "camelCase")]
#[strum(serialize_all = "camelCase")]
pub enum ScalingLimit {
    MinReplicas,
    MaxReplicas,
    /// The project's GPU quota.
    Quota,
    /// The free GPUs of the cluster.
    Capacity,
    /// A scale-up waiting out its stabilization window.
    ScaleUpStabilization,
    /// A scale-down waiting out its delay.
    ScaleDownDelay,
    /// No current figures: the count is held.
    StaleMetrics,
    /// A failed or deleted deployment is not scaled up.
    NotServing,
}

/// What the autoscaler did last and why (`status.autoscaling`): read beside the status,
/// never stored in it, like `load`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutoscalingStatus {
    /// The replicas the deployment is set to now.
    pub replicas: i64,
    /// What the load asked for at the last decision, before stabilization and clamps.
    pub wanted: i64,
    /// What held the count from `wanted` at the last decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<ScalingLimit>,
    /// The last decision in one sentence ("holding 3: 4 waiting per replica, target 10").
    pub reason: String,
    pub decided_at: DateTime<Utc>,
    /// The last change of the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scaled: Option<ScalingChange>,
}

/// One change of the replica count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingChange {
    pub at: DateTime<Utc>,
    pub from: i64,
    pub to: i64,
    pub reason: String,
}

/// What the decider knows this interval.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub now: DateTime<Utc>,
    /// The replicas the deployment is set to now.
    pub current: i64,
    /// The reading of the scaled pods (the whole deployment, or its stable track while a
    /// canary runs); `None` when there is none yet.
    pub load: Option<&'a Load>,
    /// The most replicas the project's quota allows this deployment (`None`: no quota).
    pub quota_allows: Option<i64>,
    /// The most replicas that can be placed now: those running plus those that fit on free
    /// GPUs (`None`: it needs no GPUs, or the inventory is unknown).
    pub fits: Option<i64>,
    /// Failed, or being deleted: never scaled up.
    pub not_serving: bool,
}

/// What the decider remembers of a deployment between intervals (in the deciding worker's
/// memory, as the HPA controller keeps its `recommendations`; a worker taking over starts
/// afresh, which can only delay a change).
#[derive(Debug, Clone, Default)]
pub struct ScalingMemory {
    /// Unstabilized recommendations with their time, newest last.
    recommendations: Vec<(DateTime<Utc>, i64)>,
    /// Since when no request was seen (`None`: one was seen in the last reading).
    idle_since: Option<DateTime<Utc>>,
}

/// One interval's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The count to set (equal to `current` when nothing changes).
    pub replicas: i64,
    /// What the load asked for before stabilization and clamps.
    pub wanted: i64,
    /// What held the count from `wanted`, if anything.
    pub limited_by: Option<ScalingLimit>,
    /// The decision in one sentence ("2 → 4: 37 waiting per replica, target 10").
    pub reason: String,
}

impl Decision {
    pub fn changes(&self, current: i64) -> bool {
        self.replicas != current
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// Decides the replica count for this interval and updates `memory`.
pub fn decide(spec: &AutoscalingSpec, seen: &Observation, memory: &mut ScalingMemory) -> Decision {
    let current = seen.current;
    let hold = |limited_by, reason: String| Decision {
        replicas: current,
        wanted: current,
        limited_by: Some(limited_by),
        reason,
    };
    // Outside the bounds (the spec changed): to the nearest bound before anything else,
    // as the HPA does before reading any metric.
    if current > spec.max_replicas {
        return bounded(seen, spec.max_replicas, ScalingLimit::MaxReplicas);
    }
    // At zero the activator decides (a request arrived); below the minimum, the minimum.
    if current < spec.min_replicas {
        if seen.not_serving {
            return hold(
                ScalingLimit::NotServing,
                format!("holding {current}: the deployment is not serving"),
            );
        }
        return bounded(seen, spec.min_replicas, ScalingLimit::MinReplicas);
    }
    if current == 0 {
        // Idle time counts again from the replica the activator starts.
        memory.idle_since = None;
        return Decision {
            replicas: 0,
            wanted: 0,
            limited_by: None,
            reason: "at zero: the first request activates it".into(),
        };
    }
    let Some(load) = seen.load.filter(|l| !l.stale && l.pods > 0) else {
        let why = match seen.load {
            None => "no reading yet".to_owned(),
            Some(l) if l.stale => format!(
                "the metrics are stale ({})",
                l.reason.as_deref().unwrap_or("the last reading failed")
            ),
            Some(_) => "no ready replica to measure".to_owned(),
        };
        return hold(
            ScalingLimit::StaleMetrics,
            format!("holding {current}: {why}"),
        );
    };
    let metric = spec.target.metric;
    let Some(observed) = metric.observed(load, load.pods) else {
        return hold(
            ScalingLimit::StaleMetrics,
            format!(
                "holding {current}: the engine does not report what `{}` needs",
                <&str>::from(metric)
            ),
        );
    };

    // Idle: nothing finished, running or waiting in this reading.
    let f = &load.figures;
    let idle = f.requests_per_second.unwrap_or(0.0) == 0.0
        && f.running.unwrap_or(0.0) == 0.0
        && f.waiting.unwrap_or(0.0) == 0.0;
    memory.idle_since = if idle {
        Some(memory.idle_since.unwrap_or(seen.now))
    } else {
        None
    };
    if let (Some(after), Some(since)) = (spec.scale_to_zero_after(), memory.idle_since)
        && seen.now - since >= after
    {
        memory.recommendations.clear();
        // The idle time is spent: if the activator wakes it before an interval sees it at
        // zero, the next replica's idle time counts from that interval, not from this one.
        memory.idle_since = None;
        return Decision {
            replicas: 0,
            wanted: 0,
            limited_by: None,
            reason: format!(
                "{current} → 0: no request for {} s (scaleToZeroAfterSeconds {})",
                (seen.now - since).num_seconds(),
                after.num_seconds()
            ),
        };
    }

    // The HPA's recommendation, on the ready replicas that were read.
    let target = spec.target.value;
    let ratio = observed / target;
    let ready = load.pods;
    let mut wanted = if (1.0 - TOLERANCE..=1.0 + TOLERANCE).contains(&ratio) {
        current
    } else {
        let raw = (ready as f64 * ratio).ceil() as i64;
        // Pods not ready yet carry nothing: they do not pull a scale-up down, nor a
        // scale-down up.
        if ratio > 1.0 {
            raw.max(current)
        } else {
            raw.min(current)
        }
    };
    // `minReplicas: 0` keeps one replica until the idle time has passed.
    wanted = wanted.max(spec.min_replicas.max(1));
    let measured = format!(
        "{}, {}",
        metric.describe(observed),
        metric.describe_target(target)
    );

    // Stabilization: the window remembers the unstabilized recommendation.
    let up_from = seen.now - spec.scale_up_stabilization();
    let down_from = seen.now - spec.scale_down_delay();
    let oldest = up_from.min(down_from);
    memory.recommendations.retain(|(at, _)| *at > oldest);
    let in_window = |from: DateTime<Utc>| {
        memory
            .recommendations
            .iter()
            .filter(move |(at, _)| *at > from)
            .map(|(_, r)| *r)
    };
    let up = in_window(up_from).fold(wanted, i64::min);
    let down = in_window(down_from).fold(wanted, i64::max);
    memory.recommendations.push((seen.now, wanted));
    let mut replicas = current;
    let mut limited_by = None;
    if replicas < up {
        replicas = up;
    }
    if replicas > down {
        replicas = down;
    }
    if wanted > current && replicas < wanted {
        limited_by = Some(ScalingLimit::ScaleUpStabilization);
    } else if wanted < current && replicas > wanted {
        limited_by = Some(ScalingLimit::ScaleDownDelay);
    }

    // Clamps: bounds, then quota, then what fits.
    let mut note = None;
    if replicas > spec.max_replicas {
        note = Some(format!(
            "wants {replicas}, maxReplicas is {}",
            spec.max_replicas
        ));
        replicas = spec.max_replicas;
        limited_by = Some(ScalingLimit::MaxReplicas);
    }
    if replicas < spec.min_replicas.max(1) {
        replicas = spec.min_replicas.max(1);
        limited_by = Some(ScalingLimit::MinReplicas);
    }
    if replicas > current {
        if seen.not_serving {
            note = Some(format!(
                "wants {replicas}, but the deployment is not serving"
            ));
            replicas = current;
            limited_by = Some(ScalingLimit::NotServing);
        } else if let Some(quota) = seen.quota_allows
            && replicas > quota.max(current)
        {
            note = Some(format!(
                "wants {replicas}, quota allows {}",
                quota.max(current)
            ));
            replicas = quota.max(current);
            limited_by = Some(ScalingLimit::Quota);
        }
        if replicas > current
            && let Some(fits) = seen.fits
            && replicas > fits.max(current)
        {
            note = Some(format!(
                "wants {replicas}, only {} replicas fit on free GPUs",
                fits.max(current)
            ));
            replicas = fits.max(current);
            limited_by = Some(ScalingLimit::Capacity);
        }
    }

    let reason = match (replicas == current, limited_by, note) {
        (false, _, None) => format!("{current} → {replicas}: {measured}"),
        (false, _, Some(note)) => format!("{current} → {replicas}: {measured}; {note}"),
        (true, _, Some(note)) => format!("holding {current}: {measured}; {note}"),
        (true, Some(ScalingLimit::ScaleUpStabilization), None) => format!(
            "holding {current}: {measured}; wants {wanted}, waiting out the {} s scale-up stabilization",
            spec.scale_up_stabilization().num_seconds()
        ),
        (true, Some(ScalingLimit::ScaleDownDelay), None) => format!(
            "holding {current}: {measured}; wants {wanted}, waiting out the {} s scale-down delay",
            spec.scale_down_delay().num_seconds()
        ),
        (true, _, None) => format!("holding {current}: {measured}"),
    };
    Decision {
        replicas,
        wanted,
        limited_by,
        reason,
    }
}

/// A move to a bound, clamped by quota and capacity when it is a scale-up.
fn bounded(seen: &Observation, bound: i64, limit: ScalingLimit) -> Decision {
    let current = seen.current;
    let name = match limit {
        ScalingLimit::MaxReplicas => "maxReplicas",
        _ => "minReplicas",
    };
    let mut replicas = bound;
    let mut limited_by = Some(limit);
    let mut note = String::new();
    if bound > current {
        if let Some(quota) = seen.quota_allows
            && replicas > quota.max(current)
        {
            note = format!("; wants {replicas}, quota allows {}", quota.max(current));
            replicas = quota.max(current);
            limited_by = Some(ScalingLimit::Quota);
        }
        if let Some(fits) = seen.fits
            && replicas > fits.max(current)
        {
            note = format!(
                "; wants {replicas}, only {} replicas fit on free GPUs",
                fits.max(current)
            );
            replicas = fits.max(current);
            limited_by = Some(ScalingLimit::Capacity);
        }
    }
    Decision {
        replicas,
        wanted: bound,
        limited_by,
        reason: if replicas == current {
            format!("holding {current}: {name} is {bound}{note}")
        } else {
            format!("{current} → {replicas}: {name} is {bound}{note}")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::{LoadFigures, MetricsDialect};
    use super::*;

    fn spec(min: i64, max: i64, metric: ScalingMetric, value: f64) -> AutoscalingSpec {
        AutoscalingSpec {
            min_replicas: min,
            max_replicas: max,
            target: ScalingTarget { metric, value },
            scale_up_stabilization_seconds: None,
            scale_down_delay_seconds: None,
            scale_to_zero_after_seconds: None,
            activation_timeout_seconds: None,
        }
    }

    fn waiting(pods: i64, waiting: f64) -> Load {
        Load {
            as_of: t(0),
            stale: false,
            reason: None,
            dialect: MetricsDialect::Vllm,
            pods,
            pods_read: pods,
            figures: LoadFigures {
                waiting: Some(waiting),
                running: Some(4.0 * pods as f64),
                requests_per_second: Some(1.0),
                kv_cache_usage: Some(0.5),
                ..LoadFigures::default()
            },
        }
    }

    fn idle(pods: i64) -> Load {
        Load {
            figures: LoadFigures {
                waiting: Some(0.0),
                running: Some(0.0),
                requests_per_second: Some(0.0),
                kv_cache_usage: Some(0.0),
                ..LoadFigures::default()
            },
            ..waiting(pods, 0.0)
        }
    }

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn seen(now: i64, current: i64, load: &Load) -> Observation<'_> {
        Observation {
            now: t(now),
            current,
            load: Some(load),
            quota_allows: None,
            fits: None,
            not_serving: false,
        }
    }

    const WAITING: ScalingMetric = ScalingMetric::WaitingPerReplica;

    #[test]
    fn the_count_is_ceil_of_ready_times_observed_over_target() {
        let s = spec(1, 10, WAITING, 10.0);
        let load = waiting(2, 74.0); // 37 per replica
        let d = decide(&s, &seen(0, 2, &load), &mut ScalingMemory::default());
        assert_eq!((d.replicas, d.wanted, d.limited_by), (8, 8, None));
        assert_eq!(d.reason, "2 → 8: 37 waiting per replica, target 10");
        // Each metric per replica; KV-cache use as the fraction it is.
        let kv = spec(1, 10, ScalingMetric::KvCacheUsage, 0.25);
        let d = decide(&kv, &seen(0, 2, &load), &mut ScalingMemory::default());
        assert_eq!(d.replicas, 4);
        assert_eq!(d.reason, "2 → 4: 50% of the KV cache in use, target 25%");
        let rps = spec(1, 10, ScalingMetric::RequestsPerSecondPerReplica, 0.1);
        assert_eq!(
            decide(&rps, &seen(0, 2, &load), &mut ScalingMemory::default()).replicas,
            10
        );
        let running = spec(1, 10, ScalingMetric::RunningPerReplica, 2.0);
        assert_eq!(
            decide(&running, &seen(0, 2, &load), &mut ScalingMemory::default()).replicas,
            4
        );
    }

    #[test]
    fn within_the_tolerance_nothing_changes() {
        let s = spec(1, 10, WAITING, 10.0);
        for total in [36.0, 40.0, 44.0] {
            let load = waiting(4, total); // 9 to 11 per replica: ratio 0.9 to 1.1
            let d = decide(&s, &seen(0, 4, &load), &mut ScalingMemory::default());
            assert_eq!((d.replicas, d.limited_by), (4, None), "{total}");
            assert_eq!(
                d.reason,
                format!("holding 4: {} waiting per replica, target 10", total / 4.0)
            );
        }
        let load = waiting(4, 45.0);
        assert_eq!(
            decide(&s, &seen(0, 4, &load), &mut ScalingMemory::default()).replicas,
            5
        );
    }

    #[test]
    fn steady_load_does_not_flap_and_scale_down_waits_out_its_delay() {
        let mut s = spec(1, 10, WAITING, 10.0);
        s.scale_down_delay_seconds = Some(60);
        let mut memory = ScalingMemory::default();
        let busy = waiting(4, 80.0); // 20 per replica: wants 8
        let d = decide(&s, &seen(0, 4, &busy), &mut memory);
        assert_eq!(d.replicas, 8);
        // Steady at target: held, interval after interval.
        for i in 1..10 {
            let steady = waiting(8, 80.0);
            assert_eq!(
                decide(&s, &seen(i * 15, 8, &steady), &mut memory).replicas,
                8
            );
        }
        // The load drops: the count holds while a higher recommendation is in the delay's
        // window (the last one at 135 s), then follows.
        let low = waiting(8, 16.0); // 2 per replica: wants 2
        let d = decide(&s, &seen(150, 8, &low), &mut memory);
        assert_eq!((d.replicas, d.wanted), (8, 2));
        assert_eq!(d.limited_by, Some(ScalingLimit::ScaleDownDelay));
        assert!(
            d.reason
                .ends_with("wants 2, waiting out the 60 s scale-down delay"),
            "{}",
            d.reason
        );
        assert_eq!(decide(&s, &seen(194, 8, &low), &mut memory).replicas, 8);
        let d = decide(&s, &seen(196, 8, &low), &mut memory);
        assert_eq!(d.replicas, 2, "{}", d.reason);
        assert_eq!(d.reason, "8 → 2: 2 waiting per replica, target 10");
    }

    #[test]
    fn a_scale_up_stabilization_takes_the_lowest_recommendation_of_its_window() {
        let mut s = spec(1, 10, WAITING, 10.0);
        s.scale_up_stabilization_seconds = Some(30);
        let mut memory = ScalingMemory::default();
        let calm = waiting(2, 20.0);
        assert_eq!(decide(&s, &seen(0, 2, &calm), &mut memory).replicas, 2);
        let burst = waiting(2, 60.0); // wants 6
        let d = decide(&s, &seen(15, 2, &burst), &mut memory);
        assert_eq!(
            (d.replicas, d.limited_by),
            (2, Some(ScalingLimit::ScaleUpStabilization))
        );
        assert_eq!(decide(&s, &seen(31, 2, &burst), &mut memory).replicas, 6);
    }

    #[test]
    fn bounds_then_quota_then_capacity_clamp_a_scale_up() {
        let s = spec(1, 6, WAITING, 10.0);
        let load = waiting(2, 200.0); // wants 20
        let d = decide(&s, &seen(0, 2, &load), &mut ScalingMemory::default());
        assert_eq!(
            (d.replicas, d.wanted, d.limited_by),
            (6, 20, Some(ScalingLimit::MaxReplicas))
        );
        assert_eq!(
            d.reason,
            "2 → 6: 100 waiting per replica, target 10; wants 20, maxReplicas is 6"
        );

        let mut o = seen(0, 2, &load);
        o.quota_allows = Some(4);
        let d = decide(&s, &o, &mut ScalingMemory::default());
        assert_eq!((d.replicas, d.limited_by), (4, Some(ScalingLimit::Quota)));
        assert!(
            d.reason.ends_with("wants 6, quota allows 4"),
            "{}",
            d.reason
        );

        o.fits = Some(3);
        let d = decide(&s, &o, &mut ScalingMemory::default());
        assert_eq!(
            (d.replicas, d.limited_by),
            (3, Some(ScalingLimit::Capacity))
        );
        assert!(
            d.reason
                .ends_with("wants 4, only 3 replicas fit on free GPUs"),
            "{}",
            d.reason
        );

        // A quota already used up holds the count; it never forces a scale-down.
        o.fits = None;
        o.quota_allows = Some(1);
        let d = decide(&s, &o, &mut ScalingMemory::default());
        assert_eq!((d.replicas, d.limited_by), (2, Some(ScalingLimit::Quota)));
        assert_eq!(
            d.reason,
            "holding 2: 100 waiting per replica, target 10; wants 6, quota allows 2"
        );
    }

    #[test]
    fn stale_or_missing_metrics_freeze_the_count() {
        let s = spec(0, 6, WAITING, 10.0);
        let mut memory = ScalingMemory::default();
        let mut stale = idle(3);
        stale.stale = true;
        stale.reason = Some("1 of 3 ready pods could not be read: timeout".into());
        for now in [0, 900, 5000] {
            let d = decide(&s, &seen(now, 3, &stale), &mut memory);
            assert_eq!(
                (d.replicas, d.limited_by),
                (3, Some(ScalingLimit::StaleMetrics))
            );
        }
        assert_eq!(
            decide(&s, &seen(0, 3, &stale), &mut memory).reason,
            "holding 3: the metrics are stale (1 of 3 ready pods could not be read: timeout)"
        );
        let mut o = seen(0, 3, &stale);
        o.load = None;
        assert_eq!(
            decide(&s, &o, &mut memory).reason,
            "holding 3: no reading yet"
        );
        // An engine without the figure the target needs.
        let mut blind = idle(3);
        blind.figures.waiting = None;
        let d = decide(&s, &seen(0, 3, &blind), &mut memory);
        assert_eq!(d.limited_by, Some(ScalingLimit::StaleMetrics));
        assert_eq!(
            d.reason,
            "holding 3: the engine does not report what `waitingPerReplica` needs"
        );
    }

    #[test]
    fn idle_goes_to_one_then_to_zero_after_its_time_and_never_by_a_gap() {
        let mut s = spec(0, 4, WAITING, 10.0);
        s.scale_to_zero_after_seconds = Some(120);
        s.scale_down_delay_seconds = Some(0);
        let mut memory = ScalingMemory::default();
        let quiet = idle(2);
        let d = decide(&s, &seen(0, 2, &quiet), &mut memory);
        assert_eq!(d.replicas, 1, "{}", d.reason);
        assert_eq!(decide(&s, &seen(60, 1, &quiet), &mut memory).replicas, 1);
        // One request resets the idle time.
        assert_eq!(
            decide(&s, &seen(90, 1, &waiting(1, 0.0)), &mut memory).replicas,
            1
        );
        assert_eq!(decide(&s, &seen(150, 1, &quiet), &mut memory).replicas, 1);
        let d = decide(&s, &seen(270, 1, &quiet), &mut memory);
        assert_eq!(d.replicas, 0);
        assert_eq!(
            d.reason,
            "1 → 0: no request for 120 s (scaleToZeroAfterSeconds 120)"
        );
        let mut woken = memory.clone();
        // At zero the metrics do not bring it back: the first request does.
        let d = decide(&s, &seen(300, 0, &quiet), &mut memory);
        assert_eq!(
            (d.replicas, d.reason.as_str()),
            (0, "at zero: the first request activates it")
        );
        // Woken before an interval saw it at zero: the new replica gets its own idle
        // time, it is not taken down again by the time the last one spent.
        assert_eq!(decide(&s, &seen(280, 1, &quiet), &mut woken).replicas, 1);
        assert_eq!(decide(&s, &seen(390, 1, &quiet), &mut woken).replicas, 1);
        assert_eq!(decide(&s, &seen(400, 1, &quiet), &mut woken).replicas, 0);
        // With minReplicas 1 it never goes below one.
        let one = spec(1, 4, WAITING, 10.0);
        let mut memory = ScalingMemory::default();
        for now in (0..10_000).step_by(500) {
            assert_eq!(decide(&one, &seen(now, 1, &quiet), &mut memory).replicas, 1);
        }
    }

    #[test]
    fn a_deployment_that_is_not_serving_is_never_scaled_up() {
        let s = spec(2, 6, WAITING, 10.0);
        let load = waiting(2, 100.0);
        let mut o = seen(0, 2, &load);
        o.not_serving = true;
        let d = decide(&s, &o, &mut ScalingMemory::default());
        assert_eq!(
            (d.replicas, d.limited_by),
            (2, Some(ScalingLimit::NotServing))
        );
        o.current = 1;
        assert_eq!(decide(&s, &o, &mut ScalingMemory::default()).replicas, 1);
    }

    #[test]
    fn a_count_outside_changed_bounds_moves_to_the_nearest_bound() {
        let s = spec(2, 4, WAITING, 10.0);
        let load = idle(6);
        let d = decide(&s, &seen(0, 6, &load), &mut ScalingMemory::default());
        assert_eq!(
            (d.replicas, d.reason.as_str()),
            (4, "6 → 4: maxReplicas is 4")
        );
        let d = decide(&s, &seen(0, 1, &load), &mut ScalingMemory::default());
        assert_eq!(
            (d.replicas, d.reason.as_str()),
            (2, "1 → 2: minReplicas is 2")
        );
        let mut o = seen(0, 1, &load);
        o.quota_allows = Some(1);
        assert_eq!(
            decide(&s, &o, &mut ScalingMemory::default()).reason,
            "holding 1: minReplicas is 2; wants 2, quota allows 1"
        );
    }

    #[test]
    fn validation_names_every_field() {
        let mut bad = spec(5, 3, ScalingMetric::KvCacheUsage, 1.5);
        bad.scale_up_stabilization_seconds = Some(-1);
        bad.scale_down_delay_seconds = Some(7200);
        bad.scale_to_zero_after_seconds = Some(60);
        bad.activation_timeout_seconds = Some(60);
        let mut errors = FieldErrors::new();
        bad.validate(Some(9), 100, &mut errors);
        let fields: Vec<String> = errors.into_vec().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.autoscaling.maxReplicas",
                "spec.autoscaling.target.value",
                "spec.autoscaling.scaleUpStabilizationSeconds",
                "spec.autoscaling.scaleDownDelaySeconds",
                "spec.autoscaling.scaleToZeroAfterSeconds",
                "spec.autoscaling.activationTimeoutSeconds",
            ]
        );
        let mut errors = FieldErrors::new();
        let mut zero = spec(0, 200, WAITING, 0.0);
        zero.scale_to_zero_after_seconds = Some(5);
        zero.validate(Some(300), 100, &mut errors);
        let fields: Vec<String> = errors.into_vec().into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            [
                "spec.autoscaling.maxReplicas",
                "spec.autoscaling.target.value",
                "spec.autoscaling.scaleToZeroAfterSeconds",
            ]
        );
        let mut errors = FieldErrors::new();
        spec(1, 4, WAITING, 8.0).validate(Some(6), 100, &mut errors);
        let all = errors.into_vec();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].field, "spec.replicas");
        assert!(
            all[0]
                .message
                .contains("between minReplicas (1) and maxReplicas (4): it is 6")
        );
        let mut errors = FieldErrors::new();
        spec(0, 4, WAITING, 8.0).validate(None, 100, &mut errors);
        assert!(errors.is_empty());
    }

    #[test]
    fn it_starts_from_spec_replicas_inside_the_bounds() {
        assert_eq!(spec(0, 4, WAITING, 1.0).starting_replicas(None), 1);
        assert_eq!(spec(0, 4, WAITING, 1.0).starting_replicas(Some(0)), 0);
        assert_eq!(spec(2, 4, WAITING, 1.0).starting_replicas(None), 2);
        assert_eq!(spec(2, 4, WAITING, 1.0).starting_replicas(Some(3)), 3);
    }
}
