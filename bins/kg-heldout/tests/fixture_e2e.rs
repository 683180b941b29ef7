//! End to end on the fixtures: `kg-heldout generate` then `kg-heldout eval` on CPU (PyTorch,
//! Triton through its interpreter), so `eval` runs with `--device cpu`. Needs a Python with
//! torch, triton and pytest: `KG_TEST_PYTHON`, else `<workspace>/.venv/bin/python`, else
//! `python3`; without one the test fails, naming what it looked for.

#![allow(
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use kg_test_support::{copy_tree, workspace};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kg_heldout::summary::{
    DeviceMode, ErrorKind, HeldoutSummary, HeldoutTaskResult, PerfSide, SpeedupStatus,
};

/// Every file under `dir` with its content, to prove the run directory is never modified.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// The synthetic run: each overlay workspace is the task directory with the overlay's
/// optimised files and `task_result.yaml` on top, as AgentKernelArena leaves a workspace.
fn build_run(root: &Path) -> PathBuf {
    let fx = workspace().join("fixtures/heldout");
    let overlay = fx.join("run-overlay/run_20261129_120000");
    let run = root.join("ws_cpu_rules").join("run_20261129_120000");
    for e in std::fs::read_dir(&overlay).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let tr = std::fs::read_to_string(e.path().join("task_result.yaml")).unwrap();
        let id = tr
            .lines()
            .find_map(|l| l.strip_prefix("task_name: "))
            .unwrap()
            .trim()
            .to_string();
        let ws = run.join(&name);
        copy_tree(&fx.join("tasks").join(&id), &ws);
        copy_tree(&e.path(), &ws);
    }
    // A workspace whose agent renamed TEST_SHAPES: the injection cannot apply -> error entry.
    let broken = run.join("triton2triton_vllm_kg_vec_add_20261129_130000");
    copy_tree(
        &run.join("triton2triton_vllm_kg_vec_add_20261129_120000"),
        &broken,
    );
    let runner = broken.join("scripts/task_runner.py");
    let text = std::fs::read_to_string(&runner)
        .unwrap()
        .replace("TEST_SHAPES", "SHAPES");
    std::fs::write(&runner, text).unwrap();
    run
}

/// `(shape, ms)` per case from a KgRmsNorm perf log line
/// `case i {'input_0_shape': [..]}: torch X ms, kernel Y ms (cpu_wall)`; `kernel` picks Y over X.
fn logged_times(log: &str, kernel: bool) -> Vec<(String, f64)> {
    log.lines()
        .filter(|l| l.starts_with("case ") && l.ends_with("(cpu_wall)"))
        .map(|l| {
            let (shape, rest) = l.split_once("]}: torch ").unwrap();
            let (torch, rest) = rest.split_once(" ms, kernel ").unwrap();
            let t = if kernel {
                rest.split_once(" ms").unwrap().0
            } else {
                torch
            };
            (
                shape.split_once(": [").unwrap().1.to_string(),
                t.parse().unwrap(),
            )
        })
        .collect()
}

/// torch2hip (AKA's flow): the original side is the PyTorch module timed by the performance
/// command with `--baseline_only` in opt/; the agent's kernel is deleted from orig/; the
/// speedup is baseline `ori_time` over optimised `opt_time`, matched case by case.
fn check_torch2hip(ws: &Path) {
    let text = std::fs::read_to_string(ws.join("heldout_task_result.yaml")).unwrap();
    let r: HeldoutTaskResult = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(r.generalization_status, "both_pass", "{r:?}");
    assert_eq!(r.speedup_status, Some(SpeedupStatus::Measured));
    assert!(r.orig_heldout_pass_correctness && r.opt_pass_correctness);
    assert_eq!(r.orig_benchmark_methods, vec!["cpu_wall"]);
    assert_eq!(r.opt_benchmark_methods, vec!["cpu_wall"]);
    assert_eq!(r.original_run_speedup_ratio, 1.6);
    assert!(!ws.join("orig/hip/hip_1_KgRmsNorm.py").exists());
    assert!(ws.join("opt/hip/hip_1_KgRmsNorm.py").is_file());
    // The same held-out shapes went into both references (the tools compare them).
    for f in [
        "opt/pytorch_code_module/py_1_KgRmsNorm.py",
        "opt/pytorch_code_functional/py_1_KgRmsNorm_func.py",
    ] {
        let src = std::fs::read_to_string(ws.join(f)).unwrap();
        assert_eq!(src.matches("# alignment-stress:").count(), 2, "{f}");
    }
    assert!(!ws.join("logs/orig_compile_0.log").exists());
    // The baseline's first run decides whether the original side is correct.
    let base = std::fs::read_to_string(ws.join("logs/orig_baseline_0.log")).unwrap();
    let first = base.lines().next().unwrap();
    assert!(first.ends_with(" --baseline_only"), "{first}");
    let cwd = base.lines().nth(1).unwrap();
    assert!(
        cwd.starts_with("# cwd: ") && cwd.ends_with("/opt"),
        "the baseline runs in opt/: {cwd}"
    );
    // The timed runs, interleaved: baseline, kernel, baseline, kernel, …
    let order: Vec<(PerfSide, usize, &str)> = r
        .perf_runs
        .iter()
        .map(|p| (p.side, p.repeat, p.logs[0].as_str()))
        .collect();
    let expected: Vec<(PerfSide, usize, String)> = (1..=REPEATS)
        .flat_map(|i| {
            [
                (
                    PerfSide::Orig,
                    i,
                    format!("logs/orig_baseline_rep{i}_0.log"),
                ),
                (
                    PerfSide::Opt,
                    i,
                    format!("logs/opt_performance_rep{i}_0.log"),
                ),
            ]
        })
        .collect();
    assert_eq!(
        order,
        expected
            .iter()
            .map(|(s, i, l)| (*s, *i, l.as_str()))
            .collect::<Vec<_>>()
    );
    // Every (baseline run, kernel run) pair's speedup is the mean over shapes of ori_time ÷
    // opt_time; the held-out speedup is their median, inside its interval.
    let read = |rel: &str| std::fs::read_to_string(ws.join(rel)).unwrap();
    let mut cross = Vec::new();
    for i in 1..=REPEATS {
        let base = read(&format!("logs/orig_baseline_rep{i}_0.log"));
        assert!(base.lines().next().unwrap().ends_with(" --baseline_only"));
        let ori = logged_times(&base, false);
        assert_eq!(ori.len(), 8, "{base}");
        for j in 1..=REPEATS {
            let opt = logged_times(&read(&format!("logs/opt_performance_rep{j}_0.log")), true);
            assert_eq!(opt.len(), 8);
            let s = ori
                .iter()
                .map(|(shape, t)| t / opt.iter().find(|(s, _)| s == shape).unwrap().1)
                .sum::<f64>()
                / 8.0;
            cross.push(s);
        }
    }
    cross.sort_by(f64::total_cmp);
    let expected = cross[cross.len() / 2];
    assert!(
        (r.speedup_ratio - expected).abs() <= 1e-9 * expected,
        "speedup {} != the median of the {} cross-run speedups {expected}",
        r.speedup_ratio,
        cross.len()
    );
    let i = r.speedup_interval.as_ref().unwrap();
    assert_eq!((i.orig_runs, i.opt_runs), (REPEATS, REPEATS));
    assert!(
        i.low <= r.speedup_ratio + 1e-4 && r.speedup_ratio <= i.high + 1e-4,
        "{i:?}"
    );
    assert!(r.speedup_call.is_some());
}

/// Runs a side, interleaved, in the end-to-end run (the fewest allowed, to keep it short).
const REPEATS: usize = 3;

fn kg(args: &[&str], py: &Path, cwd: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
        .args(args)
        .env("PYTHON_BIN", py)
        .env("KG_LOG", "warn")
        .current_dir(cwd)
        .output()
        .unwrap()
}

#[test]
fn generate_then_eval_on_cpu_fixtures() {
    let py = kg_test_support::python_with(&["torch", "triton", "pytest"]);
    let tmp = tempfile::tempdir().unwrap();
    let tasks = workspace().join("fixtures/heldout/tasks");
    let heldout = tmp.path().join("held_out_tests");
    let t = tasks.to_str().unwrap();
    let h = heldout.to_str().unwrap();

    // Dry run writes nothing.
    let out = kg(
        &["generate", "--tasks-dir", t, "--output-dir", h, "--dry-run"],
        &py,
        tmp.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!heldout.exists());
    let listing = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listing.matches("supported    ").count(), 5, "{listing}");
    assert!(
        listing.contains("supported    torch2hip/gpumode/KgRmsNorm"),
        "{listing}"
    );

    let out = kg(
        &["generate", "--tasks-dir", t, "--output-dir", h],
        &py,
        tmp.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first =
        std::fs::read(heldout.join("triton2triton/vllm/kg_scale_rows/held_out_shapes.yaml"))
            .unwrap();
    // Deterministic: a second run writes the same bytes.
    let out = kg(
        &["generate", "--tasks-dir", t, "--output-dir", h],
        &py,
        tmp.path(),
    );
    assert!(out.status.success());
    let second =
        std::fs::read(heldout.join("triton2triton/vllm/kg_scale_rows/held_out_shapes.yaml"))
            .unwrap();
    assert_eq!(first, second);

    let run = build_run(tmp.path());
    let before = snapshot(&run);
    let out = kg(
        &[
            "eval",
            "--run-dir",
            run.to_str().unwrap(),
            "--heldout-dir",
            h,
            "--tasks-dir",
            t,
            "--timeout",
            "300",
            "--device",
            "cpu",
            "--perf-repeats",
            &REPEATS.to_string(),
        ],
        &py,
        tmp.path(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // One errored task (the broken workspace) makes the exit code 1.
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert_eq!(before, snapshot(&run), "the run directory was modified");

    let out_dir = run.with_file_name("run_20261129_120000_heldout");
    let status = |ws: &str| -> HeldoutTaskResult {
        let text =
            std::fs::read_to_string(out_dir.join(ws).join("heldout_task_result.yaml")).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    };
    let add = status("triton2triton_vllm_kg_vec_add_20261129_120000");
    assert_eq!(add.generalization_status, "both_pass", "{add:?}");
    assert!(add.speedup_ratio > 0.0);
    assert_eq!(add.speedup_status, Some(SpeedupStatus::Measured));
    assert_eq!(add.device.as_ref().map(|d| d.mode), Some(DeviceMode::Cpu));
    assert_eq!(add.opt_benchmark_methods, vec!["cpu_wall"]);
    let rows = status("triton2triton_vllm_kg_scale_rows_20261129_120000");
    assert_eq!(rows.generalization_status, "opt_regression", "{rows:?}");
    assert!(
        rows.error.as_deref().unwrap().contains("wrong elements"),
        "{rows:?}"
    );
    assert_eq!(rows.score, 20.0);
    let failure = rows.opt_failure.as_ref().unwrap();
    assert_eq!(failure.phase, "correctness");
    assert_eq!(rows.speedup_status, Some(SpeedupStatus::NotApplicable));
    let sm = status("triton2triton_rocmbench_easy_test_kg_softmax_20261129_120000");
    assert_eq!(sm.generalization_status, "both_fail", "{sm:?}");
    assert!(
        sm.error
            .as_deref()
            .unwrap()
            .contains("wider than this kernel supports"),
        "{sm:?}"
    );
    let sp = status("hip2hip_gpumode_KgSoftplus_20261129_120000");
    assert_eq!(sp.generalization_status, "both_pass", "{sp:?}");
    check_torch2hip(&out_dir.join("torch2hip_gpumode_KgRmsNorm_20261129_120000"));
    let broken = status("triton2triton_vllm_kg_vec_add_20261129_130000");
    assert_eq!(broken.generalization_status, "error");
    assert_eq!(broken.error_kind, Some(ErrorKind::Setup));
    assert!(
        broken
            .error
            .as_deref()
            .unwrap()
            .contains("injection failed"),
        "{broken:?}"
    );

    // The held-out shapes really were injected into both sides.
    let injected = std::fs::read_to_string(
        out_dir
            .join("triton2triton_vllm_kg_scale_rows_20261129_120000/orig/scripts/task_runner.py"),
    )
    .unwrap();
    assert!(injected.contains("# alignment-stress:"));
    assert!(
        out_dir
            .join("triton2triton_vllm_kg_scale_rows_20261129_120000/logs/opt_correctness_0.log")
            .is_file()
    );

    let summary: HeldoutSummary = serde_saphyr::from_str(
        &std::fs::read_to_string(out_dir.join("heldout_summary.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary.total_tasks, 6);
    assert_eq!(summary.errored_tasks, 1);
    assert_eq!(summary.both_pass_without_timing, 0);
    assert!(summary.carried_over.is_empty());
    assert_eq!(summary.quadrant_counts["both_pass"], 3);
    assert_eq!(summary.quadrant_counts["opt_regression"], 1);
    assert_eq!(summary.quadrant_counts["both_fail"], 1);
    assert_eq!(summary.quadrant_counts["opt_improvement"], 0);
    let c = &summary.conditional_correctness;
    assert_eq!(
        (c.orig_correct_count, c.opt_also_correct_count, c.rate_pct),
        (4, 3, 75.0)
    );
    // Wilson interval for 3 of 4.
    let ci = c.ci95.as_ref().unwrap();
    assert_eq!((ci.low_pct, ci.high_pct), (30.1, 95.4));
    // both_pass: vec_add (original run 1.5), KgSoftplus (1.25), KgRmsNorm (1.6).
    assert_eq!(summary.heldout_speedup_stats.count, 3);
    assert_eq!(summary.original_run_speedup_stats.count, 3);
    assert_eq!(summary.original_run_speedup_stats.mean, 1.45);
    assert_eq!(summary.original_run_speedup_stats.std, 0.1803);
    let h = summary.heldout_speedup_stats.mean;
    assert_eq!(
        summary.generalization_gap.speedup_mean_delta,
        kg_heldout::summary::round(h - 1.45, 4)
    );
    assert_eq!(
        summary.speedup_retention.ratio,
        kg_heldout::summary::retention(h, 1.45)
    );
    assert_eq!(summary.per_task.len(), 6);
    assert!(out_dir.join("heldout_eval.log").is_file());
}
