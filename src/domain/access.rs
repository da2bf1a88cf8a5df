//! Roles and what they allow.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A role on one project. Ordered: each role allows everything the previous one does.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read deployments, their status, revisions and timeline.
    Viewer,
    /// Also create, change, scale, restart, roll back and delete deployments.
    Editor,
    /// Also manage the project's tokens and role bindings, and read its audit log.
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Editor => "editor",
            Self::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Self::Viewer),
            "editor" => Ok(Self::Editor),
            "admin" => Ok(Self::Admin),
            other => Err(format!(
                "`{other}` is not a role; use viewer, editor or admin"
            )),
        }
    }
}

/// The caller's effective role on one project, and where it comes from: what the API
/// will allow them there, so a client shows exactly the controls that will work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectAccess {
    pub project: String,
    /// How the caller appears in timelines and audit logs: `token:ci`, `user:alice`.
    pub name: String,
    pub role: Role,
    pub via: RoleSource,
}

/// Where a caller's role on a project comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RoleSource {
    /// A platform admin (token or OIDC group) is admin on every project.
    PlatformAdmin,
    /// A project token's own role.
    Token,
    /// The highest of the role bindings of the user and of their groups.
    RoleBinding,
}

/// What a token grants: a role on its project, or the platform-admin role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TokenRole {
    Viewer,
    Editor,
    Admin,
    /// Everything, on every project, including creating and deleting projects.
    PlatformAdmin,
}

impl TokenRole {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Viewer => "viewer",
            Self::Editor => "editor",
            Self::Admin => "admin",
            Self::PlatformAdmin => "platform-admin",
        }
    }

    /// The project role, or `None` for a platform-admin token.
    pub fn project_role(self) -> Option<Role> {
        match self {
            Self::Viewer => Some(Role::Viewer),
            Self::Editor => Some(Role::Editor),
            Self::Admin => Some(Role::Admin),
            Self::PlatformAdmin => None,
        }
    }
}

impl From<Role> for TokenRole {
    fn from(role: Role) -> Self {
        match role {
            Role::Viewer => Self::Viewer,
            Role::Editor => Self::Editor,
            Role::Admin => Self::Admin,
        }
    }
}

impl FromStr for TokenRole {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "platform-admin" => Ok(Self::PlatformAdmin),
            other => other.parse::<Role>().map(Self::from),
        }
    }
}

/// Whom a role binding names.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::EnumString,
    strum::Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum SubjectKind {
    /// Matched against the OIDC token's subject (username) claim.
    User,
    /// Matched against an entry of its groups claim.
    Group,
}

impl SubjectKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for TokenRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_by_what_they_allow() {
        assert!(Role::Viewer < Role::Editor && Role::Editor < Role::Admin);
        assert_eq!("editor".parse::<Role>(), Ok(Role::Editor));
        assert!("owner".parse::<Role>().is_err());
        assert_eq!(
            "platform-admin".parse::<TokenRole>(),
            Ok(TokenRole::PlatformAdmin)
        );
        assert_eq!(TokenRole::Admin.project_role(), Some(Role::Admin));
    }
}
