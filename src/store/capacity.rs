//! The `gpu_node`, `gpu_inventory` and `cluster_node` tables: the cluster's GPU nodes, and
//! every node's labels, as the worker last saw them.

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use tracing::instrument;

use crate::domain::GpuNode;

/// Replaces the inventory with `nodes` (rows that did not change are not written) and
/// stamps it as observed now by `worker`.
#[instrument(skip(pool, nodes), fields(nodes = nodes.len()))]
pub async fn replace_gpu_nodes(
    pool: &PgPool,
    worker: &str,
    nodes: &[GpuNode],
) -> Result<(), sqlx::Error> {
    let mut names = Vec::with_capacity(nodes.len());
    let mut resources = Vec::with_capacity(nodes.len());
    let mut products = Vec::with_capacity(nodes.len());
    let (mut allocatable, mut requested, mut ours) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ready, mut schedulable) = (Vec::new(), Vec::new());
    for n in nodes {
        names.push(n.name.clone());
        resources.push(n.resource_name.clone());
        products.push(n.product.clone().unwrap_or_default());
        allocatable.push(n.allocatable);
        requested.push(n.requested);
        ours.push(n.requested_by_modelplane);
        ready.push(n.ready);
        schedulable.push(n.schedulable);
    }
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "delete from gpu_node g
         where not exists (select 1 from unnest($1::text[], $2::text[]) as k(name, resource_name)
                           where k.name = g.name and k.resource_name = g.resource_name)",
        &names,
        &resources
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into gpu_node (name, resource_name, product, allocatable, requested,
                               requested_by_modelplane, ready, schedulable)
         select * from unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[],
                              $6::bigint[], $7::bool[], $8::bool[])
         on conflict (name, resource_name) do update set
             product = excluded.product, allocatable = excluded.allocatable,
             requested = excluded.requested,
             requested_by_modelplane = excluded.requested_by_modelplane,
             ready = excluded.ready, schedulable = excluded.schedulable, updated_at = now()
         where (gpu_node.product, gpu_node.allocatable, gpu_node.requested,
                gpu_node.requested_by_modelplane, gpu_node.ready, gpu_node.schedulable)
               is distinct from
               (excluded.product, excluded.allocatable, excluded.requested,
                excluded.requested_by_modelplane, excluded.ready, excluded.schedulable)",
        &names,
        &resources,
        &products,
        &allocatable,
        &requested,
        &ours,
        &ready,
        &schedulable
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into gpu_inventory (singleton, observed_at, worker) values (true, now(), $1)
         on conflict (singleton) do update set observed_at = now(), worker = excluded.worker",
        worker
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// When the inventory was last reported (`None`: never, capacity unknown) and its nodes,
/// only those offering `resource` when given. One round trip.
#[instrument(skip(db))]
pub async fn gpu_inventory(
    db: impl PgExecutor<'_>,
    resource: Option<&str>,
) -> Result<(Option<DateTime<Utc>>, Vec<GpuNode>), sqlx::Error> {
    let rows = sqlx::query!(
        r#"select i.observed_at, n.name as "name?", n.resource_name as "resource_name?",
                  n.product as "product?", n.allocatable as "allocatable?",
                  n.requested as "requested?", n.requested_by_modelplane as "ours?",
                  n.ready as "ready?", n.schedulable as "schedulable?"
           from gpu_inventory i
           left join gpu_node n on $1::text is null or n.resource_name = $1
           order by n.resource_name, n.product, n.name"#,
        resource
    )
    .fetch_all(db)
    .await?;
    let observed_at = rows.first().map(|r| r.observed_at);
    let nodes = rows
        .into_iter()
        .filter_map(|r| {
            Some(GpuNode {
                name: r.name?,
                resource_name: r.resource_name?,
                product: r.product.filter(|p| !p.is_empty()),
                allocatable: r.allocatable?,
                requested: r.requested?,
                requested_by_modelplane: r.ours?,
                ready: r.ready?,
                schedulable: r.schedulable?,
            })
        })
        .collect();
    Ok((observed_at, nodes))
}

/// Replaces the node labels with `nodes` (name, labels as a JSON object); rows that did not
/// change are not written.
#[instrument(skip(pool, nodes), fields(nodes = nodes.len()))]
pub async fn replace_node_labels(
    pool: &PgPool,
    nodes: &[(String, serde_json::Value)],
) -> Result<(), sqlx::Error> {
    let names: Vec<String> = nodes.iter().map(|(n, _)| n.clone()).collect();
    let labels: Vec<serde_json::Value> = nodes.iter().map(|(_, l)| l.clone()).collect();
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "delete from cluster_node where name <> all($1::text[])",
        &names
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query!(
        "insert into cluster_node (name, labels)
         select * from unnest($1::text[], $2::jsonb[])
         on conflict (name) do update set labels = excluded.labels, updated_at = now()
         where cluster_node.labels is distinct from excluded.labels",
        &names,
        &labels
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// How many nodes the worker last saw, and how many of them carry every label of
/// `selector` (a JSON object of strings). `None`: no node reported yet, nothing to check.
pub async fn nodes_matching(
    db: impl PgExecutor<'_>,
    selector: &serde_json::Value,
) -> Result<Option<(i64, i64)>, sqlx::Error> {
    let row = sqlx::query!(
        r#"select count(*) as "total!", count(*) filter (where labels @> $1) as "matching!"
           from cluster_node"#,
        selector
    )
    .fetch_one(db)
    .await?;
    Ok((row.total > 0).then_some((row.total, row.matching)))
}
