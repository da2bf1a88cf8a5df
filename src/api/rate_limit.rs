//! Per-caller request rate limits (a token bucket per credential, user or client address).
//!
//! Checked before anything costs a database round trip where the key is known without one:
//! a presented credential is limited by its hash, and an address that keeps failing to
//! authenticate is refused outright until its bucket refills.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

/// How long a credential that authenticated is let past its address's penalty.
const KNOWN_GOOD_FOR: Duration = Duration::from_secs(300);

pub struct RateLimiter {
    limiter: DefaultKeyedRateLimiter<String>,
    /// Addresses refused for failed authentication, and until when.
    penalties: Mutex<HashMap<String, Instant>>,
    /// Credentials (by hash) that authenticated recently, and when.
    known_good: Mutex<HashMap<String, Instant>>,
    checks: AtomicU64,
}

impl RateLimiter {
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let rate = NonZeroU32::new(per_minute.max(1)).expect("at least 1");
        let burst = NonZeroU32::new(burst.max(1)).expect("at least 1");
        Self {
            limiter: DefaultKeyedRateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst)),
            penalties: Mutex::new(HashMap::new()),
            known_good: Mutex::new(HashMap::new()),
            checks: AtomicU64::new(0),
        }
    }

    /// Counts one request for `key`; `Err` says how long to wait when over the limit.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        // Forget idle callers now and then, so the maps do not grow without bound.
        if self.checks.fetch_add(1, Ordering::Relaxed) % 1024 == 1023 {
            self.limiter.retain_recent();
            let now = Instant::now();
            self.penalties
                .lock()
                .expect("penalties lock")
                .retain(|_, until| *until > now);
            self.known_good
                .lock()
                .expect("known-good lock")
                .retain(|_, at| now.duration_since(*at) < KNOWN_GOOD_FOR);
        }
        self.limiter
            .check_key(&key.to_owned())
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Counts `n` operations at once for `key` (a GraphQL document with `n` mutations);
    /// more than the burst can ever allow is refused with a minute's wait.
    pub fn check_n(&self, key: &str, n: u32) -> Result<(), Duration> {
        let Some(n) = NonZeroU32::new(n) else {
            return Ok(());
        };
        match self.limiter.check_key_n(&key.to_owned(), n) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => Err(not_until.wait_time_from(DefaultClock::default().now())),
            Err(_) => Err(Duration::from_secs(60)),
        }
    }

    /// Counts one failed authentication from `client`; once over the limit, the client is
    /// refused by [`RateLimiter::penalty`] until its bucket refills.
    pub fn check_failure(&self, client: &str) -> Result<(), Duration> {
        self.check(&format!("ip:{client}")).inspect_err(|wait| {
            self.penalties
                .lock()
                .expect("penalties lock")
                .insert(client.to_owned(), Instant::now() + *wait);
        })
    }

    /// Notes that the credential with hash `key` just authenticated.
    pub fn remember_good(&self, key: &str) {
        self.known_good
            .lock()
            .expect("known-good lock")
            .insert(key.to_owned(), Instant::now());
    }

    /// Whether the credential with hash `key` authenticated within [`KNOWN_GOOD_FOR`].
    pub fn is_known_good(&self, key: &str) -> bool {
        self.known_good
            .lock()
            .expect("known-good lock")
            .get(key)
            .is_some_and(|at| at.elapsed() < KNOWN_GOOD_FOR)
    }

    /// How long `client` must still wait after too many failed authentications, if at all.
    pub fn penalty(&self, client: &str) -> Result<(), Duration> {
        let penalties = self.penalties.lock().expect("penalties lock");
        match penalties.get(client) {
            Some(until) => {
                let now = Instant::now();
                if *until > now {
                    Err(*until - now)
                } else {
                    Ok(())
                }
            }
            None => Ok(()),
        }
    }
}
