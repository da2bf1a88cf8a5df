//! Fault injection for the API server: refuse requests, add latency, fail a fraction of
//! requests, cut watch streams.

/// Shared fault settings (cheap to clone); see `RunningEmulator::faults`.
#[derive(Clone, Default)]
pub struct Faults {}
