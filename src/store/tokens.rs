//! The `api_token` table. Secrets are stored only as SHA-256 hashes.

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

use super::text::Text;
use crate::domain::{ApiToken, TokenRole};

/// What authentication needs to know about a live token.
#[derive(Debug, Clone)]
pub struct TokenGrant {
    pub id: Uuid,
    pub name: String,
    pub project_id: Option<Uuid>,
    pub role: TokenRole,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// A new token's fields, for [`insert_token`].
pub struct NewToken<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub token_hash: &'a str,
    pub project_id: Option<Uuid>,
    pub role: &'a str,
    pub created_by: &'a str,
    pub expires_at: Option<DateTime<Utc>>,
}

#[instrument(skip(db, token), fields(token_id = %token.id, name = token.name))]
pub async fn insert_token(
    db: impl PgExecutor<'_>,
    token: NewToken<'_>,
) -> Result<ApiToken, sqlx::Error> {
    sqlx::query_as!(
        ApiToken,
        r#"insert into api_token (id, name, token_hash, project_id, role, created_by, expires_at)
           values ($1, $2, $3, $4, $5, $6, $7)
           returning id, name, (select name from project where id = $4) as "project?",
                     role as "role: Text<TokenRole>", created_by, created_at, expires_at,
                     revoked_at, last_used_at"#,
        token.id,
        token.name,
        token.token_hash,
        token.project_id,
        token.role,
        token.created_by,
        token.expires_at
    )
    .fetch_one(db)
    .await
}

/// Inserts the configured bootstrap platform-admin token, unless its hash is already known
/// (so a revoked bootstrap token stays revoked) or a live platform-admin token exists.
#[instrument(skip(db, token_hash))]
pub async fn insert_bootstrap_token(
    db: impl PgExecutor<'_>,
    id: Uuid,
    token_hash: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query!(
        "insert into api_token (id, name, token_hash, project_id, role, created_by)
         select $1, 'bootstrap', $2, null, 'platform-admin', 'configuration'
         where not exists (
             select 1 from api_token
             where role = 'platform-admin' and revoked_at is null
               and (expires_at is null or expires_at > now())
         )
         on conflict do nothing",
        id,
        token_hash
    )
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

#[instrument(skip_all)]
pub async fn find_token_by_hash(
    db: impl PgExecutor<'_>,
    token_hash: &str,
) -> Result<Option<TokenGrant>, sqlx::Error> {
    sqlx::query_as!(
        TokenGrant,
        r#"select id, name, project_id, role as "role: Text<TokenRole>", expires_at, revoked_at,
                  last_used_at
           from api_token where token_hash = $1"#,
        token_hash
    )
    .fetch_optional(db)
    .await
}

/// Records use at most once a minute, so authentication does not write on every request.
#[instrument(skip(db))]
pub async fn touch_token(db: impl PgExecutor<'_>, id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update api_token set last_used_at = now()
         where id = $1 and (last_used_at is null or last_used_at < now() - interval '1 minute')",
        id
    )
    .execute(db)
    .await?;
    Ok(())
}

/// Tokens of a project (or, with `None`, the platform's), newest first.
#[instrument(skip(db))]
pub async fn list_tokens(
    db: impl PgExecutor<'_>,
    project_id: Option<Uuid>,
    live_only: bool,
    before: Option<Uuid>,
    limit: i64,
) -> Result<Vec<ApiToken>, sqlx::Error> {
    sqlx::query_as!(
        ApiToken,
        r#"select t.id, t.name, p.name as "project?", t.role as "role: Text<TokenRole>",
                  t.created_by, t.created_at,
                  t.expires_at, t.revoked_at, t.last_used_at
           from api_token t left join project p on p.id = t.project_id
           where t.project_id is not distinct from $1
             and (not $2 or (t.revoked_at is null and (t.expires_at is null or t.expires_at > now())))
             and ($3::uuid is null or t.id < $3)
           order by t.id desc
           limit $4"#,
        project_id,
        live_only,
        before,
        limit
    )
    .fetch_all(db)
    .await
}

/// Revokes a live token of the given project (or platform); returns it when it was live.
#[instrument(skip(db))]
pub async fn revoke_token(
    db: impl PgExecutor<'_>,
    project_id: Option<Uuid>,
    id: Uuid,
) -> Result<Option<ApiToken>, sqlx::Error> {
    sqlx::query_as!(
        ApiToken,
        r#"update api_token t set revoked_at = now()
           where t.id = $2 and t.project_id is not distinct from $1 and t.revoked_at is null
           returning t.id, t.name, (select name from project where id = t.project_id) as "project?",
                     t.role as "role: Text<TokenRole>", t.created_by, t.created_at, t.expires_at,
                     t.revoked_at, t.last_used_at"#,
        project_id,
        id
    )
    .fetch_optional(db)
    .await
}

/// Whether the token `id` is still live (not revoked, not expired).
#[instrument(skip(db))]
pub async fn token_is_live(db: impl PgExecutor<'_>, id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar!(
        r#"select exists (select 1 from api_token where id = $1 and revoked_at is null
                          and (expires_at is null or expires_at > now())) as "live!""#,
        id
    )
    .fetch_one(db)
    .await
}
