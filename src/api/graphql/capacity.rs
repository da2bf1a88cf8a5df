//! GraphQL's view of GPU capacity, quotas and usage: the REST documents as typed objects.

use async_graphql::{InputObject, SimpleObject};
use chrono::{DateTime, NaiveDate, Utc};

use crate::domain;

/// The cluster's GPUs, as the worker last reported them.
#[derive(SimpleObject)]
pub struct Capacity {
    /// `null`: no worker has reported the cluster yet.
    pub observed_at: Option<DateTime<Utc>>,
    pub gpus: Vec<GpuCapacity>,
}

/// The GPUs of one resource name and product.
#[derive(SimpleObject)]
pub struct GpuCapacity {
    pub resource_name: String,
    pub product: Option<String>,
    pub nodes: i64,
    pub allocatable: i64,
    /// By every unfinished pod on those nodes.
    pub requested: i64,
    pub requested_by_modelplane: i64,
    /// On Ready, schedulable nodes.
    pub free: i64,
    /// What one replica can get now.
    pub largest_free_block: i64,
    /// What one replica can ever get.
    pub largest_node: i64,
    pub unavailable_nodes: Vec<UnavailableNode>,
}

#[derive(SimpleObject)]
pub struct UnavailableNode {
    pub name: String,
    /// `cordoned` or `not Ready`.
    pub reason: String,
}

impl From<domain::CapacityReport> for Capacity {
    fn from(r: domain::CapacityReport) -> Self {
        Capacity {
            observed_at: r.observed_at,
            gpus: r
                .gpus
                .into_iter()
                .map(|g| GpuCapacity {
                    resource_name: g.resource_name,
                    product: g.product,
                    nodes: g.nodes,
                    allocatable: g.allocatable,
                    requested: g.requested,
                    requested_by_modelplane: g.requested_by_modelplane,
                    free: g.free,
                    largest_free_block: g.largest_free_block,
                    largest_node: g.largest_node,
                    unavailable_nodes: g
                        .unavailable_nodes
                        .into_iter()
                        .map(|u| UnavailableNode {
                            name: u.name,
                            reason: u.reason,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// A project's limits next to what its specs ask for.
#[derive(SimpleObject)]
pub struct ProjectQuota {
    pub replicas: QuotaUse,
    pub gpus: Vec<GpuQuotaUse>,
    pub requested: Vec<GpuRequested>,
}

#[derive(SimpleObject)]
pub struct QuotaUse {
    /// `null`: no limit.
    pub limit: Option<i64>,
    pub used: i64,
}

#[derive(SimpleObject)]
pub struct GpuQuotaUse {
    pub resource_name: String,
    pub product: Option<String>,
    pub limit: i64,
    pub used: i64,
}

#[derive(SimpleObject)]
pub struct GpuRequested {
    pub resource_name: String,
    pub product: Option<String>,
    pub gpus: i64,
}

impl From<domain::ProjectQuota> for ProjectQuota {
    fn from(q: domain::ProjectQuota) -> Self {
        ProjectQuota {
            replicas: QuotaUse {
                limit: q.replicas.limit,
                used: q.replicas.used,
            },
            gpus: q
                .gpus
                .into_iter()
                .map(|g| GpuQuotaUse {
                    resource_name: g.resource_name,
                    product: g.product,
                    limit: g.limit,
                    used: g.used,
                })
                .collect(),
            requested: q
                .requested
                .into_iter()
                .map(|g| GpuRequested {
                    resource_name: g.resource_name,
                    product: g.product,
                    gpus: g.gpus,
                })
                .collect(),
        }
    }
}

/// A quota as `setQuota` takes it (REST's `QuotaSpec`).
#[derive(InputObject)]
pub struct QuotaInput {
    /// The most replicas the project's specs may ask for; `null`: no limit.
    pub replicas: Option<i64>,
    #[graphql(default)]
    pub gpus: Vec<GpuQuotaInput>,
}

#[derive(InputObject)]
pub struct GpuQuotaInput {
    pub resource_name: String,
    /// `null`: any product.
    pub product: Option<String>,
    pub limit: i64,
}

impl From<QuotaInput> for domain::QuotaSpec {
    fn from(q: QuotaInput) -> Self {
        domain::QuotaSpec {
            replicas: q.replicas,
            gpus: q
                .gpus
                .into_iter()
                .map(|g| domain::GpuQuota {
                    resource_name: g.resource_name,
                    product: g.product,
                    limit: g.limit,
                })
                .collect(),
        }
    }
}

/// GPU-hours of a project's ready replicas.
#[derive(SimpleObject)]
pub struct Usage {
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub gpu_hours: f64,
    /// Requests the project's model keys were let through.
    pub requests: i64,
    /// Model tokens of its deployments, from their serving metrics (an estimate).
    pub tokens: i64,
    pub deployments: Vec<DeploymentUsage>,
    pub daily: Vec<DailyUsage>,
}

#[derive(SimpleObject)]
pub struct DeploymentUsage {
    pub name: String,
    /// `prefill` or `decode` for one role of a disaggregated deployment; null otherwise.
    pub role: Option<String>,
    pub resource_name: String,
    pub product: Option<String>,
    pub gpu_hours: f64,
}

#[derive(SimpleObject)]
pub struct DailyUsage {
    pub date: NaiveDate,
    pub gpu_hours: f64,
    pub requests: i64,
    pub tokens: i64,
}

impl From<domain::UsageReport> for Usage {
    fn from(u: domain::UsageReport) -> Self {
        Usage {
            from: u.from,
            to: u.to,
            gpu_hours: u.gpu_hours,
            requests: u.requests,
            tokens: u.tokens,
            deployments: u
                .deployments
                .into_iter()
                .map(|d| DeploymentUsage {
                    name: d.name,
                    role: d.role,
                    resource_name: d.resource_name,
                    product: d.product,
                    gpu_hours: d.gpu_hours,
                })
                .collect(),
            daily: u
                .daily
                .into_iter()
                .map(|d| DailyUsage {
                    date: d.date,
                    gpu_hours: d.gpu_hours,
                    requests: d.requests,
                    tokens: d.tokens,
                })
                .collect(),
        }
    }
}
