//! Runs the loom model of ADR 0004 4.5-4.6 (`model-tests/loom`) from the
//! README's test command, so `cargo test` (and CI) explores its interleavings
//! too. The model needs `--cfg ankusa_loom` in RUSTFLAGS, which rebuilds its
//! whole graph, so `run.sh` builds it in its own target dir
//! (`/var/cache/ankusa/loom-target`, or `ANKUSA_LOOM_TARGET_DIR`), in release
//! mode, with at most 2 preemptions; this test fails unless loom tests ran and
//! explored interleavings.

use std::process::Command;

#[test]
fn loom_model_explores_interleavings() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/loom/run.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("CARGO", env!("CARGO"))
        .output()
        .expect("run model-tests/loom/run.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "loom run failed:\n{stdout}\n{stderr}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("loom: ") && l.contains("interleavings explored"))
        .unwrap_or_else(|| panic!("no loom summary in:\n{stdout}"));
    // "loom: 6 tests passed, 348 interleavings explored, 12s (...)"
    let words: Vec<&str> = summary.split_whitespace().collect();
    let tests: u64 = words[1].parse().unwrap();
    let explored: u64 = words[4].parse().unwrap();
    println!("{summary}");
    assert!(tests >= 6, "only {tests} loom tests ran");
    assert!(explored > 0, "loom explored no interleaving");
}
