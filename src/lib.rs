//! modelplane: a control plane for LLM and model servers on Kubernetes.
//!
//! Layers, outermost first: `api` (HTTP) → `service` (use cases) → `store` (SQL), with
//! `domain` holding the validated types every layer shares.

pub mod api;
pub mod config;
pub mod domain;
pub mod server;
pub mod service;
pub mod store;
pub mod telemetry;
