//! One solution's evaluation: sealed inputs, workloads in order, retries and injection.

use super::*;

/// The candidate process of one evaluation, and what its start left for its first trace.
#[derive(Default)]
struct CandidateSlot {
    worker: Option<Worker>,
    started: Option<CandidateStart>,
    built: Option<kg_contract::BuildRecord>,
    /// The solution's build failure: every workload gets it.
    compile_failure: Option<(Status, String)>,
}

/// What a trace records of one workload's run beside its outcome.
#[derive(Default)]
struct WorkloadRun {
    wall_s: Option<f64>,
    retried: Option<Retry>,
    candidate_start: Option<CandidateStart>,
    build: Option<kg_contract::BuildRecord>,
}

impl Session {
    /// Evaluates `sol` on the given workloads of `problem`, calling `on_event` as it goes.
    /// See [`Session::evaluate_sealed`] for the traces to write down and the problem's hash.
    pub fn evaluate(
        &mut self,
        problem: &Problem,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Vec<Trace>, ExecError> {
        let e = self.evaluate_sealed(problem, None, sol, workloads, on_event)?;
        match e.error {
            Some(err) => Err(err),
            None => Ok(e.traces),
        }
    }

    /// Evaluates `sol` like [`Session::evaluate`] and returns only once the candidate is gone
    /// (shut down, or killed with its process group when the evaluation stopped early) and the
    /// problem directory was hashed again after it: these traces are what to write down.
    ///
    /// The problem directory is hashed (content, [`kg_contract::tree`]) before the candidate
    /// starts, after each workload (a change is that workload's REWARD_HACK) and after the
    /// candidate is gone (a change then, e.g. from an exit handler, makes every trace of this
    /// evaluation REWARD_HACK, naming the files). `pinned`: the tree the caller loaded the
    /// problem from; a directory that no longer matches it is [`ExecError::ProblemChanged`]
    /// before anything runs. `Err` only when nothing ran; an evaluation stopped part way
    /// (cancelled, the judge lost) returns the traces it finished with the reason in
    /// [`Evaluated::error`].
    pub fn evaluate_sealed(
        &mut self,
        problem: &Problem,
        pinned: Option<&integrity::DirSnapshot>,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Evaluated, ExecError> {
        check_languages(sol)?;
        self.check_toolchain(sol)?;
        if sol.definition != problem.definition.name {
            return Err(ExecError::WrongDefinition {
                solution: sol.name.clone(),
                for_def: sol.definition.clone(),
                def: problem.definition.name.clone(),
            });
        }
        let before = integrity::snapshot_dir(&problem.dir);
        let problem_tree_sha256 = before.sha256().map_err(ExecError::ProblemTree)?;
        if let Some(p) = pinned {
            let c = p.changes(&before);
            if !c.is_empty() {
                let mut files: Vec<String> = c
                    .changed
                    .iter()
                    .chain(&c.added)
                    .map(|f| f.display().to_string())
                    .collect();
                files.extend(c.incomplete);
                return Err(ExecError::ProblemChanged {
                    dir: problem.dir.clone(),
                    files: files.join(", "),
                });
            }
        }
        let mut finished = Vec::new();
        let result = self.evaluate_in(problem, &before, sol, workloads, &mut |e| {
            if let Event::WorkloadFinished(t) = &e {
                finished.push((**t).clone());
            }
            on_event(e);
        });
        // A process started for this evaluation and never taken (the reference failed to load).
        let own = prestart_key(sol, workloads.len());
        self.prestarted
            .retain(|p| p.key != own || p.during != CandidateLaunch::EvaluationStart);
        // `evaluate_in` has returned: its candidate was shut down, or dropped on the way out
        // (which kills its process group and every descendant found), so nothing it ran can
        // still write; what it left in the problem directory is checked now.
        let (mut traces, error) = match result {
            Ok(t) => (t, None),
            Err(e) => (finished, Some(e)),
        };
        if let Some(msg) = problem_dir_tampering(
            &problem.dir,
            &before,
            "after its last workload was judged (e.g. from an exit handler or a thread)",
            "changed or removed (NOT restored)",
        ) {
            tracing::error!(dir = %problem.dir.display(), "{msg}");
            for t in &mut traces {
                if let Some(ev) = t.evaluation.as_mut() {
                    ev.log = bounded_log(format!("{msg}\n{}", ev.log));
                    ev.status = Status::RewardHack;
                    ev.reason = Some(Reason::ProblemDirChanged);
                    ev.correctness = None;
                    ev.performance = None;
                }
            }
        }
        Ok(Evaluated {
            traces,
            problem_tree_sha256,
            error,
        })
    }

    /// The evaluation loop of [`Session::evaluate_sealed`], against the snapshot `before`.
    pub(super) fn evaluate_in(
        &mut self,
        problem: &Problem,
        before: &integrity::DirSnapshot,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Vec<Trace>, ExecError> {
        check_languages(sol)?;
        if sol.definition != problem.definition.name {
            return Err(ExecError::WrongDefinition {
                solution: sol.name.clone(),
                for_def: sol.definition.clone(),
                def: problem.definition.name.clone(),
            });
        }
        let mut traces = Vec::new();
        let mut slot = CandidateSlot::default();
        let total = workloads.len();
        self.evaluating.clone_from(&sol.name);
        // The candidate's interpreter starts while the judge starts or loads the reference
        // (nothing is timed before the first workload; nothing of the candidate's runs before
        // its `load`).
        let own = prestart_key(sol, total);
        if total > 0 && !self.prestarted.iter().any(|p| p.key == own) {
            let calls = self.precompile_calls_for(sol, problem, workloads);
            self.prestart(sol, total, &calls, CandidateLaunch::EvaluationStart)?;
        }
        for (index, w) in workloads.iter().enumerate() {
            if self.cancel.is_cancelled() {
                return Err(ExecError::Cancelled);
            }
            on_event(Event::WorkloadStarted {
                definition: problem.definition.name.clone(),
                solution: sol.name.clone(),
                uuid: w.workload.uuid.clone(),
                index,
                total,
            });
            let mut run = WorkloadRun::default();
            let outcome = match self.ensure_judge(problem)? {
                Err(msg) => Outcome::fail(
                    Status::InvalidReference,
                    Reason::ReferenceFailed,
                    format!("the reference could not be loaded: {msg}"),
                ),
                Ok(()) => {
                    self.ensure_candidate(problem, sol, &mut slot, total - index, on_event)?;
                    match (&slot.worker, &slot.compile_failure) {
                        (_, Some((st, log))) => {
                            Outcome::fail(*st, Reason::BuildFailed, log.clone())
                        }
                        (Some(_), None) => {
                            self.candidate_workload(problem, w, &mut slot, &mut run)?
                        }
                        (None, None) => Outcome::fail(
                            Status::RuntimeError,
                            Reason::NoCandidate,
                            "no candidate process".to_string(),
                        ),
                    }
                }
            };
            // The candidate must not write the problem directory (planted modules, changed
            // data).
            let outcome = guard_problem_dir(&problem.dir, before, outcome);
            let outcome = match &self.opts.sol_floor {
                Some(f) => f.check(&problem.definition.name, &w.workload.uuid, outcome),
                None => outcome,
            };
            let trace = self.trace_of(problem, sol, w, slot.worker.as_ref(), outcome, run);
            on_event(Event::WorkloadFinished(Box::new(trace.clone())));
            traces.push(trace);
        }
        if let Some(c) = slot.worker.take() {
            c.shutdown();
        }
        // The directory is checked again by `evaluate_sealed`, now that the candidate is gone.
        Ok(traces)
    }

    /// Starts the evaluation's candidate process when it has none or it died (a solution that
    /// failed to build leaves its failure in the slot instead).
    fn ensure_candidate(
        &mut self,
        problem: &Problem,
        sol: &Solution,
        slot: &mut CandidateSlot,
        remaining: usize,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), ExecError> {
        if slot.compile_failure.is_some() || !slot.worker.as_ref().is_none_or(Worker::is_dead) {
            return Ok(());
        }
        if let Some(c) = slot.worker.take() {
            c.shutdown();
            on_event(Event::Notice(format!(
                "{}: starting a fresh candidate process for `{}`",
                problem.definition.name, sol.name
            )));
        }
        match self.start_candidate(sol, remaining)? {
            Ok(StartedCandidate {
                worker: mut c,
                start,
                build,
            }) => {
                slot.built = build;
                if self.opts.require_sandbox {
                    let report = c.isolation.clone().unwrap_or_default();
                    if !report.missing().is_empty() {
                        c.kill();
                        return Err(ExecError::SandboxIncomplete {
                            missing: report.missing_detail(),
                        });
                    }
                }
                slot.started = Some(start);
                slot.worker = Some(c);
            }
            Err(f) => slot.compile_failure = Some(f),
        }
        Ok(())
    }

    /// One workload in the slot's candidate process, with the log lines about its wall time,
    /// its isolation and (on the candidate's first workload) its start.
    fn candidate_workload(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        slot: &mut CandidateSlot,
        run: &mut WorkloadRun,
    ) -> Result<Outcome, ExecError> {
        let Some(c) = slot.worker.as_mut() else {
            return Ok(Outcome::fail(
                Status::RuntimeError,
                Reason::NoCandidate,
                "no candidate process",
            ));
        };
        let t = Instant::now();
        let mut o = self.run_workload_retrying(problem, w, c, &mut run.retried)?;
        let wall = t.elapsed().as_secs_f64();
        run.wall_s = Some(wall);
        if !o.log.is_empty() && !o.log.ends_with('\n') {
            o.log.push('\n');
        }
        o.log
            .push_str(&format!("harness: workload wall {wall:.3} s\n"));
        let i = c.isolation.clone().unwrap_or_default();
        o.log
            .push_str(&format!("harness: candidate {}\n", i.summary()));
        if let Some(st) = slot.started.take() {
            o.log.push_str(&format!(
                "harness: candidate ready {:.3} s after it was asked for ({}; its process found ready {:.3} s after it started), solution loaded in {:.3} s; first workload evaluated {:.3} s after the candidate process started\n",
                st.ready_s,
                match st.started {
                    CandidateLaunch::WhenAsked => "started when asked for",
                    CandidateLaunch::EvaluationStart => "started as its evaluation began",
                    CandidateLaunch::EarlierEvaluation => "started while an earlier evaluation ran",
                },
                st.process_s,
                st.load_s,
                c.started.elapsed().as_secs_f64()
            ));
            run.candidate_start = Some(st);
            run.build = slot.built.take();
        }
        Ok(o)
    }

    /// The trace of workload `w` with `outcome`, in the environment as it is now.
    fn trace_of(
        &mut self,
        problem: &Problem,
        sol: &Solution,
        w: &LoadedWorkload,
        candidate: Option<&Worker>,
        outcome: Outcome,
        run: WorkloadRun,
    ) -> Trace {
        let mut env = self.environment_now();
        env.isolation = candidate.map(|c| c.isolation.clone().unwrap_or_default());
        env.unverified = unverified_paths(&self.opts.device, sol);
        Trace {
            definition: problem.definition.name.clone(),
            solution: Some(sol.name.clone()),
            workload: w.workload.clone(),
            evaluation: Some(Evaluation {
                status: outcome.status,
                reason: outcome.reason,
                log: bounded_log(outcome.log),
                correctness: outcome.correctness,
                performance: outcome.performance,
                environment: env,
                timestamp: now_iso(),
                wall_s: run.wall_s,
                retried: run.retried,
                candidate_start: run.candidate_start,
                build: run.build,
            }),
            // Chained and sealed by the writer, once the candidate is gone.
            kernelgate_chain: None,
        }
    }

    /// Whether the fault `kind` is to be injected now: test builds read `KG_TEST_FAULT`
    /// (`KIND` every time, `KIND-once` the first time, either with `@UUID` only in the session
    /// whose claimed GPU that is), so tests can show how a fault of the harness's own plumbing
    /// is reported; release builds never inject.
    pub(super) fn inject(&mut self, kind: &str) -> bool {
        if !cfg!(debug_assertions) {
            return false;
        }
        let Ok(mut v) = std::env::var("KG_TEST_FAULT") else {
            return false;
        };
        if let Some((fault, uuid)) = v.split_once('@') {
            if self.opts.gpu_claim.as_ref().is_none_or(|c| c.uuid != uuid) {
                return false;
            }
            v = fault.to_string();
        }
        let hit = v == kind || (v == format!("{kind}-once") && self.faults_injected == 0);
        if hit {
            self.faults_injected += 1;
            tracing::warn!("KG_TEST_FAULT: injecting `{kind}`");
        }
        hit
    }

    /// [`Session::run_workload`], once more when the outcome may be the harness's doing
    /// ([`Outcome::retry`]): the second attempt is what is recorded, the first one's status in
    /// `retried`. A second loss of the harness's own state stops the evaluation
    /// ([`ExecError::HarnessFault`]), so no candidate status is given for a fault of ours.
    pub(super) fn run_workload_retrying(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
        retried: &mut Option<Retry>,
    ) -> Result<Outcome, ExecError> {
        let first = self.run_workload(problem, w, cand)?;
        let Some(reason) = first.retry else {
            return Ok(first);
        };
        let head: String = first.log.chars().take(600).collect();
        let first_attempt = format!("{}: {}", first.status.as_str(), head.trim_end());
        let fault = |detail: String| ExecError::HarnessFault {
            definition: problem.definition.name.clone(),
            workload: w.workload.uuid.clone(),
            detail,
        };
        if cand.is_dead() {
            return match reason {
                RetryReason::HarnessStateLost => Err(fault(first_attempt)),
                RetryReason::DualClock => Ok(first),
            };
        }
        tracing::warn!(
            workload = %w.workload.uuid,
            reason = reason.as_str(),
            "evaluating the workload once more: {first_attempt}"
        );
        let second = self.run_workload(problem, w, cand)?;
        if second.retry == Some(RetryReason::HarnessStateLost) {
            return Err(fault(format!(
                "twice; first attempt {first_attempt}; second {}",
                second.status.as_str()
            )));
        }
        *retried = Some(Retry {
            reason,
            first_attempt,
        });
        Ok(second)
    }

    pub(super) fn run_workload(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
    ) -> Result<Outcome, ExecError> {
        // The claim's L2 execution lock, held by us for the whole workload (crate::l2 says why).
        let l2 =
            crate::l2::hold_for_workload(&self.opts, &problem.definition.name, &w.workload.uuid)?;
        let xfer = self.transfer_dir(cand)?;
        if self.inject("lose-transfer") {
            let _ = std::fs::remove_dir_all(&xfer.inputs);
        }
        let result = self.run_workload_in(problem, w, cand, &xfer);
        // The judge's input directory and the session directory are the harness's own (the
        // sandboxed candidate cannot write either): a failure after they vanished is no
        // verdict on the candidate.
        let lost = [&xfer.inputs, &self.dir.path().to_path_buf()]
            .into_iter()
            .find(|d| !d.is_dir())
            .map(|d| d.display().to_string());
        let _ = std::fs::remove_dir_all(&xfer.inputs);
        let _ = std::fs::remove_dir_all(&xfer.outputs);
        let mut outcome = result?;
        if let Some(d) = lost
            && outcome.status != Status::Passed
        {
            tracing::warn!(dir = %d, "a transfer directory of the harness vanished during a workload");
            outcome.log = format!(
                "harness: its transfer directory `{d}` vanished during the workload\n{}",
                outcome.log
            );
            outcome.retry = Some(RetryReason::HarnessStateLost);
        }
        let log = cand.take_log();
        if !log.is_empty() {
            if !outcome.log.is_empty() && !outcome.log.ends_with('\n') {
                outcome.log.push('\n');
            }
            outcome.log.push_str(&log);
        }
        outcome.log = crate::l2::with_note(&l2, std::mem::take(&mut outcome.log));
        Ok(outcome)
    }
}
