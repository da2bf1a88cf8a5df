//! The resource quota controller (pkg/controller/resourcequota): keeps each
//! ResourceQuota's `status.used` current as pods come and go.

use std::collections::HashSet;

use super::Sim;
use super::write_status;
use crate::resources::meta_str;

/// The resource quota controller (pkg/controller/resourcequota): the `status` of the
/// ResourceQuotas in the namespaces whose pods changed (all of them on a resync, which a
/// quota's own change causes), as [`crate::admission::quota_status`] computes it. It runs
/// on every pass of the controllers after pod changes.
pub(super) fn sync(sim: &Sim) {
    let Some(kind) = sim.store.kinds().by_resource("", "v1", "resourcequotas") else {
        return;
    };
    let namespaces: HashSet<&str> = sim.dirty.pods.iter().map(|(ns, _)| ns.as_str()).collect();
    if !sim.resync && namespaces.is_empty() {
        return;
    }
    for quota in sim.list(kind) {
        let ns = meta_str(&quota, "namespace").unwrap_or("");
        if !sim.resync && !namespaces.contains(ns) {
            continue;
        }
        let status = {
            let st = sim.store.lock();
            crate::admission::quota_status(&st, &sim.store, ns, &quota)
        };
        write_status(&sim.store, kind, &quota, status, "kube-controller-manager");
    }
}
