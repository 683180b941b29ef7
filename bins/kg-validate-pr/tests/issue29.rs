//! Issue 29 item 4 (and item 8 for this binary): kg-validate-pr must name the cause that
//! actually decided a run. Each case builds its own fixture on top of `fixtures/validate/base`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::{Edit, Fixture, ctx, python, stage};

const BENIGN: Edit = Edit::Replace(
    "kern/rowsum.py",
    "    M, N = x.shape\n",
    "    M, N = x.shape  # rows, columns\n",
);

fn argnames(grid: &'static str) -> Vec<&'static str> {
    vec![
        "--expected-route",
        "kern.rowsum:rowsum",
        "--shape-vars",
        "M,N",
        "--target",
        "tests/test_rowsum.py",
        "--shape-argnames",
        "M,N",
        "--grid",
        grid,
        "--no-perf",
    ]
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// The one-line verdict: the last stderr line that starts with the label.
fn verdict_line(out: &Output) -> String {
    stderr(out)
        .lines()
        .rev()
        .find(|l| l.starts_with("kg-validate-pr: "))
        .unwrap_or_else(|| panic!("no verdict line; stderr:\n{}", stderr(out)))
        .to_string()
}

/// `git` with the repository's environment stripped, run in `dir`; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .expect("the git CLI is needed to build a sparse checkout");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The PR adds an import of a package the interpreter does not have: the run must say so,
/// naming the module, and must not call it a GPU requirement or a defect of the PR.
#[test]
fn missing_dependency_at_collection_is_named() {
    let py = python(false);
    let edit = Edit::Replace(
        "tests/test_rowsum.py",
        "import pytest\n",
        "import pytest\n\nimport kg_absent_dependency  # noqa: F401\n",
    );
    // No GPU: the no-device run is what used to become `gpu_requirement: required`.
    let f = Fixture::new(std::slice::from_ref(&edit), &[]);
    let before = f.fingerprint();
    let (out, r) = f.run(&py, false, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2), "{c}");
    assert_ne!(
        r["test_selection"]["gpu_requirement"], "required",
        "a missing package says nothing about the GPU: {c}"
    );
    assert_eq!(
        r["test_selection"]["gpu_requirement"], "not-evaluated",
        "{c}"
    );
    let note = r["stages"]["correctness_repo_tests"]["note"]
        .as_str()
        .unwrap();
    assert!(
        note.contains("missing dependency `kg_absent_dependency`")
            && note.contains("tests/test_rowsum.py"),
        "{c}"
    );
    assert!(!note.contains("gpu_requirement is `required`"), "{c}");
    // The cause is a typed field of the run record, not only words in a note.
    let head = r["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|run| run["name"] == "head-repo")
        .expect("a head-repo run");
    assert_eq!(head["cause"]["kind"], "missing-dependency", "{c}");
    assert_eq!(head["cause"]["module"], "kg_absent_dependency", "{c}");
    assert_eq!(head["cause"]["during"], "collection", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "skip", "{c}");
    assert!(
        r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["severity"] == "note"),
        "an environment fact is not a finding against the PR: {c}"
    );
    assert_eq!(f.fingerprint(), before);

    // A claimed GPU: base passes, head cannot be collected. That is not "passes on base and
    // fails on head" (a blocker): the environment lacks the package.
    let f = Fixture::new(&[edit], &[]);
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "skip", "{c}");
    assert!(
        r["stages"]["correctness_repo_tests"]["note"]
            .as_str()
            .unwrap()
            .contains("missing dependency `kg_absent_dependency`"),
        "{c}"
    );
    assert!(
        r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["severity"] == "note"),
        "{c}"
    );
    let line = verdict_line(&out);
    assert!(
        line.contains("decided by correctness_repo_tests (skip)")
            && line.contains("kg_absent_dependency"),
        "{line}"
    );
}

/// A module of the checkout itself that head cannot import is the PR's defect, and the cause
/// still names the module.
#[test]
fn missing_checkout_module_is_a_failure_that_names_the_module() {
    let py = python(false);
    let f = Fixture::new(
        &[Edit::Replace(
            "tests/test_rowsum.py",
            "from kern.rowsum import rowsum\n",
            "from kern.rowsum_gone import rowsum\n",
        )],
        &[],
    );
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "BLOCK", "{c}");
    assert_eq!(stage(&r, "correctness_repo_tests"), "fail", "{c}");
    let note = r["stages"]["correctness_repo_tests"]["note"]
        .as_str()
        .unwrap();
    assert!(
        note.contains("`kern.rowsum_gone`") && note.contains("the checkout"),
        "{c}"
    );
}

#[test]
fn misspelt_target_is_no_such_target_with_close_matches() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let out = f
        .command(
            &py,
            true,
            &["--target", "tests/test_rowsun.py", "--no-perf"],
        )
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("no such target `tests/test_rowsun.py`"),
        "{err}"
    );
    assert!(
        err.contains("did you mean `tests/test_rowsum.py`"),
        "close match named: {err}"
    );
    assert!(!err.contains("--runtime-module"), "{err}");
    assert!(!f.out.exists(), "nothing ran, so no report: {err}");
    assert_eq!(f.fingerprint(), before);

    // Nothing close: name what exists where the user looked.
    let out = f
        .command(&py, true, &["--target", "tests/zz.py", "--no-perf"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no such target `tests/zz.py`"), "{err}");
    for existing in [
        "tests/test_rowsum.py",
        "tests/test_rowsum_env.py",
        "tests/test_tl_add.py",
    ] {
        assert!(err.contains(existing), "{existing} listed: {err}");
    }
    assert!(!f.out.exists(), "{err}");

    // A target the patch creates is not misspelt.
    let new_test = "def test_new():\n    assert True\n".to_string();
    let f = Fixture::new(&[Edit::Write("tests/test_new.py", new_test)], &[]);
    let (out, r) = f.run(
        &py,
        true,
        &[
            "--target",
            "tests/test_new.py",
            "--runtime-module",
            "kern",
            "--no-perf",
        ],
    );
    let c = ctx(&out, &r);
    assert_eq!(stage(&r, "correctness_repo_tests"), "pass", "{c}");
}

#[test]
fn malformed_grid_is_rejected_before_any_stage() {
    let py = python(false);
    let f = Fixture::new(&[BENIGN], &[]);
    let before = f.fingerprint();
    let logs = f.out.parent().unwrap().join("validation_report.logs");
    let start = std::time::Instant::now();
    // Four values in one cell for two argnames (the `;` was forgotten).
    let out = f
        .command(&py, true, &argnames("16,33,5,130"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line: {err}"));
    assert!(
        line.contains("--grid") && line.contains("--shape-argnames"),
        "{line}"
    );
    assert!(line.contains("argname `N`"), "{line}");
    assert!(
        line.contains("--grid '16,33;5,130'"),
        "the fix is spelt out: {line}"
    );
    assert!(!f.out.exists(), "no report: {err}");
    assert!(!logs.exists(), "no run happened: {err}");
    assert!(
        start.elapsed().as_secs() < 5,
        "rejected up front, not after the stages ran"
    );
    assert_eq!(f.fingerprint(), before);
    assert!(f.lock_free());

    // Too few values: the argname that gets none is named.
    let out = f
        .command(&py, true, &argnames("16;5,130"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--grid") && err.contains("argname `N`") && err.contains("`16`"),
        "{err}"
    );
    assert!(!f.out.exists(), "{err}");

    // An empty value.
    let out = f
        .command(&py, true, &argnames("16,;5,130"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("argname `N`") && err.contains("empty"),
        "{err}"
    );
    assert!(!f.out.exists(), "{err}");
}

#[test]
fn verdict_line_names_the_first_stage_that_decided_it() {
    let py = python(false);
    // BLOCK from merge_sim.
    let f = Fixture::new(
        &[Edit::Replace("kern/rowsum.py", "TILE = 4\n", "TILE = 8\n")],
        &[Edit::Replace("kern/rowsum.py", "TILE = 4\n", "TILE = 16\n")],
    );
    let (out, r) = f.run(&py, false, &argnames("16,33;5,130"));
    let line = verdict_line(&out);
    assert_eq!(r["verdict"], "BLOCK", "{}", ctx(&out, &r));
    assert!(
        line.starts_with("kg-validate-pr: BLOCK, decided by merge_sim (blocker): merge conflict"),
        "{line}"
    );
    // INCONCLUSIVE: runtime_compat is the first stage that is not `pass` on a claimed GPU.
    let f = Fixture::new(
        &[Edit::Replace(
            "kern/__init__.py",
            "__version__ = \"0.1.0\"\n",
            "__version__ = \"0.2.0\"\n\nfrom kern import _rowsum_native  # prebuilt extension\n",
        )],
        &[],
    );
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let line = verdict_line(&out);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{}", ctx(&out, &r));
    assert!(
        line.starts_with(
            "kg-validate-pr: INCONCLUSIVE, decided by runtime_compat (skip): runtime mismatch"
        ),
        "{line}"
    );
    assert!(line.contains("also incomplete:"), "{line}");
    // NO_GPU: gpu_claim comes first.
    let f = Fixture::new(&[BENIGN], &[]);
    let (out, r) = f.run(&py, false, &argnames("16,33;5,130"));
    let line = verdict_line(&out);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{}", ctx(&out, &r));
    assert!(
        line.starts_with("kg-validate-pr: INCONCLUSIVE, decided by gpu_claim (skip): "),
        "{line}"
    );
}

fn sparse_fixture(edits: &[Edit]) -> Fixture {
    let docs = Edit::Write("docs/guide.md", "# guide\n".into());
    let more = Edit::Write("docs/more/deep.md", "deep\n".into());
    let f = Fixture::with_base(&[docs, more], edits, &[]);
    git(
        &f.repo,
        &["sparse-checkout", "set", "kern", "tests", "scripts"],
    );
    assert!(!f.repo.join("docs").exists(), "docs/ is outside the cone");
    assert_eq!(
        git(&f.repo, &["status", "--porcelain"]),
        "",
        "the sparse checkout is clean to git"
    );
    f
}

#[test]
fn sparse_checkout_whose_git_status_is_clean_is_clean() {
    let py = python(false);
    let f = sparse_fixture(&[BENIGN]);
    let before = f.fingerprint();
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(stage(&r, "merge_sim"), "pass", "{c}");
    assert_eq!(r["verdict"], "PASS", "{c}");
    assert_eq!(r["repo"]["restored"], true, "{c}");
    assert_eq!(f.fingerprint(), before, "docs/ is not materialised");
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");

    // A patch that touches a path outside the sparse checkout cannot be applied there: say so,
    // and do not call it a merge conflict.
    let f = sparse_fixture(&[
        BENIGN,
        Edit::Replace("docs/guide.md", "# guide\n", "# the guide\n"),
    ]);
    let before = f.fingerprint();
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(r["verdict"], "INCONCLUSIVE", "{c}");
    assert_eq!(out.status.code(), Some(2), "{c}");
    assert_eq!(stage(&r, "merge_sim"), "skip", "{c}");
    let note = r["stages"]["merge_sim"]["note"].as_str().unwrap();
    assert!(
        note.contains("outside the sparse checkout") && note.contains("docs/guide.md"),
        "{c}"
    );
    assert!(r["findings"].as_array().unwrap().is_empty(), "{c}");
    assert_eq!(f.fingerprint(), before);
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");
}

/// A sparse *index* (directory entries) is beyond libgit2: refused with the command that keeps
/// the checkout sparse but the index readable, not reported as a git failure.
#[test]
fn sparse_index_is_refused_with_the_fix() {
    let py = python(false);
    let f = sparse_fixture(&[BENIGN]);
    git(
        &f.repo,
        &[
            "sparse-checkout",
            "set",
            "--sparse-index",
            "kern",
            "tests",
            "scripts",
        ],
    );
    let before = f.fingerprint();
    let out = f
        .command(&py, true, &argnames("16,33;5,130"))
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("sparse index")
            && err.contains("git sparse-checkout reapply --no-sparse-index"),
        "{err}"
    );
    assert!(!f.out.exists(), "{err}");
    assert_eq!(f.fingerprint(), before);
}

/// skip-worktree entries set by hand (no sparse-checkout): one deleted, one edited locally;
/// `git status` is clean, and the run hands both back as they were.
#[test]
fn skip_worktree_entries_are_not_dirty_and_are_left_alone() {
    let py = python(false);
    let f = Fixture::with_base(
        &[
            Edit::Write("notes/a.txt", "a\n".into()),
            Edit::Write("notes/b.txt", "b\n".into()),
        ],
        &[BENIGN],
        &[],
    );
    git(
        &f.repo,
        &[
            "update-index",
            "--skip-worktree",
            "notes/a.txt",
            "notes/b.txt",
        ],
    );
    std::fs::remove_file(f.repo.join("notes/a.txt")).unwrap();
    std::fs::write(f.repo.join("notes/b.txt"), "local edit\n").unwrap();
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");
    let before = f.fingerprint();
    let (out, r) = f.run(&py, true, &argnames("16,33;5,130"));
    let c = ctx(&out, &r);
    assert_eq!(stage(&r, "merge_sim"), "pass", "{c}");
    assert_eq!(r["verdict"], "PASS", "{c}");
    assert_eq!(
        f.fingerprint(),
        before,
        "neither entry was restored from HEAD"
    );
    assert!(!f.repo.join("notes/a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(f.repo.join("notes/b.txt")).unwrap(),
        "local edit\n"
    );
}

#[test]
fn help_lists_the_exit_codes() {
    for flag in ["-h", "--help"] {
        let out = Command::new(support::BIN).arg(flag).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        let section: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim() != "Exit codes:")
            .skip(1)
            .take(3)
            .map(str::trim)
            .collect();
        assert_eq!(
            section,
            [
                "0  PASS",
                "1  BLOCK or NEEDS_WORK",
                "2  INCONCLUSIVE; also bad input, a validator error, or SIGINT/SIGTERM/SIGHUP (an `error:` line, no report)"
            ],
            "{flag}:\n{text}"
        );
    }
}
