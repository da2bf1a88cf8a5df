//! Where to call the model: the in-cluster URL, the external URL through the Gateway, and
//! the OpenAI base URL.

use super::Observed;
use super::routing::route_state;
use crate::domain::Endpoints;
use crate::reconciler::desired::{Target, route_path_prefix};

/// The in-cluster URL, the external URL through the Gateway, and the OpenAI base URL.
pub(super) fn endpoints(t: &Target, namespace: &str, observed: &Observed) -> Endpoints {
    let record = t.record;
    let at_zero = t.serving.replicas == 0;
    if at_zero && !observed.activating {
        // The Service and route are kept, but nothing behind them answers.
        return Endpoints {
            reason: Some("scaled to zero: no replica serves; scale up to get endpoints".into()),
            ..Endpoints::default()
        };
    }
    let port = t.serving.port;
    // At zero only the Gateway's URL wakes the model (through the activator).
    let cluster = (observed.service_exists && !at_zero).then(|| {
        format!(
            "http://{}.{namespace}.svc.cluster.local:{port}",
            record.name
        )
    });
    let (route_ok, route_message) = route_state(observed);
    let mut external = Vec::new();
    let mut reason = None;
    if observed.gateway.is_some() {
        if route_ok {
            match external_url(t, observed) {
                Ok(url) => external.push(url),
                Err(why) => reason = Some(why),
            }
        } else {
            reason = Some(route_message);
        }
    }
    if at_zero && reason.is_none() {
        reason = Some(
            "scaled to zero: activates on first request (it waits while a replica starts)".into(),
        );
    }
    let base = external.first().cloned().or_else(|| cluster.clone());
    Endpoints {
        openai_base: base.map(|b| format!("{b}/v1")),
        cluster,
        external,
        reason,
    }
}

/// The external URL: the Gateway listener's scheme and port, the route's hostname (else the
/// listener's, else the Gateway's address) and its path prefix.
fn external_url(t: &Target, observed: &Observed) -> Result<String, String> {
    let gateway = observed.gateway.as_ref().expect("checked by the caller");
    let object = observed
        .gateway_object
        .as_ref()
        .ok_or_else(|| format!("Gateway {}/{} not found", gateway.namespace, gateway.name))?;
    let listeners = &object.spec.listeners;
    let listener = match &gateway.section {
        Some(section) => listeners.iter().find(|l| l.name == *section),
        None => listeners
            .iter()
            .find(|l| matches!(l.protocol.as_str(), "HTTP" | "HTTPS")),
    }
    .ok_or_else(|| "the Gateway has no matching HTTP listener".to_owned())?;
    let https = listener.protocol == "HTTPS";
    let scheme = if https { "https" } else { "http" };
    let port = listener.port;
    let host = t
        .serving
        .spec
        .routing
        .hostname
        .clone()
        .filter(|h| !h.starts_with("*."))
        .or_else(|| listener.hostname.clone().filter(|h| !h.starts_with("*.")))
        .or_else(|| {
            object
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .and_then(|a| a.first())
                .map(|a| a.value.clone())
        })
        .ok_or_else(|| "the Gateway has no address yet".to_owned())?;
    let default_port = (https && port == 443) || (!https && port == 80);
    let authority = if default_port {
        host
    } else {
        format!("{host}:{port}")
    };
    let path = route_path_prefix(t);
    let path = if path == "/" { String::new() } else { path };
    Ok(format!("{scheme}://{authority}{path}"))
}
