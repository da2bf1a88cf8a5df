//! Rates and latency quantiles from successive readings of each pod's counters, the way
//! Prometheus' `rate()` and `histogram_quantile()` compute them.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::parse::{Histogram, PodMetrics};
use crate::domain::LoadFigures;

/// What one pod did since its previous reading, and its gauges now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodDelta {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    /// Seconds since the previous reading; `None` on a pod's first reading, and then every
    /// increase below is `None` too.
    pub seconds: Option<f64>,
    pub finished: Option<f64>,
    pub failed: Option<f64>,
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
    /// Per-bucket increases (still cumulative over `le`).
    pub ttft: Option<Histogram>,
    pub inter_token: Option<Histogram>,
    pub e2e: Option<Histogram>,
}

/// The previous reading of each pod, by pod uid.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    previous: HashMap<String, (DateTime<Utc>, PodMetrics)>,
}

impl Tracker {
    /// Records `now` as the pod's reading at `at` and returns what changed since the last one.
    pub fn observe(&mut self, pod: &str, at: DateTime<Utc>, now: PodMetrics) -> PodDelta {
        let mut delta = PodDelta {
            running: now.running,
            waiting: now.waiting,
            kv_cache_usage: now.kv_cache_usage,
            ..PodDelta::default()
        };
        if let Some((then, before)) = self.previous.get(pod) {
            let millis = (at - *then).num_milliseconds();
            // A reading not later than the last one gives no interval to divide by.
            if millis > 0 {
                delta.seconds = Some(millis as f64 / 1000.0);
                delta.finished = increase(before.finished, now.finished);
                delta.failed = increase(before.failed, now.failed);
                delta.prompt_tokens = increase(before.prompt_tokens, now.prompt_tokens);
                delta.generation_tokens = increase(before.generation_tokens, now.generation_tokens);
                delta.ttft = histogram_increase(before.ttft.as_ref(), now.ttft.as_ref());
                delta.inter_token =
                    histogram_increase(before.inter_token.as_ref(), now.inter_token.as_ref());
                delta.e2e = histogram_increase(before.e2e.as_ref(), now.e2e.as_ref());
            }
        }
        self.previous.insert(pod.to_string(), (at, now));
        delta
    }

    /// Forgets the pods not read this round (gone, or no longer ready).
    pub fn retain(&mut self, seen: &HashSet<String>) {
        self.previous.retain(|pod, _| seen.contains(pod));
    }
}

/// How much a counter rose between two readings. A lower value means the server restarted
/// and counted from zero again, so the rise is the new value: Prometheus' `rate()` does the
/// same (prometheus/prometheus promql/functions.go, extrapolatedRate, "Handle counter
/// resets"). A counter first seen now was created since the last reading (engines create
/// some on first use), so it rose from zero.
fn increase(before: Option<f64>, now: Option<f64>) -> Option<f64> {
    let now = now?;
    Some(match before {
        Some(before) if now >= before => now - before,
        _ => now,
    })
}

/// Bucket-by-bucket increase of a histogram. If its count or any bucket went down, or its
/// buckets changed, the server restarted: the new histogram is the increase, whole.
fn histogram_increase(before: Option<&Histogram>, now: Option<&Histogram>) -> Option<Histogram> {
    let now = now?;
    let Some(before) = before else {
        return Some(now.clone());
    };
    let same_buckets = before.buckets.len() == now.buckets.len()
        && before
            .buckets
            .iter()
            .zip(&now.buckets)
            .all(|(b, n)| b.0 == n.0);
    let went_down = now.count < before.count
        || before
            .buckets
            .iter()
            .zip(&now.buckets)
            .any(|(b, n)| n.1 < b.1);
    if !same_buckets || went_down {
        return Some(now.clone());
    }
    Some(Histogram {
        buckets: before
            .buckets
            .iter()
            .zip(&now.buckets)
            .map(|(b, n)| (n.0, n.1 - b.1))
            .collect(),
        count: now.count - before.count,
        sum: now.sum - before.sum,
    })
}

/// The load of a set of pods (a track or a whole deployment) from their latest deltas.
pub fn figures(deltas: &[&PodDelta]) -> LoadFigures {
    // Each pod's rate over its own interval, summed over the pods measured.
    let rate = |pick: fn(&PodDelta) -> Option<f64>| {
        deltas
            .iter()
            .filter_map(|d| Some(pick(d)? / d.seconds?))
            .reduce(|a, b| a + b)
    };
    let sum = |pick: fn(&PodDelta) -> Option<f64>| {
        deltas.iter().filter_map(|d| pick(d)).reduce(|a, b| a + b)
    };
    let kv: Vec<f64> = deltas.iter().filter_map(|d| d.kv_cache_usage).collect();

    // Over the pods that measured both: a fraction, so at most 1 even if an engine counts
    // some aborts apart from its finished requests (SGLang).
    let (failed, finished) = deltas
        .iter()
        .filter_map(|d| Some((d.failed?, d.finished?)))
        .fold((0.0, 0.0), |(f, n), (df, dn)| (f + df, n + dn));
    let error_rate = (finished > 0.0).then(|| (failed / finished).clamp(0.0, 1.0));

    let ttft = summed(deltas, |d| d.ttft.as_ref());
    let inter_token = summed(deltas, |d| d.inter_token.as_ref());
    let e2e = summed(deltas, |d| d.e2e.as_ref());

    LoadFigures {
        requests_per_second: rate(|d| d.finished),
        prompt_tokens_per_second: rate(|d| d.prompt_tokens),
        generation_tokens_per_second: rate(|d| d.generation_tokens),
        ttft_p50_seconds: quantile(0.5, ttft.as_ref()),
        ttft_p95_seconds: quantile(0.95, ttft.as_ref()),
        inter_token_latency_p50_seconds: quantile(0.5, inter_token.as_ref()),
        e2e_latency_p95_seconds: quantile(0.95, e2e.as_ref()),
        waiting: sum(|d| d.waiting),
        running: sum(|d| d.running),
        kv_cache_usage: (!kv.is_empty()).then(|| kv.iter().sum::<f64>() / kv.len() as f64),
        error_rate,
    }
}

/// The sum over pods of a histogram's increases (as `sum by (le)` would), if any pod has one.
fn summed(deltas: &[&PodDelta], pick: fn(&PodDelta) -> Option<&Histogram>) -> Option<Histogram> {
    let mut total: Option<Histogram> = None;
    for h in deltas.iter().filter_map(|d| pick(d)) {
        match &mut total {
            Some(t) => t.add(h),
            None => total = Some(h.clone()),
        }
    }
    total
}

/// A quantile of an interval's observations; `None` when nothing was observed.
fn quantile(q: f64, h: Option<&Histogram>) -> Option<f64> {
    let h = h?;
    if h.count <= 0.0 {
        return None;
    }
    bucket_quantile(q, &h.buckets)
}

/// The `q`-quantile of cumulative `(le, count)` buckets, as Prometheus' `histogram_quantile`
/// computes it for classic histograms (prometheus/prometheus promql/quantile.go,
/// bucketQuantile): linear interpolation inside the bucket the rank falls in; from 0 in the
/// lowest bucket when its upper bound is positive (else that bound); the upper bound of the
/// last finite bucket when the rank falls in `+Inf`. Counts are first made monotonic as
/// ensureMonotonic does. `None` where Prometheus answers NaN: no `+Inf` bucket, fewer than
/// two buckets, no observations.
pub fn bucket_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut b: Vec<(f64, f64)> = buckets
        .iter()
        .copied()
        .filter(|(le, count)| !le.is_nan() && !count.is_nan())
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if b.last()?.0 != f64::INFINITY {
        return None;
    }
    // coalesceBuckets: buckets with the same bound are one.
    b.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
    // ensureMonotonic: the envelope, removing any decrease from one bucket to the next.
    let mut max = f64::NEG_INFINITY;
    for bucket in &mut b {
        max = max.max(bucket.1);
        bucket.1 = max;
    }
    if b.len() < 2 {
        return None;
    }
    let last = b.len() - 1;
    let observations = b[last].1;
    if observations <= 0.0 {
        return None;
    }
    let rank = q * observations;
    let i = b[..last]
        .iter()
        .position(|(_, count)| *count >= rank)
        .unwrap_or(last);
    if i == last {
        return Some(b[last - 1].0);
    }
    if i == 0 && b[0].0 <= 0.0 {
        return Some(b[0].0);
    }
    let (start, below) = if i > 0 {
        (b[i - 1].0, b[i - 1].1)
    } else {
        (0.0, 0.0)
    };
    let value = start + (b[i].0 - start) * ((rank - below) / (b[i].1 - below));
    (!value.is_nan()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;

    const INF: f64 = f64::INFINITY;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::seconds(1_700_000_000 + seconds)
    }

    fn counters(finished: f64, failed: f64, prompt: f64, generated: f64) -> PodMetrics {
        PodMetrics {
            finished: Some(finished),
            failed: Some(failed),
            prompt_tokens: Some(prompt),
            generation_tokens: Some(generated),
            ..PodMetrics::default()
        }
    }

    fn hist(buckets: &[(f64, f64)]) -> Histogram {
        Histogram {
            buckets: buckets.to_vec(),
            count: buckets.last().map_or(0.0, |b| b.1),
            sum: 0.0,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-9)
    }

    #[test]
    fn two_readings_give_exact_rates() {
        let mut tracker = Tracker::default();
        let first = tracker.observe("a", t(0), counters(100.0, 1.0, 5000.0, 20000.0));
        assert_eq!(first.seconds, None);
        let d = tracker.observe("a", t(15), counters(130.0, 4.0, 6500.0, 23000.0));
        assert_eq!(d.seconds, Some(15.0));
        let f = figures(&[&d]);
        assert_eq!(f.requests_per_second, Some(2.0));
        assert_eq!(f.prompt_tokens_per_second, Some(100.0));
        assert_eq!(f.generation_tokens_per_second, Some(200.0));
        assert!(close(f.error_rate, 0.1), "{:?}", f.error_rate);
    }

    #[test]
    fn the_first_round_has_no_rates_and_an_idle_one_has_zero() {
        let mut tracker = Tracker::default();
        let mut now = counters(7.0, 0.0, 70.0, 700.0);
        now.running = Some(0.0);
        let first = tracker.observe("a", t(0), now.clone());
        let f = figures(&[&first]);
        assert_eq!(f.requests_per_second, None);
        assert_eq!(f.prompt_tokens_per_second, None);
        assert_eq!(f.generation_tokens_per_second, None);
        assert_eq!(f.error_rate, None);
        // Gauges need no previous reading.
        assert_eq!(f.running, Some(0.0));

        let idle = tracker.observe("a", t(15), now);
        let f = figures(&[&idle]);
        assert_eq!(f.requests_per_second, Some(0.0));
        assert_eq!(f.prompt_tokens_per_second, Some(0.0));
        assert_eq!(f.generation_tokens_per_second, Some(0.0));
        // Nothing finished: no error rate, no latency.
        assert_eq!(f.error_rate, None);
        assert_eq!(f.ttft_p50_seconds, None);
    }

    #[test]
    fn pods_are_summed_each_over_its_own_interval() {
        let mut tracker = Tracker::default();
        tracker.observe("a", t(0), counters(0.0, 0.0, 0.0, 0.0));
        tracker.observe("b", t(5), counters(50.0, 0.0, 0.0, 0.0));
        let a = tracker.observe("a", t(10), counters(30.0, 0.0, 0.0, 0.0)); // 3/s
        let b = tracker.observe("b", t(10), counters(60.0, 5.0, 0.0, 0.0)); // 2/s
        let f = figures(&[&a, &b]);
        assert_eq!(f.requests_per_second, Some(5.0));
        assert!(close(f.error_rate, 5.0 / 40.0));
    }

    #[test]
    fn a_counter_that_drops_was_reset_and_counts_its_new_value() {
        // Prometheus' rate() over 100, 130, 10 sees 30 then a reset to 10: 40 in total
        // (promql/functions.go, extrapolatedRate).
        let mut tracker = Tracker::default();
        tracker.observe("a", t(0), counters(100.0, 0.0, 1000.0, 0.0));
        let d = tracker.observe("a", t(10), counters(130.0, 0.0, 1200.0, 0.0));
        assert_eq!(d.finished, Some(30.0));
        let d = tracker.observe("a", t(20), counters(10.0, 0.0, 50.0, 0.0));
        assert_eq!(d.finished, Some(10.0));
        assert_eq!(d.prompt_tokens, Some(50.0));
        assert_eq!(figures(&[&d]).requests_per_second, Some(1.0));
    }

    #[test]
    fn a_counter_created_between_readings_rose_from_zero() {
        let mut tracker = Tracker::default();
        let before = PodMetrics {
            finished: Some(4.0),
            ..PodMetrics::default()
        };
        tracker.observe("a", t(0), before);
        let d = tracker.observe("a", t(10), counters(6.0, 1.0, 30.0, 90.0));
        assert_eq!(d.finished, Some(2.0));
        assert_eq!(d.failed, Some(1.0));
        assert_eq!(d.prompt_tokens, Some(30.0));
        // A counter that vanished gives no increase.
        let d = tracker.observe("a", t(20), PodMetrics::default());
        assert_eq!(d.finished, None);
        assert_eq!(figures(&[&d]).requests_per_second, None);
    }

    #[test]
    fn a_pod_that_goes_and_a_new_one_cause_no_spike() {
        let mut tracker = Tracker::default();
        tracker.observe("old", t(0), counters(1000.0, 0.0, 0.0, 0.0));
        let old = tracker.observe("old", t(10), counters(1010.0, 0.0, 0.0, 0.0));
        assert_eq!(figures(&[&old]).requests_per_second, Some(1.0));

        // Next round: the old pod is gone, a new one is read for the first time.
        let new = tracker.observe("new", t(20), counters(5000.0, 0.0, 0.0, 0.0));
        tracker.retain(&HashSet::from(["new".to_string()]));
        assert_eq!(figures(&[&new]).requests_per_second, None);
        let new = tracker.observe("new", t(30), counters(5020.0, 0.0, 0.0, 0.0));
        assert_eq!(figures(&[&new]).requests_per_second, Some(2.0));

        // The old pod is forgotten: if its uid came back it would start afresh.
        let back = tracker.observe("old", t(40), counters(1020.0, 0.0, 0.0, 0.0));
        assert_eq!(back.seconds, None);
    }

    #[test]
    fn a_reading_not_later_than_the_last_gives_no_rate() {
        let mut tracker = Tracker::default();
        tracker.observe("a", t(10), counters(1.0, 0.0, 0.0, 0.0));
        let same = tracker.observe("a", t(10), counters(5.0, 0.0, 0.0, 0.0));
        assert_eq!(same.seconds, None);
        assert_eq!(same.finished, None);
        let earlier = tracker.observe("a", t(5), counters(6.0, 0.0, 0.0, 0.0));
        assert_eq!(earlier.finished, None);
    }

    #[test]
    fn quantiles_interpolate_as_prometheus_does() {
        // promql/quantile.go bucketQuantile, worked by hand.
        let b = [(0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (INF, 100.0)];
        // rank 50 falls in (0.1, 0.5]: 0.1 + 0.4 * (50 - 10) / (60 - 10).
        assert!(close(bucket_quantile(0.5, &b), 0.42));
        // rank 95 falls in (0.5, 1]: 0.5 + 0.5 * (95 - 60) / (100 - 60).
        assert!(close(bucket_quantile(0.95, &b), 0.9375));
        // rank 5 falls in the first bucket, interpolated from 0: 0.1 * 5 / 10.
        assert!(close(bucket_quantile(0.05, &b), 0.05));

        // Rank in +Inf: the upper bound of the last finite bucket.
        let tail = [(0.1, 10.0), (0.5, 20.0), (INF, 100.0)];
        assert_eq!(bucket_quantile(0.95, &tail), Some(0.5));
        // A first bucket bound not above 0 is returned as is.
        let neg = [(-1.0, 10.0), (0.0, 10.0), (1.0, 20.0), (INF, 20.0)];
        assert_eq!(bucket_quantile(0.25, &neg), Some(-1.0));
        // Unsorted buckets are sorted, and a dip is flattened (ensureMonotonic):
        // 0.1:10, 0.5:8 → 0.5:10, so rank 50 falls in (0.5, 1].
        let dip = [(1.0, 100.0), (INF, 100.0), (0.5, 8.0), (0.1, 10.0)];
        assert!(close(bucket_quantile(0.5, &dip), 0.5 + 0.5 * 40.0 / 90.0));

        // Where Prometheus answers NaN.
        assert_eq!(bucket_quantile(0.5, &[(0.1, 1.0), (1.0, 2.0)]), None);
        assert_eq!(bucket_quantile(0.5, &[(INF, 5.0)]), None);
        assert_eq!(bucket_quantile(0.5, &[(0.1, 0.0), (INF, 0.0)]), None);
        assert_eq!(bucket_quantile(0.5, &[]), None);
    }

    #[test]
    fn latency_comes_from_the_interval_not_the_lifetime() {
        let mut tracker = Tracker::default();
        let before = PodMetrics {
            ttft: Some(hist(&[
                (0.1, 1000.0),
                (0.5, 1000.0),
                (1.0, 1000.0),
                (INF, 1000.0),
            ])),
            ..PodMetrics::default()
        };
        tracker.observe("a", t(0), before);
        let now = PodMetrics {
            ttft: Some(hist(&[
                (0.1, 1010.0),
                (0.5, 1060.0),
                (1.0, 1100.0),
                (INF, 1100.0),
            ])),
            ..PodMetrics::default()
        };
        let d = tracker.observe("a", t(15), now);
        assert_eq!(
            d.ttft.as_ref().unwrap().buckets,
            vec![(0.1, 10.0), (0.5, 60.0), (1.0, 100.0), (INF, 100.0)]
        );
        let f = figures(&[&d]);
        assert!(close(f.ttft_p50_seconds, 0.42));
        assert!(close(f.ttft_p95_seconds, 0.9375));
    }

    #[test]
    fn histograms_are_summed_over_pods() {
        let mut tracker = Tracker::default();
        let zero = PodMetrics {
            e2e: Some(hist(&[(1.0, 0.0), (2.0, 0.0), (INF, 0.0)])),
            inter_token: Some(hist(&[(0.01, 0.0), (0.1, 0.0), (INF, 0.0)])),
            ..PodMetrics::default()
        };
        tracker.observe("a", t(0), zero.clone());
        tracker.observe("b", t(0), zero);
        let a = tracker.observe(
            "a",
            t(10),
            PodMetrics {
                e2e: Some(hist(&[(1.0, 40.0), (2.0, 50.0), (INF, 50.0)])),
                inter_token: Some(hist(&[(0.01, 0.0), (0.1, 10.0), (INF, 10.0)])),
                ..PodMetrics::default()
            },
        );
        let b = tracker.observe(
            "b",
            t(10),
            PodMetrics {
                e2e: Some(hist(&[(1.0, 0.0), (2.0, 40.0), (INF, 50.0)])),
                inter_token: Some(hist(&[(0.01, 0.0), (0.1, 0.0), (INF, 0.0)])),
                ..PodMetrics::default()
            },
        );
        // Summed: 1:40, 2:90, +Inf:100. p95 rank 95 falls in +Inf → 2.
        let f = figures(&[&a, &b]);
        assert_eq!(f.e2e_latency_p95_seconds, Some(2.0));
        // Alone, pod a's p95 (rank 47.5 in (1, 2]) would be 1 + 7.5 / 10.
        assert!(close(figures(&[&a]).e2e_latency_p95_seconds, 1.75));
        // Only pod a produced tokens: 0.01 + 0.09 * 5 / 10.
        assert!(close(f.inter_token_latency_p50_seconds, 0.055));
    }

    #[test]
    fn a_histogram_that_went_down_is_taken_whole() {
        let mut tracker = Tracker::default();
        let big = PodMetrics {
            e2e: Some(hist(&[(1.0, 500.0), (INF, 600.0)])),
            ..PodMetrics::default()
        };
        tracker.observe("a", t(0), big);
        // One bucket lower (a restart that already served 700 requests): whole.
        let restarted = hist(&[(1.0, 100.0), (INF, 700.0)]);
        let d = tracker.observe(
            "a",
            t(10),
            PodMetrics {
                e2e: Some(restarted.clone()),
                ..PodMetrics::default()
            },
        );
        assert_eq!(d.e2e, Some(restarted));
        // Different buckets after a restart: whole too.
        let rebucketed = hist(&[(2.0, 3.0), (INF, 800.0)]);
        let d = tracker.observe(
            "a",
            t(20),
            PodMetrics {
                e2e: Some(rebucketed.clone()),
                ..PodMetrics::default()
            },
        );
        assert_eq!(d.e2e, Some(rebucketed));
    }

    #[test]
    fn no_finished_request_means_no_latency_and_no_error_rate() {
        let mut tracker = Tracker::default();
        let same = PodMetrics {
            ttft: Some(hist(&[(0.1, 5.0), (INF, 5.0)])),
            e2e: Some(hist(&[(1.0, 5.0), (INF, 5.0)])),
            ..counters(5.0, 1.0, 10.0, 10.0)
        };
        tracker.observe("a", t(0), same.clone());
        let d = tracker.observe("a", t(15), same);
        let f = figures(&[&d]);
        assert_eq!(f.requests_per_second, Some(0.0));
        assert_eq!(f.error_rate, None);
        assert_eq!(f.ttft_p50_seconds, None);
        assert_eq!(f.ttft_p95_seconds, None);
        assert_eq!(f.e2e_latency_p95_seconds, None);
        assert_eq!(f.inter_token_latency_p50_seconds, None);
    }

    #[test]
    fn gauges_are_summed_and_kv_cache_use_averaged_over_pods_that_report_them() {
        let with = |running, waiting, kv| PodDelta {
            running,
            waiting,
            kv_cache_usage: kv,
            ..PodDelta::default()
        };
        let a = with(Some(3.0), Some(1.0), Some(0.2));
        let b = with(Some(5.0), None, Some(0.6));
        let c = with(None, None, None);
        let f = figures(&[&a, &b, &c]);
        assert_eq!(f.running, Some(8.0));
        assert_eq!(f.waiting, Some(1.0));
        assert!(close(f.kv_cache_usage, 0.4));
        let f = figures(&[&c]);
        assert_eq!((f.running, f.waiting, f.kv_cache_usage), (None, None, None));
        assert_eq!(figures(&[]), LoadFigures::default());
    }

    #[test]
    fn the_error_rate_is_a_fraction_of_the_finished_requests() {
        let d = PodDelta {
            seconds: Some(10.0),
            finished: Some(10.0),
            failed: Some(12.0),
            ..PodDelta::default()
        };
        assert_eq!(figures(&[&d]).error_rate, Some(1.0));
        // A pod that does not count failures adds nothing to either side.
        let e = PodDelta {
            seconds: Some(10.0),
            finished: Some(30.0),
            ..PodDelta::default()
        };
        assert_eq!(figures(&[&e]).error_rate, None);
        assert_eq!(figures(&[&e]).requests_per_second, Some(3.0));
    }
}
