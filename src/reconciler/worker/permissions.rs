//! What the worker's RBAC does not allow, told in the record's conditions: a write the API
//! server answers 403 (an object applied, a Kubernetes Event published) becomes
//! `Authorized=False` (reason `Forbidden`) naming the verb, the resource and the namespace,
//! once per record, rather than a log line nobody reads. Counted as
//! the reconcile errors metric (`kind="forbidden"`, see `metrics.rs`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Worker;
use crate::domain::{Condition, ConditionStatus, DeploymentStatus};
use crate::reconciler::cluster::ClusterError;
use crate::store;

/// The condition's type.
pub(super) const AUTHORIZED: &str = "Authorized";

impl Worker {
    /// Adds `Authorized=False` to the last status of a record whose reconcile the API server
    /// refused with 403 (the rest of the status is kept: nothing new was observed); once,
    /// while the same refusal stands.
    pub(super) async fn note_forbidden(&self, id: Uuid, err: &ClusterError) {
        let Some(status) = err.api_status().filter(|s| s.code == 403) else {
            return;
        };
        let Ok(Some(target)) = store::deployments::find_reconcile_target(&self.pool, id).await
        else {
            return;
        };
        let last = &target.row.status.0;
        let condition = forbidden_condition(status, last, Utc::now());
        if last.conditions.contains(&condition) {
            return;
        }
        let mut noted = last.clone();
        noted.conditions.retain(|c| c.type_ != AUTHORIZED);
        noted.conditions.push(condition);
        if let Err(err) =
            store::deployments::update_status(&self.pool, id, target.row.generation, &noted, None)
                .await
        {
            tracing::warn!(error = %err, "cannot note a forbidden write");
        }
    }
}

/// `Authorized=False` for the API server's 403 `status`: who may not do what, and where,
/// as its message says (k8s.io/apiserver `endpoints/handlers/responsewriters/errors.go`,
/// `forbiddenMessage`: `User "<u>" cannot <verb> resource "<resource>" in API group
/// "<group>" in the namespace "<ns>"`), and what to do about it. Keeps the time of an
/// earlier `Authorized=False` in `previous`.
pub(super) fn forbidden_condition(
    status: &kube::core::Status,
    previous: &DeploymentStatus,
    now: DateTime<Utc>,
) -> Condition {
    let message = &status.message;
    let quoted_after = |marker: &str| {
        let rest = &message[message.find(marker)? + marker.len()..];
        rest.split('"').next().map(str::to_owned)
    };
    let verb = message
        .find(" cannot ")
        .and_then(|at| message[at + 8..].split(' ').next())
        .unwrap_or("write");
    let details = status.details.as_ref();
    let resource = quoted_after("resource \"")
        .or_else(|| details.map(|d| d.kind.clone()))
        .unwrap_or_default();
    let group = quoted_after("in API group \"")
        .or_else(|| details.map(|d| d.group.clone()))
        .unwrap_or_default();
    let qualified = if group.is_empty() {
        resource
    } else {
        format!("{resource}.{group}")
    };
    let place = match quoted_after("in the namespace \"") {
        Some(namespace) => format!(" in namespace {namespace}"),
        None => String::new(),
    };
    let since = previous
        .conditions
        .iter()
        .find(|c| c.type_ == AUTHORIZED && c.status == ConditionStatus::False)
        .map_or(now, |c| c.last_transition_time);
    Condition {
        type_: AUTHORIZED.into(),
        status: ConditionStatus::False,
        reason: "Forbidden".into(),
        message: format!(
            "the worker may not {verb} {qualified}{place}: its RBAC is too narrow; grant it in \
             the worker's ClusterRole (Kubernetes answered 403: {message})"
        ),
        last_transition_time: since,
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;
    use kube::core::response::StatusDetails;

    use super::*;

    fn forbidden(message: &str, group: &str, kind: &str) -> Status {
        Status {
            code: 403,
            reason: "Forbidden".into(),
            message: message.into(),
            details: Some(StatusDetails {
                name: String::new(),
                group: group.into(),
                kind: kind.into(),
                uid: String::new(),
                causes: Vec::new(),
                retry_after_seconds: 0,
            }),
            ..Status::default()
        }
    }

    #[test]
    fn the_verb_resource_and_namespace_are_named() {
        let status = forbidden(
            r#"events.events.k8s.io is forbidden: User "system:serviceaccount:modelplane:modelplane" cannot create resource "events" in API group "events.k8s.io" in the namespace "team-a""#,
            "events.k8s.io",
            "events",
        );
        let previous = DeploymentStatus::pending(1);
        let c = forbidden_condition(&status, &previous, Utc::now());
        assert_eq!(
            (c.type_.as_str(), c.reason.as_str()),
            ("Authorized", "Forbidden")
        );
        assert_eq!(c.status, ConditionStatus::False);
        assert!(
            c.message.starts_with(
                "the worker may not create events.events.k8s.io in namespace team-a: its RBAC is too narrow"
            ),
            "{}",
            c.message
        );
        assert!(
            c.message
                .ends_with(&format!("(Kubernetes answered 403: {})", status.message))
        );
    }

    #[test]
    fn a_message_of_another_shape_falls_back_on_the_details() {
        let status = forbidden("forbidden by policy", "apps", "deployments");
        let c = forbidden_condition(&status, &DeploymentStatus::pending(1), Utc::now());
        assert!(
            c.message
                .starts_with("the worker may not write deployments.apps: its RBAC"),
            "{}",
            c.message
        );
    }

    #[test]
    fn the_transition_time_stays_while_it_is_forbidden() {
        let status = forbidden("x", "", "services");
        let then = Utc::now() - chrono::Duration::minutes(5);
        let mut previous = DeploymentStatus::pending(1);
        previous
            .conditions
            .push(forbidden_condition(&status, &previous, then));
        let again = forbidden_condition(&status, &previous, Utc::now());
        assert_eq!(again.last_transition_time, then);
        assert_eq!(again, previous.conditions[0]);
    }
}
