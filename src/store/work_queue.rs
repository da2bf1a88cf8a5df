//! The `reconcile_work` table: Postgres as the reconciler's queue.
//!
//! Enqueuing is an upsert plus `pg_notify`, so a sleeping worker wakes as soon as the
//! surrounding transaction commits (notifications are delivered on commit). Workers
//! claim items with `FOR UPDATE SKIP LOCKED` and a lease: an item is held by one worker
//! at a time, and the lease of a worker that dies simply expires.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use tracing::instrument;
use uuid::Uuid;

/// The channel workers `LISTEN` on; the payload is the deployment id.
pub const NOTIFY_CHANNEL: &str = "modelplane_reconcile";

#[instrument(skip(db))]
pub async fn enqueue_reconcile(
    db: impl PgExecutor<'_>,
    deployment_id: Uuid,
    trace_parent: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        "with queued as (
             insert into reconcile_work (deployment_id, trace_parent) values ($1, $2)
             on conflict (deployment_id) do update
                 set run_after = now(), attempts = 0, enqueued_at = now(), claim_token = null,
                     trace_parent = coalesce(excluded.trace_parent, reconcile_work.trace_parent)
             returning deployment_id
         )
         select pg_notify('modelplane_reconcile', deployment_id::text) from queued",
        deployment_id,
        trace_parent,
    )
    .fetch_one(db)
    .await?;
    Ok(())
}

/// [`enqueue_reconcile`] for many records in one statement, waking the workers once.
///
/// A record already due and not claimed since it was queued is left as it is (a cluster
/// change arrives as several watch events, and each would otherwise rewrite the row): the
/// workers were woken when it was queued, and one that sleeps wakes by the earliest due
/// time anyway.
#[instrument(skip(db, deployment_ids), fields(count = deployment_ids.len()))]
pub async fn enqueue_reconciles(
    db: impl PgExecutor<'_>,
    deployment_ids: &[Uuid],
) -> Result<(), sqlx::Error> {
    sqlx::query!(
        r#"with queued as (
               insert into reconcile_work (deployment_id) select distinct unnest($1::uuid[])
               on conflict (deployment_id) do update
                   set run_after = now(), attempts = 0, enqueued_at = now(), claim_token = null
                   -- Already due and not claimed since it was queued: nothing to write.
                   where reconcile_work.claim_token is not null
                      or reconcile_work.run_after > now() or reconcile_work.attempts <> 0
               returning deployment_id
           )
           select pg_notify('modelplane_reconcile', 'batch') as "notified"
           where exists (select 1 from queued)"#,
        deployment_ids
    )
    .fetch_optional(db)
    .await?;
    Ok(())
}

/// Makes every record due now (the periodic safety net, a relist, the cluster back after an
/// outage), and wakes the workers. A record already queued keeps its attempt count but is
/// due now too: one backing off from an outage must not wait out its backoff once the
/// cluster answers. Returns how many records were not queued before.
#[instrument(skip(db))]
pub async fn enqueue_all(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    let queued = sqlx::query_scalar!(
        r#"with queued as (
               insert into reconcile_work (deployment_id)
               select id from model_deployment
               on conflict (deployment_id) do update
                   set run_after = now() where reconcile_work.run_after > now()
               returning (xmax = 0) as inserted
           )
           select (select count(*) from queued where inserted) as "count!"
           from pg_notify('modelplane_reconcile', 'all')"#
    )
    .fetch_one(db)
    .await?;
    Ok(queued)
}

/// Queues every record of one project (its namespace changed), and wakes the workers.
#[instrument(skip(db))]
pub async fn enqueue_project(db: impl PgExecutor<'_>, project: &str) -> Result<i64, sqlx::Error> {
    let queued = sqlx::query_scalar!(
        r#"with queued as (
               insert into reconcile_work (deployment_id)
               select d.id from model_deployment d join project p on p.id = d.project_id
               where p.name = $1
               on conflict (deployment_id) do nothing
               returning 1
           )
           select (select count(*) from queued) as "count!"
           from pg_notify('modelplane_reconcile', 'project')"#,
        project
    )
    .fetch_one(db)
    .await?;
    Ok(queued)
}

/// A claimed work item.
#[derive(Debug, Clone)]
pub struct Claim {
    pub deployment_id: Uuid,
    pub attempts: i32,
    pub claim_token: Uuid,
    /// When this claim's lease ends: tells it apart from a later claim of the same item by
    /// the same worker.
    pub lease_expires_at: DateTime<Utc>,
    /// The trace of the request that queued it, if traces are exported.
    pub trace_parent: Option<String>,
}

/// Claims up to `limit` due items that no live lease holds.
#[instrument(skip(db))]
pub async fn claim_work(
    db: impl PgExecutor<'_>,
    worker: &str,
    lease: Duration,
    limit: i64,
) -> Result<Vec<Claim>, sqlx::Error> {
    sqlx::query_as!(
        Claim,
        r#"update reconcile_work w
           set lease_owner = $1,
               lease_expires_at = now() + make_interval(secs => $2),
               attempts = w.attempts + 1,
               claim_token = gen_random_uuid()
           where w.deployment_id in (
               select deployment_id from reconcile_work
               where run_after <= now() and (lease_expires_at is null or lease_expires_at < now())
               order by run_after
               limit $3
               for update skip locked
           )
           returning w.deployment_id, w.attempts, w.claim_token as "claim_token!",
                     w.lease_expires_at as "lease_expires_at!", w.trace_parent"#,
        worker,
        lease.as_secs_f64(),
        limit
    )
    .fetch_all(db)
    .await
}

/// Ends a claim. With `again`, the item comes back after that delay; without, it is done.
/// If the record was re-enqueued while it was being worked on (the enqueue clears the
/// claim token), the item stays due and only the lease is released.
#[instrument(skip(pool))]
pub async fn finish_work(
    pool: &sqlx::PgPool,
    worker: &str,
    claim: &Claim,
    again: Option<Duration>,
    error: Option<&str>,
) -> Result<(), sqlx::Error> {
    let again = again.map(|d| d.as_secs_f64());
    // Done and unchanged since the claim (the usual case): the item goes, one statement.
    // Not one statement for both cases: the release below must see a re-enqueue that
    // committed while the delete waited for its row, which a single snapshot would not.
    if again.is_none() {
        let deleted = sqlx::query!(
            "delete from reconcile_work where deployment_id = $1 and claim_token = $2",
            claim.deployment_id,
            claim.claim_token,
        )
        .execute(pool)
        .await?;
        if deleted.rows_affected() == 1 {
            return Ok(());
        }
    }
    // Else the lease is released (a success resets the attempt count, so backoff reflects
    // consecutive failures only). When the item stays due (it was re-enqueued meanwhile),
    // the workers are woken: nothing else would before the lease's end.
    sqlx::query!(
        r#"with finished as (
               update reconcile_work
               set lease_owner = null, lease_expires_at = null, last_error = $4,
                   attempts = case when $4::text is null then 0 else attempts end,
                   run_after = case when claim_token = $2
                                    then now() + make_interval(secs => coalesce($3::float8, 0))
                                    else run_after end,
                   -- A retry is no longer part of the request's trace; a re-enqueue's is kept.
                   trace_parent = case when claim_token = $2 then null else trace_parent end,
                   claim_token = null
               where deployment_id = $1
                 and (claim_token = $2
                      or (claim_token is null and lease_owner = $5 and lease_expires_at = $6))
               returning run_after
           )
           select count(pg_notify('modelplane_reconcile', 'due')) as "woken!"
           from finished where run_after <= now()"#,
        claim.deployment_id,
        claim.claim_token,
        again,
        error,
        worker,
        claim.lease_expires_at,
    )
    .fetch_one(pool)
    .await?;
    Ok(())
}

/// Gives back every lease `worker` holds (at shutdown): the items are due again at once
/// for the other workers, who are woken. Returns how many were released.
#[instrument(skip(db))]
pub async fn release_leases(db: impl PgExecutor<'_>, worker: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar!(
        r#"with released as (
               update reconcile_work
               set lease_owner = null, lease_expires_at = null, claim_token = null,
                   run_after = least(run_after, now())
               where lease_owner = $1 and lease_expires_at > now()
               returning deployment_id
           )
           select count(*) as "released!"
           from released, (select pg_notify('modelplane_reconcile', 'due')) as woken"#,
        worker,
    )
    .fetch_one(db)
    .await
}

/// Vacuums the queue table. Every claim, finish and re-enqueue leaves a dead row version,
/// and the claim's index scan (oldest `run_after` first) walks over them before it finds a
/// live row: under a long burst the claim slowed from 0.1 ms to 0.45 ms per call (10,000
/// records) until something vacuumed. Autovacuum comes at most once a minute and may be
/// off; the worker calls this after every few thousand claims. `SKIP_LOCKED`: when another
/// worker is vacuuming it already, this returns at once.
#[instrument(skip(db))]
pub async fn vacuum_queue(db: impl PgExecutor<'_>) -> Result<(), sqlx::Error> {
    // The simple protocol: VACUUM cannot be prepared inside a transaction block.
    sqlx::raw_sql("vacuum (skip_locked) reconcile_work")
        .execute(db)
        .await?;
    Ok(())
}

/// The queue at a glance, read in one statement when a worker finds nothing to claim.
#[derive(Debug, Clone, Copy)]
pub struct QueueState {
    /// Number of queued items.
    pub depth: i64,
    /// Seconds since the oldest item was enqueued (0 when empty).
    pub oldest_age: f64,
    /// When the next item is due (its lease's end when claimed), if any.
    pub next_due: Option<DateTime<Utc>>,
}

#[instrument(skip(db))]
pub async fn queue_state(db: impl PgExecutor<'_>) -> Result<QueueState, sqlx::Error> {
    let row = sqlx::query!(
        r#"select count(*) as "depth!",
                  coalesce(extract(epoch from now() - min(enqueued_at)), 0)::float8 as "oldest!",
                  min(greatest(run_after, coalesce(lease_expires_at, run_after))) as next_due
           from reconcile_work"#
    )
    .fetch_one(db)
    .await?;
    Ok(QueueState {
        depth: row.depth,
        oldest_age: row.oldest,
        next_due: row.next_due,
    })
}

/// Number of queued items, for metrics and tests.
#[instrument(skip(db))]
pub async fn count_queued(db: impl PgExecutor<'_>) -> Result<i64, sqlx::Error> {
    Ok(queue_state(db).await?.depth)
}
