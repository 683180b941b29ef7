//! `kg-bench evaluate`: one solution (or the reference) over a problem's workloads.

use super::*;

/// Reads `--sign-key` (before any worker exists, so no worker can inherit or see it).
pub(crate) fn load_signer(a: &EvalArgs) -> Result<Option<chain::TraceSigner>, Failure> {
    a.sign_key
        .as_deref()
        .map(chain::load_signing_key)
        .transpose()
        .map_err(usage)
}

pub(crate) fn evaluate(a: EvaluateArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let problem = match (&a.problem_dir, &a.definition, &a.workload) {
        (Some(d), None, None) => Problem::load(d),
        (None, Some(d), Some(w)) => Problem::from_files(d, w),
        _ => {
            return Err(usage(anyhow!(
                "give PROBLEM_DIR, or --definition FILE and --workload FILE"
            )));
        }
    }
    .map_err(usage)?;
    for w in &problem.warnings {
        eprintln!("warning: {w}");
    }
    let solution = if a.solution == Path::new("reference") && !a.solution.exists() {
        kg_exec::engine::reference_solution(&problem)
    } else {
        let (solution, warns) = load_solution(&a.solution).map_err(usage)?;
        for w in warns {
            eprintln!("warning: {w}");
        }
        solution
    };
    check_languages(&solution).map_err(from_exec)?;
    let workloads =
        corpus::select_workloads(&problem, a.workloads.as_deref(), a.eval.max_workloads);
    if let Some(u) = &a.workloads {
        for id in u {
            if !problem.workloads.iter().any(|w| &w.workload.uuid == id) {
                return Err(usage(anyhow!(
                    "--workloads: `{id}` is not a workload of `{}`",
                    problem.workload_path.display()
                )));
            }
        }
    }
    if workloads.is_empty() {
        return Err(usage(anyhow!("no workloads selected")));
    }
    if a.eval.sign_key.is_some() && a.output.is_none() {
        return Err(usage(anyhow!(
            "--sign-key signs the trace file: give -o FILE too"
        )));
    }
    let signer = load_signer(&a.eval)?;
    let run_id = chain::new_run_id().map_err(usage)?;
    let (interp, acquired) = prepare_env(&a.env)?;
    let opts = options(&acquired, &a.eval)?;
    if let Some(f) = &opts.sol_floor
        && let Some(c) = corpus::sol_coverage(
            f,
            workloads
                .iter()
                .map(|w| (problem.definition.name.as_str(), w.workload.uuid.as_str())),
        )
    {
        sol_notice(&c);
    }
    let cpu = opts.device.is_cpu();
    let estimates = if cpu {
        corpus::cpu_estimates(&workloads, &solution, opts.rounds)
    } else {
        IndexMap::new()
    };
    let estimated_s = estimates.values().sum::<f64>() + corpus::CPU_PAIR_FIXED_S;
    if cpu {
        let short = corpus::estimate_cpu_s(workloads[0], &solution, 2) + corpus::CPU_PAIR_FIXED_S;
        warn_if_long(&CpuEstimate {
            estimated_s,
            short_s: short,
            interpreted: corpus::is_triton(&solution),
        });
    }
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    let mut progress = Progress::new(
        Verbosity::of(&a.env),
        workloads.len(),
        estimated_s,
        !a.env.json,
    );
    progress.pair(0, &problem.definition.name, &solution.name, estimates);
    // Nothing is written while the candidate lives: `evaluate_sealed` returns once it is gone.
    let sealed = session.evaluate_sealed(&problem, None, &solution, &workloads, &mut |e| {
        progress.event(&e);
    });
    session.shutdown();
    progress.finish();
    let evaluated = sealed.map_err(from_exec)?;
    let mut traces = evaluated.traces;
    let mut head = None;
    if let Some(path) = &a.output {
        let manifest = chain::Manifest::new(
            &run_id,
            &problem.definition.name,
            &evaluated.problem_tree_sha256,
            &solution,
        )
        .map_err(usage)?;
        let w = chain::write_traces(
            path,
            &traces,
            &manifest,
            signer.as_ref(),
            chain::WriteMode::Append,
        )
        .map_err(usage)?;
        traces = w.traces;
        head = Some(w.head);
    }
    // Stopped part way (Ctrl-C, the judge lost): the finished traces are written above.
    if let Some(e) = evaluated.error {
        return Err(from_exec(e));
    }
    if let Some(path) = &a.eval.junit {
        let key = problem.dir.file_name().map_or_else(
            || problem.definition.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        let suite = kg_report::junit::suite_of_traces(&key, &solution.name, &traces);
        write_junit(path, &[suite])?;
    }
    if a.env.json {
        println!("{}", serde_json::to_string_pretty(&traces).map_err(usage)?);
        if let (Some(p), Some(h)) = (&a.output, &head) {
            eprintln!("traces: {} (chain head {h})", p.display());
        }
    } else {
        println!("{}", output::trace_table(&traces));
        println!("{}", output::totals_line(&traces));
        if let (Some(p), Some(h)) = (&a.output, &head) {
            println!("traces: {} (chain head {h})", p.display());
        }
    }
    Ok(exit_for(&traces))
}

/// Writes `--junit`'s file (atomically: a CI system never reads half of one).
pub(crate) fn write_junit(path: &Path, suites: &[kg_report::junit::Suite]) -> Result<(), Failure> {
    let xml = kg_report::junit::render("kernelgate", suites);
    kg_contract::io::write_atomic(path, xml.as_bytes()).map_err(|e| usage(anyhow!("--junit: {e}")))
}

/// Says so when `--sol` bounds fewer than all of the workloads about to run (a wrong file
/// would otherwise check nothing, silently).
pub(crate) fn sol_notice(c: &SolCoverage) {
    eprintln!(
        "notice: --sol `{}` bounds {} of the {} selected workload(s); the others have no speed-of-light floor",
        c.source, c.bounded, c.total
    );
}

pub(crate) fn exit_for(traces: &[Trace]) -> i32 {
    let all = !traces.is_empty()
        && traces.iter().all(|t| {
            t.evaluation
                .as_ref()
                .is_some_and(|e| e.status == Status::Passed)
        });
    if all { exit::OK } else { exit::FAILED }
}
