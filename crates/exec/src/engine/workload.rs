//! One workload: correctness rounds, hand-over checks and the trace's figures.

use super::*;
use rounds::RoundsCx;

/// What the log says about a workload whose timing passed.
struct TimingLog<'a> {
    /// The candidate's and the reference's timing replies.
    tr: &'a Value,
    rr: &'a Value,
    /// Each side's reported timed time, summed (ms).
    sums_ms: (f64, f64),
    iterations: u32,
    rounds: u32,
    /// Seconds in the correctness rounds, and in the reference's timing.
    phases_s: (f64, f64),
    wall_ms: f64,
    st: &'a rounds::Rounds,
    cs: &'a kg_contract::Spread,
    /// Whether the candidate's latency was raised from its median to mean / ratio.
    c_raised: bool,
    cupti_note: Option<String>,
    /// Where the reference timing came from, when an earlier candidate's was reused.
    reused: Option<&'a ReferenceReuse>,
}

/// A reference timing kept for later candidates of the same workload
/// ([`EvalOptions::reference_reuse`]).
pub(super) struct KeptReference {
    /// The judge's timing reply and its samples, bound to its calls when they were taken.
    rr: Value,
    events: Vec<f64>,
    /// The spin before each call it was timed with (GPU only).
    spin_us: Option<f64>,
    at: Instant,
    /// The solution whose evaluation timed it.
    timed_with: String,
    uses: u32,
}

/// What a kept reference timing must match to serve another candidate: the workload, by its
/// problem's directory (two problems of one name never share), and the calls the reference
/// makes (warm-up, iterations, method, the CPU time budget).
pub(super) struct ReferenceKey(String);

impl ReferenceKey {
    fn new(
        problem: &Problem,
        w: &LoadedWorkload,
        warmup: u32,
        iterations: u32,
        method: &str,
        budget: Option<f64>,
    ) -> Self {
        ReferenceKey(format!(
            "{}\0{}\0{warmup}\0{iterations}\0{method}\0{budget:?}",
            problem.dir.display(),
            w.workload.uuid
        ))
    }
}

/// Whether a reference timed with spin `kept` may stand for one timed with `now`: the spin
/// only has to outlast the host's launch (it is 4x the reference's), so a spin within a
/// quarter of this one hides the same launch; the same on the CPU (no spin).
pub(super) fn spins_alike(kept: Option<f64>, now: Option<f64>) -> bool {
    match (kept, now) {
        (None, None) => true,
        (Some(k), Some(n)) if n > 0.0 => (k / n - 1.0).abs() <= 0.25,
        _ => false,
    }
}

impl Session {
    pub(super) fn candidate_call(
        &self,
        cand: &mut Worker,
        req: &Value,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        self.candidate_call_with(cand, req, deadline, &mut crate::process::no_asides)
    }

    /// [`Session::candidate_call`], answering the candidate's asides with `on_aside`.
    pub(super) fn candidate_call_with(
        &self,
        cand: &mut Worker,
        req: &Value,
        deadline: Instant,
        on_aside: &mut dyn FnMut(&Aside) -> AsideReply,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        match cand.request_with(req, deadline, &self.cancel, on_aside) {
            Ok(r) if reply_ok(&r) => Ok(Ok(r)),
            Ok(r) => {
                let (status, reason) = match reply_kind(&r) {
                    "runtime" | "exception" => (Status::RuntimeError, Reason::CandidateRaised),
                    "compile" => (Status::CompileError, Reason::BuildFailed),
                    _ => (Status::RuntimeError, Reason::WorkerProtocol),
                };
                Ok(Err(Outcome::fail(status, reason, reply_message(&r))))
            }
            Err(WorkerError::Cancelled) => Err(ExecError::Cancelled),
            Err(WorkerError::Timeout { seconds }) => Ok(Err(Outcome::fail(
                Status::Timeout,
                Reason::Timeout,
                format!(
                    "the candidate did not finish within --timeout ({:.0} s for the workload; waited {seconds:.1} s in this call); its process group was killed",
                    self.opts.timeout.as_secs_f64()
                ),
            ))),
            Err(WorkerError::Died { how }) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
                Reason::CandidateDied,
                format!("the candidate process {how}"),
            ))),
            Err(e) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
                Reason::WorkerProtocol,
                format!("candidate worker: {e}"),
            ))),
        }
    }

    pub(super) fn run_workload_in(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
        xfer: &Transfer,
    ) -> Result<Outcome, ExecError> {
        let t_workload = Instant::now();
        let deadline = t_workload + self.opts.timeout;
        self.outputs_via = match &self.pool_off {
            _ if self.opts.device.is_cpu() => "files (a CPU run)".into(),
            Some((tag, why)) if tag == cand.tag() => {
                format!("files (the candidate's output pool failed earlier: {why})")
            }
            _ => "files".into(),
        };
        let rounds = self.opts.rounds.max(1);
        let method = self.opts.timing_method();
        let method_name = serde_json::to_value(method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let cx = RoundsCx {
            problem,
            w,
            xfer,
            outputs: Self::output_specs(problem, w),
            tolerance: w.workload.judge_policy(),
            rounds,
            method_name: &method_name,
            deadline,
        };
        let mut st = match self.correctness_rounds(&cx, cand)? {
            Ok(st) => st,
            Err(o) => return Ok(o),
        };
        // Timing, on the last round's inputs; the outputs of the timed calls are checked again.
        let budget = if self.opts.device.is_cpu() {
            self.opts.cpu_time_budget.map(|d| d.as_secs_f64())
        } else {
            None
        };
        let rounds_s = t_workload.elapsed().as_secs_f64();
        let tr = match self.timed_calls(&cx, cand, &mut st, budget)? {
            Timed::Fail(mut o) => {
                if let Some(r) = &o.check
                    && o.outcome.status.has_correctness()
                {
                    st.figs.merge(r);
                    o.outcome.correctness = Some(st.figs.correctness(rounds));
                }
                return Ok(o.outcome);
            }
            Timed::Ok(r) => r,
        };
        let cand_events = times_of(&tr);
        let iterations = cand_events.len() as u32;
        let t_ref = Instant::now();
        let key = ReferenceKey::new(
            problem,
            w,
            self.opts.warmup,
            iterations,
            &method_name,
            budget,
        );
        let spin_us = tr.get("spin_us").and_then(Value::as_f64);
        let (rr, ref_events, reused) = match self.kept_reference(&key, spin_us) {
            Some((rr, ev, reuse)) => (rr, ev, Some(reuse)),
            None => match self.time_reference(&tr, iterations, &method_name, budget, deadline)? {
                Ok((rr, ev)) => (rr, ev, None),
                Err(o) => return Ok(o),
            },
        };
        let ref_s = t_ref.elapsed().as_secs_f64();
        // Kept for later candidates only once this workload has passed.
        let to_keep = (reused.is_none() && self.opts.reference_reuse.is_some())
            .then(|| (rr.clone(), ref_events.clone()));
        // What each worker reported, for the log (before CUPTI spans may replace them).
        let (cand_sum_ms, ref_sum_ms) = (
            cand_events.iter().sum::<f64>(),
            ref_events.iter().sum::<f64>(),
        );
        if let Some(why) =
            dual_clock_after_reference(&tr, &rr, ref_sum_ms, !self.opts.device.is_cpu())
        {
            return Ok(Outcome::fail(Status::RewardHack, Reason::DualClock, why)
                .retry_for(RetryReason::DualClock));
        }
        // CUPTI spans when both sides have them (and they are plausible), else the event times,
        // so candidate and reference are always measured by the same method.
        let (method, cand_times, ref_times, cupti_note) =
            choose_times(method, &tr, &rr, cand_events, ref_events);
        // Statistics are computed here from the raw samples, never taken from a worker.
        let (Some(cs), Some(rs)) = (
            integrity::spread_from_times(&cand_times),
            integrity::spread_from_times(&ref_times),
        ) else {
            return Ok(Outcome::fail(
                Status::RuntimeError,
                Reason::NoSamples,
                "timing produced no samples",
            ));
        };
        // The candidate's median, unless its mean says the work was concentrated in a few calls.
        // The reference keeps its median: raising a noisy reference's latency would inflate
        // the candidate's speedup, the one direction a bound must never move.
        let (c_lat, c_raised) = integrity::robust_latency(&cs);
        let r_lat = rs.median_ms;
        let speedup = if c_lat > 0.0 { r_lat / c_lat } else { 0.0 };
        let log = self.timing_log(&TimingLog {
            tr: &tr,
            rr: &rr,
            sums_ms: (cand_sum_ms, ref_sum_ms),
            iterations,
            rounds,
            phases_s: (rounds_s, ref_s),
            wall_ms: t_workload.elapsed().as_secs_f64() * 1e3,
            st: &st,
            cs: &cs,
            c_raised,
            cupti_note,
            reused: reused.as_ref(),
        });
        if let Some((rr, events)) = to_keep {
            self.keep_reference(key, spin_us, rr, events);
        }
        Ok(Outcome {
            status: Status::Passed,
            reason: None,
            log,
            correctness: Some(st.figs.correctness(rounds)),
            performance: Some(Performance {
                latency_ms: c_lat,
                reference_latency_ms: r_lat,
                speedup_factor: speedup,
                timing_method: Some(method),
                warmup: Some(self.opts.warmup),
                iterations: Some(iterations),
                spread: Some(cs),
                reference_spread: Some(rs),
                phases: Some(phases_of(&tr, rounds_s, ref_s)),
                reference_reused: reused,
            }),
            retry: None,
        })
    }

    /// A kept reference timing for `key` that may serve this candidate (reuse on, young
    /// enough, its spin within a quarter of this candidate's), counted as used; else None.
    fn kept_reference(
        &mut self,
        key: &ReferenceKey,
        spin_us: Option<f64>,
    ) -> Option<(Value, Vec<f64>, ReferenceReuse)> {
        let max_age = self.opts.reference_reuse?;
        let k = self.kept_references.get_mut(&key.0)?;
        let age = k.at.elapsed();
        if age > max_age || !spins_alike(k.spin_us, spin_us) {
            return None;
        }
        k.uses += 1;
        let reuse = ReferenceReuse {
            timed_with: k.timed_with.clone(),
            age_s: age.as_secs_f64(),
            uses: k.uses,
        };
        Some((k.rr.clone(), k.events.clone(), reuse))
    }

    /// Keeps a reference timing taken with the current candidate, whose workload passed, for
    /// later candidates, replacing an older one.
    fn keep_reference(
        &mut self,
        key: ReferenceKey,
        spin_us: Option<f64>,
        rr: Value,
        events: Vec<f64>,
    ) {
        let kept = KeptReference {
            rr,
            events,
            spin_us,
            at: Instant::now(),
            timed_with: self.evaluating.clone(),
            uses: 1,
        };
        self.kept_references.insert(key.0, kept);
    }

    /// The reference's timed calls, as many as the candidate's (`iterations`) on the same sets
    /// (`tr`: the candidate's timing reply): the judge's reply and its samples, bound to the
    /// calls it made.
    fn time_reference(
        &mut self,
        tr: &Value,
        iterations: u32,
        method_name: &str,
        budget: Option<f64>,
        deadline: Instant,
    ) -> Result<Result<(Value, Vec<f64>), Outcome>, ExecError> {
        let clones = if self.opts.device.is_cpu() { 1 } else { 4 };
        let rreq = json!({
            "op": "time_reference", "warmup": self.opts.warmup,
            "iterations": iterations.max(1), "method": method_name,
            "budget_s": budget, "clones": clones, "spin_us": tr.get("spin_us"),
        });
        let (rr, ref_keys) = self.judge_timing_request(&rreq, deadline);
        let rr = match judge_ok(rr, REFERENCE_FAILED, "")? {
            Ok(r) => r,
            Err(o) => return Ok(Err(o)),
        };
        // The trusted judge's samples are held to the same binding (cheap, and a harness bug
        // would otherwise skew every speedup): one per set it opened, or per clone call.
        let ref_rule = match ref_keys {
            Err(why) => Err(why),
            Ok(served) if method_name == "cuda_graph" => Ok(integrity::SampleRule::GraphReplays {
                calls: iterations.max(1) as usize,
                served,
            }),
            Ok(0) => Ok(integrity::SampleRule::Unsealed {
                calls: iterations.max(1) as usize,
                sets: clones,
            }),
            Ok(served) => Ok(integrity::SampleRule::OnePerKey { served }),
        };
        match ref_rule.and_then(|rule| integrity::bound_samples(&rr, rule)) {
            Ok(t) => Ok(Ok((rr, t))),
            Err(why) => Ok(Err(Outcome::fail(
                Status::InvalidReference,
                Reason::ReferenceTimingUnbound,
                format!(
                    "harness: the judge's reference timing is not bound to its timed calls: {why}"
                ),
            ))),
        }
    }

    /// The log of a workload whose timing passed.
    fn timing_log(&self, l: &TimingLog) -> String {
        let (cand_sum_ms, ref_sum_ms) = l.sums_ms;
        let (rounds_s, ref_s) = l.phases_s;
        let (tr, rr, rounds, iterations, st) = (l.tr, l.rr, l.rounds, l.iterations, l.st);
        let mut log = format!(
            "harness: timed iterations: candidate {:.3} s, reference {:.3} s; correctness rounds {rounds}\n",
            cand_sum_ms / 1e3,
            ref_sum_ms / 1e3
        );
        if let Some(wall) = tr.get("outside_ms").and_then(Value::as_f64) {
            log.push_str(&format!(
                "harness: dual clock: candidate reported {cand_sum_ms:.3} ms over {iterations} timed call(s) with distinct inputs; parent wall time {wall:.3} ms\n"
            ));
        }
        if tr.get("phases_s").is_some() {
            let p = phases_of(tr, rounds_s, ref_s);
            log.push_str(&format!(
                "harness: phases: correctness rounds {:.3} s; timed inputs prepared {:.3} s; candidate load + warm-up {:.3} s; timed batch {:.3} s; sampled re-checks {:.3} s; reference timing {:.3} s\n",
                p.correctness_rounds_s,
                p.timed_inputs_s,
                p.candidate_load_warmup_s,
                p.timed_batch_s,
                p.sampled_checks_s,
                p.reference_timing_s
            ));
        }
        if let Some(r) = l.reused {
            log.push_str(&format!(
                "harness: reference timing reused: timed with `{}` {:.1} s before on this device (use {} of that timing; --reference-reuse {} s)\n",
                r.timed_with,
                r.age_s,
                r.uses,
                self.opts.reference_reuse.map_or(0.0, |d| d.as_secs_f64())
            ));
        }
        log.push_str(&format!("harness: round inputs: {}\n", st.round_inputs));
        log.push_str(&format!(
            "harness: outputs handed over: {}\n",
            self.outputs_via
        ));
        log.push_str(&format!(
            "harness: correctness round costs (ms, summed over {rounds} rounds in {} batch(es), {} of them run in the candidate while the judge prepared them; the last batch checked while the candidate warmed up for timing): {}\n",
            st.batches,
            st.overlapped,
            st.costs.line()
        ));
        if let Some(h) = tr.get("handover").and_then(Value::as_str) {
            log.push_str(&format!("harness: timed input sets: {h}\n"));
        }
        if let Some(us) = tr.get("spin_us").and_then(Value::as_f64)
            && !self.opts.device.is_cpu()
        {
            let why = match tr.get("ref_host_ms").and_then(Value::as_f64) {
                Some(h) => format!(
                    "{SPIN_HOST_FACTOR}x the reference's host launch time {:.1} us, within {SPIN_MIN_US}-{SPIN_MAX_US} us",
                    h * 1e3
                ),
                None => "the reference's host launch time was not measured".into(),
            };
            log.push_str(&format!(
                "harness: spin kernel before each timed call: {us:.0} us ({why})\n"
            ));
            if let Some(note) = host_bound_note(tr.get("ref_host_ms").and_then(Value::as_f64)) {
                log.push_str(&note);
            }
        }
        if l.c_raised {
            log.push_str(&format!(
                "harness: candidate latency is mean / {} = {:.6} ms, not the median {:.6} ms: its timed calls' time is concentrated in a few of them\n",
                integrity::CONCENTRATION_RATIO,
                l.cs.mean_ms / integrity::CONCENTRATION_RATIO,
                l.cs.median_ms
            ));
        }
        if let Some(n) = &l.cupti_note {
            log.push_str(&format!("harness: {n}\n"));
        }
        log.push_str(&overhead_line(
            l.wall_ms,
            (tr, cand_sum_ms),
            (rr, ref_sum_ms),
        ));
        log.push_str(&asked_calls_line(
            l.wall_ms,
            (tr, cand_sum_ms),
            (rr, ref_sum_ms),
            &st.costs,
        ));
        for (who, v) in [("candidate", tr), ("reference", rr)] {
            let mut notes = v.get("notes").cloned().unwrap_or(Value::Null);
            if let Some(o) = notes.as_object_mut() {
                o.remove("cupti_ms");
                o.remove("timed_index");
                if !o.is_empty() {
                    log.push_str(&format!("timing notes ({who}): {notes}\n"));
                }
            }
        }
        log
    }

    /// Whether the candidate is asked to hand its outputs over on the device (`device_out`):
    /// on a GPU, unless its output pool already failed.
    pub(super) fn device_out(&self, cand: &Worker) -> bool {
        !self.opts.device.is_cpu() && self.pool_off.as_ref().is_none_or(|(t, _)| t != cand.tag())
    }

    /// The check request `req` (it names the file the outputs would be in, `path`) for the
    /// candidate's reply `cr`: with `device`, the description of the outputs in the
    /// candidate's device pool, when `cr` handed them over there; the pool's descriptor goes
    /// to the judge first when the judge has not opened that pool. When that relay fails, the
    /// candidate writes the outputs to the file instead.
    pub(super) fn handed_check(
        &mut self,
        cand: &mut Worker,
        cr: &Value,
        mut req: Value,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        if let Some(why) = cr.get("pool_off").and_then(Value::as_str) {
            self.outputs_via = format!("files (the candidate's output pool failed: {why})");
        }
        let Some(desc) = cr.get("device").filter(|d| d.is_object()) else {
            return Ok(Ok(req));
        };
        let Some(judge) = self.judge.as_mut() else {
            return Ok(Ok(req));
        };
        let key = (
            judge.tag().to_string(),
            cand.tag().to_string(),
            desc.get("pool").and_then(Value::as_u64).unwrap_or(0),
        );
        let import = self.pool_opened.as_ref() != Some(&key);
        if import {
            let relayed = cand
                .recv_fd(deadline.min(Instant::now() + FD_WAIT))
                .and_then(|fd| judge.send_fd(fd.as_fd()));
            if let Err(e) = relayed {
                return self.resend(
                    cand,
                    req,
                    &format!("relaying its descriptor failed: {e}"),
                    deadline,
                );
            }
            self.pool_opened = Some(key);
        }
        let mut d = desc.clone();
        d["import"] = json!(import);
        req["device"] = d;
        if self.outputs_via == "files" {
            self.outputs_via = "on the device (the candidate's shared memory pool)".into();
        }
        Ok(Ok(req))
    }

    /// Asks the candidate to write the outputs it handed over on the device to the file the
    /// check request `req` names (`path`), and returns `req` without `device`; every later
    /// hand-over of this candidate goes as a file.
    pub(super) fn resend(
        &mut self,
        cand: &mut Worker,
        mut req: Value,
        why: &str,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        tracing::warn!("the candidate's output pool failed ({why}); its outputs go as files");
        self.pool_off = Some((cand.tag().to_string(), why.to_string()));
        self.outputs_via = format!("files (the candidate's output pool failed: {why})");
        let resend = json!({"op": "resend", "out": req.get("path"), "why": why});
        if let Err(o) = self.candidate_call(cand, &resend, deadline)? {
            return Ok(Err(o));
        }
        if let Some(o) = req.as_object_mut() {
            o.remove("device");
        }
        Ok(Ok(req))
    }

    /// The judge's reply `r` to the check request `req`, asked again from the file after the
    /// candidate wrote it when the judge could not read the candidate's pool
    /// (`handover_failed`).
    pub(super) fn settle_check(
        &mut self,
        cand: &mut Worker,
        r: Result<Value, JudgeFail>,
        req: &Value,
        deadline: Instant,
    ) -> Result<Result<Result<Value, JudgeFail>, Outcome>, ExecError> {
        let why = match &r {
            Ok(v) => match v.get("handover_failed").and_then(Value::as_str) {
                Some(why) => format!("the judge could not read it: {why}"),
                None => return Ok(Ok(r)),
            },
            Err(_) => return Ok(Ok(r)),
        };
        match self.resend(cand, req.clone(), &why, deadline)? {
            Ok(req) => Ok(Ok(self.judge_request(&req, deadline))),
            Err(o) => Ok(Err(o)),
        }
    }

    /// The outcome of the judge's `check_rounds` reply `r` for `batch`: the first round that
    /// did not pass (its figures merged into `figs` up to it), or None when every round passed.
    pub(super) fn round_check_outcome(
        r: Result<Value, JudgeFail>,
        batch: &[u32],
        figs: &mut Figures,
    ) -> Result<Option<Outcome>, ExecError> {
        let r = match r {
            Ok(r) => r,
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => {
                return Ok(Some(Outcome::fail(
                    Status::RuntimeError,
                    Reason::JudgeFailed,
                    format!("the judge failed while checking outputs: {m}"),
                )));
            }
        };
        if !reply_ok(&r) {
            return Ok(Some(Outcome::fail(
                Status::RuntimeError,
                Reason::JudgeFailed,
                reply_message(&r),
            )));
        }
        let results = replies_of(&r, "results");
        if results.is_empty() {
            return Ok(Some(Outcome::fail(
                Status::RuntimeError,
                Reason::JudgeFailed,
                "the judge returned no check results",
            )));
        }
        for (&round, res) in batch.iter().zip(&results) {
            figs.merge(res);
            let status = res
                .get("status")
                .and_then(Value::as_str)
                .and_then(Status::parse)
                .unwrap_or(Status::RuntimeError);
            if status != Status::Passed {
                let msg = format!(
                    "round {round}: {}",
                    res.get("message").and_then(Value::as_str).unwrap_or("")
                );
                let mut o = Outcome::fail(status, check_reason(res, status), msg);
                if status.has_correctness() {
                    o.correctness = Some(figs.correctness(round + 1));
                }
                return Ok(Some(o));
            }
        }
        Ok(short_batch(
            (Status::RuntimeError, Reason::JudgeFailed),
            "the judge checked",
            results.len(),
            batch.len(),
        ))
    }
}

/// The workload's phases: the correctness rounds and the reference's timing as the harness
/// measured them, the rest from the candidate's timing reply (`phases_s`, 0 where absent).
fn phases_of(tr: &Value, rounds_s: f64, ref_s: f64) -> Phases {
    let p = tr.get("phases_s");
    let f = |k: &str| {
        p.and_then(|p| p.get(k))
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
    };
    Phases {
        correctness_rounds_s: rounds_s,
        timed_inputs_s: f("prepare"),
        candidate_load_warmup_s: f("load"),
        timed_batch_s: f("batch"),
        sampled_checks_s: f("checks"),
        reference_timing_s: ref_s,
    }
}
