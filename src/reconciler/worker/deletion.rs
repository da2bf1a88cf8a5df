//! Deletion: a deleted record's objects go (by its id label) before the record does;
//! objects whose record is gone (orphans) and the namespaces of deleted projects go too.

use std::time::Duration;

use gateway_api::experimental::httproutes::HttpRoute;
use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use uuid::Uuid;

use super::{Outcome, Worker, record_id};
use crate::domain::EventKind;
use crate::reconciler::cluster::{ClusterError, Object};
use crate::reconciler::desired::{
    InferencePool, LABEL_DEPLOYMENT_ID, LABEL_INSTALLATION, LABEL_MANAGED_BY,
    LABEL_NAMESPACE_ADOPTED, LABEL_PROJECT, LeaderWorkerSet,
};
use crate::store;
use crate::store::deployments::ReconcileTarget;

impl Worker {
    /// For an id with no record (or a deleted project's): deletes whatever is still
    /// labelled with it, and the namespaces of projects that are gone.
    pub(super) async fn collect_gone_record(&self, id: Uuid) -> Result<Outcome, ClusterError> {
        self.delete_objects(id, None).await?;
        self.collect_project_namespaces().await?;
        Ok(Outcome::Done)
    }

    /// Deletes every object with the record's id label; removes the record once none is left.
    pub(super) async fn finish_deletion(
        &self,
        target: &ReconcileTarget,
    ) -> Result<Outcome, ClusterError> {
        let id = target.row.id;
        let remaining = self.delete_objects(id, Some(&target.namespace)).await?;
        if remaining > 0 {
            let mut status = target.row.status.0.clone();
            status.message = format!("deleting: {remaining} Kubernetes object(s) still to go");
            if status != target.row.status.0 {
                store::deployments::update_status(
                    &self.pool,
                    id,
                    target.row.generation,
                    &status,
                    None,
                )
                .await?;
            }
            return Ok(Outcome::Again(Duration::from_secs(1)));
        }
        self.timeline(
            target,
            EventKind::Deleted,
            "every Kubernetes object removed; record deleted",
        )
        .await;
        // Its pods are gone: whatever GPU time was still open ends now.
        store::usage::record_held(&self.pool, id, &target.row.name, &[]).await?;
        store::deployments::delete_deployment_record(&self.pool, id).await?;
        tracing::info!(deployment_id = %id, "deployment deleted");
        Ok(Outcome::Done)
    }

    /// Deletes the objects labelled with `id`; returns how many objects (pods and replica
    /// sets included) still carry the label.
    async fn delete_objects(
        &self,
        id: Uuid,
        namespace: Option<&str>,
    ) -> Result<usize, ClusterError> {
        let selector = format!(
            "{LABEL_DEPLOYMENT_ID}={id},{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        // Pods and replica sets go with their Deployment; they are only counted.
        Ok(self
            .delete_labelled::<HttpRoute>(namespace, &selector, true)
            .await?
            + self
                .delete_labelled::<InferencePool>(namespace, &selector, true)
                .await?
            // The endpoint picker's configuration and RBAC (InferencePool mode).
            + self
                .delete_labelled::<RoleBinding>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<Role>(namespace, &selector, true)
                .await?
            // Cluster-scoped: found by its labels cluster-wide.
            + self
                .delete_labelled::<ClusterRoleBinding>(None, &selector, true)
                .await?
            + self
                .delete_labelled::<ServiceAccount>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<ConfigMap>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<PodDisruptionBudget>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<Service>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<K8sDeployment>(namespace, &selector, true)
                .await?
            // A group's pods go with it (its headless Service too, which it owns).
            + self
                .delete_labelled::<LeaderWorkerSet>(namespace, &selector, true)
                .await?
            + self
                .delete_labelled::<ReplicaSet>(namespace, &selector, false)
                .await?
            + self
                .delete_labelled::<Pod>(namespace, &selector, false)
                .await?)
    }

    /// How many objects of kind `K` match `selector`, deleting them when `delete` (none
    /// when the cluster does not serve the kind).
    async fn delete_labelled<K: Object>(
        &self,
        namespace: Option<&str>,
        selector: &str,
        delete: bool,
    ) -> Result<usize, ClusterError> {
        let objects = match self.cluster.list::<K>(namespace, selector).await {
            Ok(objects) => objects,
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => return Ok(0),
            Err(err) => return Err(err),
        };
        if delete {
            for object in &objects {
                let meta = object.meta();
                let name = meta.name.as_deref().unwrap_or_default();
                self.cluster
                    .delete::<K>(meta.namespace.as_deref(), name)
                    .await?;
            }
        }
        Ok(objects.len())
    }

    /// Deletes the namespaces this installation created for projects that no longer exist;
    /// adopted namespaces survive their project.
    async fn collect_project_namespaces(&self) -> Result<(), ClusterError> {
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        for namespace in self.cluster.list::<Namespace>(None, &selector).await? {
            let meta = namespace.metadata;
            let labels = meta.labels.unwrap_or_default();
            let Some(project) = labels.get(LABEL_PROJECT).map(String::as_str) else {
                continue;
            };
            if meta.deletion_timestamp.is_some()
                || store::projects::project_exists(&self.pool, project).await?
            {
                continue;
            }
            let name = meta.name.as_deref().unwrap_or_default();
            if labels.get(LABEL_NAMESPACE_ADOPTED).map(String::as_str) == Some("true") {
                // Adopted: it stays, without modelplane's labels. Applying nothing as our
                // field manager removes the fields only we own.
                tracing::info!(
                    namespace = name,
                    project,
                    "releasing the adopted namespace of a deleted project"
                );
                let released = Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.to_owned()),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                };
                self.cluster.apply(&released).await?;
                continue;
            }
            tracing::info!(
                namespace = name,
                project,
                "deleting the namespace of a deleted project"
            );
            self.cluster.delete::<Namespace>(None, name).await?;
        }
        Ok(())
    }

    /// Deletes managed objects of this installation whose record no longer exists (run by
    /// the resync, see `queue.rs`).
    pub(super) async fn collect_orphans(&self) -> Result<(), ClusterError> {
        let selector = format!(
            "{LABEL_MANAGED_BY}=modelplane,{LABEL_INSTALLATION}={}",
            self.config.build.installation
        );
        let mut ids = Vec::new();
        ids.extend(self.labelled_ids::<K8sDeployment>(&selector).await?);
        ids.extend(self.labelled_ids::<LeaderWorkerSet>(&selector).await?);
        ids.extend(self.labelled_ids::<Service>(&selector).await?);
        ids.extend(self.labelled_ids::<HttpRoute>(&selector).await?);
        ids.extend(self.labelled_ids::<PodDisruptionBudget>(&selector).await?);
        ids.extend(self.labelled_ids::<ClusterRoleBinding>(&selector).await?);
        ids.sort();
        ids.dedup();
        self.collect_project_namespaces().await?;
        for id in store::deployments::missing_deployment_ids(&self.pool, &ids).await? {
            tracing::info!(deployment_id = %id, "removing orphaned objects");
            self.delete_objects(id, None).await?;
        }
        Ok(())
    }

    /// The record ids on the objects of kind `K` matching `selector` (none when the
    /// cluster does not serve the kind).
    async fn labelled_ids<K: Object>(&self, selector: &str) -> Result<Vec<Uuid>, ClusterError> {
        let objects = match self.cluster.list::<K>(None, selector).await {
            Ok(objects) => objects,
            Err(err) if err.api_status().is_some_and(|s| s.code == 404) => return Ok(vec![]),
            Err(err) => return Err(err),
        };
        Ok(objects
            .iter()
            .filter_map(|o| record_id(o.meta().labels.as_ref()))
            .collect())
    }
}
