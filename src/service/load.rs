//! Serving metrics as the API shows them: `status.load` on every deployment read, and the
//! series of a deployment or a whole project over a window. The worker writes them
//! (`reconciler::load`); this side only reads.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use strum::VariantArray;
use tracing::instrument;

use super::access::{Authorized, authorize};
use super::{Actor, Context, ServiceError};
use crate::domain::{Deployment, FieldErrors, Load, Metrics, Role, Series, SeriesName, Track};
use crate::store;
use crate::store::load::{Resolution, Scope, Step};

/// How long the fine series is kept; longer windows read the 5-minute rollups.
pub const FINE_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// How long the coarse series is kept: the longest window.
pub const COARSE_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// The rollups' step.
pub const COARSE_STEP: Duration = Duration::from_secs(300);
/// Most points one series may have.
pub const MAX_POINTS: i64 = 1000;
/// Readings older than this many collection intervals are reported stale.
const STALE_AFTER_INTERVALS: u32 = 3;

/// The query of a metrics read, as the caller spelled it.
#[derive(Debug, Clone, Default)]
pub struct MetricsQuery {
    /// How far back, e.g. `15m`, `1h`, `7d` (default `1h`, at most `30d`).
    pub window: Option<String>,
    /// The width of one point, e.g. `1m` (default: the window / 60, at least the stored
    /// resolution).
    pub step: Option<String>,
    /// Comma-separated series names (default: all).
    pub series: Option<String>,
    /// `all` (default), `stable` or `canary`; deployments only.
    pub track: Option<String>,
}

/// A parsed [`MetricsQuery`].
struct Window {
    resolution: Resolution,
    resolution_step: Duration,
    step: Duration,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    points: i64,
    series: Vec<SeriesName>,
}

/// Adds what is read beside each deployment's status: its current load (`status.load`,
/// `status.canary.load`), one read for all of them (a reading older than a few collection
/// intervals is marked stale), and the autoscaler's last decision (`status.autoscaling`) for
/// those that autoscale.
#[instrument(skip_all, fields(deployments = deployments.len()))]
pub async fn attach(ctx: &Context, deployments: &mut [Deployment]) -> Result<(), ServiceError> {
    if deployments.is_empty() {
        return Ok(());
    }
    let ids: Vec<_> = deployments.iter().map(|d| d.id).collect();
    let autoscaled: Vec<_> = deployments
        .iter()
        .filter(|d| d.spec.autoscaling.is_some())
        .map(|d| d.id)
        .collect();
    if !autoscaled.is_empty() {
        let mut states = store::autoscaling::states(&ctx.pool, &autoscaled).await?;
        for deployment in deployments.iter_mut() {
            deployment.status.autoscaling = states.remove(&deployment.id);
        }
    }
    let mut loads = store::load::current(&ctx.pool, &ids).await?;
    let now = Utc::now();
    for deployment in deployments.iter_mut() {
        let Some(current) = loads.remove(&deployment.id) else {
            continue;
        };
        deployment.status.load = current.all.map(|l| aged(l, now, ctx.load_interval));
        if let Some(canary) = &mut deployment.status.canary {
            canary.load = current.canary.map(|l| aged(l, now, ctx.load_interval));
        }
    }
    Ok(())
}

/// A deployment read with its load and the autoscaler's last decision in the same
/// statement ([`store::deployments::DeploymentRead`]): what [`attach`] adds, without a
/// read of its own.
pub fn record(
    ctx: &Context,
    read: store::deployments::DeploymentRead,
    project: &str,
) -> Deployment {
    let mut deployment = read.row.into_record(project);
    if deployment.spec.autoscaling.is_some() {
        deployment.status.autoscaling = read.autoscaling.map(|s| s.0);
    }
    // As `attach`: the stored status stands when there is no reading at all.
    if read.load.is_some() || read.canary_load.is_some() {
        let now = Utc::now();
        deployment.status.load = read.load.map(|l| aged(l.0, now, ctx.load_interval));
        if let Some(canary) = &mut deployment.status.canary {
            canary.load = read.canary_load.map(|l| aged(l.0, now, ctx.load_interval));
        }
    }
    deployment
}

/// `load` as of `now`: stale when nothing newer was read for a few intervals (the worker
/// is down or cannot reach the cluster).
fn aged(mut load: Load, now: DateTime<Utc>, interval: Duration) -> Load {
    let age = (now - load.as_of).to_std().unwrap_or_default();
    if !load.stale && age > interval * STALE_AFTER_INTERVALS {
        load.stale = true;
        load.reason = Some(format!(
            "no reading for {} s (readings are due every {} s): is the worker running?",
            age.as_secs(),
            interval.as_secs()
        ));
    }
    load
}

/// A deployment's metrics over a window (any member of its project).
#[instrument(skip(ctx, actor))]
pub async fn deployment_metrics(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    name: &str,
    query: &MetricsQuery,
) -> Result<Metrics, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    deployment_metrics_in(ctx, &project, name, query).await
}

/// [`deployment_metrics`] in a project already authorised.
pub async fn deployment_metrics_in(
    ctx: &Context,
    project: &Authorized,
    name: &str,
    query: &MetricsQuery,
) -> Result<Metrics, ServiceError> {
    project.require(Role::Viewer)?;
    let mut errors = FieldErrors::new();
    let window = parse_window(query, ctx.load_interval, Utc::now(), &mut errors);
    let scope = match query.track.as_deref() {
        None | Some("all") => Some(Scope::All),
        Some(t) => errors
            .check(
                "track",
                t.parse::<Track>()
                    .map_err(|_| format!("`{t}` is not a track; use all, stable or canary")),
            )
            .map(Scope::Track),
    };
    errors.finish(|| ())?;
    let window = window.ok_or_else(out_of_range)?;
    let scope = scope.unwrap_or(Scope::All);
    let deployment = super::deployments::get_deployment_in(ctx, project, name).await?;
    let steps = store::load::deployment_series(
        &ctx.pool,
        window.resolution,
        deployment.id,
        scope,
        window.from,
        window.to,
        window.step,
    )
    .await?;
    Ok(window.metrics(&steps))
}

/// A project's metrics over a window, summed over its deployments (any member).
#[instrument(skip(ctx, actor))]
pub async fn project_metrics(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &MetricsQuery,
) -> Result<Metrics, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Viewer).await?;
    project_metrics_in(ctx, &project, query).await
}

/// [`project_metrics`] in a project already authorised.
pub async fn project_metrics_in(
    ctx: &Context,
    project: &Authorized,
    query: &MetricsQuery,
) -> Result<Metrics, ServiceError> {
    project.require(Role::Viewer)?;
    let mut errors = FieldErrors::new();
    let window = parse_window(query, ctx.load_interval, Utc::now(), &mut errors);
    if query.track.is_some() {
        errors.push(
            "track",
            "a project's metrics are of whole deployments; ask a deployment for one track",
        );
    }
    errors.finish(|| ())?;
    let window = window.ok_or_else(out_of_range)?;
    let steps = store::load::project_series(
        &ctx.pool,
        window.resolution,
        project.id,
        window.from,
        window.to,
        window.step,
    )
    .await?;
    Ok(window.metrics(&steps))
}

fn out_of_range() -> FieldErrors {
    FieldErrors::single(
        "window",
        "is out of the range of dates this server can show",
    )
}

/// The window, step, resolution and series of a query. One piece on purpose: each
/// parameter's check depends on those before it (the step's floor on the window's
/// resolution, the points on both) and every problem goes into one `FieldErrors`, so a
/// caller hears of all its mistakes at once.
fn parse_window(
    query: &MetricsQuery,
    interval: Duration,
    now: DateTime<Utc>,
    errors: &mut FieldErrors,
) -> Option<Window> {
    let window = match &query.window {
        None => Some(Duration::from_secs(3600)),
        Some(w) => errors.check("window", parse_duration(w)).and_then(|w| {
            if w > COARSE_RETENTION {
                errors.push("window", "must be at most 30d (the longest series kept)");
                None
            } else {
                Some(w)
            }
        }),
    };
    let series = match &query.series {
        None => SeriesName::VARIANTS.to_vec(),
        Some(list) => {
            let mut names = Vec::new();
            for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                match name.parse::<SeriesName>() {
                    Ok(n) if !names.contains(&n) => names.push(n),
                    Ok(_) => {}
                    Err(_) => {
                        let known: Vec<&str> =
                            SeriesName::VARIANTS.iter().map(|s| s.as_str()).collect();
                        errors.push(
                            "series",
                            format!("`{name}` is not a series; use any of {}", known.join(", ")),
                        );
                    }
                }
            }
            if names.is_empty() && !errors.as_slice().iter().any(|e| e.field == "series") {
                errors.push(
                    "series",
                    "name at least one series, or leave it out for all",
                );
            }
            names
        }
    };
    let window = window?;
    // Windows the fine series still covers read it; longer ones read the rollups.
    let (resolution, resolution_step) = if window <= FINE_RETENTION {
        (Resolution::Fine, interval.max(Duration::from_secs(1)))
    } else {
        (Resolution::Coarse, COARSE_STEP)
    };
    let step = match &query.step {
        None => {
            let wanted = window / 60;
            let steps = wanted.as_secs().div_ceil(resolution_step.as_secs()).max(1);
            Some(resolution_step * steps as u32)
        }
        Some(s) => errors.check("step", parse_duration(s)).and_then(|step| {
            if step < resolution_step {
                errors.push(
                    "step",
                    format!(
                        "must be at least {} for a window of {} (the stored resolution)",
                        format_duration(resolution_step),
                        format_duration(window)
                    ),
                );
                None
            } else {
                Some(step)
            }
        }),
    }?;
    let points = window.as_secs().div_ceil(step.as_secs()) as i64;
    if points > MAX_POINTS {
        errors.push(
            "step",
            format!(
                "gives {points} points over {}; at most {MAX_POINTS}: use a longer step",
                format_duration(window)
            ),
        );
        return None;
    }
    // Points start on multiples of the step since the epoch (as the store bins them); the
    // last one holds now.
    let step_secs = step.as_secs() as i64;
    let end = (now.timestamp().div_euclid(step_secs) + 1) * step_secs;
    let start = end - points * step_secs;
    Some(Window {
        resolution,
        resolution_step,
        step,
        from: Utc.timestamp_opt(start, 0).single()?,
        to: Utc.timestamp_opt(end, 0).single()?,
        points,
        series,
    })
}

impl Window {
    /// The answer: every point of the window, with gaps where nothing was stored.
    fn metrics(&self, steps: &[Step]) -> Metrics {
        let step = chrono::Duration::from_std(self.step).expect("step fits");
        let timestamps: Vec<DateTime<Utc>> = (0..self.points)
            .map(|i| self.from + step * i as i32)
            .collect();
        let by_time: HashMap<i64, &Step> =
            steps.iter().map(|s| (s.bucket.timestamp(), s)).collect();
        let series = self
            .series
            .iter()
            .map(|&name| Series {
                name,
                unit: name.unit().to_owned(),
                values: timestamps
                    .iter()
                    .map(|t| by_time.get(&t.timestamp()).and_then(|s| value(s, name)))
                    .collect(),
            })
            .collect();
        Metrics {
            window_seconds: self.step.as_secs() as i64 * self.points,
            step_seconds: self.step.as_secs() as i64,
            resolution_seconds: self.resolution_step.as_secs() as i64,
            timestamps,
            series,
        }
    }
}

fn value(step: &Step, name: SeriesName) -> Option<f64> {
    let v = match name {
        SeriesName::RequestsPerSecond => step.requests_per_second,
        SeriesName::PromptTokensPerSecond => step.prompt_tokens_per_second,
        SeriesName::GenerationTokensPerSecond => step.generation_tokens_per_second,
        SeriesName::TtftP50Seconds => step.ttft_p50_seconds,
        SeriesName::TtftP95Seconds => step.ttft_p95_seconds,
        SeriesName::InterTokenLatencyP50Seconds => step.inter_token_latency_p50_seconds,
        SeriesName::E2eLatencyP95Seconds => step.e2e_latency_p95_seconds,
        SeriesName::Waiting => step.waiting,
        SeriesName::Running => step.running,
        SeriesName::KvCacheUsage => step.kv_cache_usage,
        SeriesName::ErrorRate => step.error_rate,
        SeriesName::Replicas => step.replicas,
    }?;
    // Stored as 4-byte reals: print what was measured, not float noise.
    Some((v * 1e4).round() / 1e4).filter(|v| v.is_finite())
}

/// `30s`, `15m`, `1h`, `7d` (one number and one unit).
fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad =
        || format!("`{s}` is not a duration; write a number and one of s, m, h, d (e.g. 15m)");
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86400,
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("`{s}` must be longer than zero"));
    }
    n.checked_mul(seconds)
        .filter(|s| *s <= 10 * 365 * 86400)
        .map(Duration::from_secs)
        .ok_or_else(bad)
}

fn format_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 86400 == 0 => format!("{}d", s / 86400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(q: MetricsQuery) -> Result<Window, FieldErrors> {
        let mut errors = FieldErrors::new();
        let now = Utc.timestamp_opt(1_800_000_007, 0).unwrap();
        let w = parse_window(&q, Duration::from_secs(15), now, &mut errors);
        errors.finish(|| w.unwrap())
    }

    #[test]
    fn the_default_is_an_hour_in_minutes_from_the_fine_series() {
        let w = window(MetricsQuery::default()).unwrap();
        assert_eq!(w.resolution, Resolution::Fine);
        assert_eq!(w.step, Duration::from_secs(60));
        assert_eq!(w.points, 60);
        assert_eq!((w.to - w.from).num_seconds(), 3600);
        // The last point holds now, and points start on multiples of the step.
        assert_eq!(w.to.timestamp() % 60, 0);
        assert!(w.to.timestamp() > 1_800_000_007 && w.to.timestamp() - 60 <= 1_800_000_007);
        assert_eq!(w.series.len(), SeriesName::VARIANTS.len());
    }

    #[test]
    fn long_windows_read_the_rollups_and_refuse_finer_steps() {
        let w = window(MetricsQuery {
            window: Some("7d".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(w.resolution, Resolution::Coarse);
        assert_eq!(w.step.as_secs() % 300, 0);
        let err = window(MetricsQuery {
            window: Some("2d".into()),
            step: Some("1m".into()),
            ..Default::default()
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("step"), "{err}");
        assert!(err.to_string().contains("at least 5m"), "{err}");
    }

    #[test]
    fn bad_input_names_every_field() {
        let err = window(MetricsQuery {
            window: Some("forever".into()),
            series: Some("requestsPerSecond,bogus".into()),
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("window") && err.contains("`forever`"), "{err}");
        assert!(err.contains("series") && err.contains("`bogus`"), "{err}");
        let err = window(MetricsQuery {
            window: Some("31d".into()),
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("at most 30d"), "{err}");
        let err = window(MetricsQuery {
            window: Some("24h".into()),
            step: Some("15s".into()),
            ..Default::default()
        })
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("5760 points"), "{err}");
    }

    #[test]
    fn a_reading_left_behind_turns_stale_with_the_reason() {
        let now = Utc::now();
        let load = Load {
            as_of: now - chrono::Duration::seconds(120),
            stale: false,
            reason: None,
            dialect: crate::domain::MetricsDialect::Vllm,
            pods: 1,
            pods_read: 1,
            figures: Default::default(),
        };
        let fresh = aged(
            load.clone(),
            load.as_of + chrono::Duration::seconds(20),
            Duration::from_secs(15),
        );
        assert!(!fresh.stale);
        let old = aged(load, now, Duration::from_secs(15));
        assert!(old.stale);
        assert!(old.reason.unwrap().contains("no reading for 120 s"));
    }
}
