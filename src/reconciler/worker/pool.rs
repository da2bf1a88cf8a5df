//! InferencePool mode's clean-up: the pool and its endpoint picker are removed once the
//! record no longer routes through a pool and the Gateway has accepted the route without it.

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};

use super::{Worker, deployment_ref};
use crate::domain::{Deployment, EventKind};
use crate::reconciler::cluster::ClusterError;
use crate::reconciler::desired::{InferencePool, picker_cluster_binding_name, picker_name};
use crate::reconciler::status::Observed;
use crate::store::deployments::ReconcileTarget;

impl Worker {
    /// Removes InferencePool mode's objects when the record no longer routes through a pool
    /// (switched to Service mode, or the Gateway went), once the Gateway has accepted the
    /// route that no longer names the pool.
    pub(super) async fn remove_pool(
        &self,
        target: &ReconcileTarget,
        record: &Deployment,
        observed: &mut Observed,
    ) -> Result<(), ClusterError> {
        let namespace = target.namespace.as_str();
        let picker = picker_name(&record.name);
        if !self.pool_objects_remain(namespace, record, &picker).await? {
            return Ok(());
        }
        let what = "InferencePool mode's objects (the pool and its endpoint picker)";
        if !self.may_remove(target, record, observed, what).await {
            return Ok(());
        }
        let ns = Some(namespace);
        let results = [
            self.cluster.delete::<InferencePool>(ns, &record.name).await,
            self.cluster.delete::<K8sDeployment>(ns, &picker).await,
            self.cluster.delete::<Service>(ns, &picker).await,
            self.cluster.delete::<RoleBinding>(ns, &picker).await,
            self.cluster.delete::<Role>(ns, &picker).await,
            self.cluster
                .delete::<ClusterRoleBinding>(
                    None,
                    &picker_cluster_binding_name(namespace, &record.name),
                )
                .await,
            self.cluster.delete::<ServiceAccount>(ns, &picker).await,
            self.cluster.delete::<ConfigMap>(ns, &picker).await,
        ];
        for result in results {
            match result {
                Ok(()) => {}
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => {}
                Err(err) => return Err(err),
            }
        }
        let message = "InferencePool mode's objects (the pool and its endpoint picker) removed: the route no longer uses them";
        self.timeline(target, EventKind::InferencePoolRemoved, message)
            .await;
        if let Some(regarding) = deployment_ref(observed.deployment.as_ref()) {
            self.events
                .normal(
                    &regarding,
                    "InferencePoolRemoved",
                    "RemoveInferencePool",
                    message,
                )
                .await;
        }
        Ok(())
    }

    /// Whether the record's InferencePool or its endpoint picker's Deployment is still there.
    async fn pool_objects_remain(
        &self,
        namespace: &str,
        record: &Deployment,
        picker: &str,
    ) -> Result<bool, ClusterError> {
        // Not known yet (the watch has not listed, or the kind is not served): ask only for a
        // record that was in InferencePool mode.
        let was_pool_mode = record
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "InferencePool");
        let pool = match self
            .seen
            .of::<InferencePool>()
            .and_then(|seen| seen.get(Some(namespace), &record.name))
        {
            Some(pool) => pool.is_some(),
            None if !was_pool_mode => false,
            None => match self
                .cluster
                .get::<InferencePool>(Some(namespace), &record.name)
                .await
            {
                Ok(pool) => pool.is_some(),
                Err(err) if err.api_status().is_some_and(|s| s.code == 404) => false,
                Err(err) => return Err(err),
            },
        };
        let picker_exists = self
            .seen
            .of::<K8sDeployment>()
            .and_then(|seen| seen.get(Some(namespace), picker))
            .is_some_and(|d| d.is_some());
        Ok(pool || picker_exists)
    }
}
