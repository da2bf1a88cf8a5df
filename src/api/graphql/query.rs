//! Queries.

use std::sync::Arc;

use async_graphql::{Context, InputObject, Object, Result};
use uuid::Uuid;

use super::errors::{field_errors, service_error};
use super::state;
use super::types::{
    DeploymentNode, GpuUsage, Page_, PhaseCount, Project, ProjectRole, Viewer, authorized,
    connection, phase_counts,
};
use crate::domain::FieldErrors;
use crate::service::{self, Identity};

pub struct Query;

/// Filters for `deployments`, as REST's list takes them.
#[derive(InputObject, Default)]
pub struct DeploymentFilter {
    pub phase: Option<super::types::Phase>,
    /// A Kubernetes label selector over the spec's labels (`team=nlp,tier!=batch`).
    pub label_selector: Option<String>,
    pub name_prefix: Option<String>,
}

#[Object]
impl Query {
    /// Who the credential is, and its roles.
    #[graphql(complexity = "5 * super::DB_COST + child_complexity")]
    async fn viewer(&self, ctx: &Context<'_>) -> Result<Viewer> {
        let (state, actor) = state(ctx)?;
        let mut roles = Vec::new();
        let mut cursor = None;
        loop {
            let page = service::projects::list_projects(
                &state.ctx,
                actor,
                Some(service::MAX_PAGE_SIZE),
                cursor.as_deref(),
            )
            .await
            .map_err(service_error)?;
            for project in &page.items {
                if let Some(role) = service::access::role_on(&state.ctx, actor, project)
                    .await
                    .map_err(service_error)?
                {
                    roles.push(ProjectRole {
                        project: project.name.clone(),
                        role: role.into(),
                    });
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        Ok(Viewer {
            name: actor.name.clone(),
            platform_admin: actor.is_platform_admin()
                && !matches!(actor.identity, Identity::System),
            roles,
        })
    }

    /// The projects the caller has a role on, oldest first.
    #[graphql(
        complexity = "first.unwrap_or(50).clamp(1, 200) as usize * child_complexity + super::DB_COST"
    )]
    async fn projects(
        &self,
        ctx: &Context<'_>,
        first: Option<i64>,
        after: Option<String>,
    ) -> Result<Page_<Project>> {
        let (state, actor) = state(ctx)?;
        let page = service::projects::list_projects(&state.ctx, actor, first, after.as_deref())
            .await
            .map_err(service_error)?;
        Ok(connection(page, after.is_some(), Project::from))
    }

    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn project(&self, ctx: &Context<'_>, name: String) -> Result<Project> {
        let (state, actor) = state(ctx)?;
        let project = service::projects::get_project(&state.ctx, actor, &name)
            .await
            .map_err(service_error)?;
        Ok(project.into())
    }

    /// A deployment by `project` and `name`, or by `id` (which works in any project).
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn deployment(
        &self,
        ctx: &Context<'_>,
        project: Option<String>,
        name: Option<String>,
        id: Option<Uuid>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = state(ctx)?;
        match (project, name, id) {
            (Some(project), Some(name), None) => {
                let project = authorized(ctx, &project).await?;
                let deployment =
                    service::deployments::get_deployment_in(&state.ctx, &project, &name)
                        .await
                        .map_err(service_error)?;
                Ok(DeploymentNode {
                    deployment,
                    project,
                })
            }
            (None, None, Some(id)) => {
                let (project, deployment) =
                    service::deployments::get_deployment_by_id(&state.ctx, actor, id)
                        .await
                        .map_err(service_error)?;
                Ok(DeploymentNode {
                    deployment,
                    project: Arc::new(project),
                })
            }
            _ => Err(field_errors(FieldErrors::single(
                "",
                "give `project` and `name`, or `id` alone",
            ))),
        }
    }

    /// A project's deployments, oldest first.
    #[graphql(
        complexity = "first.unwrap_or(50).clamp(1, 200) as usize * child_complexity + super::DB_COST"
    )]
    async fn deployments(
        &self,
        ctx: &Context<'_>,
        project: String,
        filter: Option<DeploymentFilter>,
        first: Option<i64>,
        after: Option<String>,
    ) -> Result<Page_<DeploymentNode>> {
        let (state, _) = state(ctx)?;
        let project = authorized(ctx, &project).await?;
        let filter = filter.unwrap_or_default();
        let query = service::deployments::ListDeployments {
            phase: filter
                .phase
                .map(|p| crate::domain::Phase::from(p).as_str().to_owned()),
            label_selector: filter.label_selector,
            name_prefix: filter.name_prefix,
            limit: first,
            cursor: after.clone(),
        };
        let page = service::deployments::list_deployments_in(&state.ctx, &project, &query)
            .await
            .map_err(service_error)?;
        Ok(connection(page, after.is_some(), |deployment| {
            DeploymentNode {
                deployment,
                project: project.clone(),
            }
        }))
    }

    /// How many of the project's deployments are in each phase.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn phase_counts(&self, ctx: &Context<'_>, project: String) -> Result<Vec<PhaseCount>> {
        let project = authorized(ctx, &project).await?;
        phase_counts(ctx, &project).await
    }

    /// The cluster's GPUs per resource name and product, as the worker last reported them.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn capacity(&self, ctx: &Context<'_>) -> Result<super::capacity::Capacity> {
        let (state, actor) = state(ctx)?;
        let report = service::capacity::get_capacity(&state.ctx, actor)
            .await
            .map_err(service_error)?;
        Ok(report.into())
    }

    /// GPUs the project's deployments ask for, and hold in ready pods.
    #[graphql(complexity = "super::DB_COST + child_complexity")]
    async fn gpus(&self, ctx: &Context<'_>, project: String) -> Result<GpuUsage> {
        let (state, _) = state(ctx)?;
        let project = authorized(ctx, &project).await?;
        let usage = service::deployments::gpu_usage(&state.ctx, &project)
            .await
            .map_err(service_error)?;
        Ok(GpuUsage {
            requested: usage.requested,
            in_use: usage.in_use,
        })
    }
}
