//! Mutations: the REST actions, through the same service functions and rules.
//!
//! `expectedGeneration` plays `If-Match`: the change is refused (`PRECONDITION_FAILED`) unless
//! the spec is still at that generation. Input errors name the same field paths as REST.

use async_graphql::{Context, InputObject, Json, Object, Result};
use serde_json::{Value, json};
use uuid::Uuid;

use super::errors::{field_errors, service_error};
use super::state;
use super::types::{DeploymentNode, Project, Role, authorized};
use crate::domain::CanaryHeader;
use crate::domain::from_json_value_at;
use crate::service::canary::{self, StartCanary, UpdateCanary};
use crate::service::capacity::WriteOptions;
use crate::service::deployments::{
    self as deployments, CreateDeployment, ReplaceDeployment, RollbackDeployment, ScaleDeployment,
};
use crate::service::projects::{self, CreateProject};
use crate::service::{Actor, Precondition};
use crate::service::{model_keys, role_bindings, tokens};

pub struct Mutation;

/// How a change is carried out (REST's `dryRun` and `force` query parameters).
#[derive(Debug, Clone, Copy, Default, InputObject)]
pub struct WriteOptionsInput {
    /// Check everything (validation, quota, fit) and answer as if written; write nothing.
    #[graphql(default)]
    pub dry_run: bool,
    /// Accept replicas that ask for more GPUs than any node has.
    #[graphql(default)]
    pub force: bool,
}

fn write_options(options: Option<WriteOptionsInput>) -> WriteOptions {
    let options = options.unwrap_or_default();
    WriteOptions {
        dry_run: options.dry_run,
        force: options.force,
    }
}

fn precondition(expected_generation: Option<i64>) -> Precondition {
    expected_generation.map_or(Precondition::None, Precondition::Generation)
}

/// The deployment after a change, in its project as the caller sees it.
async fn node(ctx: &Context<'_>, deployment: crate::domain::Deployment) -> Result<DeploymentNode> {
    let project = authorized(ctx, &deployment.project).await?;
    Ok(DeploymentNode {
        deployment,
        project,
    })
}

fn caller<'a>(ctx: &Context<'a>) -> Result<(&'a crate::api::AppState, &'a Actor)> {
    state(ctx)
}

#[Object]
impl Mutation {
    /// Creates a deployment. With an `idempotencyKey`, a retry returns the first result.
    async fn create_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        spec: Json<Value>,
        idempotency_key: Option<String>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let request = CreateDeployment {
            name,
            spec: from_json_value_at("spec", spec.0).map_err(field_errors)?,
        };
        let created = deployments::create_deployment(
            &state.ctx,
            actor,
            &project,
            request,
            idempotency_key.as_deref(),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, created.deployment).await
    }

    /// Changes the spec with a JSON merge patch of the spec (`null` removes a field).
    async fn update_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        patch: Json<Value>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::patch_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            json!({"spec": patch.0}),
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Replaces the spec.
    async fn replace_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        spec: Json<Value>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let request = ReplaceDeployment {
            spec: from_json_value_at("spec", spec.0).map_err(field_errors)?,
        };
        let deployment = deployments::replace_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            request,
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    #[allow(clippy::too_many_arguments)]
    async fn scale_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        replicas: i64,
        #[graphql(
            desc = "`prefill` or `decode`: the role to scale, for (and only for) a disaggregated deployment"
        )]
        role: Option<String>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::scale_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            ScaleDeployment { replicas, role },
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Serves a LoRA adapter of the base model under its own `model` name (added to
    /// `spec.adapters`; running pods load it without a restart).
    #[allow(clippy::too_many_arguments)]
    async fn add_adapter(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        adapter: String,
        source: String,
        #[graphql(
            desc = "For `s3://` sources only: the Secret whose keys (`AWS_ACCESS_KEY_ID`, …) the pods' fetcher uses."
        )]
        secret_name: Option<String>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let request = deployments::AddAdapter {
            adapter: crate::domain::AdapterSpec {
                name: adapter,
                source,
                secret_ref: secret_name.map(|name| crate::domain::SecretRef { name }),
            },
        };
        let deployment = deployments::add_adapter(
            &state.ctx,
            actor,
            &project,
            &name,
            request,
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Stops serving a LoRA adapter (running pods unload it without a restart).
    async fn remove_adapter(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        adapter: String,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::remove_adapter(
            &state.ctx,
            actor,
            &project,
            &name,
            &adapter,
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Replaces every pod without changing the spec.
    async fn restart_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        expected_generation: Option<i64>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::restart_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            &precondition(expected_generation),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Makes an earlier revision's spec current again (as a new generation).
    #[allow(clippy::too_many_arguments)]
    async fn rollback_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        revision: i64,
        replicas: Option<i64>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::rollback_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            RollbackDeployment { revision, replicas },
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Starts a canary: `spec` is a merge patch of the deployment's spec (or give
    /// `revision`); `weight` percent (0–99) of the requests without the header go to it once
    /// it has a ready replica, and every request with the header (default
    /// `x-modelplane-canary: true`).
    #[allow(clippy::too_many_arguments)]
    async fn start_canary(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        spec: Option<Json<Value>>,
        revision: Option<i64>,
        replicas: Option<i64>,
        weight: i32,
        header_name: Option<String>,
        header_value: Option<String>,
        expected_generation: Option<i64>,
        options: Option<WriteOptionsInput>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let request = StartCanary {
            spec: spec.map(|s| s.0),
            revision,
            replicas,
            weight,
            header: header(header_name, header_value),
        };
        let deployment = canary::start_canary(
            &state.ctx,
            actor,
            &project,
            &name,
            request,
            &precondition(expected_generation),
            write_options(options),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Changes the canary's weight or header.
    #[allow(clippy::too_many_arguments)]
    async fn update_canary(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        weight: Option<i32>,
        header_name: Option<String>,
        header_value: Option<String>,
        expected_generation: Option<i64>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let request = UpdateCanary {
            weight,
            header: header(header_name, header_value),
        };
        let deployment = canary::update_canary(
            &state.ctx,
            actor,
            &project,
            &name,
            request,
            &precondition(expected_generation),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Promotes the canary: its spec becomes the deployment's (a new revision).
    async fn promote_canary(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        expected_generation: Option<i64>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = canary::promote_canary(
            &state.ctx,
            actor,
            &project,
            &name,
            &precondition(expected_generation),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Aborts the canary: all traffic goes back to the stable track.
    async fn abort_canary(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        expected_generation: Option<i64>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = canary::abort_canary(
            &state.ctx,
            actor,
            &project,
            &name,
            &precondition(expected_generation),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Asks for deletion: the worker removes every Kubernetes object, then the record.
    async fn delete_deployment(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        expected_generation: Option<i64>,
    ) -> Result<DeploymentNode> {
        let (state, actor) = caller(ctx)?;
        let deployment = deployments::delete_deployment(
            &state.ctx,
            actor,
            &project,
            &name,
            &precondition(expected_generation),
        )
        .await
        .map_err(service_error)?;
        node(ctx, deployment).await
    }

    /// Creates a project (platform admins).
    async fn create_project(
        &self,
        ctx: &Context<'_>,
        name: String,
        namespace: Option<String>,
    ) -> Result<Project> {
        let (state, actor) = caller(ctx)?;
        let request = CreateProject {
            name,
            namespace,
            adopt_namespace: false,
        };
        let project = projects::create_project(&state.ctx, actor, request)
            .await
            .map_err(service_error)?;
        Ok(project.into())
    }

    /// Deletes a project without deployments (platform admins). Returns its name.
    async fn delete_project(&self, ctx: &Context<'_>, name: String) -> Result<String> {
        let (state, actor) = caller(ctx)?;
        projects::delete_project(&state.ctx, actor, &name)
            .await
            .map_err(service_error)?;
        Ok(name)
    }

    /// Sets (replaces) a project's quota (platform admins).
    async fn set_quota(
        &self,
        ctx: &Context<'_>,
        project: String,
        quota: super::capacity::QuotaInput,
    ) -> Result<super::capacity::ProjectQuota> {
        let (state, actor) = caller(ctx)?;
        let quota = crate::service::capacity::set_quota(&state.ctx, actor, &project, quota.into())
            .await
            .map_err(service_error)?;
        Ok(quota.into())
    }

    /// Removes a project's quota (platform admins). Returns the project's name.
    async fn delete_quota(&self, ctx: &Context<'_>, project: String) -> Result<String> {
        let (state, actor) = caller(ctx)?;
        crate::service::capacity::delete_quota(&state.ctx, actor, &project)
            .await
            .map_err(service_error)?;
        Ok(project)
    }

    /// Creates a project token (project admins). The secret is in the answer, once.
    async fn create_token(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        role: Role,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<CreatedToken> {
        let (state, actor) = caller(ctx)?;
        let request = tokens::CreateToken {
            name,
            role: Some(role.into()),
            expires_at,
        };
        let created = tokens::create_project_token(&state.ctx, actor, &project, request)
            .await
            .map_err(service_error)?;
        Ok(CreatedToken {
            id: created.token.id,
            name: created.token.name,
            secret: created.secret,
            expires_at: created.token.expires_at,
        })
    }

    /// Revokes a project token (project admins); its open streams end. Returns its id.
    async fn revoke_token(&self, ctx: &Context<'_>, project: String, id: Uuid) -> Result<Uuid> {
        let (state, actor) = caller(ctx)?;
        let token = tokens::revoke_project_token(&state.ctx, actor, &project, id)
            .await
            .map_err(service_error)?;
        Ok(token.id)
    }

    /// Creates a model key (project admins). The secret is in the answer, once.
    #[allow(clippy::too_many_arguments)]
    async fn create_model_key(
        &self,
        ctx: &Context<'_>,
        project: String,
        name: String,
        deployments: Option<Vec<String>>,
        requests_per_minute: Option<i32>,
        daily_token_budget: Option<i64>,
        max_concurrent: Option<i32>,
        expires_at: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<super::keys::CreatedModelKey> {
        let (state, actor) = caller(ctx)?;
        let request = model_keys::CreateKey {
            name,
            deployments,
            requests_per_minute,
            daily_token_budget,
            max_concurrent,
            expires_at,
        };
        let created = model_keys::create_key(&state.ctx, actor, &project, request)
            .await
            .map_err(service_error)?;
        Ok(super::keys::CreatedModelKey {
            key: created.key.into(),
            secret: created.secret,
        })
    }

    /// Revokes a model key (project admins): the Gateway refuses it within a second.
    async fn revoke_model_key(
        &self,
        ctx: &Context<'_>,
        project: String,
        id: Uuid,
    ) -> Result<super::keys::ModelKey> {
        let (state, actor) = caller(ctx)?;
        let key = model_keys::revoke_key(&state.ctx, actor, &project, id)
            .await
            .map_err(service_error)?;
        Ok(key.into())
    }

    /// Grants an OIDC user or group a role on a project (project admins). Returns its id.
    async fn create_role_binding(
        &self,
        ctx: &Context<'_>,
        project: String,
        subject_kind: String,
        subject: String,
        role: Role,
    ) -> Result<Uuid> {
        let (state, actor) = caller(ctx)?;
        let request = role_bindings::CreateRoleBinding {
            subject_kind,
            subject,
            role: role.into(),
        };
        let binding = role_bindings::create_role_binding(&state.ctx, actor, &project, request)
            .await
            .map_err(service_error)?;
        Ok(binding.id)
    }

    /// Removes a role binding (project admins). Returns its id.
    async fn delete_role_binding(
        &self,
        ctx: &Context<'_>,
        project: String,
        id: Uuid,
    ) -> Result<Uuid> {
        let (state, actor) = caller(ctx)?;
        role_bindings::delete_role_binding(&state.ctx, actor, &project, id)
            .await
            .map_err(service_error)?;
        Ok(id)
    }
}

/// A new token: its secret is shown here once; only its hash is stored.
#[derive(async_graphql::SimpleObject)]
pub struct CreatedToken {
    pub id: Uuid,
    pub name: String,
    /// Use as `Authorization: Bearer <secret>`.
    pub secret: String,
    pub expires_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A canary header from its two optional parts: the default header's name or value fills
/// in the one not given.
fn header(name: Option<String>, value: Option<String>) -> Option<CanaryHeader> {
    if name.is_none() && value.is_none() {
        return None;
    }
    let default = CanaryHeader::default();
    Some(CanaryHeader {
        name: name.unwrap_or(default.name),
        value: value.unwrap_or(default.value),
    })
}
