//! `ankusa`: the relay binary. CLI wiring only (DESIGN.md section 1).
//!
//! The storage engine and key layout exist today; `ankusa serve` comes with the
//! runtime (issue 4). Until then the binary says what it is built on and refuses
//! any command with a clear error.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        None | Some("-h" | "--help" | "help") => {
            println!(
                "ankusa {} — self-hosted webhook relay\n\n\
                 Storage backends built in: memory, rocksdb, fjall.\n\
                 Commands: none yet; `ankusa serve` arrives with the relay runtime.\n\
                 Tests: `cargo test` (see README.md).",
                env!("CARGO_PKG_VERSION")
            );
            ExitCode::SUCCESS
        }
        Some("-V" | "--version") => {
            println!("ankusa {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("ankusa: unknown command {other:?}; run `ankusa --help`");
            ExitCode::from(2)
        }
    }
}
