//! Server-Sent Events: `…/watch` streams a deployment's (or a project's) changes to curl.
//!
//! Each event's `id:` is the change's sequence number (send it back as `Last-Event-ID` to
//! resume), `event:` says what changed, `data:` is the same JSON as the REST resource or
//! timeline item.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};

use super::responses::{DeploymentPath, NoSuchDeployment, NoSuchProject, ProjectPath};
use crate::api::AppState;
use crate::api::error::ApiError;
use crate::api::extract::{ClientAddress, Query};
use crate::service::Actor;
use crate::service::live::{self, WatchEvent, Watched};

/// Watch a deployment: `state` first (the deployment as it is now), then `synced` (what
/// follows is live), then `created`, `spec`, `status`, `restart`, `deleting` (each with the
/// deployment), `event` (a timeline entry), and `deleted`, which ends the stream. `reset` means the `Last-Event-ID` was older than the
/// feed keeps (24 hours): a `state` follows. A `: keep-alive` comment comes every 15 s.
/// With `?load=true`, a `load` event (`{id, name, load, canaryLoad}`) follows every new
/// reading of the deployment's serving metrics whose figures changed (at most one per
/// collection interval).
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/watch", tag = "deployments",
    params(DeploymentPath, WatchParams,
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id: every change since is sent")),
    responses(
        (status = 200, description = "A stream of events", content_type = "text/event-stream", body = String),
        NoSuchDeployment,
    ))]
pub async fn watch_deployment(
    State(state): State<AppState>,
    actor: Actor,
    ClientAddress(address): ClientAddress,
    Path(DeploymentPath { project, name }): Path<DeploymentPath>,
    Query(params): Query<WatchParams>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let resume = last_event_id(&headers)?;
    let events = live::watch(
        &state.ctx,
        &state.changes,
        &actor,
        &address,
        &project,
        Watched::Deployment(&name),
        live::WatchOptions {
            resume_after: resume,
            with_load: params.load,
        },
    )
    .await?;
    Ok(sse(events))
}

/// Watch every deployment of a project: a `state` event per deployment first, then `synced`
/// (sent at once for an empty project), then the changes of all of them (as for one
/// deployment; `deleted` does not end this stream). After a resume, `synced` follows the
/// replayed changes. With `?load=true`, `load` events too (see the deployment's watch).
#[utoipa::path(get, path = "/api/v1/projects/{project}/watch", tag = "deployments",
    params(ProjectPath, WatchParams,
        ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this event id: every change since is sent")),
    responses(
        (status = 200, description = "A stream of events", content_type = "text/event-stream", body = String),
        NoSuchProject,
    ))]
pub async fn watch_project(
    State(state): State<AppState>,
    actor: Actor,
    ClientAddress(address): ClientAddress,
    Path(ProjectPath { project }): Path<ProjectPath>,
    Query(params): Query<WatchParams>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let resume = last_event_id(&headers)?;
    let events = live::watch(
        &state.ctx,
        &state.changes,
        &actor,
        &address,
        &project,
        Watched::Project,
        live::WatchOptions {
            resume_after: resume,
            with_load: params.load,
        },
    )
    .await?;
    Ok(sse(events))
}

/// What a watch sends besides the changes.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WatchParams {
    /// Also send `load` events: new readings of the serving metrics.
    #[serde(default)]
    pub load: bool,
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .filter(|v| *v >= 0)
        .map(Some)
        .ok_or_else(|| {
            crate::domain::FieldErrors::single(
                "Last-Event-ID",
                "must be the id of an event this stream sent",
            )
            .into()
        })
}

fn sse(
    events: impl Stream<Item = WatchEvent> + Send + 'static,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let events = events.map(|event| {
        let (id, name, data) = match event {
            WatchEvent::Deployment {
                seq,
                kind,
                deployment,
            } => (
                seq,
                kind.map_or("state", |k| k.as_str()),
                serde_json::to_string(&deployment),
            ),
            WatchEvent::Timeline { seq, event } => (seq, "event", serde_json::to_string(&event)),
            WatchEvent::Load { seq, update } => (seq, "load", serde_json::to_string(&update)),
            WatchEvent::Deleted { seq, id } => (
                seq,
                "deleted",
                serde_json::to_string(&serde_json::json!({ "id": id })),
            ),
            WatchEvent::Reset { seq } => (seq, "reset", Ok("{}".to_owned())),
            WatchEvent::Synced { seq } => (seq, "synced", Ok("{}".to_owned())),
        };
        Ok(Event::default()
            .id(id.to_string())
            .event(name)
            .data(data.expect("records serialise")))
    });
    Sse::new(events).keep_alive(
        KeepAlive::new()
            .interval(Duration::from_secs(15))
            .text("keep-alive"),
    )
}
