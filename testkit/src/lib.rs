//! What modelplane's tests and benchmarks share, in one place instead of `#[path]` imports:
//!
//! - [`server`]: the real router on a random port over a fresh database, and clients for
//!   it (HTTP, SSE, GraphQL over WebSocket);
//! - [`chart`]: the Helm chart rendered with the pinned helm;
//! - [`scratch`]: a migrated scratch database for a benchmark.

pub mod chart;
pub mod scratch;
pub mod server;

use std::path::{Path, PathBuf};

/// The repository's root (where `Cargo.toml`, `deploy/` and `scripts/` are).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit/ sits in the repository")
        .to_path_buf()
}
