//! `modelplane-emulator`: runs the Kubernetes API server emulator and writes a kubeconfig for it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use modelplane_emulator::Emulator;

#[derive(Debug, Parser)]
#[command(
    name = "modelplane-emulator",
    version,
    about = "A Kubernetes API server emulator for tests and demos (plain HTTP, no auth)"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "EMULATOR_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write a kubeconfig for the emulator to this path.
    #[arg(long, env = "EMULATOR_KUBECONFIG_OUT")]
    kubeconfig_out: Option<PathBuf>,
    /// Do not serve the Gateway API group (like a cluster without its CRDs).
    #[arg(long)]
    no_gateway_api: bool,
    /// Do not serve the InferencePool group (like a cluster without its CRD).
    #[arg(long)]
    no_inference_api: bool,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval_seconds: u64,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let emu = Emulator::builder()
        .listen(args.listen)
        .gateway_api(!args.no_gateway_api)
        .inference_api(!args.no_inference_api)
        .bookmark_interval(Duration::from_secs(args.bookmark_interval_seconds.max(1)))
        .start()
        .await?;
    if let Some(path) = &args.kubeconfig_out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, emu.kubeconfig_yaml())?;
        tracing::info!(path = %path.display(), "wrote kubeconfig");
    }
    println!("modelplane-emulator serving on {}", emu.url());
    shutdown_signal().await?;
    emu.shutdown().await;
    Ok(())
}

/// Ctrl-C or SIGTERM (what process managers and `kill` send).
async fn shutdown_signal() -> std::io::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c().await
    }
}
