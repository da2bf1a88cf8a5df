//! The `modelplane` binary: parse the command line, set up telemetry, run the role.

use std::process::ExitCode;

use clap::Parser;
use modelplane::config::{Cli, Command};
use modelplane::{api, server, telemetry};

/// mimalloc instead of glibc's malloc: the request paths allocate many small, short-lived
/// buffers from both runtime threads, and glibc's arenas spent a tenth of the API's CPU on
/// them (`_int_malloc`, `malloc_consolidate`, lock waits) under load.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Openapi = cli.command {
        print!("{}", api::openapi_document());
        return ExitCode::SUCCESS;
    }
    if let Command::GraphqlSchema = cli.command {
        print!("{}", api::graphql::sdl());
        return ExitCode::SUCCESS;
    }
    let tracing = telemetry::init_tracing(&cli.log);
    modelplane::install_crypto_provider();
    let result = match cli.command {
        Command::Serve(config) => server::serve(*config, telemetry::init_metrics()).await,
        Command::Migrate(config) => server::migrate(&config).await,
        Command::Openapi | Command::GraphqlSchema => unreachable!("handled above"),
    };
    // The exporter's thread blocks while it flushes: not on the runtime's threads.
    tokio::task::spawn_blocking(move || tracing.shutdown())
        .await
        .ok();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(error = %err, "modelplane stopped");
            ExitCode::FAILURE
        }
    }
}
