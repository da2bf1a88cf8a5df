//! Per-caller request rate limits (a token bucket per token, user or client address).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

pub struct RateLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    checks: AtomicU64,
}

impl RateLimiter {
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let rate = NonZeroU32::new(per_minute.max(1)).expect("at least 1");
        let burst = NonZeroU32::new(burst.max(1)).expect("at least 1");
        Self {
            limiter: DefaultKeyedRateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst)),
            checks: AtomicU64::new(0),
        }
    }

    /// Counts one request for `key`; `Err` says how long to wait when over the limit.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        // Forget idle callers now and then, so the map does not grow without bound.
        if self.checks.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&key.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}
