//! `gateway_hostname`: the hostnames each Gateway answers for, as the worker last saw it.

use sqlx::{PgExecutor, PgPool};

/// Replaces what is known of `gateway` (`namespace/name`) with `hostnames`.
pub async fn replace_gateway_hostnames(
    pool: &PgPool,
    gateway: &str,
    hostnames: &[String],
) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query!("delete from gateway_hostname where gateway = $1", gateway)
        .execute(&mut *tx)
        .await?;
    sqlx::query!(
        "insert into gateway_hostname (gateway, hostname)
         select $1, h from unnest($2::text[]) as h on conflict do nothing",
        gateway,
        hostnames
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Forgets a Gateway that was deleted.
pub async fn delete_gateway_hostnames(pool: &PgPool, gateway: &str) -> Result<(), sqlx::Error> {
    sqlx::query!("delete from gateway_hostname where gateway = $1", gateway)
        .execute(pool)
        .await
        .map(|_| ())
}

/// The hostnames `gateway` answers for.
pub async fn hostnames_of_gateway(
    executor: impl PgExecutor<'_>,
    gateway: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar!(
        "select hostname from gateway_hostname where gateway = $1 order by hostname",
        gateway
    )
    .fetch_all(executor)
    .await
}
