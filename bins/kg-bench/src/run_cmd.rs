//! `kg-bench run`: a corpus of problem/solution pairs through kg-exec's runner, reported as it goes.

use super::*;

/// `run`'s stderr: what the corpus runner reports, as notices, refusals and progress lines.
pub(crate) struct RunReporter {
    verbosity: Verbosity,
    /// Lane labels (from [`RunEvent::LanesStarted`]).
    labels: Vec<String>,
    /// Set when evaluation starts.
    progress: Option<Progress>,
    /// `--json`: no progress bar.
    json: bool,
}

impl RunReporter {
    /// Events of evaluation under way (the progress bar, builds); whether `event` was one.
    fn progress_event(&mut self, event: &RunEvent) -> bool {
        let loud = self.verbosity != Verbosity::Quiet;
        match event {
            RunEvent::RunStarted {
                pairs,
                workloads,
                estimated_s,
            } => {
                let mut p = Progress::new(self.verbosity, *workloads, *estimated_s, !self.json);
                p.labels.clone_from(&self.labels);
                p.pairs = *pairs;
                self.progress = Some(p);
            }
            RunEvent::PairStarted {
                lane,
                key,
                solution,
                estimates,
            } => {
                if let Some(p) = &mut self.progress {
                    p.pair(*lane, key, solution, estimates.clone());
                }
            }
            RunEvent::WorkloadStarted { lane, uuid, .. } => {
                if let Some(p) = &mut self.progress {
                    p.started(*lane, uuid);
                }
            }
            RunEvent::WorkloadFinished { lane, trace } => {
                if let Some(p) = &mut self.progress {
                    p.finished(*lane, trace);
                }
            }
            RunEvent::BuildStarted { solution } => {
                if let Some(p) = &mut self.progress {
                    p.build(Some(solution));
                }
                if self.verbosity == Verbosity::Verbose {
                    self.say(&format!("build: {solution} ..."));
                }
            }
            RunEvent::BuildFinished {
                solution,
                outcome,
                seconds,
            } => {
                if let Some(p) = &mut self.progress {
                    p.build(None);
                }
                let line = match outcome {
                    BuildEnd::Built => format!("build: {solution} built in {}", fmt_secs(*seconds)),
                    BuildEnd::Cached => format!("build: {solution} from the build cache"),
                    BuildEnd::Failed => format!(
                        "build: {solution} failed after {} (COMPILE_ERROR; the compiler's output is in its traces)",
                        fmt_secs(*seconds)
                    ),
                    BuildEnd::LeftToLane => String::new(),
                };
                if loud && !line.is_empty() {
                    self.say(&line);
                }
            }
            RunEvent::RunFinished { .. } => {
                if let Some(p) = &self.progress {
                    p.finish();
                }
            }
            _ => return false,
        }
        true
    }

    /// A line on stderr, above the progress bar while there is one.
    fn say(&self, line: &str) {
        match &self.progress {
            Some(p) => p.say(line),
            None => eprintln!("{line}"),
        }
    }
}

impl Reporter for RunReporter {
    fn report(&mut self, event: &RunEvent) {
        if self.progress_event(event) {
            return;
        }
        let loud = self.verbosity != Verbosity::Quiet;
        match event {
            RunEvent::ProblemFailed { key, error } => eprintln!("error: {key}: {error}"),
            RunEvent::ProblemChanged { key, error } => self.say(&format!("error: {key}: {error}")),
            RunEvent::DuplicateDefinition(dup) => {
                let dirs: Vec<String> = dup
                    .dirs
                    .iter()
                    .map(|d| format!("`{}`", d.display()))
                    .collect();
                eprintln!(
                    "notice: definition `{}` is defined by {} problems ({}){}; each is evaluated on its own and keyed by its path",
                    dup.name,
                    dup.dirs.len(),
                    dirs.join(", "),
                    if dup.identical {
                        ""
                    } else {
                        ", with different definitions"
                    }
                );
            }
            RunEvent::NoSolutions { key, searched } if loud => eprintln!(
                "notice: {key}: no solutions (looked for {}); skipped",
                searched.join(" and ")
            ),
            RunEvent::SolutionLayouts(by_layout) if loud && !by_layout.is_empty() => {
                let parts: Vec<String> = by_layout
                    .iter()
                    .map(|(l, n)| format!("{n} problem(s) from {l}"))
                    .collect();
                eprintln!("solutions: {}", parts.join("; "));
            }
            RunEvent::PairRefused {
                key,
                solution,
                languages,
                error,
            } => eprintln!(
                "refused: {key} / {solution} ({}): {error}",
                languages.join(", ")
            ),
            RunEvent::RefusedTotal { refused, selected } => eprintln!(
                "{refused} of {selected} problem/solution pair(s) refused up front (not evaluated); {} to go",
                selected - refused
            ),
            RunEvent::SolCoverage(c) => sol_notice(c),
            RunEvent::PairSkipped {
                key,
                solution,
                path,
                reason,
            } if loud => {
                let what = match reason {
                    SkipReason::NotPassed(n) => {
                        format!("{n} workload(s) did not pass; --rerun-failed evaluates it again")
                    }
                    _ => "all PASSED; --rerun evaluates it again".to_string(),
                };
                eprintln!(
                    "notice: {key} / {solution}: complete traces in `{}` ({what}); skipped",
                    path.display()
                );
            }
            RunEvent::CpuEstimate(e) => warn_if_long(e),
            RunEvent::LanesStarted { labels, reduced } => {
                if let Some(why) = reduced {
                    eprintln!("notice: {why}");
                }
                if labels.len() > 1 && loud {
                    let named: Vec<String> = labels
                        .iter()
                        .enumerate()
                        .map(|(k, l)| format!("{k}: {l}"))
                        .collect();
                    eprintln!("lanes: {}", named.join("; "));
                }
                self.labels.clone_from(labels);
            }
            RunEvent::LaneFailed {
                lane,
                label,
                key,
                solution,
                error,
            } => self.say(&format!(
                "error: lane {lane} ({label}) stopped at {key} / {solution}: {error}; the other lanes go on"
            )),
            RunEvent::Notice(n) => self.say(&format!("notice: {n}")),
            _ => {}
        }
    }
}

/// Maps a corpus runner error to its exit code.
pub(crate) fn from_runner(e: RunnerError) -> Failure {
    match e {
        RunnerError::Exec(e) => from_exec(e),
        e @ RunnerError::LanesFailed { .. } => Failure {
            code: kg_contract::exit::NO_VERDICT,
            error: e.into(),
        },
        other => usage(other),
    }
}

pub(crate) fn run(a: RunArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let verbosity = Verbosity::of(&a.env);
    let mut reporter = RunReporter {
        verbosity,
        labels: Vec::new(),
        progress: None,
        json: a.env.json,
    };
    let resume = if a.rerun {
        corpus::Resume::All
    } else if a.rerun_failed {
        corpus::Resume::Failed
    } else {
        corpus::Resume::SkipFinished
    };
    // Load everything first: bad solutions stop before anything runs.
    let mut plan = CorpusPlan::load(
        PlanOptions {
            corpus_dir: a.corpus_dir.clone(),
            solutions: SolutionSource::parse(&a.solutions),
            output_dir: a.output.clone(),
            filters: a.filter.clone(),
        },
        &mut reporter,
    )
    .map_err(from_runner)?;
    if let Some(s) = &a.shard {
        let spec = if s == "slurm" {
            kg_exec::shard::ShardSpec::from_slurm(|k| std::env::var(k).ok())
        } else {
            s.parse().map_err(|e| format!("--shard: {e}"))
        }
        .map_err(|e| usage(anyhow!(e)))?;
        let listing = plan
            .shard(spec, a.eval.max_workloads)
            .map_err(|e| usage(anyhow!(e)))?;
        if verbosity != Verbosity::Quiet {
            let mine = listing.pairs.iter().filter(|p| p.shard == spec.k).count();
            eprintln!(
                "shard {spec}: {mine} of {} problem/solution pair(s)",
                listing.pairs.len()
            );
        }
    }
    let signer = load_signer(&a.eval)?;
    let run_id = chain::new_run_id().map_err(usage)?;
    let (interp, acquired) = match &a.gpus {
        Some(g) => prepare_lanes(&a.env, g)?,
        None => {
            let (i, acq) = prepare_env(&a.env)?;
            (i, vec![acq])
        }
    };
    let first = acquired
        .first()
        .ok_or_else(|| usage(anyhow!("no device was acquired")))?;
    // Refused up front, named, before any worker starts (and before flags are checked
    // against the device).
    plan.refuse(&first.choice, &interp.path, &mut reporter)
        .map_err(from_runner)?;
    let mut opts = options(first, &a.eval)?;
    opts.prestart = match a.prestart {
        PrestartArg::Auto => kg_exec::Prestart::Auto,
        PrestartArg::On => kg_exec::Prestart::On,
        PrestartArg::Off => kg_exec::Prestart::Off,
    };
    let lanes: Vec<Lane> = match a.jobs {
        Some(jobs) if jobs > 1 && !opts.device.is_cpu() => {
            return Err(usage(anyhow!(
                "--jobs {jobs} spreads a run over CPU cores, but the device is {}; on GPUs use --gpus",
                opts.device
            )));
        }
        Some(jobs) if jobs > 1 => vec![Lane::of(&opts); usize::from(jobs)],
        _ => acquired
            .iter()
            .map(|acq| Lane {
                device: acq.choice.clone(),
                worker_env: acq.worker_env.clone(),
                gpu_claim: acq.evidence.clone(),
            })
            .collect(),
    };
    let config = RunConfig {
        resume,
        max_workloads: a.eval.max_workloads,
        run_id,
        signer,
    };
    let mut runner = CorpusRunner::new(plan, interp, opts, cancel.clone(), config)
        .with_lanes(lanes)
        .map_err(from_runner)?;
    let outcome = runner.run(&mut reporter).map_err(from_runner)?;
    if let Some(path) = &a.eval.junit {
        write_junit(path, &output::junit_suites(&outcome.pairs))?;
    }
    let summary = &outcome.summary;
    if a.env.json {
        println!("{}", serde_json::to_string_pretty(summary).map_err(usage)?);
    } else {
        println!("{}", output::run_table(&outcome.pairs));
        println!("{}", output::summary_line(summary));
        println!(
            "traces: {}/<problem path>/<solution>.jsonl",
            a.output.display()
        );
        println!("summary: {}", outcome.summary_path.display());
    }
    Ok(if summary.all_passed() {
        exit::OK
    } else {
        exit::FAILED
    })
}
