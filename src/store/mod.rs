//! All SQL lives here: one module per table or aggregate, functions named after their SQL.
//!
//! Functions take any executor (`&PgPool` or a transaction) so the service layer decides
//! what runs atomically. The batching and connection machinery that serves the busiest
//! paths is in [`throughput`] (re-exported here under its old paths).

pub mod audit;
pub mod autoscaling;
pub mod capacity;
pub mod changes;
pub mod deployments;
pub mod events;
pub mod gateways;
pub mod idempotency;
pub mod load;
pub mod model_keys;
pub mod projects;
pub mod quota;
pub mod revisions;
pub mod role_bindings;
pub mod routes;
pub mod text;
pub mod throughput;
pub mod tokens;
pub mod usage;
pub mod work_queue;

pub use throughput::{batch, creates, hot, lookups};

use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgConnection, PgPool, Postgres, Transaction};

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Opens a connection pool; slow statements are logged at `warn`.
pub async fn connect(database_url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = database_url.parse()?;
    let options = options
        .log_statements(tracing::log::LevelFilter::Debug)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1));
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // sqlx pings every connection it hands out by default: a second round trip for
        // each request (a get was ping + query). Only a connection that sat idle for a
        // while can have been cut without us seeing it; a busy one is proven by its last use.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= Duration::from_secs(1) {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect_with(options)
        .await
}

/// Begins a transaction for a spec change, which checks routes, in which every statement runs
/// on its generic plan (creates get the same from their function's `SET`, migration
/// `create_in_one_call`). Left to choose, Postgres re-planned the create statement on every
/// execution (it keeps custom plans when they look cheaper), about a third of its CPU per
/// create; the route lookups are probes of an index nothing else serves (migration
/// `route_key`), so the generic plan is right whatever the statistics. The setting rides on
/// BEGIN: no extra round trip, and it ends with the transaction.
pub async fn begin_route_write(
    conn: &mut PgConnection,
) -> Result<Transaction<'_, Postgres>, sqlx::Error> {
    conn.begin_with("begin; set local plan_cache_mode = force_generic_plan")
        .await
}

/// Applies pending migrations. sqlx holds a Postgres advisory lock while it does, so
/// several replicas starting at once apply each migration exactly once.
pub async fn migrate(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    MIGRATOR.run(pool).await
}

/// True when every embedded migration has been applied successfully.
pub async fn migrations_applied(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let applied: Option<i64> =
        sqlx::query_scalar("select max(version) from _sqlx_migrations where success")
            .fetch_one(pool)
            .await?;
    Ok(applied.unwrap_or(0) >= latest)
}

/// True when `err` is a unique-constraint violation of `constraint`.
pub fn is_unique_violation(err: &sqlx::Error, constraint: &str) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            db.is_unique_violation() && db.constraint() == Some(constraint)
        }
        _ => false,
    }
}
