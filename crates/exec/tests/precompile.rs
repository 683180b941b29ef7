//! The precompiler through the real sandbox on a machine with no GPU: a bundled Triton
//! solution's kernels are compiled for sm_90 into the solution's own Triton cache, once per
//! distinct shape, and nothing is compiled for a solution whose calls all raise.

use std::path::{Path, PathBuf};

use kg_contract::{Precompiled, Problem, Solution};
use kg_exec::{CancelToken, DeviceChoice, EvalOptions, Session};

mod support;
use support::{python, workspace};

fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    kg_contract::tree::walk(dir)
        .entries
        .into_keys()
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .map(|p| dir.join(p))
        .collect()
}

fn gelu() -> (Problem, Solution) {
    let dir = workspace().join("problems/core/gelu_tanh_bf16_gemma2_2b");
    let problem = Problem::load(&dir).unwrap_or_else(|e| panic!("{e}"));
    let text = std::fs::read_to_string(dir.join("solutions/triton_flat.json"))
        .unwrap_or_else(|e| panic!("{e}"));
    let sol: Solution = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    (problem, sol)
}

fn session(cache: &Path) -> Session {
    let mut opts = EvalOptions::new(DeviceChoice::Cpu);
    opts.cache_dir = cache.to_path_buf();
    Session::new(python(), opts, CancelToken::new()).unwrap_or_else(|e| panic!("{e}"))
}

/// `sol` precompiled for sm_90 on every workload of `problem`, with the cache directory.
fn precompiled(problem: &Problem, sol: &Solution) -> (tempfile::TempDir, Precompiled) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let workloads: Vec<_> = problem.workloads.iter().collect();
    let r = session(dir.path())
        .precompile(sol, problem, &workloads, 90)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("no precompiler ran"));
    (dir, r)
}

#[test]
fn a_triton_solutions_kernels_compile_for_sm_90_into_its_own_cache_in_the_sandbox() {
    let (problem, sol) = gelu();
    let (dir, r) = precompiled(&problem, &sol);
    // One kernel per specialisation Triton makes of these shapes (an element count
    // divisible by 16 or not): two, for all seven workloads.
    assert_eq!(r.kernels, 2, "{r:?}");
    let cache = dir.path().join("triton");
    let metas: Vec<String> = files_ending(&cache, ".json")
        .iter()
        .filter(|p| !p.to_string_lossy().contains("__grp__"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    assert_eq!(metas.len(), 2, "{metas:?}");
    for m in &metas {
        assert!(
            m.contains(r#""target": {"backend": "cuda", "arch": 90"#),
            "{m}"
        );
    }
    assert_eq!(files_ending(&cache, ".cubin").len(), 2);
    // Every call ran (nothing raised but, on a host without a CUDA driver library, the
    // launcher's build).
    assert_eq!(r.failed, r.kernels - r.launchers, "{r:?}");
}

#[test]
fn a_solution_whose_calls_raise_compiles_nothing_and_says_so() {
    let (problem, mut sol) = gelu();
    for src in &mut sol.sources {
        src.content
            .push_str("\n\ndef run(*args):\n    raise RuntimeError('no')\n");
    }
    let (dir, r) = precompiled(&problem, &sol);
    assert_eq!((r.kernels, r.launchers), (0, 0), "{r:?}");
    assert!(r.failed >= 1, "{r:?}");
    assert!(files_ending(&dir.path().join("triton"), ".cubin").is_empty());
}
