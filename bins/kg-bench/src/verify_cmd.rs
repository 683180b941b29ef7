//! `kg-bench verify` and `kg-bench keygen`: flags and printing around `kg_contract::chain`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, anyhow, bail};
use clap::Args;
use kg_contract::chain::{self, ChainHead, ExpectedProblem, FileReport, RunReport, VerifyOptions};
use kg_contract::exit;

/// `kg-bench verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// Trace files (JSONL) as `kg-bench evaluate -o` / `run` wrote them.
    traces: Vec<PathBuf>,
    /// A problem directory the traces must have been evaluated on, as it is now (repeatable;
    /// matched to each line by definition name). Any changed file of it fails.
    #[arg(long = "problem", value_name = "DIR")]
    problems: Vec<PathBuf>,
    /// Every problem directory below DIR, as if each were given with --problem.
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Public key (`kg-bench keygen`'s OUT.pub): every line must be signed by it.
    #[arg(long, value_name = "FILE")]
    pubkey: Option<PathBuf>,
    /// A `kg-bench run` summary.json: verify every trace file it lists against the chain head
    /// it records (lines cut from the end of a file are caught this way).
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// The head the one trace file given must end at, `LINES:SHA256` (as `kg-bench evaluate -o`
    /// prints it).
    #[arg(long, value_name = "LINES:SHA256")]
    head: Option<ChainHead>,
    /// Print the verdicts as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// `kg-bench keygen`.
#[derive(Args)]
pub struct KeygenArgs {
    /// Where to write the private key (mode 0600; never overwritten); the public key goes to
    /// OUT.pub.
    out: PathBuf,
}

/// Runs `verify`: exit 0 when everything verified, 1 when anything did not, `Err` (exit 2)
/// for usage errors and unreadable inputs.
pub fn verify(a: VerifyArgs) -> anyhow::Result<i32> {
    if a.traces.is_empty() && a.summary.is_none() {
        bail!("give trace files to verify, or --summary SUMMARY.json");
    }
    if a.head.is_some() && a.traces.len() != 1 {
        bail!("--head applies to exactly one trace file");
    }
    let mut opts = VerifyOptions::default();
    if let Some(p) = &a.pubkey {
        opts.trusted_key = Some(chain::load_public_key(p)?);
    }
    let mut dirs = a.problems.clone();
    if let Some(c) = &a.corpus {
        dirs.extend(kg_exec::corpus::discover(c)?);
    }
    let mut problems: BTreeMap<String, ExpectedProblem> = BTreeMap::new();
    for d in &dirs {
        let (name, p) = ExpectedProblem::from_dir(d)?;
        if let Some(prev) = problems.get(&name)
            && prev.dir != p.dir
        {
            bail!(
                "`{}` and `{}` both define `{name}`; give one",
                prev.dir.display(),
                p.dir.display()
            );
        }
        problems.insert(name, p);
    }
    opts.problems = problems;
    let run: Option<RunReport> = match &a.summary {
        Some(s) => Some(chain::verify_run(s, &opts)?),
        None => None,
    };
    let mut files: Vec<FileReport> = Vec::new();
    for t in &a.traces {
        // A file the summary lists was checked against its head already.
        if run
            .as_ref()
            .is_some_and(|r| r.files.iter().any(|f| same_file(&f.path, t)))
        {
            continue;
        }
        let file_opts = VerifyOptions {
            expected_head: a.head.clone(),
            ..opts.clone()
        };
        files.push(chain::verify_file(t, &file_opts)?);
    }
    let ok = files.iter().all(FileReport::ok) && run.as_ref().is_none_or(RunReport::ok);
    if a.json {
        let doc = serde_json::json!({"ok": ok, "files": files, "summary": run});
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).context("serialise the verdicts")?
        );
    } else {
        if let Some(r) = &run {
            for f in &r.findings {
                println!("FAILED  {}: {}", r.summary.display(), f.message);
            }
            for f in &r.files {
                print_file(f);
            }
        }
        for f in &files {
            print_file(f);
        }
        let all: Vec<&FileReport> = run
            .iter()
            .flat_map(|r| r.files.iter())
            .chain(files.iter())
            .collect();
        let bad = all.iter().filter(|f| !f.ok()).count();
        println!(
            "{} trace file(s), {} verified, {bad} failed{}",
            all.len(),
            all.len() - bad,
            match (&run, run.as_ref().is_some_and(|r| !r.findings.is_empty())) {
                (Some(_), true) => "; the summary's chain record failed",
                _ => "",
            }
        );
    }
    if !ok {
        // The verdicts are data (stdout); say on stderr too that it failed, and where first.
        let first = run
            .iter()
            .flat_map(|r| {
                r.findings
                    .iter()
                    .map(move |f| format!("{}: {}", r.summary.display(), f.message))
            })
            .chain(
                run.iter()
                    .flat_map(|r| r.files.iter())
                    .chain(files.iter())
                    .flat_map(FileReport::located),
            )
            .next()
            .unwrap_or_default();
        eprintln!("error: the traces do not verify; first: {first}");
    }
    Ok(if ok { exit::OK } else { exit::FAILED })
}

fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

fn print_file(f: &FileReport) {
    if f.ok() {
        let signed = match f.signers.as_slice() {
            [] => "unsigned (SHA-256 seals)".to_string(),
            keys => format!(
                "{} line(s) signed by {}",
                f.signed_lines,
                keys.iter()
                    .map(|k| format!("{}…", &k[..k.len().min(16)]))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let head = f.head.as_ref().map(ToString::to_string).unwrap_or_default();
        println!(
            "ok      {}: {} line(s), head {head}, {signed}",
            f.path.display(),
            f.lines
        );
        return;
    }
    for x in f.located() {
        println!("FAILED  {x}");
    }
}

/// Runs `keygen`.
pub fn keygen(a: KeygenArgs) -> anyhow::Result<i32> {
    let public = chain::generate_key(&a.out).map_err(|e| anyhow!(e))?;
    println!(
        "private key: {} (mode 0600; give it to `--sign-key` only, and keep it where no candidate's user can read it)",
        a.out.display()
    );
    println!(
        "public key:  {} ({})",
        chain::public_key_path(&a.out).display(),
        public.hex()
    );
    Ok(exit::OK)
}
