//! Subscriptions, fed by the change feed (`service::live`), as the SSE streams are.

use std::sync::Arc;

use async_graphql::{Context, Object, Result, SimpleObject, Subscription};
use futures::{Stream, StreamExt};
use uuid::Uuid;

use super::errors::service_error;
use super::state;
use super::types::{ChangeKind, DeploymentNode, Phase, TimelineEventNode, authorized};
use crate::service::live::{self, WatchEvent, Watched};

pub struct Subscription;

/// One message of a deployment subscription.
pub struct DeploymentChange {
    /// The change's number in the feed.
    seq: i64,
    /// `null` for the first message (the state as it is now).
    kind: Option<ChangeKind>,
    deployment: Option<DeploymentNode>,
    /// Set when the deployment is gone; the subscription then ends.
    deleted_id: Option<Uuid>,
    /// The watch started afresh (the resume point was too old).
    reset: bool,
}

#[Object]
impl DeploymentChange {
    async fn seq(&self) -> i64 {
        self.seq
    }
    async fn kind(&self) -> Option<ChangeKind> {
        self.kind
    }
    async fn deployment(&self) -> Option<&DeploymentNode> {
        self.deployment.as_ref()
    }
    async fn deleted_id(&self) -> Option<Uuid> {
        self.deleted_id
    }
    async fn reset(&self) -> bool {
        self.reset
    }
}

/// A new timeline entry.
#[derive(SimpleObject)]
pub struct TimelineChange {
    seq: i64,
    event: TimelineEventNode,
}

/// Filters for `deploymentsChanged`.
#[derive(async_graphql::InputObject, Default)]
pub struct ChangeFilter {
    pub phase: Option<Phase>,
    pub name_prefix: Option<String>,
}

#[Subscription]
impl Subscription {
    /// One deployment: its state first, then every change; the deletion is the last message.
    async fn deployment_changed(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        after_seq: Option<i64>,
    ) -> Result<impl Stream<Item = DeploymentChange> + use<>> {
        let events = watch(ctx, &project, Watched::Deployment(&name), after_seq).await?;
        let project = authorized(ctx, &project).await?;
        Ok(events.filter_map(move |event| {
            let project = project.clone();
            async move { change(event, &project) }
        }))
    }

    /// Every deployment of a project (optionally filtered): each one's state first, then
    /// every change. A deleted deployment sends `deletedId`.
    async fn deployments_changed(
        &self,
        ctx: &Context<'_>,
        project: String,
        filter: Option<ChangeFilter>,
        after_seq: Option<i64>,
    ) -> Result<impl Stream<Item = DeploymentChange> + use<>> {
        let events = watch(ctx, &project, Watched::Project, after_seq).await?;
        let project = authorized(ctx, &project).await?;
        let filter = filter.unwrap_or_default();
        let phase = filter.phase.map(crate::domain::Phase::from);
        let prefix = filter.name_prefix;
        Ok(events.filter_map(move |event| {
            let project = project.clone();
            let prefix = prefix.clone();
            async move {
                let change = change(event, &project)?;
                if let Some(node) = &change.deployment {
                    let d = &node.deployment;
                    if phase.is_some_and(|p| p != d.status.phase)
                        || prefix
                            .as_ref()
                            .is_some_and(|p| !d.name.starts_with(p.as_str()))
                    {
                        return None;
                    }
                }
                Some(change)
            }
        }))
    }

    /// New readings of the serving metrics of one deployment (`name`) or of every
    /// deployment of the project, whenever their figures change (at most one per
    /// deployment per collection interval). Other subscriptions never carry these.
    async fn deployment_load(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: Option<String>,
        after_seq: Option<i64>,
    ) -> Result<impl Stream<Item = super::load::LoadChange> + use<>> {
        let watched = match &name {
            Some(name) => Watched::Deployment(name),
            None => Watched::Project,
        };
        let events = watch_with(ctx, &project, watched, after_seq, true).await?;
        Ok(events.filter_map(|event| async move {
            match event {
                WatchEvent::Load { seq, update } => Some(super::load::LoadChange::of(seq, &update)),
                _ => None,
            }
        }))
    }

    /// A deployment's new timeline entries.
    async fn deployment_events(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        after_seq: Option<i64>,
    ) -> Result<impl Stream<Item = TimelineChange> + use<>> {
        let events = watch(ctx, &project, Watched::Deployment(&name), after_seq).await?;
        Ok(events.filter_map(|event| async move {
            match event {
                WatchEvent::Timeline { seq, event } => Some(TimelineChange {
                    seq,
                    event: TimelineEventNode(event),
                }),
                _ => None,
            }
        }))
    }
}

async fn watch(
    ctx: &Context<'_>,
    project: &str,
    watched: Watched<'_>,
    after_seq: Option<i64>,
) -> Result<impl Stream<Item = WatchEvent> + use<>> {
    watch_with(ctx, project, watched, after_seq, false).await
}

async fn watch_with(
    ctx: &Context<'_>,
    project: &str,
    watched: Watched<'_>,
    after_seq: Option<i64>,
    with_load: bool,
) -> Result<impl Stream<Item = WatchEvent> + use<>> {
    let (state, actor) = state(ctx)?;
    let address = ctx
        .data_opt::<crate::api::extract::ClientAddress>()
        .map_or("unknown", |a| a.0.as_str());
    live::watch(
        &state.ctx,
        &state.changes,
        actor,
        address,
        project,
        watched,
        live::WatchOptions {
            resume_after: after_seq,
            with_load,
        },
    )
    .await
    .map_err(service_error)
}

fn change(
    event: WatchEvent,
    project: &Arc<crate::service::access::Authorized>,
) -> Option<DeploymentChange> {
    Some(match event {
        WatchEvent::Deployment {
            seq,
            kind,
            deployment,
        } => DeploymentChange {
            seq,
            kind: kind.map(Into::into),
            deployment: Some(DeploymentNode {
                deployment: *deployment,
                project: project.clone(),
            }),
            deleted_id: None,
            reset: false,
        },
        WatchEvent::Deleted { seq, id } => DeploymentChange {
            seq,
            kind: Some(ChangeKind::Deleted),
            deployment: None,
            deleted_id: Some(id),
            reset: false,
        },
        WatchEvent::Reset { seq } => DeploymentChange {
            seq,
            kind: None,
            deployment: None,
            deleted_id: None,
            reset: true,
        },
        // Subscriptions mark the end of the starting state with `kind: null` messages alone.
        WatchEvent::Timeline { .. } | WatchEvent::Synced { .. } | WatchEvent::Load { .. } => {
            return None;
        }
    })
}
