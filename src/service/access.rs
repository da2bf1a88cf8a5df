//! Who the caller is and what they may do: every use case asks here first.
//!
//! A caller without any role on a project is told the project does not exist (404), so
//! names never leak; a caller who can see the project but lacks the role gets 403.

use uuid::Uuid;

use super::{Context, ServiceError};
use crate::domain::{Project, ProjectAccess, Role, RoleSource, TokenRole, is_dns1123_label};
use crate::store;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// How the caller appears in timelines and audit logs: `token:ci`, `user:alice@example.com`.
    pub name: String,
    pub identity: Identity,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// An API token with a role on one project, or a platform-admin token.
    Token {
        id: Uuid,
        project_id: Option<Uuid>,
        role: TokenRole,
    },
    /// A person authenticated by OIDC; roles come from role bindings on each project.
    /// `subject` is the configured username claim (`sub` by default).
    User {
        subject: String,
        groups: Vec<String>,
        platform_admin: bool,
        /// When the identity provider's token ends (its `exp`, Unix seconds): a stream
        /// opened with it ends then too, and resumes with the refreshed token.
        expires_at: Option<i64>,
    },
    /// modelplane itself (the reconciler).
    System,
}

impl Actor {
    pub fn token(id: Uuid, name: &str, project_id: Option<Uuid>, role: TokenRole) -> Self {
        Self {
            name: format!("token:{name}"),
            identity: Identity::Token {
                id,
                project_id,
                role,
            },
        }
    }

    pub fn user(subject: &str, groups: Vec<String>, platform_admin: bool) -> Self {
        Self {
            name: format!("user:{subject}"),
            identity: Identity::User {
                subject: subject.to_owned(),
                groups,
                platform_admin,
                expires_at: None,
            },
        }
    }

    /// The same user, whose credential ends at `exp` (Unix seconds).
    pub fn expiring_at(mut self, exp: i64) -> Self {
        if let Identity::User { expires_at, .. } = &mut self.identity {
            *expires_at = Some(exp);
        }
        self
    }

    /// Whether the credential has reached its end (an OIDC token's `exp`; a token's
    /// expiry and revocation are in the database).
    pub fn has_expired(&self) -> bool {
        match &self.identity {
            Identity::User {
                expires_at: Some(exp),
                ..
            } => chrono::Utc::now().timestamp() >= *exp,
            _ => false,
        }
    }

    pub fn system() -> Self {
        Self {
            name: "worker".into(),
            identity: Identity::System,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A stable key for the caller (idempotency scopes, rate limits): not the display name.
    pub fn key(&self) -> String {
        match &self.identity {
            Identity::Token { id, .. } => format!("token:{id}"),
            Identity::User { subject, .. } => format!("user:{subject}"),
            Identity::System => "system".into(),
        }
    }

    pub fn is_platform_admin(&self) -> bool {
        match &self.identity {
            Identity::Token { role, .. } => *role == TokenRole::PlatformAdmin,
            Identity::User { platform_admin, .. } => *platform_admin,
            Identity::System => true,
        }
    }
}

/// The caller's role on `project`, if any.
pub async fn role_on(
    ctx: &Context,
    actor: &Actor,
    project: &Project,
) -> Result<Option<Role>, ServiceError> {
    if actor.is_platform_admin() {
        return Ok(Some(Role::Admin));
    }
    match &actor.identity {
        Identity::Token {
            project_id, role, ..
        } => Ok(if *project_id == Some(project.id) {
            role.project_role()
        } else {
            None
        }),
        Identity::User {
            subject, groups, ..
        } => {
            if let Some(role) = ctx.access.role(project.id, subject, groups) {
                return Ok(role);
            }
            let ticket = ctx.access.ticket();
            let roles =
                store::role_bindings::roles_of_subject(&ctx.pool, project.id, subject, groups)
                    .await?;
            let role = roles.into_iter().max();
            ctx.access
                .store_role(ticket, project.id, subject, groups, role);
            Ok(role)
        }
        Identity::System => Ok(Some(Role::Admin)),
    }
}

/// A project and the role the caller was found to hold on it by one [`authorize`]. Reads
/// nested under a project take it instead of the caller, so a page of deployments and their
/// revisions (a GraphQL query) is authorised once, not once per item. Only this module
/// makes one.
#[derive(Debug, Clone)]
pub struct Authorized {
    project: Project,
    role: Role,
}

impl Authorized {
    pub fn project(&self) -> &Project {
        &self.project
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn into_project(self) -> Project {
        self.project
    }

    /// Checks the role found covers `needed` as well.
    pub fn require(&self, needed: Role) -> Result<(), ServiceError> {
        if self.role < needed {
            return Err(ServiceError::Forbidden(format!(
                "this needs the {needed} role on project `{}`; you have {}",
                self.project.name, self.role
            )));
        }
        Ok(())
    }
}

impl std::ops::Deref for Authorized {
    type Target = Project;
    fn deref(&self) -> &Project {
        &self.project
    }
}

/// Finds `project` and checks the caller holds at least `needed` on it.
pub async fn authorize(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    needed: Role,
) -> Result<Authorized, ServiceError> {
    let not_found = || ServiceError::not_found("project", project);
    if !is_dns1123_label(project) {
        return Err(not_found());
    }
    let found = match ctx.access.project(project) {
        Some(found) => found,
        None => {
            let ticket = ctx.access.ticket();
            let found = store::projects::find_project_by_name(&ctx.pool, project)
                .await?
                .ok_or_else(not_found)?;
            ctx.access.store_project(ticket, &found);
            found
        }
    };
    let Some(role) = role_on(ctx, actor, &found).await? else {
        return Err(not_found());
    };
    let authorized = Authorized {
        project: found,
        role,
    };
    authorized.require(needed)?;
    Ok(authorized)
}

/// The caller's effective role on `project` (`me`), as [`authorize`] judges it. A caller
/// with no role there is told the project does not exist, as everywhere.
pub async fn my_access(
    ctx: &Context,
    actor: &Actor,
    project: &str,
) -> Result<ProjectAccess, ServiceError> {
    let authorized = authorize(ctx, actor, project, Role::Viewer).await?;
    let via = match &actor.identity {
        _ if actor.is_platform_admin() => RoleSource::PlatformAdmin,
        Identity::Token { .. } => RoleSource::Token,
        Identity::User { .. } => RoleSource::RoleBinding,
        Identity::System => RoleSource::PlatformAdmin,
    };
    Ok(ProjectAccess {
        project: authorized.name.clone(),
        name: actor.name.clone(),
        role: authorized.role(),
        via,
    })
}

/// Whether `actor` may still read `project`: the token is neither revoked nor expired, and
/// the role is still there. Long-lived streams ask now and then and end when it is not.
pub async fn still_allowed(
    ctx: &Context,
    actor: &Actor,
    project: &Project,
) -> Result<bool, ServiceError> {
    if actor.has_expired() {
        return Ok(false);
    }
    if let Identity::Token { id, .. } = &actor.identity
        && !store::tokens::token_is_live(&ctx.pool, *id).await?
    {
        return Ok(false);
    }
    Ok(role_on(ctx, actor, project).await?.is_some())
}

/// Platform-level operations (projects themselves, platform tokens).
pub fn require_platform_admin(actor: &Actor) -> Result<(), ServiceError> {
    if actor.is_platform_admin() {
        Ok(())
    } else {
        Err(ServiceError::Forbidden(
            "this needs the platform-admin role".into(),
        ))
    }
}

/// The projects the caller may see; `None` means all of them.
pub async fn visible_projects(
    ctx: &Context,
    actor: &Actor,
) -> Result<Option<Vec<Uuid>>, ServiceError> {
    if actor.is_platform_admin() {
        return Ok(None);
    }
    Ok(Some(match &actor.identity {
        Identity::Token { project_id, .. } => project_id.iter().copied().collect(),
        Identity::User {
            subject, groups, ..
        } => store::role_bindings::projects_of_subject(&ctx.pool, subject, groups).await?,
        Identity::System => Vec::new(),
    }))
}

/// Who the caller is, for `whoami`: a project token also says its project and role.
#[derive(Debug, Clone)]
pub struct CallerDescription {
    pub project: Option<String>,
    pub role: Option<&'static str>,
}

pub async fn describe_caller(
    ctx: &Context,
    actor: &Actor,
) -> Result<CallerDescription, ServiceError> {
    Ok(match &actor.identity {
        Identity::Token {
            project_id: Some(id),
            role,
            ..
        } => CallerDescription {
            project: store::projects::find_project_by_id(&ctx.pool, *id)
                .await?
                .map(|p| p.name),
            role: Some(role.as_str()),
        },
        Identity::Token { role, .. } => CallerDescription {
            project: None,
            role: Some(role.as_str()),
        },
        Identity::User { platform_admin, .. } => CallerDescription {
            project: None,
            role: platform_admin.then_some(TokenRole::PlatformAdmin.as_str()),
        },
        Identity::System => CallerDescription {
            project: None,
            role: None,
        },
    })
}
