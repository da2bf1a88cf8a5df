//! modelplane: a control plane for LLM and model servers on Kubernetes.
//!
//! Layers, outermost first: `api` (HTTP: REST and GraphQL, served by `listener`) →
//! `service` (use cases) → `store` (SQL), with `domain` holding the validated types every
//! layer shares. The `reconciler` runs beside the API: Postgres through `store`, Kubernetes
//! through kube. The picture and the flows: `docs/ARCHITECTURE.md`.

pub mod api;
pub mod auth;
pub mod config;
pub mod domain;
pub mod listener;
pub mod metrics;
pub mod reconciler;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;

/// Selects rustls' ring backend for every TLS client in the process (JWKS fetches, the
/// Kubernetes client). Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
