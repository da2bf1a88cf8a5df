//! Concurrent gets of single deployments, read from Postgres together.
//!
//! A get by project and name is one indexed row. What it costs is mostly the round trip
//! around that row: a send that wakes a Postgres backend, the statement's start and end,
//! the answer that wakes us again. Measured on the 2-core bench machine, one row per
//! statement cost Postgres about 88 µs per row; four rows per statement, about 35 µs.
//!
//! So when gets arrive faster than Postgres answers them, the ones waiting are read in one
//! call (`read_deployments`: the pairs joined with the unique key, on a plan kept for the
//! connection). Nobody waits for a batch to fill: a read starts at once while fewer than
//! [`IN_FLIGHT`] are running, and a batch is just what queued up while they ran (the way
//! group commit works). At low load every get is read alone, with the same statement as
//! before.
//!
//! What stays true:
//! - a batch's statement starts after each of its requests was queued, so it sees every
//!   write committed before the request arrived (read-your-writes, across API processes
//!   too);
//! - the reads run in their own task, so a request that is cancelled does not cancel the
//!   others' reads (and is not read at all if it went away before its batch started);
//! - a batch read that takes longer than [`BATCH_TIMEOUT`] is dropped with its connection,
//!   and its gets read alone: a stuck connection holds up one batch, not every get;
//! - if a batch's statement fails (or its task panics), each of its requests reads alone,
//!   so each gets its own answer or its own error; if no connection could be had in the
//!   pool's timeout, each gets that error at once rather than waiting as long again.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use uuid::Uuid;

use super::batch::{BatchWork, Batcher};
use super::hot::HotConnections;
use crate::store::deployments::{DeploymentRead, read_deployment};

/// How many batch reads may run at once. One: a read is a single index probe per get, so
/// the next batch waits little, and gathers everything that arrived meanwhile. On the bench
/// machine two at once made smaller batches: 0.41-0.49 of raw Postgres's gets against
/// 0.56-0.59 with one (2026-11-26; on a three times slower machine the day before, the two
/// were within the noise of each other).
pub const IN_FLIGHT: usize = 1;

/// The most gets one statement reads.
pub const MAX_BATCH: usize = 64;

/// How long a batch read may take before its gets read alone. A batch is at most 64 index
/// probes; one stuck connection must not hold up every get of the process.
pub const BATCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads deployments by project and name, batching concurrent reads; see the module docs.
pub struct DeploymentLookups {
    hot: Arc<HotConnections>,
    batcher: Batcher<Lookup>,
}

pub struct Lookup {
    project_id: Uuid,
    name: String,
    answer: oneshot::Sender<Answer>,
}

/// What a batch tells each of its requests.
enum Answer {
    /// The row, if it exists (boxed: a row is kilobytes, the other answers are not).
    Read(Option<Box<DeploymentRead>>),
    /// No connection could be had (the pool timed out or is closed): the request's own
    /// attempt would fail the same way, after as long again.
    NoConnection(sqlx::Error),
    /// The statement failed: the request reads alone, for its own answer or error.
    ReadAlone,
}

impl DeploymentLookups {
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

    /// The deployment `name` of project `project_id` as the API reads it, if there is one.
    pub async fn find(
        self: &Arc<Self>,
        project_id: Uuid,
        name: &str,
    ) -> Result<Option<DeploymentRead>, sqlx::Error> {
        let (answer, answered) = oneshot::channel();
        Batcher::submit(
            self,
            Lookup {
                project_id,
                name: name.to_owned(),
                answer,
            },
        );
        match answered.await {
            Ok(Answer::Read(row)) => Ok(row.map(|row| *row)),
            Ok(Answer::NoConnection(err)) => Err(err),
            // The statement failed, or the batch's task ended without answering.
            Ok(Answer::ReadAlone) | Err(_) => {
                let mut conn = self.hot.acquire().await?;
                let row = read_deployment(&mut *conn, project_id, name).await?;
                conn.reuse();
                Ok(row)
            }
        }
    }

    /// Reads one batch and answers each of its requests.
    async fn read(&self, batch: Vec<Lookup>) {
        metrics::histogram!(crate::metrics::DB_LOOKUPS_PER_STATEMENT).record(batch.len() as f64);
        let fetched = tokio::time::timeout(BATCH_TIMEOUT, self.fetch(&batch))
            .await
            // Its connection is dropped with the read, not kept: sqlx takes it back once the
            // statement has ended (a read commits nothing).
            .unwrap_or(Err(Failure::TimedOut));
        match fetched {
            Ok(rows) => {
                let mut rows: Vec<Option<DeploymentRead>> = rows.into_iter().map(Some).collect();
                let mut batch = batch.into_iter();
                while let Some(lookup) = batch.next() {
                    let slot = rows.iter_mut().find(|r| {
                        r.as_ref().is_some_and(|r| {
                            r.row.project_id == lookup.project_id && r.row.name == lookup.name
                        })
                    });
                    // A row is kilobytes of decoded spec: moved to its request, copied only
                    // when a later request of the batch asks for the same one.
                    let asked_again = batch
                        .as_slice()
                        .iter()
                        .any(|l| l.project_id == lookup.project_id && l.name == lookup.name);
                    let row = slot.and_then(|slot| {
                        if asked_again {
                            slot.clone()
                        } else {
                            slot.take()
                        }
                    });
                    // A request that went away does not take its answer.
                    let _ = lookup.answer.send(Answer::Read(row.map(Box::new)));
                }
            }
            Err(Failure::NoConnection(err)) => {
                for lookup in batch {
                    // The error is not `Clone`; these two carry nothing to copy.
                    let copy = match &err {
                        sqlx::Error::PoolClosed => sqlx::Error::PoolClosed,
                        _ => sqlx::Error::PoolTimedOut,
                    };
                    let _ = lookup.answer.send(Answer::NoConnection(copy));
                }
            }
            Err(Failure::Statement(err)) => {
                tracing::warn!(error = %err, size = batch.len(), "batched deployment read failed; reading one by one");
                read_alone(batch);
            }
            Err(Failure::TimedOut) => {
                tracing::warn!(timeout = ?BATCH_TIMEOUT, size = batch.len(), "batched deployment read timed out; reading one by one");
                read_alone(batch);
            }
        }
    }

    async fn fetch(&self, batch: &[Lookup]) -> Result<Vec<DeploymentRead>, Failure> {
        let mut conn = self.hot.acquire().await.map_err(|err| match err {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => Failure::NoConnection(err),
            // Opening a new connection failed: each request tries its own.
            other => Failure::Statement(other),
        })?;
        let rows = if let [one] = batch {
            read_deployment(&mut *conn, one.project_id, &one.name)
                .await
                .map_err(Failure::Statement)?
                .into_iter()
                .collect()
        } else {
            let projects: Vec<Uuid> = batch.iter().map(|l| l.project_id).collect();
            let names: Vec<String> = batch.iter().map(|l| l.name.clone()).collect();
            find_deployments(&mut conn, &projects, &names)
                .await
                .map_err(Failure::Statement)?
        };
        conn.reuse();
        Ok(rows)
    }
}

/// Why a batch was not read.
enum Failure {
    NoConnection(sqlx::Error),
    Statement(sqlx::Error),
    TimedOut,
}

/// The deployments named by the pairs `(projects[i], names[i])` that exist, in no order:
/// one call of `read_deployments` (migration `read_deployments`, which reads the columns of
/// [`deployment_read_columns!`](crate::deployment_read_columns) on a plan kept for the
/// connection).
async fn find_deployments(
    conn: &mut sqlx::PgConnection,
    projects: &[Uuid],
    names: &[String],
) -> Result<Vec<DeploymentRead>, sqlx::Error> {
    sqlx::query_as("select * from read_deployments($1, $2)")
        .bind(projects)
        .bind(names)
        .fetch_all(conn)
        .await
}

/// Tells each request of a batch that was not read to read alone.
fn read_alone(batch: Vec<Lookup>) {
    for lookup in batch {
        let _ = lookup.answer.send(Answer::ReadAlone);
    }
}

impl BatchWork for DeploymentLookups {
    type Item = Lookup;

    fn batcher(&self) -> &Batcher<Lookup> {
        &self.batcher
    }

    fn abandoned(lookup: &Lookup) -> bool {
        lookup.answer.is_closed()
    }

    async fn run(self: &Arc<Self>, batch: Vec<Lookup>) {
        self.read(batch).await;
    }
}
