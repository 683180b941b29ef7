//! Compatibility with the public SOL-ExecBench examples.
//!
//! Their files are not committed. Export them and point `KG_SOL_EXAMPLES` at the directory:
//!
//! ```text
//! git -C <mirror of NVIDIA/SOL-ExecBench> archive HEAD examples | tar -x -C /tmp/sol
//! KG_SOL_EXAMPLES=/tmp/sol/examples cargo nextest run -p kg-contract --run-ignored only compat
//! ```

use std::path::{Path, PathBuf};

use kg_contract::{Problem, load_solution};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("failed to read `{}`: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

#[test]
#[ignore = "needs KG_SOL_EXAMPLES pointing at an export of SOL-ExecBench's examples/"]
fn sol_execbench_examples_load() {
    let root = std::env::var_os("KG_SOL_EXAMPLES")
        .map(PathBuf::from)
        .expect(
            "set KG_SOL_EXAMPLES to the exported `examples/` directory of NVIDIA/SOL-ExecBench",
        );
    let mut files = Vec::new();
    walk(&root, &mut files);
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();

    let (mut definitions, mut workload_lines, mut solutions) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut warnings = Vec::new();
    for f in &files {
        let n = name(f);
        if n == "definition.json" {
            let dir = f.parent().unwrap();
            match Problem::load(dir) {
                Ok(p) => {
                    definitions += 1;
                    workload_lines += p.workloads.len();
                    warnings.extend(p.warnings);
                }
                Err(e) => failures.push(e.to_string()),
            }
        } else if n == "workload.jsonl" && !f.with_file_name("definition.json").is_file() {
            failures.push(format!("`{}` has no sibling definition.json", f.display()));
        } else if n.starts_with("solution") && n.ends_with(".json") {
            match load_solution(f) {
                Ok((_, w)) => {
                    solutions += 1;
                    warnings.extend(w);
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    println!(
        "loaded {definitions} definitions, {workload_lines} workload lines, {solutions} solutions"
    );
    for w in &warnings {
        println!("warning: {w}");
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        definitions > 0 && workload_lines > 0 && solutions > 0,
        "found nothing to load under `{}`",
        root.display()
    );
}
