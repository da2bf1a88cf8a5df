//! `modelplane-emulator`: runs the Kubernetes API server emulator and writes a kubeconfig for it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use modelplane_emulator::{Crds, Emulator};

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
    /// Install the CustomResourceDefinition manifests in this folder at start (what
    /// `scripts/crds.sh` provides); without it the Gateway API and InferencePool kinds
    /// are served from built-in definitions that validate nothing.
    #[arg(long, env = "MODELPLANE_CRDS")]
    crds: Option<PathBuf>,
    /// Do not serve the Gateway API group (like a cluster without its CRDs).
    #[arg(long)]
    no_gateway_api: bool,
    /// Do not serve the InferencePool group (like a cluster without its CRD).
    #[arg(long)]
    no_inference_api: bool,
    /// Seconds between watch bookmarks.
    #[arg(long, default_value_t = 60)]
    bookmark_interval_seconds: u64,
    /// Serve the bare API server: no nodes, controllers, scheduler, kubelets or Gateway.
    #[arg(long)]
    no_cluster: bool,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: usize,
    /// `nvidia.com/gpu` allocatable per node.
    #[arg(long, default_value_t = 8)]
    gpus_per_node: u32,
    /// The `nvidia.com/gpu.product` node label.
    #[arg(long, default_value = "NVIDIA-H100-80GB-HBM3")]
    gpu_product: String,
    /// Time from scheduling to a running container, e.g. `2s` or `300ms`.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    start_delay: Duration,
    /// First crash-loop back-off (doubles per restart, up to 30x), e.g. `10s`.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    restart_backoff: Duration,
    /// Image pattern (`*` wildcards) whose pulls fail; repeatable.
    #[arg(long)]
    fail_images: Vec<String>,
    /// Image pattern whose containers crash after starting; repeatable.
    #[arg(long)]
    crash_images: Vec<String>,
    /// Pre-create this Gateway (`namespace/name`), served by the data plane.
    #[arg(long)]
    gateway: Option<String>,
    /// Address of the Gateway data plane (its port becomes the listener port).
    #[arg(long, default_value = "127.0.0.1:0")]
    gateway_listen: SocketAddr,
}

/// `300ms`, `2s`, `1m`, or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("invalid duration unit in {s:?} (use ms, s or m)")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// mimalloc instead of glibc's malloc: the simulated cluster clones and drops JSON trees
/// all the time, and glibc's allocator was about a fifth of its CPU in a convergence run.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("modelplane-emulator: {err}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> std::io::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let mut builder = Emulator::builder()
        .listen(args.listen)
        .gateway_api(!args.no_gateway_api)
        .inference_api(!args.no_inference_api)
        .crds(match &args.crds {
            Some(dir) => Crds::Manifests(dir.clone()),
            None => Crds::BuiltIn,
        })
        .bookmark_interval(Duration::from_secs(args.bookmark_interval_seconds.max(1)));
    if !args.no_cluster {
        builder = builder
            .nodes(args.nodes)
            .gpus_per_node(args.gpus_per_node)
            .gpu_product(args.gpu_product.clone())
            .start_delay(args.start_delay)
            .restart_backoff(args.restart_backoff)
            .gateway_listen(args.gateway_listen);
        for p in &args.fail_images {
            builder = builder.fail_images(p.clone());
        }
        for p in &args.crash_images {
            builder = builder.crash_images(p.clone());
        }
        if let Some(gw) = &args.gateway {
            let Some((ns, name)) = gw.split_once('/') else {
                return Err(std::io::Error::other("--gateway must be namespace/name"));
            };
            builder = builder.gateway(ns, name);
        }
    }
    let emu = builder.start().await.map_err(|err| {
        if err.kind() == std::io::ErrorKind::AddrInUse {
            std::io::Error::new(
                err.kind(),
                format!(
                    "{err}: another process listens on --listen {} or --gateway-listen {}; choose free addresses",
                    args.listen, args.gateway_listen
                ),
            )
        } else {
            err
        }
    })?;
    if let Some(path) = &args.kubeconfig_out {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, emu.kubeconfig_yaml())?;
        tracing::info!(path = %path.display(), "wrote kubeconfig");
    }
    println!("modelplane-emulator serving on {}", emu.url());
    match &args.crds {
        Some(dir) => println!(
            "custom resources from the CRD manifests in {}",
            dir.display()
        ),
        None => println!(
            "custom resources from built-in definitions that check nothing (no --crds given)"
        ),
    }
    if let Some(gw) = emu.gateway_addr() {
        println!("gateway data plane on http://{gw}");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5h").is_err());
    }

    #[test]
    fn cluster_flags_parse() {
        let a = Args::try_parse_from([
            "modelplane-emulator",
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--fail-images",
            "*:bad",
            "--fail-images",
            "x*",
            "--gateway",
            "gw/public",
            "--start-delay",
            "100ms",
        ])
        .unwrap();
        assert_eq!((a.nodes, a.gpus_per_node), (2, 4));
        assert_eq!(a.fail_images, ["*:bad", "x*"]);
        assert_eq!(a.gateway.as_deref(), Some("gw/public"));
        assert_eq!(a.start_delay, Duration::from_millis(100));
    }
}
