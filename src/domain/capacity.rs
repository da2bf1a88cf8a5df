//! GPU capacity and quotas: what a spec asks of the cluster, whether the cluster's GPU
//! nodes can give it, and whether a project's quota allows it.
//!
//! Quotas count what the specs ask for (desired replicas x GPUs per replica, canaries
//! included), so they hold before any pod exists. The fit check counts what the nodes
//! have free now, as the worker last saw them.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::errors::FieldErrors;
use super::names::validate_label_value;
use super::serving::{ServingRole, ServingSpec};
use super::spec::check_extended_resource_name;

/// The largest quota limit (GPUs or replicas) a project can be given.
pub const MAX_QUOTA: i64 = 1_000_000;

/// The GPUs one replica asks for: a resource name, an optional product, a count per pod,
/// and the pods of one replica (more than one when it spans nodes; they are placed whole).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GpuShape {
    pub resource_name: String,
    pub product: Option<String>,
    pub per_pod: i64,
    pub pods_per_replica: i64,
}

impl GpuShape {
    /// The GPUs one pod of `serving` asks for (`None` when it asks for none), with the
    /// server's default resource name when the spec names none.
    pub fn of(serving: &ServingSpec, default_resource: &str) -> Option<Self> {
        if serving.gpus <= 0 {
            return None;
        }
        let gpu = serving.spec.resources.gpu.as_ref();
        Some(GpuShape {
            resource_name: gpu
                .and_then(|g| g.resource_name.clone())
                .unwrap_or_else(|| default_resource.to_owned()),
            product: gpu.and_then(|g| g.product.clone()),
            per_pod: i64::from(serving.gpus),
            pods_per_replica: i64::from(serving.nodes.max(1)),
        })
    }

    /// The GPUs of one whole replica.
    pub fn per_replica(&self) -> i64 {
        self.per_pod * self.pods_per_replica
    }
}

/// What one track (a deployment's stable pods, or its canary's) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrackDemand {
    pub replicas: i64,
    pub gpu: Option<GpuShape>,
    /// The nodes its pods may run on (`spec.scheduling.nodeSelector`; empty: any).
    pub node_selector: std::collections::BTreeMap<String, String>,
}

impl TrackDemand {
    /// What a spec asks for: one demand, or one per role of a disaggregated deployment
    /// (whose roles may ask for different GPUs per pod).
    pub fn all_of(serving: &ServingSpec, default_resource: &str) -> Vec<Self> {
        match &serving.roles {
            None => vec![Self::of(serving, default_resource)],
            Some(_) => ServingRole::ALL
                .into_iter()
                .map(|role| Self::of(&serving.for_role(role), default_resource))
                .collect(),
        }
    }

    pub fn of(serving: &ServingSpec, default_resource: &str) -> Self {
        TrackDemand {
            replicas: i64::from(serving.replicas),
            gpu: GpuShape::of(serving, default_resource),
            node_selector: serving.spec.scheduling.node_selector.clone(),
        }
    }
}

/// What a set of tracks asks for in all: replicas, and GPUs by resource name and product.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Demand {
    pub replicas: i64,
    pub gpus: BTreeMap<(String, Option<String>), i64>,
}

impl Demand {
    pub fn add(&mut self, track: &TrackDemand) {
        self.replicas += track.replicas;
        if let Some(gpu) = &track.gpu {
            *self
                .gpus
                .entry((gpu.resource_name.clone(), gpu.product.clone()))
                .or_default() += track.replicas * gpu.per_replica();
        }
    }

    pub fn remove(&mut self, track: &TrackDemand) {
        self.replicas -= track.replicas;
        if let Some(gpu) = &track.gpu {
            let key = (gpu.resource_name.clone(), gpu.product.clone());
            let left =
                self.gpus.get(&key).copied().unwrap_or(0) - track.replicas * gpu.per_replica();
            if left == 0 {
                self.gpus.remove(&key);
            } else {
                self.gpus.insert(key, left);
            }
        }
    }

    /// The GPUs a quota entry counts: of its resource name and, when it names one, its
    /// product.
    pub fn gpus_counted_by(&self, entry: &GpuQuota) -> i64 {
        self.gpus
            .iter()
            .filter(|((resource, product), _)| {
                *resource == entry.resource_name
                    && (entry.product.is_none() || *product == entry.product)
            })
            .map(|(_, n)| n)
            .sum()
    }
}

/// A project's quota as a platform admin sets it (`PUT …/quota`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct QuotaSpec {
    /// The most model-server replicas the project's specs may ask for (canaries included);
    /// `null`: no limit.
    #[serde(default)]
    pub replicas: Option<i64>,
    /// GPU limits, each for one resource name and, optionally, one product.
    #[serde(default)]
    pub gpus: Vec<GpuQuota>,
}

/// At most `limit` GPUs of `resourceName` (of `product` only, when given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuQuota {
    /// An extended resource name, e.g. `nvidia.com/gpu`.
    pub resource_name: String,
    /// Counts only deployments that ask for this product; `null`: every deployment
    /// asking for the resource, whatever its product.
    #[serde(default)]
    pub product: Option<String>,
    #[schema(minimum = 0)]
    pub limit: i64,
}

impl QuotaSpec {
    /// Checks every field, naming each problem.
    pub fn validate(&self) -> Result<(), FieldErrors> {
        let mut errors = FieldErrors::new();
        if let Some(replicas) = self.replicas
            && !(0..=MAX_QUOTA).contains(&replicas)
        {
            errors.push("replicas", format!("must be between 0 and {MAX_QUOTA}"));
        }
        let mut seen = HashSet::new();
        for (i, entry) in self.gpus.iter().enumerate() {
            let at = |field: &str| format!("gpus[{i}].{field}");
            errors.check(
                &at("resourceName"),
                check_extended_resource_name(&entry.resource_name),
            );
            if let Some(product) = &entry.product {
                if product.is_empty() {
                    errors.push(at("product"), "must not be empty; use null for any product");
                } else {
                    errors.check(&at("product"), validate_label_value(product));
                }
            }
            if !(0..=MAX_QUOTA).contains(&entry.limit) {
                errors.push(at("limit"), format!("must be between 0 and {MAX_QUOTA}"));
            }
            if !seen.insert((&entry.resource_name, &entry.product)) {
                errors.push(
                    at("resourceName"),
                    "names the same resource and product as an earlier entry",
                );
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// A change that would take a project past its quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaExceeded {
    /// The field of the request that asks for more (`spec.replicas`,
    /// `spec.resources.gpu.count`).
    pub field: &'static str,
    /// The quota's name, e.g. `replicas` or `nvidia.com/gpu (NVIDIA-A100-SXM4-80GB)`.
    pub quota: String,
    pub limit: i64,
    /// Asked for before the change, and after it.
    pub used: i64,
    pub requested: i64,
}

impl std::fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exceeds the project's {} quota: {} of {} in use, and this change would make it {}",
            self.quota, self.used, self.limit, self.requested
        )
    }
}

/// The name a GPU quota entry goes by in messages.
pub fn gpu_quota_name(resource: &str, product: Option<&str>) -> String {
    match product {
        Some(p) => format!("{resource} ({p})"),
        None => resource.to_owned(),
    }
}

/// Refuses a change that asks for more than the quota allows. A change that asks for no
/// more than before passes even above the limit (a lowered quota must not block scaling
/// down).
pub fn check_quota(
    quota: &QuotaSpec,
    before: &Demand,
    after: &Demand,
) -> Result<(), QuotaExceeded> {
    if let Some(limit) = quota.replicas
        && after.replicas > limit
        && after.replicas > before.replicas
    {
        return Err(QuotaExceeded {
            field: "spec.replicas",
            quota: "replicas".into(),
            limit,
            used: before.replicas,
            requested: after.replicas,
        });
    }
    for entry in &quota.gpus {
        let (was, will) = (before.gpus_counted_by(entry), after.gpus_counted_by(entry));
        if will > entry.limit && will > was {
            return Err(QuotaExceeded {
                field: "spec.resources.gpu.count",
                quota: gpu_quota_name(&entry.resource_name, entry.product.as_deref()),
                limit: entry.limit,
                used: was,
                requested: will,
            });
        }
    }
    Ok(())
}

/// One GPU node for one resource name, as the worker last saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuNode {
    pub name: String,
    pub resource_name: String,
    pub product: Option<String>,
    pub allocatable: i64,
    pub requested: i64,
    pub requested_by_modelplane: i64,
    pub ready: bool,
    pub schedulable: bool,
}

impl GpuNode {
    /// GPUs a new pod could be given here now.
    pub fn free(&self) -> i64 {
        if self.ready && self.schedulable {
            (self.allocatable - self.requested).max(0)
        } else {
            0
        }
    }

    fn offers(&self, shape: &GpuShape) -> bool {
        self.resource_name == shape.resource_name
            && (shape.product.is_none() || self.product == shape.product)
    }
}

/// `GET /capacity`: the cluster's GPUs, kept current by the worker.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReport {
    /// When a worker last reported the cluster's nodes; `null`: none has yet, and the
    /// capacity is unknown.
    pub observed_at: Option<DateTime<Utc>>,
    /// One entry per GPU resource name and product.
    pub gpus: Vec<GpuCapacity>,
}

/// The GPUs of one resource name and product.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuCapacity {
    pub resource_name: String,
    /// The nodes' product label; `null` when they carry none.
    pub product: Option<String>,
    /// Nodes offering it.
    pub nodes: i64,
    /// Allocatable on those nodes.
    pub allocatable: i64,
    /// Requested by every unfinished pod bound to them.
    pub requested: i64,
    /// Of which by modelplane's pods.
    pub requested_by_modelplane: i64,
    /// Free on Ready, schedulable nodes.
    pub free: i64,
    /// The most free on one Ready, schedulable node: what one replica can get now.
    pub largest_free_block: i64,
    /// The most allocatable on one node: what one replica can ever get.
    pub largest_node: i64,
    /// Nodes that take no new pods now.
    pub unavailable_nodes: Vec<UnavailableNode>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnavailableNode {
    pub name: String,
    /// `cordoned` or `not Ready`.
    pub reason: String,
}

impl CapacityReport {
    pub fn of(observed_at: Option<DateTime<Utc>>, nodes: &[GpuNode]) -> Self {
        let mut groups: BTreeMap<(&str, Option<&str>), GpuCapacity> = BTreeMap::new();
        for node in nodes {
            let entry = groups
                .entry((&node.resource_name, node.product.as_deref()))
                .or_insert_with(|| GpuCapacity {
                    resource_name: node.resource_name.clone(),
                    product: node.product.clone(),
                    nodes: 0,
                    allocatable: 0,
                    requested: 0,
                    requested_by_modelplane: 0,
                    free: 0,
                    largest_free_block: 0,
                    largest_node: 0,
                    unavailable_nodes: Vec::new(),
                });
            entry.nodes += 1;
            entry.allocatable += node.allocatable;
            entry.requested += node.requested;
            entry.requested_by_modelplane += node.requested_by_modelplane;
            entry.free += node.free();
            entry.largest_free_block = entry.largest_free_block.max(node.free());
            entry.largest_node = entry.largest_node.max(node.allocatable);
            let reason = if !node.ready {
                Some("not Ready")
            } else if !node.schedulable {
                Some("cordoned")
            } else {
                None
            };
            if let Some(reason) = reason {
                entry.unavailable_nodes.push(UnavailableNode {
                    name: node.name.clone(),
                    reason: reason.into(),
                });
            }
        }
        CapacityReport {
            observed_at,
            gpus: groups.into_values().collect(),
        }
    }
}

/// Whether `replicas` replicas of `shape` fit on `nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// Every replica fits now.
    Fits,
    /// No node offers this many GPUs of this kind, or (for a replica of several pods) the
    /// nodes together could never hold one whole replica: none will ever be scheduled.
    Never { largest_node: i64, pod_slots: i64 },
    /// Only `fits` of `replicas` fit on the GPUs free now.
    Partly {
        fits: i64,
        free: i64,
        ready_nodes: i64,
        largest_free_block: i64,
    },
}

/// Places `replicas` replicas of `shape` on the nodes' free GPUs (each node holds as many
/// pods as its free GPUs allow; a replica of several pods counts only when all of them
/// find room, as a LeaderWorkerSet group needs). `running` replicas of the same shape
/// already hold GPUs of their own and count as placed.
pub fn fit(nodes: &[GpuNode], shape: &GpuShape, replicas: i64, running: i64) -> Fit {
    let offering: Vec<&GpuNode> = nodes.iter().filter(|n| n.offers(shape)).collect();
    let largest_node = offering.iter().map(|n| n.allocatable).max().unwrap_or(0);
    let group = shape.pods_per_replica.max(1);
    let pod_slots: i64 = offering.iter().map(|n| n.allocatable / shape.per_pod).sum();
    if largest_node < shape.per_pod || pod_slots < group {
        return Fit::Never {
            largest_node,
            pod_slots,
        };
    }
    let free_slots: i64 = offering.iter().map(|n| n.free() / shape.per_pod).sum();
    let placeable = free_slots / group + running;
    if placeable >= replicas {
        return Fit::Fits;
    }
    Fit::Partly {
        fits: placeable,
        free: offering.iter().map(|n| n.free()).sum(),
        ready_nodes: offering.iter().filter(|n| n.ready && n.schedulable).count() as i64,
        largest_free_block: offering.iter().map(|n| n.free()).max().unwrap_or(0),
    }
}

/// `GET …/quota`: a project's limits next to what its specs ask for.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProjectQuota {
    pub replicas: QuotaUse,
    /// One per GPU quota entry; empty: no GPU quota.
    pub gpus: Vec<GpuQuotaUse>,
    /// Every GPU the project's specs ask for, by resource name and product.
    pub requested: Vec<GpuRequested>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuotaUse {
    /// `null`: no limit.
    pub limit: Option<i64>,
    pub used: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuQuotaUse {
    pub resource_name: String,
    pub product: Option<String>,
    pub limit: i64,
    pub used: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GpuRequested {
    pub resource_name: String,
    pub product: Option<String>,
    pub gpus: i64,
}

impl ProjectQuota {
    pub fn of(quota: Option<&QuotaSpec>, demand: &Demand) -> Self {
        ProjectQuota {
            replicas: QuotaUse {
                limit: quota.and_then(|q| q.replicas),
                used: demand.replicas,
            },
            gpus: quota
                .map(|q| {
                    q.gpus
                        .iter()
                        .map(|entry| GpuQuotaUse {
                            resource_name: entry.resource_name.clone(),
                            product: entry.product.clone(),
                            limit: entry.limit,
                            used: demand.gpus_counted_by(entry),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            requested: demand
                .gpus
                .iter()
                .map(|((resource, product), gpus)| GpuRequested {
                    resource_name: resource.clone(),
                    product: product.clone(),
                    gpus: *gpus,
                })
                .collect(),
        }
    }
}

/// `GET …/usage`: GPU-hours of a project's ready replicas, the requests its model keys
/// sent and its deployments' tokens, over whole days (UTC).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    /// First and last day, inclusive.
    pub from: NaiveDate,
    pub to: NaiveDate,
    pub gpu_hours: f64,
    /// Requests the project's model keys were let through (deployments with
    /// `access: keys`).
    pub requests: i64,
    /// Model tokens (prompt and generated) of its deployments, from their serving metrics
    /// (rates times time: an estimate as good as the readings).
    pub tokens: i64,
    /// Per deployment (and role, and GPU kind), most used first; deleted deployments
    /// included.
    pub deployments: Vec<DeploymentUsage>,
    /// One entry per day from `from` to `to`, days without use included.
    pub daily: Vec<DailyUsage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeploymentUsage {
    pub name: String,
    /// `prefill` or `decode`: one role of a disaggregated deployment (each role's GPUs are
    /// counted apart); `null` for any other deployment (its canary's GPUs included).
    pub role: Option<String>,
    pub resource_name: String,
    pub product: Option<String>,
    pub gpu_hours: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DailyUsage {
    pub date: NaiveDate,
    pub gpu_hours: f64,
    pub requests: i64,
    pub tokens: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, alloc: i64, requested: i64) -> GpuNode {
        GpuNode {
            name: name.into(),
            resource_name: "nvidia.com/gpu".into(),
            product: Some("A100".into()),
            allocatable: alloc,
            requested,
            requested_by_modelplane: requested,
            ready: true,
            schedulable: true,
        }
    }

    fn shape(n: i64, product: Option<&str>) -> GpuShape {
        GpuShape {
            resource_name: "nvidia.com/gpu".into(),
            product: product.map(Into::into),
            per_pod: n,
            pods_per_replica: 1,
        }
    }

    #[test]
    fn a_replica_larger_than_every_node_never_fits() {
        let nodes = [node("a", 8, 0), node("b", 8, 0)];
        assert_eq!(
            fit(&nodes, &shape(16, None), 1, 0),
            Fit::Never {
                largest_node: 8,
                pod_slots: 0
            }
        );
        // Another product's nodes do not count.
        assert_eq!(
            fit(&nodes, &shape(1, Some("H100")), 1, 0),
            Fit::Never {
                largest_node: 0,
                pod_slots: 0
            }
        );
    }

    #[test]
    fn a_replica_of_several_pods_is_placed_whole_or_not_at_all() {
        let group = |per_pod, pods| GpuShape {
            pods_per_replica: pods,
            ..shape(per_pod, None)
        };
        // Two 8-GPU nodes hold one 2-node replica; a second one needs two more nodes.
        let nodes = [node("a", 8, 0), node("b", 8, 0)];
        assert_eq!(fit(&nodes, &group(8, 2), 1, 0), Fit::Fits);
        assert_eq!(
            fit(&nodes, &group(8, 2), 2, 0),
            Fit::Partly {
                fits: 1,
                free: 16,
                ready_nodes: 2,
                largest_free_block: 8
            }
        );
        // Three free pod slots make one whole group of two, not one and a half.
        let nodes = [node("a", 8, 0), node("b", 8, 0), node("c", 8, 0)];
        assert!(matches!(
            fit(&nodes, &group(8, 2), 2, 0),
            Fit::Partly { fits: 1, .. }
        ));
        // A group larger than every node's slots together can never be placed.
        assert_eq!(
            fit(&nodes, &group(8, 4), 1, 0),
            Fit::Never {
                largest_node: 8,
                pod_slots: 3
            }
        );
        // The GPUs a quota counts are the whole group's.
        let mut d = Demand::default();
        d.add(&TrackDemand {
            replicas: 2,
            gpu: Some(group(8, 2)),
            node_selector: Default::default(),
        });
        assert_eq!(d.gpus.values().sum::<i64>(), 32);
    }

    #[test]
    fn replicas_are_placed_per_node_not_by_the_total() {
        // 6 + 6 GPUs free, but a 4-GPU replica fits once per node: 2, not 3.
        let nodes = [node("a", 8, 2), node("b", 8, 2)];
        assert_eq!(
            fit(&nodes, &shape(4, Some("A100")), 3, 0),
            Fit::Partly {
                fits: 2,
                free: 12,
                ready_nodes: 2,
                largest_free_block: 6
            }
        );
        assert_eq!(fit(&nodes, &shape(4, None), 3, 1), Fit::Fits);
    }

    #[test]
    fn cordoned_and_unready_nodes_have_nothing_free() {
        let mut cordoned = node("a", 8, 0);
        cordoned.schedulable = false;
        let mut down = node("b", 8, 0);
        down.ready = false;
        let report = CapacityReport::of(None, &[cordoned.clone(), down.clone(), node("c", 8, 3)]);
        let gpu = &report.gpus[0];
        assert_eq!(
            (gpu.nodes, gpu.allocatable, gpu.requested, gpu.free),
            (3, 24, 3, 5)
        );
        assert_eq!((gpu.largest_free_block, gpu.largest_node), (5, 8));
        let reasons: Vec<_> = gpu
            .unavailable_nodes
            .iter()
            .map(|u| u.reason.as_str())
            .collect();
        assert_eq!(reasons, ["cordoned", "not Ready"]);
    }

    fn demand(replicas: i64, gpus: i64, product: Option<&str>) -> Demand {
        let mut d = Demand::default();
        d.add(&TrackDemand {
            replicas,
            gpu: Some(shape(gpus, product)),
            node_selector: Default::default(),
        });
        d
    }

    #[test]
    fn a_quota_refuses_growth_past_its_limit_and_names_the_numbers() {
        let quota = QuotaSpec {
            replicas: None,
            gpus: vec![GpuQuota {
                resource_name: "nvidia.com/gpu".into(),
                product: None,
                limit: 8,
            }],
        };
        let err = check_quota(
            &quota,
            &demand(2, 2, Some("A100")),
            &demand(6, 2, Some("A100")),
        )
        .unwrap_err();
        assert_eq!((err.used, err.requested, err.limit), (4, 12, 8));
        assert_eq!(err.field, "spec.resources.gpu.count");
        assert!(
            err.to_string()
                .contains("nvidia.com/gpu quota: 4 of 8 in use")
        );
        // Within the limit, and shrinking while above it, both pass.
        assert!(check_quota(&quota, &demand(2, 2, None), &demand(4, 2, None)).is_ok());
        assert!(check_quota(&quota, &demand(8, 2, None), &demand(6, 2, None)).is_ok());
    }

    #[test]
    fn a_product_quota_counts_only_that_product() {
        let quota = QuotaSpec {
            replicas: Some(3),
            gpus: vec![GpuQuota {
                resource_name: "nvidia.com/gpu".into(),
                product: Some("H100".into()),
                limit: 1,
            }],
        };
        assert!(check_quota(&quota, &Demand::default(), &demand(2, 4, Some("A100"))).is_ok());
        let err = check_quota(&quota, &Demand::default(), &demand(4, 1, Some("A100"))).unwrap_err();
        assert_eq!(
            (err.quota.as_str(), err.field),
            ("replicas", "spec.replicas")
        );
    }

    #[test]
    fn quota_specs_name_every_bad_field() {
        let spec: QuotaSpec = serde_json::from_value(serde_json::json!({
            "replicas": -1,
            "gpus": [
                {"resourceName": "gpu", "limit": 1},
                {"resourceName": "nvidia.com/gpu", "product": "", "limit": -2},
                {"resourceName": "nvidia.com/gpu", "limit": 1},
                {"resourceName": "nvidia.com/gpu", "limit": 2}
            ]
        }))
        .unwrap();
        let fields: Vec<String> = spec
            .validate()
            .unwrap_err()
            .into_vec()
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "replicas",
                "gpus[0].resourceName",
                "gpus[1].product",
                "gpus[1].limit",
                "gpus[3].resourceName"
            ]
        );
    }
}
