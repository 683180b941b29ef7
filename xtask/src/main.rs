//! Project tasks, run as `cargo xtask <task>` (see matklad/cargo-xtask).
//!
//! - `setup`: create or refresh `.venv` with the exact pins of `python/requirements.txt`.
//! - `test`: everything CI checks (fmt, clippy, schema freshness, nextest, pytest, the bundled
//!   corpus end to end on the CPU, the red team on the CPU).
//! - `quickstart`: release build, `.venv`, then the bundled corpus on the best available device.
//! - `corpus [--device D] [--kg-bench PATH]`: the bundled corpus end to end alone, each
//!   workload's status checked, then the tail-mask mutants of `fixtures/mutants/`, each of
//!   which must fail (`test` runs it on the CPU; see `corpus/mod.rs`).
//! - `schemas [--check]`: write (or check) `docs/schemas/*.json` from kg-contract.
//! - `device-bundle DIR`: release binaries copied into DIR, for carrying to a GPU machine.
//! - `release ...`: a scored, hash-bound release bundle of a corpus (see `release.rs`).
//! - `wheel [--release]`: the `kernelgate` Python package (crates/py) built with maturin into
//!   `target/wheels/`; `test` builds it, installs it into `.venv` and runs its pytest tests.
//! - `slurm-test`: `kg-bench slurm` against a real single-node Slurm started in a temporary
//!   directory (see `slurm.rs`); `test` runs it unless `KG_SKIP_SLURM_TEST` says why not.
//! - `redteam [--device cpu|cuda:N]`: the adversarial corpus against kg-bench (see
//!   `redteam/mod.rs`); `test` runs it on the CPU.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};

mod corpus;
mod redteam;
mod release;
mod slurm;

const USAGE: &str = "usage: cargo xtask <setup|test|quickstart|corpus [--device D] [--kg-bench PATH]|schemas [--check]|device-bundle DIR|wheel [--release]|slurm-test|redteam|release>";
const REQUIREMENTS: &str = "python/requirements.txt";
const VENV: &str = ".venv";
const STAMP: &str = ".venv/.kg-requirements.sha256";
const BINARIES: [&str; 4] = ["kg-bench", "kg-gpu", "kg-heldout", "kg-validate-pr"];

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let root = project_root()?;
    std::env::set_current_dir(&root)
        .with_context(|| format!("failed to enter `{}`", root.display()))?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("setup") => setup(&root).map(|_| ()),
        Some("test") => test(&root),
        Some("quickstart") => quickstart(&root),
        Some("corpus") => corpus::task(&root, &args[1..]),
        Some("schemas") => schemas(&root, args.iter().any(|a| a == "--check")),
        Some("device-bundle") => {
            let dir = args.get(1).context(USAGE)?;
            device_bundle(&root, Path::new(dir))
        }
        Some("release") => release::release(&root, &args[1..]),
        Some("redteam") => redteam::redteam(&root, &args[1..]),
        Some("wheel") => {
            let python = setup(&root)?;
            let whl = wheel(&root, &python, args.iter().any(|a| a == "--release"))?;
            eprintln!("wheel: {}", whl.display());
            Ok(())
        }
        Some("slurm-test") => {
            let python = setup(&root)?;
            let kg_bench = redteam::default_kg_bench(&root)?;
            slurm::slurm_test(&root, &kg_bench, &python)
        }
        _ => bail!("{USAGE}"),
    }
}

fn project_root() -> Result<PathBuf> {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").context("run this through `cargo xtask`")?;
    Path::new(&manifest)
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

fn step(name: &str) {
    eprintln!("==> {name}");
}

/// Runs a command, failing with its name when it exits non-zero.
fn sh(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("failed to start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn venv_python(root: &Path) -> PathBuf {
    root.join(VENV).join("bin").join("python")
}

/// Creates `.venv` and installs the pinned requirements; a no-op (seconds) when already right.
fn setup(root: &Path) -> Result<PathBuf> {
    let req = root.join(REQUIREMENTS);
    let req_text =
        std::fs::read(&req).with_context(|| format!("failed to read `{}`", req.display()))?;
    let want = kg_contract::io::sha256_hex(&req_text);
    let python = venv_python(root);
    let stamp = root.join(STAMP);
    let imports = "import torch, triton, numpy, pytest, safetensors, maturin";
    if python.is_file() && std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == want) {
        let ok = Command::new(&python)
            .args(["-c", imports])
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            eprintln!("`.venv` is up to date with `{REQUIREMENTS}`");
            return Ok(python);
        }
        eprintln!("`.venv` exists but does not import its packages; reinstalling");
    }
    let t0 = Instant::now();
    if !python.is_file() {
        step("creating .venv");
        let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        sh(Command::new(&base).args(["-m", "venv", VENV])).with_context(|| {
            format!("failed to create `.venv` with `{base}`; install Python 3.10+ with the venv module, or set PYTHON to one")
        })?;
    }
    step(&format!(
        "installing {REQUIREMENTS} into .venv (torch is large; the first time takes minutes)"
    ));
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--quiet",
        "-r",
        REQUIREMENTS,
    ]);
    // A CI machine starts with an empty cache and may have little disk: caching the ~5 GB of
    // torch wheels would need that space twice.
    if std::env::var_os("CI").is_some() {
        pip.arg("--no-cache-dir");
    }
    sh(&mut pip).context(
        "pip could not install the requirements (torch needs about 6 GB free on disk; see pip's message above)",
    )?;
    sh(Command::new(&python).args(["-c", imports]))
        .context("packages installed but do not import")?;
    std::fs::write(&stamp, format!("{want}\n"))
        .with_context(|| format!("failed to write `{}`", stamp.display()))?;
    eprintln!("`.venv` ready in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(python)
}

fn test(root: &Path) -> Result<()> {
    let python = setup(root)?;
    step("cargo fmt --check");
    sh(cargo().args(["fmt", "--all", "--check"]))
        .context("formatting differs; run `cargo fmt --all`")?;
    step("cargo clippy --all-targets -- -D warnings");
    sh(cargo().args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--all-features",
        "--",
        "-D",
        "warnings",
    ]))?;
    step("schemas are fresh");
    schemas(root, true)?;
    step("cargo nextest run --workspace");
    sh(cargo()
        .args([
            "nextest",
            "run",
            "--workspace",
            "--all-features",
            "--no-fail-fast",
        ])
        .env("KG_TEST_PYTHON", &python))?;
    let py_tests = root.join("crates/exec/py/tests");
    if py_tests.is_dir() {
        step("pytest crates/exec/py/tests");
        sh(Command::new(&python)
            .args(["-m", "pytest", "-q"])
            .arg(&py_tests))?;
    }
    // The Python package as a user installs it: the wheel built, installed into `.venv`, and
    // its tests run against it (a small evaluation on the CPU among them).
    let whl = wheel(root, &python, false)?;
    step("pip install the kernelgate wheel; pytest crates/py/tests");
    sh(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "-q",
            "--force-reinstall",
            "--no-deps",
        ])
        .arg(&whl))?;
    sh(Command::new(&python)
        .args(["-m", "pytest", "-q"])
        .arg(root.join("crates/py/tests")))?;
    // The bundled corpus as a user runs it, on the CPU (about 4 minutes on 2 cores): validated,
    // then every problem's reference and every bundled solution (Triton through its
    // interpreter), each workload's status checked from its trace; then the tail-mask mutants
    // of `fixtures/mutants/`, each of which must fail a workload.
    let kg_bench = redteam::default_kg_bench(root)?;
    corpus::run_and_check(
        &kg_bench,
        &python,
        Path::new(corpus::CORE),
        Some(Path::new(corpus::MUTANTS)),
        "cpu",
        &corpus::out_dir(root),
    )?;
    // The red-team corpus on the CPU (about 5 minutes): every adversarial case caught, every
    // honest one PASSED, nothing left running, problem directories untouched.
    step("cargo xtask redteam --device cpu");
    let python_arg = python.to_string_lossy().into_owned();
    redteam::redteam(
        root,
        &[
            "--device".into(),
            "cpu".into(),
            "--kg-bench".into(),
            kg_bench.to_string_lossy().into_owned(),
            "--python".into(),
            python_arg,
        ],
    )?;
    // `kg-bench slurm` on a real single-node Slurm (about 3 minutes): a cancelled task
    // reported, retried, the shards merged and matched against a one-host run. `.ci/run`
    // installs slurm-wlm and munge, and sets KG_SKIP_SLURM_TEST with the reason when it cannot.
    match std::env::var("KG_SKIP_SLURM_TEST") {
        Ok(why) if !why.trim().is_empty() => {
            eprintln!("==> cargo xtask slurm-test: SKIPPED: {why}");
        }
        _ => {
            step("cargo xtask slurm-test");
            slurm::slurm_test(root, &kg_bench, &python)?;
        }
    }
    eprintln!("all checks passed");
    Ok(())
}

/// Builds the `kernelgate` wheel with maturin (from `.venv`) into `target/wheels/`, replacing
/// any earlier one; returns its path.
fn wheel(root: &Path, python: &Path, release: bool) -> Result<PathBuf> {
    let out = root.join("target/wheels");
    if out.is_dir() {
        for e in std::fs::read_dir(&out)?.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("kernelgate-") && name.ends_with(".whl") {
                std::fs::remove_file(e.path())?;
            }
        }
    }
    step(&format!(
        "maturin build -m crates/py/Cargo.toml{}",
        if release { " --release" } else { "" }
    ));
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "maturin",
        "build",
        "-m",
        "crates/py/Cargo.toml",
        "--out",
    ])
    .arg(&out)
    .current_dir(root);
    if release {
        cmd.arg("--release");
    }
    sh(&mut cmd).context("maturin is in python/requirements.txt: run `cargo xtask setup`")?;
    let whl = std::fs::read_dir(&out)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("kernelgate-") && n.ends_with(".whl"))
        })
        .with_context(|| format!("maturin wrote no kernelgate wheel into `{}`", out.display()))?;
    Ok(whl)
}

fn build_release() -> Result<()> {
    step("cargo build --release");
    let mut cmd = cargo();
    cmd.args(["build", "--release"]);
    for b in BINARIES {
        cmd.args(["--bin", b]);
    }
    sh(&mut cmd)
}

fn quickstart(root: &Path) -> Result<()> {
    build_release()?;
    let python = setup(root)?;
    let bench = root.join("target/release/kg-bench");
    let out = root.join("kg-results/core");
    // Every problem with its own reference as the solution (the baseline), then the Triton
    // solutions we ship, on the best device available (an idle GPU, else the CPU).
    let result =
        corpus::run_and_check(&bench, &python, Path::new(corpus::CORE), None, "auto", &out);
    // The report of both runs, with the roofline from kg-solar's analyses (written whatever
    // the statuses: it is where a failure is easiest to see).
    let report = out.join("report.html");
    let reported = quickstart_report(&bench, &python, &out, &report);
    eprintln!();
    eprintln!(
        "results: {}/{{reference,bundled}}/<problem>/<solution>.jsonl and summary.json",
        out.display()
    );
    match &reported {
        Ok(()) => eprintln!("report:  {} (open it in a browser)", report.display()),
        Err(e) => eprintln!("report:  not written: {e:#}"),
    }
    result.and(reported)
}

/// `solar analyze` of the corpus into `out/sol`, then `report` of both runs into `report`.
fn quickstart_report(bench: &Path, python: &Path, out: &Path, report: &Path) -> Result<()> {
    step("kg-bench solar analyze problems/core");
    sh(Command::new(bench)
        .args(["solar", "analyze", corpus::CORE, "--json", "--python"])
        .arg(python)
        .arg("-o")
        .arg(out.join("sol"))
        .stdout(std::process::Stdio::null()))?;
    step("kg-bench report");
    sh(Command::new(bench)
        .arg("report")
        .arg(out.join("reference"))
        .arg(out.join("bundled"))
        .arg("--sol")
        .arg(out.join("sol"))
        .arg("-o")
        .arg(report))
}

fn schemas(root: &Path, check: bool) -> Result<()> {
    let dir = root.join("docs/schemas");
    let mut stale = Vec::new();
    for (name, text) in kg_contract::schema::all() {
        let path = dir.join(name);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        if current == text {
            continue;
        }
        if check {
            stale.push(name);
        } else {
            kg_contract::io::write_atomic(&path, text.as_bytes())?;
            eprintln!("wrote {}", path.display());
        }
    }
    if !stale.is_empty() {
        bail!(
            "stale JSON schemas: {}; run `cargo xtask schemas`",
            stale.join(", ")
        );
    }
    Ok(())
}

fn device_bundle(root: &Path, dir: &Path) -> Result<()> {
    build_release()?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("failed to create `{}`", dir.display()))?;
    for b in BINARIES {
        let from = root.join("target/release").join(b);
        let to = dir.join(b);
        std::fs::copy(&from, &to).with_context(|| {
            format!("failed to copy `{}` to `{}`", from.display(), to.display())
        })?;
    }
    eprintln!("release binaries in `{}`", dir.display());
    Ok(())
}
