//! How long clean-up waits for the Gateway. A canary's objects (after an abort or a
//! promotion) and InferencePool mode's (after a switch back) are removed only once the
//! Gateway has taken in the route that no longer sends them anything: removed earlier, the
//! requests the Gateway still sends them would fail.
//!
//! The wait is bounded by one policy. A Gateway that has reported on the route before is
//! waited for as long as it takes (it serves the route, and a stuck controller is what the
//! status then says). A Gateway that has never reported on the route at all (no controller
//! runs it, or it does not exist) is waited for `MODELPLANE_GATEWAY_SILENCE_SECS` (300)
//! from when the wait began, then the objects go anyway: nothing routes through a Gateway
//! that never answered, and nothing is left behind forever. While waiting, the record's
//! `CleanedUp` condition is False (reason `WaitingForGateway`) and says what waits for what.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Worker;
use crate::domain::{ConditionStatus, Deployment, EventKind};
use crate::reconciler::status::{CLEANED_UP, CleanupWait, Observed, route_settled};
use crate::store::deployments::ReconcileTarget;

/// What clean-up may do now.
pub(super) enum GatewayWait {
    /// The Gateway has the route that no longer uses the objects: remove them.
    Settled,
    /// Keep them; the status says why (set in `observed`).
    Waiting,
    /// The Gateway never reported on the route within the wait: remove them, saying so.
    GaveUp(String),
}

impl Worker {
    /// Whether `what` (the objects to remove) may go now, given the route `observed`.
    pub(super) fn gateway_wait(
        &self,
        record: &Deployment,
        observed: &mut Observed,
        what: &str,
        now: DateTime<Utc>,
    ) -> GatewayWait {
        if route_settled(observed) {
            return GatewayWait::Settled;
        }
        let gateway = observed
            .gateway
            .as_ref()
            .map(|g| format!("Gateway {}/{}", g.namespace, g.name))
            .unwrap_or_else(|| "the Gateway".into());
        let route = observed.route.as_ref();
        let generation = route.and_then(|r| r.metadata.generation).unwrap_or(0);
        let ever_reported = route.is_some_and(|r| {
            r.status
                .iter()
                .flat_map(|s| &s.parents)
                .any(|p| !p.conditions.is_empty())
        });
        let waiting = format!(
            "waiting for {gateway} to take in route generation {generation} before removing {what}"
        );
        if ever_reported {
            observed.cleanup_wait = Some(CleanupWait {
                message: format!("{waiting}: requests it still sends them would fail"),
                recheck: None,
            });
            return GatewayWait::Waiting;
        }
        // Since when: the condition's transition, kept from pass to pass while it waits.
        let since = record
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == CLEANED_UP && c.status == ConditionStatus::False)
            .map_or(now, |c| c.last_transition_time);
        let limit = self.config.gateway_silence;
        let waited = (now - since).to_std().unwrap_or_default();
        if waited >= limit {
            return GatewayWait::GaveUp(format!(
                "removed {what} without {gateway}'s answer: it has not reported on the route in {} s (MODELPLANE_GATEWAY_SILENCE_SECS), so it does not serve it",
                limit.as_secs()
            ));
        }
        let left = limit - waited;
        let deadline = since + chrono::Duration::from_std(limit).unwrap_or_default();
        observed.cleanup_wait = Some(CleanupWait {
            // A message that stays the same while it waits: no status write per pass.
            message: format!(
                "{waiting}; it has never reported on the route, so they go anyway at {}",
                deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            recheck: Some(left.max(Duration::from_secs(1))),
        });
        GatewayWait::Waiting
    }

    /// Whether `what` may be removed now: once the Gateway has the route without it, or it
    /// never reported on the route within the wait (told on the timeline). The wait's start
    /// is told on the timeline once.
    pub(super) async fn may_remove(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
        observed: &mut Observed,
        what: &str,
    ) -> bool {
        match self.gateway_wait(record, observed, what, Utc::now()) {
            GatewayWait::Settled => true,
            GatewayWait::Waiting => {
                let already = record
                    .status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == CLEANED_UP && c.status == ConditionStatus::False);
                if let (false, Some(wait)) = (already, &observed.cleanup_wait) {
                    self.timeline(target, EventKind::CleanupWaiting, &wait.message)
                        .await;
                }
                false
            }
            GatewayWait::GaveUp(message) => {
                tracing::warn!(deployment_id = %record.id, %message, "clean-up without the Gateway");
                self.timeline(target, EventKind::CleanupWaiting, &message)
                    .await;
                true
            }
        }
    }
}
