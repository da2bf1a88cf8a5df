//! API token use cases: create (the secret is shown once), list, revoke.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use chrono::{DateTime, Duration, Utc};
use rand::RngCore;
use sha2::{Digest, Sha256};
use tracing::instrument;
use uuid::Uuid;

use super::access::{authorize, require_platform_admin};
use super::projects::parse_uuid_cursor;
use super::{Actor, Context, Page, ServiceError, cursor, page_size};
use crate::domain::{ApiToken, FieldErrors, Project, Role, TokenRole};
use crate::store;
use crate::store::tokens::NewToken;

/// Every token starts with this, so leaked tokens are easy to recognise and scan for.
pub const TOKEN_PREFIX: &str = "mpt_";
const DEFAULT_LIFETIME_DAYS: i64 = 90;
const MAX_LIFETIME_DAYS: i64 = 3650;

/// Create an API token.
#[derive(Debug, Clone)]
pub struct CreateToken {
    /// 1 to 63 letters, digits, '.', '_' or '-'; unique among the live tokens.
    pub name: String,
    /// The role on the project: required for a project token (platform tokens are always
    /// `platform-admin` and take none).
    pub role: Option<Role>,
    /// When the token stops working; 90 days from now when `None`.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A new token and its secret. The secret is never shown again.
#[derive(Debug, Clone)]
pub struct CreatedToken {
    pub token: ApiToken,
    /// Used as `Authorization: Bearer <secret>`; only its hash is stored.
    pub secret: String,
}

/// SHA-256 of a secret, hex: what the database stores and authentication looks up.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// 32 random bytes, base64url, with the token prefix.
fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    // ThreadRng is a CSPRNG seeded from the operating system.
    rand::rng().fill_bytes(&mut bytes);
    format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
}

/// Creates a token on a project (project admins).
#[instrument(skip(ctx, actor, request), fields(token = %request.name))]
pub async fn create_project_token(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    request: CreateToken,
) -> Result<CreatedToken, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    let role = request
        .role
        .ok_or_else(|| FieldErrors::single("role", "is required: viewer, editor or admin"))?;
    create_token(ctx, actor, Some(&project), TokenRole::from(role), &request).await
}

/// Creates a platform-admin token (platform admins).
#[instrument(skip(ctx, actor, request), fields(token = %request.name))]
pub async fn create_platform_token(
    ctx: &Context,
    actor: &Actor,
    request: CreateToken,
) -> Result<CreatedToken, ServiceError> {
    require_platform_admin(actor)?;
    if request.role.is_some() {
        return Err(FieldErrors::single(
            "role",
            "platform tokens are always platform-admin; omit it",
        )
        .into());
    }
    create_token(ctx, actor, None, TokenRole::PlatformAdmin, &request).await
}

async fn create_token(
    ctx: &Context,
    actor: &Actor,
    project: Option<&Project>,
    role: TokenRole,
    request: &CreateToken,
) -> Result<CreatedToken, ServiceError> {
    let mut errors = FieldErrors::new();
    let name_ok = !request.name.is_empty()
        && request.name.len() <= 63
        && request
            .name
            .starts_with(|c: char| c.is_ascii_alphanumeric())
        && request
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !name_ok {
        errors.push(
            "name",
            "must be 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit",
        );
    }
    let now = Utc::now();
    let expires_at = request
        .expires_at
        .unwrap_or(now + Duration::days(DEFAULT_LIFETIME_DAYS));
    if expires_at <= now {
        errors.push("expiresAt", "must be in the future");
    } else if expires_at > now + Duration::days(MAX_LIFETIME_DAYS) {
        errors.push("expiresAt", "must be at most 10 years from now");
    }
    errors.finish(|| ())?;

    let secret = new_secret();
    let project_id = project.map(|p| p.id);
    let mut tx = ctx.pool.begin().await?;
    let token = store::tokens::insert_token(
        &mut *tx,
        NewToken {
            id: Uuid::now_v7(),
            name: &request.name,
            token_hash: &hash_secret(&secret),
            project_id,
            role: role.as_str(),
            created_by: actor.name(),
            expires_at: Some(expires_at),
        },
    )
    .await
    .map_err(|err| {
        if store::is_unique_violation(&err, "api_token_live_name_idx") {
            ServiceError::conflict(
                Some("name"),
                format!("a live token named `{}` already exists", request.name),
            )
        } else {
            err.into()
        }
    })?;
    let message = format!(
        "token `{}` created with role {}, expiring {}",
        token.name,
        role.as_str(),
        expires_at.to_rfc3339()
    );
    store::audit::insert_audit_event(
        &mut *tx,
        project_id,
        "TokenCreated",
        &format!("token/{}", token.name),
        &message,
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    tracing::info!(token_id = %token.id, role = role.as_str(), "token created");
    Ok(CreatedToken { token, secret })
}

#[instrument(skip(ctx, actor))]
pub async fn list_project_tokens(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    query: &ListTokens,
) -> Result<Page<ApiToken>, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    list(ctx, Some(project.id), query).await
}

/// Filters and paging for token lists.
#[derive(Debug, Clone, Default)]
pub struct ListTokens {
    /// Only tokens that still work: neither revoked nor expired.
    pub live: Option<bool>,
    /// Page size, 1 to 200 (default 50).
    pub limit: Option<i64>,
    /// `nextCursor` from the previous page, with the same filters.
    pub cursor: Option<String>,
}

async fn list(
    ctx: &Context,
    project_id: Option<Uuid>,
    query: &ListTokens,
) -> Result<Page<ApiToken>, ServiceError> {
    let limit = page_size(query.limit)?;
    let live = query.live.unwrap_or(false);
    let filters = format!("tokens|{project_id:?}|{live}");
    let before = match &query.cursor {
        Some(c) => Some(parse_uuid_cursor(&cursor::decode(c, &filters)?)?),
        None => None,
    };
    let rows = store::tokens::list_tokens(&ctx.pool, project_id, live, before, limit + 1).await?;
    Ok(cursor::page(rows, limit, &filters, |t| t.id.to_string()))
}

#[instrument(skip(ctx, actor))]
pub async fn list_platform_tokens(
    ctx: &Context,
    actor: &Actor,
    query: &ListTokens,
) -> Result<Page<ApiToken>, ServiceError> {
    require_platform_admin(actor)?;
    list(ctx, None, query).await
}

#[instrument(skip(ctx, actor))]
pub async fn revoke_project_token(
    ctx: &Context,
    actor: &Actor,
    project: &str,
    id: Uuid,
) -> Result<ApiToken, ServiceError> {
    let project = authorize(ctx, actor, project, Role::Admin).await?;
    revoke(ctx, actor, Some(project.id), id).await
}

#[instrument(skip(ctx, actor))]
pub async fn revoke_platform_token(
    ctx: &Context,
    actor: &Actor,
    id: Uuid,
) -> Result<ApiToken, ServiceError> {
    require_platform_admin(actor)?;
    revoke(ctx, actor, None, id).await
}

async fn revoke(
    ctx: &Context,
    actor: &Actor,
    project_id: Option<Uuid>,
    id: Uuid,
) -> Result<ApiToken, ServiceError> {
    let mut tx = ctx.pool.begin().await?;
    let token = store::tokens::revoke_token(&mut *tx, project_id, id)
        .await?
        .ok_or_else(|| ServiceError::not_found("live token", id.to_string()))?;
    store::audit::insert_audit_event(
        &mut *tx,
        project_id,
        "TokenRevoked",
        &format!("token/{}", token.name),
        &format!("token `{}` revoked", token.name),
        actor.name(),
    )
    .await?;
    tx.commit().await?;
    // This process at once; the others through the access trigger's notification.
    ctx.access.invalidate();
    tracing::info!(token_id = %token.id, "token revoked");
    Ok(token)
}

/// Stores the configured bootstrap token as a platform-admin token on first start.
pub async fn ensure_bootstrap_token(ctx: &Context, secret: &str) -> Result<bool, ServiceError> {
    let created =
        store::tokens::insert_bootstrap_token(&ctx.pool, Uuid::now_v7(), &hash_secret(secret))
            .await?;
    if created {
        store::audit::insert_audit_event(
            &ctx.pool,
            None,
            "TokenCreated",
            "token/bootstrap",
            "bootstrap platform-admin token created from configuration",
            "configuration",
        )
        .await?;
    }
    Ok(created)
}

/// What a presented API token turned out to be.
#[derive(Debug)]
pub enum TokenCheck {
    Valid(Actor),
    /// Unknown, revoked or expired: the reason, safe to tell the caller.
    Rejected(&'static str),
}

/// Looks a presented token up by its hash (in the access cache first); a live one is
/// recorded as used.
pub async fn check_token(ctx: &Context, secret: &str) -> Result<TokenCheck, ServiceError> {
    let hash = hash_secret(secret);
    let grant = match ctx.access.token(&hash) {
        Some(grant) => grant,
        None => {
            let ticket = ctx.access.ticket();
            let Some(grant) = store::tokens::find_token_by_hash(&ctx.pool, &hash).await? else {
                return Ok(TokenCheck::Rejected("the token is not valid"));
            };
            ctx.access.store_token(ticket, &hash, &grant);
            grant
        }
    };
    if grant.revoked_at.is_some() {
        return Ok(TokenCheck::Rejected("the token was revoked"));
    }
    if grant.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Ok(TokenCheck::Rejected("the token has expired"));
    }
    // Use is recorded at most once a minute: most requests skip the write's round trip.
    let now = Utc::now();
    if grant
        .last_used_at
        .is_none_or(|at| at < now - chrono::Duration::minutes(1))
    {
        store::tokens::touch_token(&ctx.pool, grant.id).await?;
        ctx.access.token_used(&hash, now);
    }
    Ok(TokenCheck::Valid(Actor::token(
        grant.id,
        &grant.name,
        grant.project_id,
        grant.role,
    )))
}
