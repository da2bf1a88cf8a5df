//! What every benchmark needs: a scratch database of its own on the server `DATABASE_URL`
//! names, migrated, and dropped at the end.

use sqlx::{Connection, PgConnection, PgPool};

pub struct ScratchDatabase {
    pub name: String,
    pub pool: PgPool,
    admin: PgConnection,
}

impl ScratchDatabase {
    /// Creates `{prefix}_{pid}` and applies the migrations.
    pub async fn create(prefix: &str) -> Self {
        let base = std::env::var("DATABASE_URL").expect("DATABASE_URL names a Postgres server");
        let server = base
            .rsplit_once('/')
            .map_or(base.as_str(), |(s, _)| s)
            .to_owned();
        let name = format!("{prefix}_{}", std::process::id());
        let mut admin = PgConnection::connect(&format!("{server}/postgres"))
            .await
            .unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let pool = PgPool::connect(&format!("{server}/{name}")).await.unwrap();
        modelplane::store::migrate(&pool).await.unwrap();
        Self { name, pool, admin }
    }

    /// Closes the pool and drops the database.
    pub async fn drop(mut self) {
        self.pool.close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "drop database {} with (force)",
            self.name
        )))
        .execute(&mut self.admin)
        .await
        .unwrap();
    }
}
