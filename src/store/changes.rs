//! The `deployment_change` feed: rows are written by triggers (see the migration), read here.

use std::time::Duration;

use sqlx::postgres::PgListener;
use sqlx::{PgExecutor, PgPool};
use tracing::instrument;
use uuid::Uuid;

use super::text::Text;
use crate::domain::{Change, ChangeKind};

/// The channel the triggers `NOTIFY` with a new sequence number.
pub const CHANNEL: &str = "modelplane_changes";

/// A `LISTEN` connection to [`CHANNEL`] and to the activator's
/// [`SERVING_CHANNEL`](super::autoscaling::SERVING_CHANNEL): one connection per process.
pub async fn listen(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener
        .listen_all([CHANNEL, super::autoscaling::SERVING_CHANNEL])
        .await?;
    Ok(listener)
}

/// A `LISTEN` connection to `channel`.
pub async fn listen_on(pool: &PgPool, channel: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(channel).await?;
    Ok(listener)
}

/// Changes after `after`, oldest first; of one project (and one deployment) when given.
#[instrument(skip(db))]
pub async fn changes_after(
    db: impl PgExecutor<'_>,
    after: i64,
    project_id: Option<Uuid>,
    deployment_id: Option<Uuid>,
    limit: i64,
) -> Result<Vec<Change>, sqlx::Error> {
    sqlx::query_as!(
        Change,
        r#"select seq, project_id, deployment_id, kind as "kind: Text<ChangeKind>", event_id
           from deployment_change
           where seq > $1 and ($2::uuid is null or project_id = $2)
             and ($3::uuid is null or deployment_id = $3)
           order by seq
           limit $4"#,
        after,
        project_id,
        deployment_id,
        limit
    )
    .fetch_all(db)
    .await
}

/// The oldest sequence number still kept, and the newest (both `None` when the feed is empty).
pub async fn feed_bounds(
    db: impl PgExecutor<'_>,
) -> Result<(Option<i64>, Option<i64>), sqlx::Error> {
    let row =
        sqlx::query!(r#"select min(seq) as "oldest", max(seq) as "newest" from deployment_change"#)
            .fetch_one(db)
            .await?;
    Ok((row.oldest, row.newest))
}

/// Deletes changes older than `keep`; returns how many.
#[instrument(skip(db))]
pub async fn prune_changes(db: impl PgExecutor<'_>, keep: Duration) -> Result<u64, sqlx::Error> {
    let seconds = keep.as_secs_f64();
    let done = sqlx::query!(
        "delete from deployment_change where created_at < now() - make_interval(secs => $1)",
        seconds
    )
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}
