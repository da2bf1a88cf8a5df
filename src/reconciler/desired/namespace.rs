//! The project's Namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    BuildConfig, LABEL_INSTALLATION, LABEL_MANAGED_BY, LABEL_NAMESPACE_ADOPTED, LABEL_PROJECT,
    Target,
};

/// The namespace the record's objects live in, owned by its project (`adopted`: it existed
/// before the project and must survive it).
pub(super) fn namespace_object(
    t: &Target,
    namespace: &str,
    adopted: bool,
    config: &BuildConfig,
) -> Namespace {
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), "modelplane".to_owned()),
        (LABEL_PROJECT.to_owned(), t.record.project.clone()),
        (LABEL_INSTALLATION.to_owned(), config.installation.clone()),
    ]);
    if adopted {
        labels.insert(LABEL_NAMESPACE_ADOPTED.into(), "true".into());
    }
    Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    }
}
