//! The reconciler: projects every deployment record into Kubernetes objects, keeps them
//! there, and reports what the cluster says back into the record's status.

pub mod adapters;
pub mod autoscaler;
pub mod cluster;
pub mod desired;
pub mod health;
pub mod inventory;
pub mod kube_events;
pub mod load;
pub mod seen;
pub mod status;
pub mod worker;
