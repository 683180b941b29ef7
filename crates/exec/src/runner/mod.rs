//! The corpus runner: `kg-bench run` as a library, for any harness that evaluates a corpus.
//!
//! Two steps, so a caller can report problems of the corpus before it resolves Python and
//! claims a device:
//! 1. [`CorpusPlan::load`] discovers the problems under a corpus, loads them and their
//!    solutions from a [`SolutionSource`], applies the filters and checks that no two pairs
//!    would write one trace file. Nothing runs yet.
//! 2. [`CorpusRunner::run`] refuses pairs this device cannot run ([`CorpusPlan::refuse`],
//!    which a caller may call earlier), skips pairs whose earlier traces stand ([`Resume`]),
//!    evaluates the rest over its [`Lane`]s (one [`Session`] each, on its own thread; one
//!    lane unless [`CorpusRunner::with_lanes`] gave more), builds the compiled solutions
//!    among them ahead of the lanes (`pool`), writes each pair's traces as a chained file
//!    (`OUTDIR/<problem key>/<solution>.jsonl`) and seals them all in `OUTDIR/summary.json`.
//!
//! Everything a person or a log would want to see arrives as a [`RunEvent`] at the caller's
//! [`Reporter`]; the runner prints nothing. Trace files and `summary.json` are written here,
//! not by a reporter: they are the run's evidence (resume reads them back, the summary's seal
//! covers them, and a failed write must stop the run before the next pair).

mod events;
mod lane;
mod plan;
mod pool;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use indexmap::IndexMap;
use kg_contract::chain::{self, TraceSigner};
use kg_contract::{Problem, Trace};

use crate::corpus::{
    self, CpuEstimate, FoundSolutions, PriorState, ProblemInfo, Resume, RunSummary, SolutionLayout,
    SolutionSource, TraceFile,
};
use crate::engine::{
    EvalOptions, ExecError, Session, check_languages, missing_beside, toolchain_check,
};
use crate::integrity::DirSnapshot;
use crate::lanes::{Lane, Schedule};
use crate::shard::{
    SHARD_FILE, ShardError, ShardListing, ShardPair, ShardProblem, ShardRun, ShardSpec,
};
use crate::{CancelToken, DeviceChoice, Interpreter};

pub use events::{BuildEnd, LaneFailure, Reporter, RunEvent, RunnerError, SkipReason};
use lane::{LaneCtx, LaneResult, LaneSessions};
pub use plan::{CorpusPlan, PlanOptions, PlannedPair, PlannedProblem};

/// How a corpus run treats earlier traces, caps workloads, and identifies and signs its
/// traces.
#[derive(Debug)]
pub struct RunConfig {
    /// Which pairs with earlier traces are evaluated again.
    pub resume: Resume,
    /// Evaluate at most this many workloads per problem (in file order).
    pub max_workloads: Option<usize>,
    /// The run id every trace's manifest and the summary's seal record
    /// ([`chain::new_run_id`]).
    pub run_id: String,
    /// Signs every trace line and the seal.
    pub signer: Option<TraceSigner>,
}

/// What became of one selected pair.
#[derive(Debug, Clone)]
pub enum PairState {
    /// Evaluated now: its traces, as written.
    Evaluated(Vec<Trace>),
    /// Kept from an earlier run (complete traces): the file.
    Kept(PathBuf),
    /// Refused before anything ran: why.
    Refused(String),
    /// Not evaluated: its problem changed before it was due (in the summary's `errors`).
    NotRun,
}

/// One selected pair's outcome.
#[derive(Debug, Clone)]
pub struct PairOutcome {
    /// The problem key.
    pub key: String,
    /// The solution name.
    pub solution: String,
    /// What became of it.
    pub state: PairState,
}

/// What a finished run returns.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// Every selected pair, in plan order.
    pub pairs: Vec<PairOutcome>,
    /// The summary, as written.
    pub summary: RunSummary,
    /// Where it was written (`OUTDIR/summary.json`).
    pub summary_path: PathBuf,
}

/// Evaluates a [`CorpusPlan`] with one interpreter and one set of evaluation options, on
/// one [`Lane`] or several.
#[derive(Debug)]
pub struct CorpusRunner {
    plan: CorpusPlan,
    python: Interpreter,
    opts: EvalOptions,
    cancel: CancelToken,
    config: RunConfig,
    lanes: Vec<Lane>,
}

impl CorpusRunner {
    /// A runner of `plan` on `opts.device` with `python` (one lane); `cancel` stops it
    /// between and inside workloads.
    pub fn new(
        plan: CorpusPlan,
        python: Interpreter,
        opts: EvalOptions,
        cancel: CancelToken,
        config: RunConfig,
    ) -> CorpusRunner {
        let lanes = vec![Lane::of(&opts)];
        CorpusRunner {
            plan,
            python,
            opts,
            cancel,
            config,
            lanes,
        }
    }

    /// Spreads the run over `lanes` (each lane's device, worker environment and claim replace
    /// those of the options). Several lanes need the candidate sandbox: they run candidates
    /// side by side.
    pub fn with_lanes(mut self, lanes: Vec<Lane>) -> Result<CorpusRunner, RunnerError> {
        if lanes.is_empty() {
            return Err(RunnerError::NoLanes);
        }
        if lanes.len() > 1 && !self.opts.sandbox {
            return Err(RunnerError::LanesNeedSandbox { lanes: lanes.len() });
        }
        self.lanes = lanes;
        Ok(self)
    }

    /// The lanes asked for.
    pub fn lanes(&self) -> &[Lane] {
        &self.lanes
    }

    /// The plan.
    pub fn plan(&self) -> &CorpusPlan {
        &self.plan
    }

    /// Runs the plan: refusals, skips, every remaining pair, then `summary.json`. On an
    /// error after evaluation started (cancelled, the judge lost, a write failed) the traces
    /// of the pairs finished so far are written, and no summary is.
    pub fn run(&mut self, reporter: &mut dyn Reporter) -> Result<RunOutcome, RunnerError> {
        self.plan
            .refuse(&self.opts.device, &self.python.path, reporter)?;
        let max = self.config.max_workloads;
        if let Some(floor) = &self.opts.sol_floor
            && let Some(c) = corpus::sol_coverage(
                floor,
                self.plan.problems.iter().flat_map(|p| {
                    corpus::select_workloads(&p.problem, None, max)
                        .into_iter()
                        .map(|w| (p.problem.definition.name.as_str(), w.workload.uuid.as_str()))
                }),
            )
        {
            reporter.report(&RunEvent::SolCoverage(c));
        }
        // Which pairs run: finished traces are kept unless `resume` says otherwise.
        let mut to_run: Vec<(usize, usize)> = Vec::new();
        for (i, p) in self.plan.problems.iter().enumerate() {
            let workloads = corpus::select_workloads(&p.problem, None, max);
            for (j, s) in p.pairs.iter().enumerate() {
                if s.refused.is_some() {
                    continue;
                }
                let state = corpus::prior_state(&s.path, &workloads, &p.tree_sha256, &s.sha256);
                if self.config.resume.evaluates(state) {
                    to_run.push((i, j));
                } else {
                    reporter.report(&RunEvent::PairSkipped {
                        key: p.key.clone(),
                        solution: s.found.solution.name.clone(),
                        path: s.path.clone(),
                        reason: match state {
                            PriorState::NotPassed(n) => SkipReason::NotPassed(n),
                            _ => SkipReason::AllPassed,
                        },
                    });
                }
            }
        }
        let cpu = self.opts.device.is_cpu();
        let rounds = self.opts.rounds;
        let (mut estimated_s, mut short_s, mut total) = (0.0, 0.0, 0);
        let mut interpreted = false;
        for &(i, j) in &to_run {
            let p = &self.plan.problems[i];
            let sol = &p.pairs[j].found.solution;
            let workloads = corpus::select_workloads(&p.problem, None, max);
            total += workloads.len();
            if cpu {
                interpreted |= corpus::is_triton(sol);
                estimated_s += corpus::CPU_PAIR_FIXED_S
                    + corpus::cpu_estimates(&workloads, sol, rounds)
                        .values()
                        .sum::<f64>();
                short_s += corpus::CPU_PAIR_FIXED_S
                    + workloads
                        .first()
                        .map_or(0.0, |w| corpus::estimate_cpu_s(w, sol, 2));
            }
        }
        if cpu {
            reporter.report(&RunEvent::CpuEstimate(CpuEstimate {
                estimated_s,
                short_s,
                interpreted,
            }));
        }
        let evaluated = self.evaluate(&to_run, total, estimated_s, reporter)?;
        self.finish(&to_run, evaluated, reporter)
    }

    /// The sessions of the lanes that will run: every lane asked for, or only the first where
    /// candidates could not run side by side safely (said in [`RunEvent::LanesStarted`]).
    fn sessions(
        &self,
        to_run: &[(usize, usize)],
    ) -> Result<(LaneSessions, Option<String>), RunnerError> {
        let mut sessions = Vec::new();
        for lane in &self.lanes {
            let s = Session::new(
                self.python.clone(),
                lane.options(&self.opts),
                self.cancel.clone(),
            )?;
            sessions.push((lane.clone(), s));
        }
        let Some(&(i, j)) = to_run.first().filter(|_| sessions.len() > 1) else {
            return Ok((sessions, None));
        };
        let sol = &self.plan.problems[i].pairs[j].found.solution;
        let why = match sessions[0].1.probe_isolation(sol) {
            Ok(report) => missing_beside(&report).map(|missing| {
                format!(
                    "a candidate here runs without {missing}, so candidates of several lanes could reach each other; one lane is used"
                )
            }),
            Err(ExecError::Cancelled) => return Err(ExecError::Cancelled.into()),
            Err(e) => Some(format!(
                "the candidate sandbox could not be checked ({e}); one lane is used"
            )),
        };
        if why.is_some() {
            for (_, s) in sessions.drain(1..) {
                s.shutdown();
            }
        }
        Ok((sessions, why))
    }

    /// Evaluates the pairs of `to_run` over the lanes, writing each one's traces; their
    /// traces as written, by (problem, pair) index.
    fn evaluate(
        &mut self,
        to_run: &[(usize, usize)],
        workloads: usize,
        estimated_s: f64,
        reporter: &mut dyn Reporter,
    ) -> Result<IndexMap<(usize, usize), Vec<Trace>>, RunnerError> {
        let (sessions, reduced) = self.sessions(to_run)?;
        let lanes = sessions.len();
        reporter.report(&RunEvent::LanesStarted {
            labels: sessions.iter().map(|(l, _)| l.label()).collect(),
            reduced,
        });
        reporter.report(&RunEvent::RunStarted {
            pairs: to_run.len(),
            workloads,
            estimated_s,
        });
        let max = self.config.max_workloads;
        let rounds = self.opts.rounds;
        let costs: Vec<f64> = to_run
            .iter()
            .map(|&(i, j)| {
                let p = &self.plan.problems[i];
                let sol = &p.pairs[j].found.solution;
                let w = corpus::select_workloads(&p.problem, None, max);
                corpus::CPU_PAIR_FIXED_S
                    + corpus::cpu_estimates(&w, sol, rounds).values().sum::<f64>()
            })
            .collect();
        let schedule = Schedule::new(costs, lanes);
        let stopped = Mutex::new(Vec::new());
        // Compiled solutions are built on spare cores while the lanes evaluate.
        let solution_of = |k: usize| {
            let (i, j) = to_run[k];
            &self.plan.problems[i].pairs[j].found.solution
        };
        let compiled: Vec<usize> = schedule
            .order()
            .into_iter()
            .filter(|&k| crate::toolchain::is_compiled(solution_of(k)))
            .collect();
        let mut builders = Vec::new();
        for _ in 0..pool::pool_threads().min(compiled.len()) {
            builders.push(Session::new(
                self.python.clone(),
                self.lanes[0].options(&self.opts),
                self.cancel.clone(),
            )?);
        }
        let pool = (!compiled.is_empty()).then(|| pool::BuildPool::new(compiled));
        let ctx = LaneCtx {
            problems: &self.plan.problems,
            config: &self.config,
            rounds,
            cpu: self.opts.device.is_cpu(),
            to_run,
            schedule: &schedule,
            stopped: &stopped,
            lanes,
            pool: pool.as_ref(),
        };
        let mut changed: Vec<(String, String)> = Vec::new();
        let (tx, rx) = std::sync::mpsc::channel::<RunEvent>();
        let results: Vec<LaneResult> = std::thread::scope(|scope| {
            let handles: Vec<_> = sessions
                .into_iter()
                .enumerate()
                .map(|(n, (lane, session))| {
                    let tx = tx.clone();
                    let ctx = &ctx;
                    scope.spawn(move || ctx.run(n, &lane, session, &tx))
                })
                .collect();
            for mut b in builders {
                let (pool, solution_of, tx) = (pool.as_ref(), &solution_of, tx.clone());
                scope.spawn(move || {
                    if let Some(pool) = pool {
                        pool.work(&mut |k| {
                            let sol = solution_of(k);
                            let _ = tx.send(RunEvent::BuildStarted {
                                solution: sol.name.clone(),
                            });
                            let t = std::time::Instant::now();
                            let r = b.build(sol);
                            let _ = tx.send(RunEvent::BuildFinished {
                                solution: sol.name.clone(),
                                outcome: match &r {
                                    Ok(Ok(built)) if built.cached => BuildEnd::Cached,
                                    Ok(Ok(_)) => BuildEnd::Built,
                                    Ok(Err(_)) => BuildEnd::Failed,
                                    Err(_) => BuildEnd::LeftToLane,
                                },
                                seconds: t.elapsed().as_secs_f64(),
                            });
                            r
                        });
                    }
                    b.shutdown();
                });
            }
            drop(tx);
            // The reporter is the caller's and stays on this thread: lanes send it events.
            for event in rx {
                if let RunEvent::ProblemChanged { key, error } = &event {
                    changed.push((key.clone(), error.to_string()));
                }
                reporter.report(&event);
            }
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        for (key, error) in changed {
            self.plan.errors.insert(key, error);
        }
        let mut written = IndexMap::new();
        let mut failures = Vec::new();
        for r in results {
            written.extend(r.written);
            failures.extend(r.failure);
        }
        if failures.is_empty() {
            return Ok(written);
        }
        if failures
            .iter()
            .any(|f| matches!(*f.error, RunnerError::Exec(ExecError::Cancelled)))
        {
            return Err(ExecError::Cancelled.into());
        }
        if lanes == 1 {
            let f = failures.remove(0);
            return Err(*f.error);
        }
        failures.sort_by_key(|f| f.lane);
        Err(RunnerError::LanesFailed { lanes, failures })
    }

    /// Every selected pair's outcome, and the summary, sealed and written.
    fn finish(
        &mut self,
        to_run: &[(usize, usize)],
        mut evaluated: IndexMap<(usize, usize), Vec<Trace>>,
        reporter: &mut dyn Reporter,
    ) -> Result<RunOutcome, RunnerError> {
        // Every selected pair that was not refused and whose problem was not stopped before
        // it ran has one trace file: evaluated now, or kept from an earlier run.
        let mut files = Vec::new();
        let mut pairs = Vec::new();
        for (i, p) in self.plan.problems.iter().enumerate() {
            for (j, s) in p.pairs.iter().enumerate() {
                let state = if let Some(why) = &s.refused {
                    PairState::Refused(why.clone())
                } else if let Some(t) = evaluated.swap_remove(&(i, j)) {
                    PairState::Evaluated(t)
                } else if to_run.contains(&(i, j)) {
                    // Its problem changed before it was due: listed in `errors`.
                    PairState::NotRun
                } else {
                    PairState::Kept(s.path.clone())
                };
                if matches!(state, PairState::Evaluated(_) | PairState::Kept(_)) {
                    files.push(TraceFile {
                        key: p.key.clone(),
                        solution: s.found.solution.name.clone(),
                        path: s.path.clone(),
                    });
                }
                pairs.push(PairOutcome {
                    key: p.key.clone(),
                    solution: s.found.solution.name.clone(),
                    state,
                });
            }
        }
        let options = self.plan.options();
        let mut summary = corpus::summarize(
            &options.corpus_dir,
            &self.opts.device.to_string(),
            &files,
            self.plan.errors.clone(),
        );
        summary.problem_info = self
            .plan
            .problems
            .iter()
            .map(|p| {
                (
                    p.key.clone(),
                    ProblemInfo {
                        definition: p.problem.definition.name.clone(),
                        dir: p.problem.dir.display().to_string(),
                        solutions_from: p.found.layouts.clone(),
                    },
                )
            })
            .collect();
        summary.refused = self.plan.refused.clone();
        summary.filters = options.filters.clone();
        let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
        summary.chain = Some(chain::RunChain::seal(
            &options.output_dir,
            &self.config.run_id,
            &paths,
            self.config.signer.as_ref(),
        )?);
        let summary_path = options.output_dir.join("summary.json");
        let text = kg_contract::io::to_json_pretty(&summary, "summary")?;
        kg_contract::io::write_atomic(&summary_path, text.as_bytes())?;
        if let Some(listing) = self.plan.shard_listing() {
            let manifest = listing.manifest(ShardRun {
                corpus: options.corpus_dir.display().to_string(),
                filters: options.filters.clone(),
                max_workloads: self.config.max_workloads,
                run_id: self.config.run_id.clone(),
                device: self.opts.device.to_string(),
                gpu_claims: self
                    .lanes
                    .iter()
                    .filter_map(|l| l.gpu_claim.clone())
                    .collect(),
            });
            let text = kg_contract::io::to_json_pretty(&manifest, "shard manifest")?;
            kg_contract::io::write_atomic(&options.output_dir.join(SHARD_FILE), text.as_bytes())?;
        }
        reporter.report(&RunEvent::RunFinished {
            summary: Box::new(summary.clone()),
            path: summary_path.clone(),
        });
        Ok(RunOutcome {
            pairs,
            summary,
            summary_path,
        })
    }
}
