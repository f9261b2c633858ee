//! `ankusa`: the relay binary. CLI wiring only (docs/design.md section 1): the
//! commands parse their arguments and call the crates.
//!
//! - `ankusa serve [--config FILE] [--drop-unconfigured]`: runs the relay (without `--config`, the
//!   embedded demo configuration: RocksDB under `./data`, ingest on
//!   127.0.0.1:8080, admin on 127.0.0.1:8081, source `/hooks/demo` delivering
//!   to `./data/deliveries.ndjson` ordered by `x-entity-id`).
//! - `ankusa send FILE...`: posts corpus files to a running relay.
//! - `ankusa check-config FILE`: loads a configuration and reports what is wrong.

mod send;
mod serve;
mod sinks;
mod unconfigured;

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
        /// Dead-letter, at start, the queued deliveries of sources and sink
        /// entries that are no longer in the configuration (reason "source
        /// removed from the config" / "sink removed from the config"). Without
        /// it, such deliveries stop the start, naming each source and sink.
        #[arg(long)]
        drop_unconfigured: bool,
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
        /// Send the files that load even if others cannot be read or parsed,
        /// and go on after a request that got no answer.
        #[arg(long)]
        keep_going: bool,
        /// The most one request may take, in milliseconds.
        #[arg(long, default_value_t = send::DEFAULT_TIMEOUT_MS)]
        timeout_ms: u64,
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
        Command::Serve { config, drop_unconfigured } => serve::main(config, drop_unconfigured),
        Command::Send { files, url, path, keep_going, timeout_ms } => {
            send::main(&send::Args { files: &files, url: &url, path: path.as_deref(), keep_going, timeout_ms })
        }
        Command::CheckConfig { file } => match serve::load(Some(&file)) {
            Ok(c) => {
                println!(
                    "{}: ok ({}, {})",
                    file.display(),
                    count(c.sources.len(), "source", "sources"),
                    count(c.tenants.len(), "tenant", "tenants")
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                ExitCode::from(2)
            }
        },
    }
}

/// `1 tenant`, `2 tenants`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
