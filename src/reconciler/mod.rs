//! The reconciler: projects every deployment record into Kubernetes objects.

pub mod desired;
