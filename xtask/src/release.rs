//! `cargo xtask release --corpus DIR --hardware NAME [--device D] [--backend aten|fx]
//! [--candidate reference|bundled|DIR] [--timing default|events] [--kg-bench PATH]
//! [--python PATH] -o OUT`
//!
//! corpus validate -> solar analyze every workload -> baseline run (each problem's reference)
//! -> candidate run -> score -> OUT/release-bundle.json, binding by SHA-256 the corpus copy,
//! both trace sets, every SOL manifest, the tool version and the device identity. Verify the
//! result with `kg-bench score official OUT/release-bundle.json`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use kg_contract::Problem;
use kg_solar::ExtractionPath;
use kg_solar::analysis::{analysis_dir, analyze_batch, write_analysis};

const USAGE: &str = "usage: cargo xtask release --corpus DIR --hardware NAME [--device D] [--backend aten|fx] [--candidate reference|bundled|DIR] [--timing default|events] [--kg-bench PATH] [--python PATH] -o OUT";

struct Opts {
    corpus: PathBuf,
    hardware: String,
    device: String,
    backend: ExtractionPath,
    candidate: String,
    /// `kg-bench run --timing` for both runs (`default` or `events`).
    timing: String,
    kg_bench: Option<PathBuf>,
    python: Option<PathBuf>,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        corpus: PathBuf::new(),
        hardware: String::new(),
        device: "auto".into(),
        backend: ExtractionPath::Aten,
        candidate: "reference".into(),
        timing: "default".into(),
        kg_bench: None,
        python: None,
        out: PathBuf::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("`{a}` needs a value; {USAGE}"))
        };
        match a.as_str() {
            "--corpus" => o.corpus = PathBuf::from(val()?),
            "--hardware" => o.hardware = val()?,
            "--device" => o.device = val()?,
            "--backend" => {
                o.backend = match val()?.as_str() {
                    "aten" => ExtractionPath::Aten,
                    "fx" => ExtractionPath::Fx,
                    other => bail!("unknown backend `{other}`; expected aten or fx"),
                }
            }
            "--candidate" => o.candidate = val()?,
            "--timing" => {
                o.timing = val()?;
                if !matches!(o.timing.as_str(), "default" | "events") {
                    bail!(
                        "unknown --timing `{}`; expected default or events (both runs must be timed one way)",
                        o.timing
                    );
                }
            }
            "--kg-bench" => o.kg_bench = Some(PathBuf::from(val()?)),
            "--python" => o.python = Some(PathBuf::from(val()?)),
            "-o" | "--output" => o.out = PathBuf::from(val()?),
            other => bail!("unknown argument `{other}`; {USAGE}"),
        }
    }
    if o.corpus.as_os_str().is_empty() || o.hardware.is_empty() || o.out.as_os_str().is_empty() {
        bail!("{USAGE}");
    }
    Ok(o)
}

fn problem_dirs(path: &Path) -> Result<Vec<PathBuf>> {
    if path.join("definition.json").is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs = Vec::new();
    for e in
        std::fs::read_dir(path).with_context(|| format!("failed to read `{}`", path.display()))?
    {
        let p = e?.path();
        if p.is_dir() {
            dirs.extend(problem_dirs(&p)?);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Copies a directory tree, returning the copied files.
fn copy_tree(from: &Path, to: &Path) -> Result<Vec<PathBuf>> {
    kg_contract::tree::copy_tree(from, to, kg_contract::tree::CopyOptions::default())
        .with_context(|| format!("failed to copy `{}` to `{}`", from.display(), to.display()))
}

fn kg_bench_run(o: &Opts, root: &Path, corpus: &Path, solutions: &str, out: &Path) -> Result<()> {
    let bin = o
        .kg_bench
        .clone()
        .unwrap_or_else(|| root.join("target/release/kg-bench"));
    let mut cmd = Command::new(&bin);
    cmd.arg("run")
        .arg(corpus)
        .arg("--solutions")
        .arg(solutions)
        .arg("-o")
        .arg(out);
    cmd.arg("--device").arg(&o.device);
    cmd.arg("--timing").arg(&o.timing);
    if let Some(p) = &o.python {
        cmd.arg("--python").arg(p);
    }
    eprintln!("==> {cmd:?}");
    let status = cmd
        .status()
        .with_context(|| format!("failed to start `{}`; build it with `cargo build --release -p kg-bench` or pass --kg-bench", bin.display()))?;
    // Exit 1 means some workload did not pass: the score counts it as 0; 2+ is unusable.
    if !matches!(status.code(), Some(0 | 1)) {
        bail!("`{}` run failed with {status}", bin.display());
    }
    Ok(())
}

/// The score's error, with the way out when the two runs were timed by different methods: a
/// workload whose CUPTI spans were refused in one run is timed by events there, and timing
/// both runs by events makes every pair comparable. The traces stay in `out`.
fn explain_score_error(e: kg_score::ScoreError, timing: &str, out: &Path) -> anyhow::Error {
    if e.is_timing_method_mismatch() && timing == "default" {
        anyhow::anyhow!(
            "{e}\nthe baseline and candidate traces are in `{}`; to release with one timing method throughout, run again with `--timing events`",
            out.display()
        )
    } else {
        e.into()
    }
}

/// Runs the release pipeline.
pub fn release(root: &Path, args: &[String]) -> Result<()> {
    let o = parse(args)?;
    let out = if o.out.is_absolute() {
        o.out.clone()
    } else {
        root.join(&o.out)
    };
    if out.join(kg_score::bundle::BUNDLE_FILE).exists() {
        bail!(
            "`{}` already holds a bundle; choose an empty output directory",
            out.display()
        );
    }
    // 1. corpus validate, and copy it into the bundle so every path is bundle-relative.
    let dirs = problem_dirs(&o.corpus)?;
    if dirs.is_empty() {
        bail!("`{}` holds no problems", o.corpus.display());
    }
    eprintln!("==> validating {} problems", dirs.len());
    let corpus_out = out.join("corpus");
    let mut corpus_files = Vec::new();
    for d in &dirs {
        Problem::load(d)
            .with_context(|| format!("corpus validation failed for `{}`", d.display()))?;
        let rel = d.strip_prefix(&o.corpus).unwrap_or(d);
        corpus_files.extend(copy_tree(d, &corpus_out.join(rel))?);
    }
    let problems: Vec<Problem> = problem_dirs(&corpus_out)?
        .iter()
        .map(|d| Problem::load(d).with_context(|| format!("failed to load `{}`", d.display())))
        .collect::<Result<_>>()?;
    // 2. solar analyze every workload (one interpreter start).
    let hw = kg_solar::hardware::load(&o.hardware)?;
    let python = kg_exec::find_python_env(o.python.as_deref(), root)?.path;
    let items: Vec<(&Problem, usize, ExtractionPath)> = problems
        .iter()
        .flat_map(|p| (0..p.workloads.len()).map(move |i| (p, i, o.backend)))
        .collect();
    eprintln!(
        "==> solar analyze: {} workloads, backend {}, hardware {}",
        items.len(),
        o.backend,
        hw.spec.name
    );
    let mut solar_dirs = Vec::new();
    for ((p, i, _), r) in items.iter().zip(analyze_batch(&items, &python, &hw)?) {
        let a = r?;
        let d = analysis_dir(
            &out.join("solar"),
            &p.definition.name,
            &p.workloads[*i].workload.uuid,
        );
        write_analysis(&d, &a, &hw)?;
        solar_dirs.push(d);
    }
    // 3-4. baseline (references) and candidate runs on the device.
    let base_dir = out.join("baseline");
    let cand_dir = out.join("candidate");
    kg_bench_run(&o, root, &corpus_out, "reference", &base_dir)?;
    kg_bench_run(&o, root, &corpus_out, &o.candidate, &cand_dir)?;
    // 5. score and bundle.
    let created = kg_proc::now_utc();
    let assembled = kg_score::bundle::assemble(&kg_score::bundle::Inputs {
        root: out.clone(),
        corpus_files,
        baseline: ("reference".into(), kg_score::trace_files(&base_dir)?),
        candidate: (o.candidate.clone(), kg_score::trace_files(&cand_dir)?),
        solar_dirs,
        hardware: (hw.spec.name.clone(), hw.sha256.clone()),
        backend: o.backend.as_str().into(),
        created,
    });
    let (bundle, report) = assembled.map_err(|e| explain_score_error(e, &o.timing, &out))?;
    println!(
        "release bundle `{}`: SOL score {:.6} over {} problems / {} workloads on {} ({})",
        out.join(kg_score::bundle::BUNDLE_FILE).display(),
        report.overall,
        report.problems.len(),
        report.workloads.len(),
        bundle.device,
        bundle.timing_method
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixed_timing_methods_point_to_events_and_other_errors_pass_through() {
        let out = Path::new("/tmp/rel");
        let mixed = || kg_score::ScoreError::Mismatch {
            what: "timing method",
            candidate: "device_event_sync".into(),
            baseline: "cupti".into(),
            workload: "w1".into(),
        };
        let msg = explain_score_error(mixed(), "default", out).to_string();
        assert!(
            msg.contains("--timing events") && msg.contains("/tmp/rel"),
            "{msg}"
        );
        assert!(msg.contains("candidate `device_event_sync`"), "{msg}");
        // Already timed by events: nothing to suggest.
        let msg = explain_score_error(mixed(), "events", out).to_string();
        assert!(!msg.contains("--timing events"), "{msg}");
        let within_baseline = kg_score::ScoreError::BaselineMixed {
            definition: "d".into(),
            workload: "w".into(),
            what: "timing method",
            value: "device_event_sync".into(),
            first: "cupti".into(),
        };
        let msg = explain_score_error(within_baseline, "default", out).to_string();
        assert!(msg.contains("--timing events"), "{msg}");
        let device = kg_score::ScoreError::Mismatch {
            what: "device",
            candidate: "a".into(),
            baseline: "b".into(),
            workload: "w".into(),
        };
        let msg = explain_score_error(device, "default", out).to_string();
        assert!(!msg.contains("--timing events"), "{msg}");
    }
}
