//! Concurrent creates of deployments, committed together.
//!
//! Every create writes the change feed, whose rows are numbered in commit order: a create's
//! commit holds the feed's lock (and Postgres's NOTIFY lock) through its WAL flush, so creates
//! commit one at a time. Each hand-over wakes the next committer, and when the CPUs are busy
//! (with the API itself, say) that wake-up waits for a CPU: measured on the 2-core bench
//! machine, one busy process beside Postgres cut raw Postgres's creates from 3,338 to 2,126
//! per second, and two to 533.
//!
//! So creates that wait together share one transaction and one commit (see [`super::batch`]):
//! `create_deployment_records` runs each in its own subtransaction, so one that fails leaves
//! nothing and the others stand, after taking every lock the batch needs in the order every
//! other writer takes them (no deadlock). At low load a create is a batch of one.
//!
//! What stays true:
//! - each create gets its own outcome: written, its name taken, or its route held;
//! - a create that fails in the batch for any other reason, or whose batch statement failed
//!   (so rolled back), runs again alone, for its own answer or its own error; if that finds
//!   its name taken by its own id (it was written after all), it answers the record;
//! - when the batch's outcome is unknown (its connection was lost, or an answer could not be
//!   read), each create answers an error, as a lone create whose connection drops at COMMIT
//!   does; none runs again (it may have been written). No batch is given up while it may
//!   still commit: Postgres bounds its lock waits (`lock_timeout` on the function), as it
//!   bounds nothing for a lone create.

use std::sync::Arc;

use sqlx::types::Json;
use tokio::sync::oneshot;

use super::batch::{BatchWork, Batcher};
use super::hot::HotConnections;
use crate::domain::{Canary, DeploymentSpec, DeploymentStatus};
use crate::store::deployments::{
    CreateOutcome, CreatedRecord, NewDeployment, create_deployment_record, find_deployment,
};
use crate::store::routes::RouteSpace;

/// How many batches may be committing at once: one filling while the other flushes.
pub const IN_FLIGHT: usize = 2;

/// The most creates one transaction holds. Each is a subtransaction, and Postgres keeps at
/// most 64 per transaction in shared memory before every snapshot gets slower.
pub const MAX_BATCH: usize = 32;

/// Creates deployments, committing concurrent creates together; see the module docs.
pub struct DeploymentCreates {
    hot: Arc<HotConnections>,
    batcher: Batcher<Create>,
}

pub struct Create {
    /// `create_deployment_record`'s arguments, by name.
    item: serde_json::Value,
    answer: oneshot::Sender<Answer>,
}

enum Answer {
    Done(CreateOutcome),
    /// Not written: run alone, for its own answer or error.
    Alone,
    /// The batch's outcome is unknown, or no connection could be had.
    Failed(sqlx::Error),
}

impl DeploymentCreates {
    pub fn new(hot: Arc<HotConnections>) -> Arc<Self> {
        Arc::new(Self {
            hot,
            batcher: Batcher::new(IN_FLIGHT, MAX_BATCH),
        })
    }

    /// How many batch statements have run (for tests).
    pub fn statements(&self) -> u64 {
        self.batcher.batches()
    }

    /// Creates a deployment whose project's quota is checked by the call (see
    /// [`create_deployment_record`]; `NeedsAdmission` when the project has one).
    pub async fn create(
        self: &Arc<Self>,
        new: NewDeployment<'_>,
        space: &RouteSpace,
    ) -> Result<CreateOutcome, sqlx::Error> {
        let (answer, answered) = oneshot::channel();
        Batcher::submit(
            self,
            Create {
                item: item(&new, space),
                answer,
            },
        );
        match answered.await {
            Ok(Answer::Done(outcome)) => Ok(outcome),
            Ok(Answer::Failed(err)) => Err(err),
            // Not written, or the batch's task ended without answering (which may have been
            // after its commit: a name taken by this very create is the record).
            Ok(Answer::Alone) | Err(_) => {
                let mut conn = self.hot.acquire().await?;
                let outcome = match create_deployment_record(&mut *conn, new, space, true).await? {
                    CreateOutcome::NameTaken => {
                        match find_deployment(&mut *conn, new.project_id, new.name).await? {
                            Some(row) if row.id == new.id => CreateOutcome::Created(Box::new(row)),
                            _ => CreateOutcome::NameTaken,
                        }
                    }
                    outcome => outcome,
                };
                conn.reuse();
                Ok(outcome)
            }
        }
    }

    async fn commit(&self, batch: Vec<Create>) {
        metrics::histogram!(crate::metrics::DB_CREATES_PER_STATEMENT).record(batch.len() as f64);
        let mut conn = match self.hot.acquire().await {
            Ok(conn) => conn,
            Err(err @ (sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed)) => {
                for create in batch {
                    let _ = create.answer.send(Answer::Failed(copy_pool_error(&err)));
                }
                return;
            }
            // Opening a new connection failed: each create tries its own.
            Err(_) => return alone(batch),
        };
        let items = serde_json::Value::Array(batch.iter().map(|c| c.item.clone()).collect());
        match create_records(&mut conn, &items).await {
            Ok(rows) => {
                conn.reuse();
                let mut rows = rows.into_iter();
                for create in batch {
                    let answer = rows.next().unwrap_or_else(|| {
                        Answer::Failed(sqlx::Error::Protocol(
                            "create_deployment_records answered fewer rows than creates".into(),
                        ))
                    });
                    let _ = create.answer.send(answer);
                }
            }
            // Postgres answered an error: the statement, and so its transaction, rolled back.
            Err(sqlx::Error::Database(err)) => {
                tracing::warn!(error = %err, size = batch.len(), "batched create failed; creating one by one");
                alone(batch);
            }
            // Lost on the way, or unreadable: it may have committed.
            Err(err) => {
                tracing::warn!(error = %err, size = batch.len(), "batched create's outcome unknown");
                for create in batch {
                    let _ = create
                        .answer
                        .send(Answer::Failed(sqlx::Error::Protocol(format!(
                            "the create's outcome is unknown: {err}"
                        ))));
                }
            }
        }
    }
}

impl BatchWork for DeploymentCreates {
    type Item = Create;

    fn batcher(&self) -> &Batcher<Create> {
        &self.batcher
    }

    fn abandoned(create: &Create) -> bool {
        create.answer.is_closed()
    }

    async fn run(self: &Arc<Self>, batch: Vec<Create>) {
        self.commit(batch).await;
    }
}

/// Tells each create of a batch that wrote nothing to run alone.
fn alone(batch: Vec<Create>) {
    for create in batch {
        let _ = create.answer.send(Answer::Alone);
    }
}

/// The error is not `Clone`; these two carry nothing to copy.
fn copy_pool_error(err: &sqlx::Error) -> sqlx::Error {
    match err {
        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
        _ => sqlx::Error::PoolTimedOut,
    }
}

/// `create_deployment_record`'s arguments (quota checked), by name.
fn item(new: &NewDeployment<'_>, space: &RouteSpace) -> serde_json::Value {
    serde_json::json!({
        "new_id": new.id,
        "of_project": new.project_id,
        "new_name": new.name,
        "new_spec": new.spec,
        "new_spec_version": new.spec.spec_version,
        "new_labels": new.spec.labels,
        "new_engine": new.spec.engine.kind.as_str(),
        "new_phase": new.status.phase.as_str(),
        "new_status": new.status,
        "on_gateway": new.route.gateway,
        "on_hostname": new.route.hostname,
        "on_path": new.route.path_prefix,
        "route_space": space.space,
        "route_paths": space.paths,
        "path_and_ancestors": new.route.path_and_ancestors(),
        "event_message": new.message,
        "by_actor": new.actor,
        "new_trace_parent": new.trace_parent,
    })
}

/// Runs `create_deployment_records` (one transaction) and reads each item's answer, in order.
async fn create_records(
    conn: &mut sqlx::PgConnection,
    items: &serde_json::Value,
) -> Result<Vec<Answer>, sqlx::Error> {
    let records = sqlx::query_as!(
        CreatedRecord,
        r#"select r.outcome as "outcome!", r.error_code as "error_code?",
                  r.error_detail as "error_detail?",
                  (r.created).id as "id?", (r.created).project_id as "project_id?",
                  (r.created).name as "name?", (r.created).generation as "generation?",
                  (r.created).spec as "spec?: Json<DeploymentSpec>",
                  (r.created).status as "status?: Json<DeploymentStatus>",
                  (r.created).restarted_at as "restarted_at?",
                  (r.created).deletion_requested_at as "deletion_requested_at?",
                  (r.created).canary as "canary?: Json<Canary>",
                  (r.created).created_at as "created_at?", (r.created).updated_at as "updated_at?"
           from create_deployment_records($1) r
           order by r.item"#,
        items
    )
    .fetch_all(conn)
    .await?;
    Ok(records
        .into_iter()
        .map(|record| {
            // Failed in the batch for another reason (its subtransaction rolled back): alone,
            // it gets its own answer or error.
            let failed = record.outcome == "error";
            match record.outcome() {
                Ok(outcome) => Answer::Done(outcome),
                Err(_) if failed => Answer::Alone,
                // Anything else may be a written record that could not be read.
                Err(err) => Answer::Failed(err),
            }
        })
        .collect())
}
