//! How many watches (SSE) and GraphQL subscriptions one caller, and one client address, may
//! hold open at once. Each open stream holds a [`StreamSlot`]; the count goes down when the
//! stream ends, however it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::ServiceError;

/// The caps (`MODELPLANE_MAX_STREAMS_PER_CALLER`, `MODELPLANE_MAX_STREAMS_PER_ADDRESS`),
/// and how long a stream whose client reads nothing is kept
/// (`MODELPLANE_STREAM_SLOW_CLIENT_SECS`).
#[derive(Debug, Clone, Copy)]
pub struct StreamLimits {
    pub per_caller: usize,
    pub per_address: usize,
    pub slow_client: std::time::Duration,
}

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            per_caller: 32,
            per_address: 128,
            slow_client: std::time::Duration::from_secs(30),
        }
    }
}

/// The open streams, by caller and by address.
#[derive(Default)]
pub struct StreamSlots {
    limits: StreamLimits,
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream's place; given back when dropped.
pub struct StreamSlot {
    slots: Arc<StreamSlots>,
    keys: [String; 2],
}

impl StreamSlots {
    pub fn new(limits: StreamLimits) -> Self {
        Self {
            limits,
            open: Mutex::default(),
        }
    }

    pub fn limits(&self) -> StreamLimits {
        self.limits
    }

    /// A place for one more stream of `caller` (a credential's key) from `address`, or the
    /// refusal that names the cap.
    pub fn take(self: &Arc<Self>, caller: &str, address: &str) -> Result<StreamSlot, ServiceError> {
        let keys = [format!("caller:{caller}"), format!("address:{address}")];
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = |key: &String| open.get(key).copied().unwrap_or(0);
        let (over, reason, limit) = if count(&keys[0]) >= self.limits.per_caller {
            (true, "per_caller", self.limits.per_caller)
        } else if count(&keys[1]) >= self.limits.per_address {
            (true, "per_address", self.limits.per_address)
        } else {
            (false, "", 0)
        };
        if over {
            metrics::counter!(crate::metrics::STREAMS_REFUSED, "reason" => reason).increment(1);
            let whose = if reason == "per_caller" {
                "this credential"
            } else {
                "this address"
            };
            return Err(ServiceError::TooManyStreams(format!(
                "{whose} already holds {limit} open watches and subscriptions, the most allowed; close one first"
            )));
        }
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        Ok(StreamSlot {
            slots: self.clone(),
            keys,
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            if let Some(n) = open.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    open.remove(key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_caller_and_per_address_and_places_come_back() {
        let slots = Arc::new(StreamSlots::new(StreamLimits {
            per_caller: 2,
            per_address: 3,
            ..StreamLimits::default()
        }));
        let a1 = slots.take("token:a", "10.0.0.1").unwrap();
        let _a2 = slots.take("token:a", "10.0.0.1").unwrap();
        assert!(matches!(
            slots.take("token:a", "10.0.0.2"),
            Err(ServiceError::TooManyStreams(m)) if m.contains("this credential")
        ));
        let _b1 = slots.take("token:b", "10.0.0.1").unwrap();
        assert!(matches!(
            slots.take("token:c", "10.0.0.1"),
            Err(ServiceError::TooManyStreams(m)) if m.contains("this address")
        ));
        drop(a1);
        assert!(slots.take("token:c", "10.0.0.1").is_ok());
    }
}
