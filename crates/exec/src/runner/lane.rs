//! One lane's thread of a corpus run: it takes pairs from the [`Schedule`], evaluates each in
//! its own [`Session`], writes its traces and sends [`RunEvent`]s to the caller's thread.

use std::sync::Mutex;
use std::sync::mpsc::Sender;

use indexmap::IndexMap;
use kg_contract::Trace;
use kg_contract::chain::{self, ChainError};

use super::{LaneFailure, PlannedProblem, RunConfig, RunEvent, RunnerError};
use crate::corpus;
use crate::engine::{Event, ExecError, Session};
use crate::lanes::{Lane, Schedule};

/// What one lane's thread needs to see of the run (all shared, read-only or locked).
pub(super) struct LaneCtx<'a> {
    pub(super) problems: &'a [PlannedProblem],
    pub(super) config: &'a RunConfig,
    pub(super) rounds: u32,
    pub(super) cpu: bool,
    pub(super) to_run: &'a [(usize, usize)],
    pub(super) schedule: &'a Schedule,
    /// Problems that changed during the run: none of their pairs is evaluated after that.
    pub(super) stopped: &'a Mutex<Vec<usize>>,
    pub(super) lanes: usize,
    /// Builds of the run's compiled solutions, made ahead of the lanes.
    pub(super) pool: Option<&'a super::pool::BuildPool>,
}

/// Each lane with its session.
pub(super) type LaneSessions = Vec<(Lane, Session)>;

/// What a lane's thread returns.
pub(super) struct LaneResult {
    pub(super) written: Vec<((usize, usize), Vec<Trace>)>,
    pub(super) failure: Option<LaneFailure>,
}

/// How one pair ended on a lane.
pub(super) enum PairEnd {
    /// Its traces, as written.
    Written(Vec<Trace>),
    /// Its problem changed: not written, in `errors`.
    ProblemChanged,
}

impl LaneCtx<'_> {
    /// Lane `n`'s thread: takes pairs from the schedule until none is left or the lane stops.
    pub(super) fn run(
        &self,
        n: usize,
        lane: &Lane,
        mut session: Session,
        tx: &Sender<RunEvent>,
    ) -> LaneResult {
        let mut written = Vec::new();
        let mut failure = None;
        // Pairs whose build is still to come wait while the lane evaluates others.
        let ready = |k: usize| self.pool.is_none_or(|p| !p.pending(k));
        while let Some(k) = self.schedule.next_ready(n, ready) {
            let (i, j) = self.to_run[k];
            if self.is_stopped(i) {
                continue;
            }
            // The pairs this lane takes next can start their candidate processes (and
            // precompilers) meanwhile.
            let upcoming: Vec<(usize, usize, Vec<&kg_contract::LoadedWorkload>)> = self
                .schedule
                .upcoming(n, 8)
                .into_iter()
                .map(|k| self.to_run[k])
                .filter(|&(ni, _)| !self.is_stopped(ni))
                .map(|(ni, nj)| {
                    let np = &self.problems[ni].problem;
                    (
                        ni,
                        nj,
                        corpus::select_workloads(np, None, self.config.max_workloads),
                    )
                })
                .collect();
            let due: Vec<crate::engine::Due> = upcoming
                .iter()
                .map(|(ni, nj, w)| crate::engine::Due {
                    solution: &self.problems[*ni].pairs[*nj].found.solution,
                    problem: &self.problems[*ni].problem,
                    workloads: w,
                })
                .collect();
            session.prestart_next(&due);
            if let Some(pool) = self.pool
                && let Some((outcome, waited)) = pool.take(k)
            {
                let sol = &self.problems[i].pairs[j].found.solution;
                session.provide_build(sol, outcome, waited);
            }
            match self.pair(n, lane, &mut session, i, j, tx) {
                Ok(PairEnd::Written(traces)) => written.push(((i, j), traces)),
                Ok(PairEnd::ProblemChanged) => {}
                Err(error) => {
                    let p = &self.problems[i];
                    let f = LaneFailure {
                        lane: n,
                        label: lane.label(),
                        key: p.key.clone(),
                        solution: p.pairs[j].found.solution.name.clone(),
                        error: Box::new(error),
                    };
                    let _ = tx.send(RunEvent::LaneFailed {
                        lane: n,
                        label: f.label.clone(),
                        key: f.key.clone(),
                        solution: f.solution.clone(),
                        error: f.error.to_string(),
                    });
                    failure = Some(f);
                    break;
                }
            }
        }
        session.shutdown();
        LaneResult { written, failure }
    }

    fn is_stopped(&self, problem: usize) -> bool {
        self.stopped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&problem)
    }

    /// Evaluates pair `j` of problem `i` on lane `n` and writes its traces (also those
    /// finished before it stopped part way, when it returns an error).
    fn pair(
        &self,
        n: usize,
        lane: &Lane,
        session: &mut Session,
        i: usize,
        j: usize,
        tx: &Sender<RunEvent>,
    ) -> Result<PairEnd, RunnerError> {
        let p = &self.problems[i];
        let s = &p.pairs[j];
        let sol = &s.found.solution;
        let workloads = corpus::select_workloads(&p.problem, None, self.config.max_workloads);
        if s.path.exists()
            && let Err(error) = std::fs::remove_file(&s.path)
        {
            return Err(RunnerError::RemoveStale {
                path: s.path.clone(),
                error,
            });
        }
        // A send fails only when the caller's thread is gone; the run itself goes on.
        let send = |e: RunEvent| {
            let _ = tx.send(e);
        };
        send(RunEvent::PairStarted {
            lane: n,
            key: p.key.clone(),
            solution: sol.name.clone(),
            estimates: if self.cpu {
                corpus::cpu_estimates(&workloads, sol, self.rounds)
            } else {
                IndexMap::new()
            },
        });
        // Nothing is written while the candidate lives: `evaluate_sealed` returns once it is
        // gone.
        let res = session.evaluate_sealed(&p.problem, Some(&p.tree), sol, &workloads, &mut |e| {
            send(match e {
                Event::WorkloadStarted {
                    uuid, index, total, ..
                } => RunEvent::WorkloadStarted {
                    lane: n,
                    uuid,
                    index,
                    total,
                },
                Event::WorkloadFinished(trace) => RunEvent::WorkloadFinished { lane: n, trace },
                Event::Notice(text) if self.lanes > 1 => {
                    RunEvent::Notice(format!("lane {n} ({}): {text}", lane.label()))
                }
                Event::Notice(text) => RunEvent::Notice(text),
            });
        });
        let evaluated = match res {
            Ok(e) => e,
            Err(error @ ExecError::ProblemChanged { .. }) => {
                // An earlier candidate (or someone) changed this problem: no later
                // evaluation of it can be trusted; the other problems still run.
                self.stopped
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(i);
                self.schedule.remove(|k| self.to_run[k].0 == i);
                send(RunEvent::ProblemChanged {
                    key: p.key.clone(),
                    error,
                });
                return Ok(PairEnd::ProblemChanged);
            }
            Err(e) => return Err(e.into()),
        };
        let manifest = chain::Manifest::new(
            &self.config.run_id,
            &p.problem.definition.name,
            &evaluated.problem_tree_sha256,
            sol,
        )
        .map_err(ChainError::from)?;
        let w = chain::write_traces(
            &s.path,
            &evaluated.traces,
            &manifest,
            self.config.signer.as_ref(),
            chain::WriteMode::Replace,
        )?;
        send(RunEvent::PairFinished {
            lane: n,
            key: p.key.clone(),
            solution: sol.name.clone(),
            file: s.path.clone(),
        });
        // Stopped part way (Ctrl-C, the judge lost): the finished traces are written.
        if let Some(e) = evaluated.error {
            return Err(e.into());
        }
        Ok(PairEnd::Written(w.traces))
    }
}
