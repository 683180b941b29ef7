//! One fixture git repository per failure mode (see `fixtures/validate/README.md`); each case
//! asserts the verdict, the exit code, the key stage statuses, and that the worktree is byte
//! for byte as it was received. NO_GPU cases use `KG_GPU_BACKEND=none`; PASS logic uses
//! kg-gpu's fake backend (a test-only build feature).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use support::{Edit, Fixture, ctx, python, severities, stage};

const ROUTE: &[&str] = &[
    "--expected-route",
    "kern.rowsum:rowsum",
    "--shape-vars",
    "M,N",
];

fn args<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra.iter()).copied().collect()
}

const TAIL_BUG: Edit = Edit::Replace(
    "kern/rowsum.py",
    "        stop = min(start + TILE, N)  # masked tail\n",
    "        stop = start + TILE\n        if stop > N:\n            break  # tail tile dropped\n",
);
const BENIGN: Edit = Edit::Replace(
    "kern/rowsum.py",
    "    M, N = x.shape\n",
    "    M, N = x.shape  # rows, columns\n",
);

fn argnames_grid() -> Vec<&'static str> {
    args(
        ROUTE,
        &[
            "--target",
            "tests/test_rowsum.py",
            "--shape-argnames",
            "M,N",
            "--grid",
            "16,33;5,130",
        ],
    )
}

#[test]
fn tail_store_bug_hidden_by_commented_rows_blocks() {
    let py = python(false);
    let f = Fixture::new(
        &[
            TAIL_BUG,
            Edit::Replace(
                "tests/test_rowsum.py",
                "        (3, 5),\n        (2, 7),\n",
                "        # (3, 5),\n        # (2, 7),\n",
            ),
        ],
        &[],
    );
    let before = f.fingerprint();
    let junit = f.dir.path().join("out/junit.xml");
    let (out, r) = f.run(
        &py,
        false,
        &args(
            &argnames_grid(),
            &["--no-perf", "--junit", junit.to_str().unwrap()],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "BLOCK", "{c}");
    assert_eq!(out.status.code(), Some(1), "{c}");
    // JUnit for CI: a testcase per stage and the verdict's, the failed stages failures with
    // their findings, the skipped ones skipped; valid against the schema.
    support::junit_is_valid(&junit);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(xml.matches("<testcase ").count(), 11, "{xml}");
    let case = |name: &str| {
        let at = xml
            .find(&format!("<testcase name=\"{name}\""))
            .unwrap_or_else(|| panic!("no testcase {name}: {xml}"));
        let end = at + xml[at..].find("</testcase>").unwrap();
        xml[at..end].to_string()
    };
    assert!(
        case("correctness_s1_grid").contains("<failure type=\"stage_fail\""),
        "{xml}"
    );
    assert!(case("correctness_s1_grid").contains("blocker: "), "{xml}");
    assert!(case("gpu_claim").contains("<skipped message="), "{xml}");
    assert!(
        !case("correctness_repo_tests").contains("<failure"),
        "{xml}"
    );
    assert!(case("verdict").contains("<failure type=\"BLOCK\""), "{xml}");
    assert_eq!(r["degraded_mode"], "NO_GPU", "{c}");
    assert_eq!(
        r["test_selection"]["gpu_requirement"], "not-required",
        "{c}"
    );
    assert_eq!(stage(&r, "gpu_claim"), "skip", "{c}");
    assert_eq!(stage(&r, "test_policy"), "fail", "{c}");
    assert_eq!(
        stage(&r, "correctness_repo_tests"),
        "pass",
        "the PR's own rows still pass: {c}"
    );
    assert_eq!(stage(&r, "correctness_s1_grid"), "fail", "{c}");
    assert_eq!(r["test_selection"]["grid_channel"], "pytest", "{c}");
    let sev = severities(&r);
    assert!(
        sev.contains(&("blocker".into(), "correctness_s1_grid".into())),
        "{c}"
    );
    assert!(
        sev.contains(&("should-fix".into(), "test_policy".into())),
        "{c}"
    );
    assert_eq!(
        r["stages"]["test_policy"]["new_commented_rows"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{c}"
    );
    assert!(r["arch_coverage"].as_object().unwrap().is_empty(), "{c}");
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn test_only_tolerance_widening_blocks() {
    let py = python(false);
    let f = Fixture::new(
        &[Edit::Replace(
            "tests/test_rowsum.py",
            "atol=1e-6",
            "atol=1e-1",
        )],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(&py, false, &args(&argnames_grid(), &["--no-perf"]));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "BLOCK", "{c}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stage(&r, "test_policy"), "fail", "{c}");
    assert_eq!(
        severities(&r),
        vec![("blocker".to_string(), "test_policy".to_string())],
        "{c}"
    );
    let tol = &r["stages"]["test_policy"]["tolerances"];
    assert!(
        tol.as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == "atol" && t["widened"] == true),
        "{c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn kernel_change_plus_widening_needs_work() {
    let py = python(false);
    let f = Fixture::new(
        &[
            BENIGN,
            Edit::Replace("tests/test_rowsum.py", "atol=1e-6", "atol=1e-1"),
        ],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(
            &argnames_grid(),
            &["--no-perf", "--tol-table", "f32=1e-5,bf16=1e-2"],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "NEEDS_WORK", "{c}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stage(&r, "gpu_claim"), "pass", "{c}");
    let sev = severities(&r);
    assert!(sev.iter().all(|(s, _)| s != "blocker"), "{c}");
    // Widened with kernel code changed; being above the table's largest entry is recorded
    // beside the literal, not a second finding (the seed records the table alongside).
    assert_eq!(
        sev.iter()
            .filter(|(s, st)| s == "should-fix" && st == "test_policy")
            .count(),
        1,
        "{c}"
    );
    let widened = r["stages"]["test_policy"]["tolerances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["widened"] == true)
        .cloned()
        .unwrap();
    assert_eq!(widened["reference"], 1e-2, "{c}");
    assert_eq!(widened["above_reference"], true, "{c}");
    assert_eq!(f.fingerprint(), before);
    assert!(f.lock_free());
}

#[test]
fn target_that_ignores_its_grid_is_inconclusive() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(
            ROUTE,
            &[
                "--target",
                "scripts/check_rowsum_fixed.py",
                "--shape-arg",
                "--shapes",
                "--grid",
                "16,33",
                "--no-perf",
            ],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(r["test_selection"]["runner"], "script", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "pass", "{c}");
    assert_eq!(stage(&r, "correctness_s1_grid"), "skip", "{c}");
    assert!(r["test_selection"]["grid_channel"].is_null(), "{c}");
    assert!(
        r["test_selection"]["grid_channel_reason"]
            .as_str()
            .unwrap()
            .contains("does not consume"),
        "{c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn grid_that_duplicates_defaults_is_downgraded() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(
            ROUTE,
            &[
                "--target",
                "tests/test_rowsum_env.py",
                "--shape-env",
                "ROWSUM_SHAPES",
                "--grid",
                "4,8;3,5",
                "--no-perf",
            ],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(r["test_selection"]["grid_channel"], "env", "{c}");
    assert_eq!(
        r["test_selection"]["grid_independence"], "duplicates-target-defaults",
        "{c}"
    );
    assert_eq!(stage(&r, "correctness_s1_grid"), "skip", "{c}");
    assert_eq!(
        r["stages"]["correctness_s1_grid"]["exit_code"], 0,
        "the grid did pass: {c}"
    );
    assert_eq!(f.fingerprint(), before);
}

/// `--grid-novelty` fills in what a channel cannot show (no literal default to compare with) and
/// says so; it never overrides a grid found to duplicate the declared defaults.
#[test]
fn grid_novelty_is_an_assertion_for_unknown_independence_only() {
    let py = python(false);
    // Shapes from the environment, with a computed default: nothing to compare the grid with.
    let computed_default = Edit::Write(
        "tests/test_rowsum_env2.py",
        "import os\n\nimport numpy as np\nimport pytest\n\nfrom kern.rowsum import rowsum\n\n\ndef _default():\n    return \";\".join(f\"{m},{2 * m}\" for m in (2, 3))\n\n\nSHAPES = [tuple(int(v) for v in c.split(\",\")) for c in (os.environ.get(\"ROWSUM_SHAPES2\") or _default()).split(\";\")]\n\n\n@pytest.mark.parametrize(\"M,N\", SHAPES)\ndef test_rowsum_env2(M, N):\n    x = np.random.default_rng(1).standard_normal((M, N))\n    np.testing.assert_allclose(rowsum(x), x.sum(axis=1), rtol=1e-6, atol=1e-6)\n".into(),
    );
    let run = |target: &'static str,
               env: &'static str,
               grid: &'static str,
               novelty: Option<&'static str>| {
        let f = Fixture::with_base(std::slice::from_ref(&computed_default), &[BENIGN], &[]);
        let mut extra = vec![
            "--target",
            target,
            "--shape-env",
            env,
            "--grid",
            grid,
            "--no-perf",
        ];
        if let Some(n) = novelty {
            extra.extend(["--grid-novelty", n]);
        }
        let (out, r) = f.run(&py, true, &args(ROUTE, &extra));
        (ctx(&out, &r), r)
    };
    let (c, r) = run(
        "tests/test_rowsum_env2.py",
        "ROWSUM_SHAPES2",
        "16,33;5,130",
        None,
    );
    assert_eq!(r["test_selection"]["grid_channel"], "env", "{c}");
    assert_eq!(r["test_selection"]["grid_independence"], "unknown", "{c}");
    let (c, r) = run(
        "tests/test_rowsum_env2.py",
        "ROWSUM_SHAPES2",
        "16,33;5,130",
        Some("odd N past the tile"),
    );
    assert_eq!(
        r["test_selection"]["grid_independence"], "adds-coverage",
        "{c}"
    );
    let reason = r["test_selection"]["grid_independence_reason"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("asserted by --grid-novelty: odd N past the tile"),
        "{c}"
    );
    // The literal default `4,8;3,5` is known: the assertion cannot turn a duplicate into coverage.
    let (c, r) = run(
        "tests/test_rowsum_env.py",
        "ROWSUM_SHAPES",
        "4,8;3,5",
        Some("trust me"),
    );
    assert_eq!(
        r["test_selection"]["grid_independence"], "duplicates-target-defaults",
        "{c}"
    );
    assert!(
        r["test_selection"]["grid_independence_reason"]
            .as_str()
            .unwrap()
            .contains("ignored"),
        "{c}"
    );
    assert_eq!(stage(&r, "correctness_s1_grid"), "skip", "{c}");
}

#[test]
fn pr_added_failing_test_blocks() {
    let py = python(false);
    let new_test = "import numpy as np\n\nfrom kern.rowsum import rowsum\n\n\ndef test_rowsum_float64_exact():\n    x = np.random.default_rng(5).standard_normal((3, 9))\n    np.testing.assert_allclose(rowsum(x), x.sum(axis=1), rtol=1e-12, atol=0)\n";
    let f = Fixture::new(
        &[
            Edit::Replace(
                "kern/rowsum.py",
                "    out = np.zeros(M, dtype=x.dtype)\n",
                "    out = np.zeros(M, dtype=np.float32)\n",
            ),
            Edit::Write("tests/test_rowsum_new.py", new_test.to_string()),
        ],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(
            ROUTE,
            &["--target", "tests/test_rowsum_new.py", "--no-perf"],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "BLOCK", "{c}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        r["stages"]["baseline_control"]["base_state"], "target-not-present",
        "{c}"
    );
    assert_eq!(stage(&r, "correctness_repo_tests"), "fail", "{c}");
    assert!(
        severities(&r).contains(&("blocker".into(), "correctness_repo_tests".into())),
        "{c}"
    );
    assert_eq!(f.fingerprint(), before, "the PR-added file must be gone");
}

#[test]
fn merge_conflict_blocks() {
    let py = python(false);
    let f = Fixture::new(
        &[Edit::Replace("kern/rowsum.py", "TILE = 4\n", "TILE = 8\n")],
        &[Edit::Replace("kern/rowsum.py", "TILE = 4\n", "TILE = 16\n")],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(&py, false, &args(&argnames_grid(), &[]));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "BLOCK", "{c}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stage(&r, "merge_sim"), "fail", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "skip", "{c}");
    assert!(
        r["runs"].as_array().unwrap().is_empty(),
        "nothing runs after a conflict: {c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn deliberately_slower_kernel_needs_work() {
    let py = python(false);
    let f = Fixture::new(
        &[Edit::Replace(
            "kern/rowsum.py",
            "    for start in range(0, N, TILE):\n",
            "    for start in [s for s in range(0, N, TILE) for _ in range(12)][::12]:\n        for _ in range(11):\n            x[:, start:start + TILE].sum(axis=1)\n",
        )],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(&argnames_grid(), &["--perf-args", "bench_rowsum.py"]),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "NEEDS_WORK", "{c}");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stage(&r, "perf"), "fail", "{c}");
    let perf = &r["stages"]["perf"]["perf"];
    assert_eq!(perf["classification"], "regression", "{c}");
    assert_eq!(
        perf["order"],
        serde_json::json!(["base", "head", "base", "head", "base", "head"]),
        "interleaved: {c}"
    );
    assert!(
        perf["columns"][0]["ci_high"].as_f64().unwrap() < 0.95,
        "{c}"
    );
    assert!(
        !perf["regressed_rows"].as_array().unwrap().is_empty(),
        "{c}"
    );
    assert!(
        severities(&r).contains(&("should-fix".into(), "perf".into())),
        "{c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn perf_neutral_good_change_passes_on_a_claimed_gpu() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let head_sha = "0123456789abcdef0123456789abcdef01234567";
    let md = f.dir.path().join("out/summary.md");
    let (out, r) = f.run(
        &py,
        true,
        &args(
            &argnames_grid(),
            &[
                "--perf-args",
                "bench_rowsum.py",
                "--head-sha",
                head_sha,
                "--markdown",
                md.to_str().unwrap(),
            ],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "PASS", "{c}");
    assert_eq!(out.status.code(), Some(0));
    for s in [
        "merge_sim",
        "gpu_claim",
        "runtime_compat",
        "test_policy",
        "baseline_control",
        "correctness_repo_tests",
        "correctness_s1_grid",
        "execution_receipt",
    ] {
        assert_eq!(stage(&r, s), "pass", "{s}: {c}");
    }
    assert_eq!(stage(&r, "index_width_scan"), "info");
    assert_ne!(stage(&r, "perf"), "fail", "{c}");
    assert_eq!(r["repo"]["head"], head_sha);
    assert_eq!(r["repo"]["restored"], true);
    assert_eq!(r["arch_coverage"]["sm_90"], "runtime", "{c}");
    // The fixture package imports neither torch nor triton; their installed versions are still
    // part of the runtime identity (read from distribution metadata).
    for dist in ["torch", "triton"] {
        let installed = std::process::Command::new(&py)
            .args([
                "-c",
                &format!("import importlib.metadata as m; print(m.version('{dist}'))"),
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        assert_eq!(
            r["runtime_identity"][format!("{dist}_version")].as_str(),
            installed.as_deref(),
            "{dist}: {c}"
        );
    }
    assert_eq!(r["gpu_claim"]["vendor"], "fake");
    assert_eq!(
        r["test_selection"]["grid_independence"], "adds-coverage",
        "{c}"
    );
    let receipts = r["stages"]["execution_receipt"]["receipts"]
        .as_array()
        .unwrap();
    assert!(
        receipts
            .iter()
            .any(|x| x["executed_shapes"] == serde_json::json!(["16,33", "5,130"])),
        "{c}"
    );
    assert!(std::fs::read_to_string(&md).unwrap().contains("**PASS**"));
    let junit = f.dir.path().join("out/junit.xml");
    assert!(!junit.exists(), "written only when asked for");
    // Every run's log exists and is bound by its hash.
    for run in r["runs"].as_array().unwrap() {
        let log = f.out.parent().unwrap().join(run["log"].as_str().unwrap());
        assert_eq!(
            kg_contract::io::sha256_file(&log).unwrap(),
            run["log_sha256"].as_str().unwrap()
        );
    }
    assert_eq!(f.fingerprint(), before);
    assert!(f.lock_free(), "the GPU lock is released after the run");
}

#[test]
fn good_change_without_gpu_is_inconclusive_but_runs_correctness() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let (out, r) = f.run(&py, false, &args(&argnames_grid(), &["--no-perf"]));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(r["degraded_mode"], "NO_GPU");
    assert_eq!(r["device"], "cpu");
    assert_eq!(
        r["test_selection"]["gpu_requirement"], "not-required",
        "{c}"
    );
    assert_eq!(stage(&r, "correctness_repo_tests"), "pass", "{c}");
    assert_eq!(stage(&r, "correctness_s1_grid"), "pass", "{c}");
    assert!(r["arch_coverage"].as_object().unwrap().is_empty());
    assert!(r["gpu_claim"].is_null());
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn runtime_mismatch_is_inconclusive_not_blamed() {
    let py = python(false);
    let f = Fixture::new(
        &[Edit::Replace(
            "kern/__init__.py",
            "__version__ = \"0.1.0\"\n",
            "__version__ = \"0.2.0\"\n\nfrom kern import _rowsum_native  # prebuilt extension of the runtime image\n",
        )],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(&py, true, &args(&argnames_grid(), &["--no-perf"]));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stage(&r, "runtime_compat"), "skip", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "skip", "{c}");
    assert!(
        r["findings"].as_array().unwrap().is_empty(),
        "nothing attributed to the PR: {c}"
    );
    assert!(r["runtime_identity"]["module_path"].is_null(), "{c}");
    assert_eq!(f.fingerprint(), before);
}

/// A FlyDSL-shaped checkout (`python/flydsl`, version 0.2.0) validated against a prebuilt
/// runtime in PYLIB: only a matching version for a patch that leaves the runtime's sources alone
/// is accepted; anything else is an environment fact (INCONCLUSIVE), never blamed on the PR.
#[test]
fn flydsl_prebuilt_runtime_must_match_the_tree() {
    let py = python(false);
    let checkout = Edit::Write(
        "python/flydsl/_version.py",
        "__version__ = \"0.2.0\"\n".into(),
    );
    let init = Edit::Write(
        "python/flydsl/__init__.py",
        "from ._version import __version__  # noqa: F401\n".into(),
    );
    let run = |pylib_version: &str, edits: &[Edit]| {
        let f = Fixture::with_base(&[checkout.clone(), init.clone()], edits, &[]);
        let pylib = f.dir.path().join("pylib/flydsl");
        std::fs::create_dir_all(&pylib).unwrap();
        std::fs::write(
            pylib.join("__init__.py"),
            format!("__version__ = \"{pylib_version}\"\n"),
        )
        .unwrap();
        let before = f.fingerprint();
        let out = f
            .command(&py, true, &args(&argnames_grid(), &["--no-perf"]))
            .env("PYLIB", f.dir.path().join("pylib"))
            .output()
            .unwrap();
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f.out).unwrap()).unwrap();
        assert_eq!(f.fingerprint(), before);
        (out, r)
    };
    let (out, r) = run("0.2.0", &[BENIGN]);
    let c = ctx(&out, &r);
    assert_eq!(r["repo"]["kind"], "flydsl", "{c}");
    assert_eq!(stage(&r, "runtime_compat"), "pass", "{c}");
    let (out, r) = run("0.1.0", &[BENIGN]);
    let c = ctx(&out, &r);
    assert_eq!(stage(&r, "runtime_compat"), "skip", "{c}");
    let note = r["stages"]["runtime_compat"]["note"].as_str().unwrap();
    assert!(note.contains("`0.1.0`") && note.contains("`0.2.0`"), "{c}");
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2));
    let (out, r) = run(
        "0.2.0",
        &[Edit::Write(
            "python/flydsl/_version.py",
            "__version__ = \"0.2.0\"  # bumped build\n".into(),
        )],
    );
    let c = ctx(&out, &r);
    assert_eq!(stage(&r, "runtime_compat"), "skip", "{c}");
    assert!(
        r["stages"]["runtime_compat"]["note"]
            .as_str()
            .unwrap()
            .contains("changes FlyDSL runtime sources (python/flydsl/_version.py)"),
        "{c}"
    );
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert!(r["findings"].as_array().unwrap().is_empty(), "{c}");
}

#[test]
fn script_target_with_cli_grid_and_axis_passes() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &args(
            ROUTE,
            &[
                "--target",
                "scripts/check_rowsum.py",
                "--shape-arg",
                "--shapes",
                "--grid",
                "4,8;5,130",
                "--axis",
                "scale=--scale:2;3",
                "--no-perf",
            ],
        ),
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "PASS", "{c}");
    assert_eq!(r["test_selection"]["grid_channel"], "cli", "{c}");
    assert_eq!(r["test_selection"]["axis_state"], "proven", "{c}");
    assert_eq!(
        r["test_selection"]["axes"][0]["independence"], "adds-coverage",
        "{c}"
    );
    assert_eq!(
        r["test_selection"]["grid_independence"], "adds-coverage",
        "{c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn triton_kernel_through_the_interpreter_passes() {
    let py = python(true);
    let f = Fixture::new(
        &[Edit::Replace(
            "kern/tl_add.py",
            "    BLOCK = 64\n",
            "    BLOCK = 32\n",
        )],
        &[],
    );
    let before = f.fingerprint();
    let (out, r) = f.run(
        &py,
        true,
        &[
            "--target",
            "tests/test_tl_add.py",
            "--shape-env",
            "TL_ADD_SIZES",
            "--grid",
            "33;257",
            "--expected-route",
            "kern.tl_add:add",
            "--shape-vars",
            "n",
            "--no-perf",
        ],
    );
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "PASS", "{c}");
    assert_eq!(
        r["test_selection"]["grid_independence"], "adds-coverage",
        "{c}"
    );
    let receipts = r["stages"]["execution_receipt"]["receipts"]
        .as_array()
        .unwrap();
    assert!(
        receipts
            .iter()
            .any(|x| x["executed_shapes"] == serde_json::json!(["33", "257"])),
        "{c}"
    );
    assert_eq!(f.fingerprint(), before);
}

#[test]
fn sigterm_mid_run_restores_the_worktree_and_releases_the_gpu() {
    let py = python(false);
    let pid_file = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let slow = format!(
        "import os\nimport time\n\n\ndef test_slow():\n    with open({:?}, 'w') as f:\n        f.write(str(os.getpid()))\n    time.sleep(120)\n",
        pid_file.to_str().unwrap()
    );
    let f = Fixture::new(&[BENIGN, Edit::Write("tests/test_slow.py", slow)], &[]);
    std::fs::write(&pid_file, "").unwrap();
    let before = f.fingerprint();
    let mut child = f
        .command(
            &py,
            true,
            &[
                "--target",
                "tests/test_slow.py",
                "--runtime-module",
                "kern",
                "--no-perf",
            ],
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let target_pid = loop {
        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
        if let Ok(p) = text.trim().parse::<i32>() {
            break p;
        }
        assert!(
            start.elapsed().as_secs() < 120,
            "the slow target never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "kg-validate-pr ended before the target ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_ne!(
        f.fingerprint(),
        before,
        "the patch is applied while the target runs"
    );
    assert!(!f.lock_free(), "the GPU is held while the target runs");
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed().as_secs() < 30,
            "kg-validate-pr did not stop after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(2));
    assert_eq!(f.fingerprint(), before, "worktree restored byte for byte");
    assert!(f.lock_free(), "GPU lock released");
    assert!(
        !std::path::Path::new(&format!("/proc/{target_pid}")).exists(),
        "the target's process was killed"
    );
}
