//! What health and metrics endpoints ask of the database.

use super::{Context, ServiceError};
use crate::store;

/// The database answers and every migration this build knows is applied.
pub async fn database_ready(ctx: &Context) -> Result<bool, ServiceError> {
    Ok(store::migrations_applied(&ctx.pool).await?)
}

/// Work items queued for the reconciler.
pub async fn queue_depth(ctx: &Context) -> Result<i64, ServiceError> {
    Ok(store::work_queue::count_queued(&ctx.pool).await?)
}
