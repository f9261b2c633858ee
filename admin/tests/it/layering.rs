//! The crate's layering (docs/design.md section 1): the domain (the context,
//! the one-row actions, `JobError`, the answer types and `jobs/`) never
//! imports the HTTP layer (`http/`), and a job kind's module imports the job
//! model, never another kind. Read from the sources, comments left out, so a
//! new import that breaks either rule fails here.

use std::path::{Path, PathBuf};

/// The job kinds' modules of `jobs/`: every file but the model and the runner.
const NOT_A_KIND: [&str; 2] = ["model", "mod"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files of `dir`, not below it.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a source dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    out.sort();
    out
}

/// `path`'s code without its comment lines.
fn code(path: &Path) -> String {
    std::fs::read_to_string(path)
        .expect("a source file")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_domain_never_imports_the_http_layer() {
    let mut domain = files(&src());
    domain.extend(files(&src().join("jobs")));
    domain.retain(|p| p.file_name().is_some_and(|n| n != "lib.rs"));
    assert!(domain.len() >= 10, "the domain's files: {domain:?}");
    for path in domain {
        let code = code(&path);
        for needle in ["crate::http", "super::http", "AdminState", "ApiError"] {
            assert!(
                !code.contains(needle),
                "{} names {needle}: the domain must not know the HTTP layer",
                path.display()
            );
        }
    }
}

#[test]
fn a_job_kind_imports_the_model_not_another_kind() {
    let jobs = src().join("jobs");
    let kinds: Vec<String> = files(&jobs)
        .iter()
        .filter_map(|p| p.file_stem()?.to_str().map(str::to_owned))
        .filter(|k| !NOT_A_KIND.contains(&k.as_str()))
        .collect();
    assert!(kinds.len() >= 5, "the job kinds: {kinds:?}");
    for kind in &kinds {
        let code = code(&jobs.join(format!("{kind}.rs")));
        for other in kinds.iter().filter(|o| *o != kind) {
            for needle in [format!("super::{other}"), format!("crate::jobs::{other}")] {
                assert!(
                    !code.contains(&needle),
                    "jobs/{kind}.rs names {needle}: a job kind depends on the job model only"
                );
            }
        }
    }
}
