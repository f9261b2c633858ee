//! The module graph drawn in the crate doc (`pipeline/src/lib.rs`) is the
//! code's, and it has no circle: each stage module imports only the modules
//! below it, never the dispatcher, so a stage is a boundary and not a file of
//! one big type's methods.

use std::collections::{BTreeMap, BTreeSet};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The crate's modules: the files of `src/` but the root.
fn modules(src: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(src)
        .expect("src/")
        .filter_map(|e| {
            let path = e.expect("entry").path();
            let stem = path.file_stem()?.to_str()?.to_owned();
            (path.extension()? == "rs" && stem != "lib").then_some(stem)
        })
        .collect()
}

/// The modules `code` names by a `crate::` path, comments left out.
fn imports(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let text: String = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let items: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            group[..group.find('}').expect("a closed use group")]
                .split(',')
                .collect()
        } else {
            vec![rest]
        };
        for item in items {
            let name: String = item
                .trim()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) {
                out.insert(name);
            }
        }
    }
    out
}

/// The graph the crate doc draws: its `a, b -> c, d` lines (`(none)`: no
/// edge).
fn drawn(lib: &str) -> Graph {
    let mut graph = Graph::new();
    let block = lib
        .split("//! ```text\n")
        .nth(1)
        .and_then(|b| b.split("//! ```\n").next())
        .expect("the module graph's block in the crate doc");
    for line in block.lines() {
        let line = line.trim_start_matches("//!").trim();
        let (from, to) = line.split_once(" -> ").expect("`from -> to` lines");
        let to: BTreeSet<String> = if to == "(none)" {
            BTreeSet::new()
        } else {
            to.split(", ").map(str::to_owned).collect()
        };
        for f in from.split(", ") {
            graph.insert(f.to_owned(), to.clone());
        }
    }
    graph
}

#[test]
fn the_drawn_module_graph_is_the_code_and_has_no_circle() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let code: Graph = modules
        .iter()
        .map(|m| {
            let text = std::fs::read_to_string(src.join(format!("{m}.rs"))).expect("module");
            let mut deps = imports(&text, &modules);
            deps.remove(m);
            (m.clone(), deps)
        })
        .collect();
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    assert_eq!(
        drawn(&lib),
        code,
        "the module graph in the crate doc (pipeline/src/lib.rs) is not the code's"
    );
    // No circle: repeatedly take away the modules that import nothing left.
    let mut left = code;
    while !left.is_empty() {
        let done: BTreeSet<String> = left
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !left.contains_key(d)))
            .map(|(m, _)| m.clone())
            .collect();
        assert!(
            !done.is_empty(),
            "an import circle among the modules {:?}",
            left.keys().collect::<Vec<_>>()
        );
        left.retain(|m, _| !done.contains(m));
    }
}
