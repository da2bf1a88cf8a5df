//! Waiting for a condition in the emulator's integration tests.

use std::time::Duration;

/// How long a test waits for the simulated cluster to get somewhere.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `f` until it returns Some, failing after [`DEADLINE`] with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
