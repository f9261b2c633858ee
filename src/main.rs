//! `ankusa`: the relay binary. CLI wiring only (docs/design.md section 1): the
//! commands parse their arguments and call the crates.
//!
//! - `ankusa serve [--config FILE]`: runs the relay (without `--config`, the
//!   embedded demo configuration: RocksDB under `./data`, ingest on
//!   127.0.0.1:8080, admin on 127.0.0.1:8081, source `/hooks/demo` delivering
//!   to `./data/deliveries.ndjson` ordered by `x-entity-id`).
//! - `ankusa send FILE...`: posts corpus files to a running relay.
//! - `ankusa check-config FILE`: loads a configuration and reports what is wrong.

mod send;
mod serve;
mod sinks;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Ankusa: a self-hosted webhook relay.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the relay.
    Serve {
        /// The YAML configuration (config/ankusa.example.yaml documents every
        /// option). Without it, the embedded demo configuration.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
    /// POST provider webhooks saved in the corpus format to a running relay.
    Send {
        /// Corpus files (`{"method", "path_hint", "headers", "body"}`).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The relay's ingest address.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Post to this path instead of each file's `path_hint`.
        #[arg(long)]
        path: Option<String>,
    },
    /// Load a configuration file and report every problem in it.
    CheckConfig {
        /// The YAML configuration.
        file: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve { config } => serve::main(config),
        Command::Send { files, url, path } => send::main(&files, &url, path.as_deref()),
        Command::CheckConfig { file } => match ankusa_config::Config::load(&file)
            .map_err(|e| e.to_string())
            .and_then(|c| serve::validate(&c).map(|()| c).map_err(|e| format!("{e:#}")))
        {
            Ok(c) => {
                println!("{}: ok ({} sources, {} tenants)", file.display(), c.sources.len(), c.tenants.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::from(2)
            }
        },
    }
}
