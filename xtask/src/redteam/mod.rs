//! `cargo xtask redteam`: runs the red-team corpus in `fixtures/adversarial/` through
//! `kg-bench evaluate` and checks that every adversarial solution is caught, every honest one
//! passes, no process survives and the problem directory is byte-identical afterwards.
//!
//! Each case runs in a scratch directory: a copy of its problem directory (so a candidate that
//! plants files cannot touch the checkout), a working directory for kg-bench and a `TMPDIR`
//! holding kg-bench's private worker directory. kg-bench runs as a subprocess with `--json`,
//! short limits and a marker environment variable. This process makes itself a child
//! subreaper, so every process a candidate leaves behind (also one that called `setsid`) is
//! re-parented here; those, and any process still carrying the marker, are reported and killed
//! by pid.
//!
//! Verdict per case (see `fixtures/adversarial/README.md`):
//! - honest (`expected: PASSED`): every workload PASSED and side effects clean, else
//!   FALSE-POSITIVE;
//! - adversarial: every workload is not PASSED, or PASSED with `0 < speedup <= max_speedup`
//!   where the manifest gives `max_speedup` (a timing hack that gained nothing); and side
//!   effects clean. Otherwise MISSED. A case caught with another status than the expected
//!   one is `caught` (`--strict` makes it a failure).
//!
//! Not for: measuring overhead or GPU evidence (that is `docs/evidence/integrity.md`).
//!
//! Layout: `manifest` (the cases), `probe` (what kg-bench supports), `run` (one case: spawn,
//! watch, sweep, collect), `tree` and `host` (what a case could change, and putting it back),
//! `checks` (the checks on a case's output), `verdict` (judging a case), `report` (the table).

mod checks;
mod host;
mod manifest;
mod probe;
mod report;
mod run;
#[cfg(test)]
mod tests;
mod tree;
mod verdict;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use host::{
    Binary, DECOY, Restore, SECRET_VARS, interpreter, random_hex, site_dirs, startup_files,
};
use manifest::{MANIFEST, check_fresh, load_manifest};
use probe::{Probe, probe_kg_bench, skip_reason};
use report::{finish, got_summary};
use run::run_case;
use verdict::{Verdict, judge};

const USAGE: &str = "usage: cargo xtask redteam [--device cpu|cuda:N] [--kg-bench PATH] [--python PATH] [--case NAME,...] [--strict] [--keep]";

/// Command-line options of `cargo xtask redteam`.
#[derive(Debug)]
struct Opts {
    device: String,
    kg_bench: Option<PathBuf>,
    python: Option<PathBuf>,
    cases: Option<Vec<String>>,
    strict: bool,
    keep: bool,
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        device: "cpu".into(),
        kg_bench: None,
        python: None,
        cases: None,
        strict: false,
        keep: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String> {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--device" => o.device = value("--device")?,
            "--kg-bench" => o.kg_bench = Some(PathBuf::from(value("--kg-bench")?)),
            "--python" => o.python = Some(PathBuf::from(value("--python")?)),
            "--case" => o.cases = Some(value("--case")?.split(',').map(str::to_string).collect()),
            "--strict" => o.strict = true,
            "--keep" => o.keep = true,
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    if o.device != "cpu" && !o.device.starts_with("cuda:") && !o.device.starts_with("rocm:") {
        bail!("--device must be cpu, cuda:N or rocm:N, got `{}`", o.device);
    }
    Ok(o)
}

/// What every case is checked against, set up once per run.
struct Ctx {
    probe: Probe,
    /// (variable, random value) planted in kg-bench's environment.
    secrets: Vec<(String, String)>,
    /// The interpreter's site directories (start-up files checked there).
    site_dirs: Vec<PathBuf>,
    /// The run's kernelgate cache (`KG_CACHE_DIR`), with decoys of other solutions' caches.
    cache: PathBuf,
}

/// Builds kg-bench (debug) and returns its path.
pub(crate) fn default_kg_bench(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(&cargo)
        .args(["build", "-p", "kg-bench"])
        .current_dir(root)
        .status()
        .with_context(|| format!("failed to start `{cargo} build -p kg-bench`"))?;
    if !st.success() {
        bail!("`cargo build -p kg-bench` failed ({st}); or pass --kg-bench PATH");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let p = target.join("debug").join("kg-bench");
    if !p.is_file() {
        bail!(
            "built kg-bench, but `{}` does not exist; pass --kg-bench PATH",
            p.display()
        );
    }
    Ok(p)
}

/// Runs the red-team corpus (see the module docs); fails on any miss, false positive or error.
pub fn redteam(root: &Path, args: &[String]) -> Result<()> {
    let opts = parse_args(args)?;
    let mut cases = load_manifest(root)?;
    check_fresh(root, &cases)?;
    let on_gpu = opts.device != "cpu";
    let skipped_gpu = cases.iter().filter(|c| c.gpu_only && !on_gpu).count();
    cases.retain(|c| on_gpu || !c.gpu_only);
    if let Some(names) = &opts.cases {
        for n in names {
            if !cases.iter().any(|c| &c.case == n) {
                bail!(
                    "--case `{n}`: no such case for device `{}` in {MANIFEST}",
                    opts.device
                );
            }
        }
        cases.retain(|c| names.contains(&c.case));
    }
    let kg_bench = match &opts.kg_bench {
        Some(p) => p.clone(),
        None => default_kg_bench(root)?,
    };
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!(
            "warning: failed to become a child subreaper ({e}); detached survivors are found by marker only"
        );
    }
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let work = std::env::temp_dir().join(format!("kg-redteam-{nonce}"));
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create `{}`", work.display()))?;
    let probe = probe_kg_bench(&kg_bench);
    let python = interpreter(root, &opts);
    let site = site_dirs(&python)?;
    let cache = work.join("cache");
    for d in ["triton", "torch-extensions-v1"] {
        let decoy = cache.join(d).join(DECOY);
        std::fs::create_dir_all(&decoy)
            .with_context(|| format!("failed to create `{}`", decoy.display()))?;
        std::fs::write(
            decoy.join("README"),
            "another solution's cache (red-team decoy)\n",
        )
        .with_context(|| format!("failed to write into `{}`", decoy.display()))?;
    }
    // Put back, however the run ends, what a case may have planted outside its scratch.
    let _restore = Restore {
        baseline: startup_files(&site),
        dirs: site.clone(),
        binary: Binary::read(&kg_bench).ok(),
    };
    let ctx = Ctx {
        probe,
        secrets: SECRET_VARS
            .iter()
            .map(|v| (v.to_string(), format!("kgrt{}", random_hex(16))))
            .collect(),
        site_dirs: site,
        cache,
    };
    eprintln!(
        "==> redteam: {} case(s) on {} ({} gpu-only case(s) skipped), kg-bench `{}` (verify: {}, --memory-limit: {}); start-up files checked in {} site dir(s) of `{}`",
        cases.len(),
        opts.device,
        skipped_gpu,
        kg_bench.display(),
        if ctx.probe.verify { "yes" } else { "no" },
        if ctx.probe.memory_limit { "yes" } else { "no" },
        ctx.site_dirs.len(),
        python.display()
    );
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut planted_before = false;
    for (i, c) in cases.iter().enumerate() {
        eprint!("[{}/{}] {} ... ", i + 1, cases.len(), c.case);
        if let Some(reason) = skip_reason(c, &ctx.probe) {
            eprintln!("SKIPPED: {reason}");
            rows.push((c.clone(), "-".into(), Verdict::Skipped, reason));
            continue;
        }
        let g = run_case(root, &opts, &kg_bench, &work, &nonce, c, &ctx)?;
        // A start-up file or binary a case planted stays for the next case only (so a victim
        // case such as poisoned_later_judge shows whether it took effect), then goes.
        if planted_before {
            _restore.now();
        }
        planted_before = !g.startup_diff.is_empty() || g.binary_diff.is_some();
        let (v, why) = judge(c, &g);
        let got = got_summary(&g);
        // The whole verdict on the progress line, so a run cut off by a time limit keeps it.
        eprintln!(
            "{} ({:.1} s, kg-bench peak RSS {} MiB): {got}; {why}",
            v.label(),
            g.wall,
            g.rss_mib.map_or("?".into(), |r| r.to_string())
        );
        rows.push((c.clone(), got, v, why));
    }
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    finish(&rows, t0, &opts, &work)
}
