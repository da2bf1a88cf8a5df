//! Whether the key check answers: the routes of deployments with model keys send every
//! request's check there, and the Gateway refuses what it cannot have checked (fail
//! closed). The worker asks each of the key check's addresses for `/healthz` every few
//! seconds, as the Gateway reaches them (the worker runs beside it, in the cluster), and
//! such records carry a `KeysChecked` condition saying so; a `Ready` one reads `Degraded`
//! while it is False. A change requeues every record, which writes the condition.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Worker;
use crate::store;

/// How often the key check is asked.
const EVERY: Duration = Duration::from_secs(5);
/// How long one address has to answer.
const TIMEOUT: Duration = Duration::from_secs(2);

impl Worker {
    /// Probes the key check until `shutdown` (only where one is configured).
    pub(super) async fn probe_key_check(self: Arc<Self>, shutdown: CancellationToken) {
        let Some(configured) = self.config.build.key_check.clone() else {
            return;
        };
        let http = match reqwest::Client::builder()
            .timeout(TIMEOUT)
            .no_proxy()
            .build()
        {
            Ok(http) => http,
            Err(err) => {
                tracing::error!(error = %err, "key check probe: no HTTP client");
                return;
            }
        };
        loop {
            // The key check runs in the activator's processes, at their addresses.
            let addresses = self
                .activator_address()
                .map_or_else(|| configured.addresses.clone(), |a| a.addresses);
            let state = probe(&http, &addresses, configured.port).await;
            let changed = {
                let mut known = self.key_check.write().expect("not poisoned");
                let changed = known.as_ref() != Some(&state);
                *known = Some(state.clone());
                changed
            };
            if changed {
                match &state {
                    Ok(_) => tracing::info!("key check probe: it answers"),
                    Err(why) => tracing::warn!(%why, "key check probe: it does not answer"),
                }
                if let Err(err) = store::work_queue::enqueue_all(&self.pool).await {
                    tracing::warn!(error = %err, "cannot requeue after the key check changed");
                    *self.key_check.write().expect("not poisoned") = None;
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    }

    /// What the last probe found (`None`: none yet, or no key check here).
    pub(super) fn key_check_state(&self) -> Option<Result<String, String>> {
        self.key_check.read().expect("not poisoned").clone()
    }
}

/// Asks every address; `Ok` with the condition's message when all answer, `Err` naming those
/// that do not.
async fn probe(http: &reqwest::Client, addresses: &[IpAddr], port: u16) -> Result<String, String> {
    let at = |ip: &IpAddr| std::net::SocketAddr::new(*ip, port).to_string();
    if addresses.is_empty() {
        return Err("the key check has no address (no API process is ready): the Gateway refuses every request to this deployment until one is (fail closed)".into());
    }
    let mut failing = Vec::new();
    for ip in addresses {
        let url = format!("http://{}/healthz", at(ip));
        let why = match http.get(&url).send().await {
            Ok(r) if r.status().is_success() => continue,
            Ok(r) => format!("answers {}", r.status().as_u16()),
            Err(err) if err.is_timeout() => format!("no answer within {} s", TIMEOUT.as_secs()),
            Err(err) if err.is_connect() => "refuses connections".to_owned(),
            Err(_) => "cannot be reached".to_owned(),
        };
        failing.push(format!("{} {why}", at(ip)));
    }
    let all: Vec<String> = addresses.iter().map(at).collect();
    if failing.is_empty() {
        return Ok(format!(
            "the Gateway asks modelplane's key check at {} before each request",
            all.join(", ")
        ));
    }
    let which = if failing.len() == addresses.len() {
        "every request to this deployment"
    } else {
        "the requests it sends there"
    };
    Err(format!(
        "the key check does not answer ({}): the Gateway refuses {which} (fail closed)",
        failing.join("; ")
    ))
}
