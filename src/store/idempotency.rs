//! The `idempotency_key` table: responses remembered per (project, caller, key) for 24 hours.

use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

/// A response remembered for a key.
#[derive(Debug, Clone)]
pub struct StoredResponse {
    pub request_hash: String,
    pub response_status: Option<i32>,
    pub response_body: Option<serde_json::Value>,
}

/// Claims a key for this request; `false` when it is already taken (then read it with
/// [`find_idempotency_key`]). A concurrent request with the same key blocks on the
/// unique index until the first one commits, then sees it as taken.
#[instrument(skip(db, request_hash))]
pub async fn claim_idempotency_key(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    caller: &str,
    key: &str,
    request_hash: &str,
) -> Result<bool, sqlx::Error> {
    // A key older than 24 hours is forgotten: it is claimed again as if it were new.
    let claimed = sqlx::query_scalar!(
        r#"insert into idempotency_key (project_id, caller, key, request_hash)
           values ($1, $2, $3, $4)
           on conflict (project_id, caller, key) do update
               set request_hash = excluded.request_hash, response_status = null,
                   response_body = null, created_at = now()
               where idempotency_key.created_at < now() - interval '24 hours'
           returning true as "claimed!""#,
        project_id,
        caller,
        key,
        request_hash
    )
    .fetch_optional(db)
    .await?;
    Ok(claimed.is_some())
}

#[instrument(skip(db))]
pub async fn find_idempotency_key(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    caller: &str,
    key: &str,
) -> Result<Option<StoredResponse>, sqlx::Error> {
    sqlx::query_as!(
        StoredResponse,
        "select request_hash, response_status, response_body from idempotency_key
         where project_id = $1 and caller = $2 and key = $3",
        project_id,
        caller,
        key
    )
    .fetch_optional(db)
    .await
}

#[instrument(skip(db, body))]
pub async fn save_idempotent_response(
    db: impl PgExecutor<'_>,
    project_id: Uuid,
    caller: &str,
    key: &str,
    status: i32,
    body: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "update idempotency_key set response_status = $4, response_body = $5
         where project_id = $1 and caller = $2 and key = $3",
        project_id,
        caller,
        key,
        status,
        body
    )
    .execute(db)
    .await?;
    Ok(())
}
