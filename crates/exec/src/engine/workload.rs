//! One workload: correctness rounds, hand-over checks and the trace's figures.

use super::*;

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
                let status = match reply_kind(&r) {
                    "runtime" | "exception" => Status::RuntimeError,
                    "compile" => Status::CompileError,
                    _ => Status::RuntimeError,
                };
                Ok(Err(Outcome::fail(status, reply_message(&r))))
            }
            Err(WorkerError::Cancelled) => Err(ExecError::Cancelled),
            Err(WorkerError::Timeout { seconds }) => Ok(Err(Outcome::fail(
                Status::Timeout,
                format!(
                    "the candidate did not finish within --timeout ({:.0} s for the workload; waited {seconds:.1} s in this call); its process group was killed",
                    self.opts.timeout.as_secs_f64()
                ),
            ))),
            Err(WorkerError::Died { how }) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
                format!("the candidate process {how}"),
            ))),
            Err(e) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
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
        // v1: the tolerance; v2: the workload's checks (never the v1 defaults).
        let tol_json = w.workload.judge_policy();
        let outputs = Self::output_specs(problem, w);
        let rounds = self.opts.rounds.max(1);
        let mut figs = Figures::new();
        let mut pending = None;
        let mut last_in = Value::Null;
        let mut costs = RoundCosts::default();
        // Round inputs that are random, scalar or custom (the problem's own generator) are drawn
        // by the candidate from the round's seed (no bytes move): the judge announces the draws
        // first, and each batch then runs in the candidate while the judge prepares it (neither
        // is timed). Round 0's bytes are compared on both sides; when they differ, or the
        // candidate could not draw them, the rounds restart with inputs as files, written by
        // the judge before each batch runs.
        let mut round_inputs = "files (an input is read from a file)";
        let mut draws = self.round_draws(w, rounds, deadline)?;
        let method = self.opts.timing_method();
        let method_name = serde_json::to_value(method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        // The judge's preparation of the timed sets, asked right after the last batch's rounds
        // while the candidate still runs that batch (the judge waits on it otherwise).
        let mut early_timed = None;
        let per_batch = rounds_per_batch(problem, w);
        let mut batches = 0u32;
        let mut overlapped = 0u32;
        let mut next = 0u32;
        while next < rounds {
            let batch: Vec<u32> = (next..rounds.min(next + per_batch)).collect();
            batches += 1;
            let out = xfer.outputs.join(format!("out_{}.bin", batch[0]));
            let ins: Vec<PathBuf> = batch
                .iter()
                .map(|r| xfer.inputs.join(format!("in_{r}.pt")))
                .collect();
            let generate = draws.is_some();
            let device_out = self.device_out(cand);
            let reqs: Vec<Value> = batch
                .iter()
                .zip(&ins)
                .map(|(&round, inp)| {
                    let mut req = self.prepare_request(problem, w, round, inp);
                    req["generate"] = json!(generate);
                    req["digest"] = json!(generate && round == 0);
                    req
                })
                .collect();
            let req = json!({"op": "prepare_rounds", "rounds": reqs});
            let run_of = |inputs: &[Value]| {
                let runs: Vec<Value> = batch
                    .iter()
                    .zip(inputs)
                    .map(|(&round, input)| {
                        json!({"round": round, "in": input, "outputs": outputs,
                               "digest": generate && round == 0})
                    })
                    .collect();
                json!({"op": "run_rounds", "runs": runs, "out": out, "device_out": device_out})
            };
            let drawn: Option<Vec<Value>> = draws.as_ref().map(|d| {
                batch
                    .iter()
                    .filter_map(|&r| d.get(r as usize).cloned())
                    .collect()
            });
            let (r, judge_took, early_run) = match &drawn {
                Some(inputs) => {
                    let run = run_of(inputs);
                    let mut jreqs = vec![req];
                    if next + batch.len() as u32 >= rounds {
                        jreqs.push(self.prepare_timed_request(w, xfer, &method_name, true));
                    }
                    let (rs, c) = self.judge_requests_during(&jreqs, deadline, |s| {
                        let t = Instant::now();
                        (s.candidate_call(cand, &run, deadline), t.elapsed())
                    });
                    let mut rs = rs.into_iter();
                    let (r, took) = rs.next().unwrap_or((
                        Err(JudgeFail::Other("the judge was not asked".into())),
                        Duration::ZERO,
                    ));
                    early_timed = rs.next().map(|(t, _)| t);
                    overlapped += 1;
                    (r, took, Some(c))
                }
                None => {
                    let t = Instant::now();
                    let r = self.judge_request(&req, deadline);
                    (r, t.elapsed(), None)
                }
            };
            let r = match r {
                Ok(r) if reply_ok(&r) => r,
                Ok(r) => {
                    return Ok(Outcome::fail(Status::InvalidReference, reply_message(&r)));
                }
                Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
                Err(JudgeFail::Other(m)) => {
                    return Ok(Outcome::fail(
                        Status::InvalidReference,
                        format!("the reference failed: {m}"),
                    ));
                }
            };
            let replies = replies_of(&r, "replies");
            costs.add_ms("judge prepare", judge_took.as_secs_f64() * 1e3, &replies);
            if let Some(bad) = replies.iter().find(|r| !reply_ok(r)) {
                return Ok(Outcome::fail(Status::InvalidReference, reply_message(bad)));
            }
            if let Some(o) = short_batch(
                Status::InvalidReference,
                "the judge prepared",
                replies.len(),
                batch.len(),
            ) {
                return Ok(o);
            }
            let mut inputs: Vec<Value> = replies
                .iter()
                .zip(&ins)
                .map(|(r, inp)| {
                    r.get("input")
                        .filter(|v| v.is_object())
                        .cloned()
                        .unwrap_or_else(|| json!(inp))
                })
                .collect();
            let (cr, run_ms) = match early_run {
                Some((cr, took)) => {
                    if drawn.as_deref() != Some(&inputs[..]) {
                        return Ok(Outcome::fail(
                            Status::RuntimeError,
                            "the judge's round inputs differ from the draws it announced",
                        ));
                    }
                    (cr, took.as_secs_f64() * 1e3)
                }
                None => {
                    let t = Instant::now();
                    let cr = self.candidate_call(cand, &run_of(&inputs), deadline);
                    (cr, t.elapsed().as_secs_f64() * 1e3)
                }
            };
            let cr = match cr? {
                Err(o) => return Ok(o),
                Ok(cr) => cr,
            };
            let creplies = replies_of(&cr, "replies");
            costs.add_ms(
                "candidate run",
                run_ms,
                creplies.iter().chain(std::iter::once(&cr)),
            );
            if generate
                && batch[0] == 0
                && let Some(m) = cr.get("draw_failed").and_then(Value::as_str)
            {
                tracing::debug!("the candidate could not draw round 0: {m}");
                draws = None;
                early_timed = None;
                round_inputs = "files (the candidate could not run the input generator)";
                continue;
            }
            for (round, c) in batch.iter().zip(&creplies) {
                if let Some(m) = c.get("reward_hack").and_then(Value::as_str) {
                    return Ok(Outcome::fail(
                        Status::RewardHack,
                        format!("round {round}: {m}"),
                    ));
                }
            }
            if let Some(o) = short_batch(
                Status::RuntimeError,
                "the candidate answered",
                creplies.len(),
                batch.len(),
            ) {
                return Ok(o);
            }
            if generate && batch[0] == 0 {
                if creplies[0].get("digest").and_then(Value::as_str)
                    != replies[0].get("digest").and_then(Value::as_str)
                {
                    draws = None;
                    early_timed = None;
                    round_inputs =
                        "files (the candidate's generator did not reproduce round 0's inputs)";
                    continue;
                }
                round_inputs = "drawn in the candidate from each round's seed";
            }
            next += batch.len() as u32;
            let check =
                json!({"op": "check_rounds", "rounds": batch, "path": out, "tolerance": tol_json});
            let check = match self.handed_check(cand, &cr, check, deadline)? {
                Ok(c) => c,
                Err(o) => return Ok(o),
            };
            last_in = inputs.pop().unwrap_or(Value::Null);
            if next >= rounds {
                // The last batch is checked while the candidate loads and warms up for timing.
                pending = Some(PendingCheck { batch, req: check });
                break;
            }
            let t_op = Instant::now();
            let r = self.judge_request(&check, deadline);
            let r = match self.settle_check(cand, r, &check, deadline)? {
                Ok(r) => r,
                Err(o) => return Ok(o),
            };
            costs.add("judge check", t_op, r.as_ref().ok());
            if let Some(o) = Self::round_check_outcome(r, &batch, &mut figs)? {
                return Ok(o);
            }
            let _ = std::fs::remove_file(&out);
            for (inp, &round) in ins.iter().zip(&batch) {
                if round + 1 < rounds {
                    let _ = std::fs::remove_file(inp);
                }
            }
        }
        // Timing, on the last round's inputs; the outputs of the timed calls are checked again.
        let budget = if self.opts.device.is_cpu() {
            self.opts.cpu_time_budget.map(|d| d.as_secs_f64())
        } else {
            None
        };
        let clones = if self.opts.device.is_cpu() { 1 } else { 4 };
        let rounds_s = t_workload.elapsed().as_secs_f64();
        let tr = match self.timed_calls(
            problem,
            w,
            cand,
            xfer,
            &last_in,
            &method_name,
            budget,
            deadline,
            (pending, early_timed, &mut figs, &mut costs),
        )? {
            Timed::Fail(mut o) => {
                if let Some(r) = &o.check
                    && o.outcome.status.has_correctness()
                {
                    figs.merge(r);
                    o.outcome.correctness = Some(figs.correctness(rounds));
                }
                return Ok(o.outcome);
            }
            Timed::Ok(r) => r,
        };
        let cand_events = times_of(&tr);
        let iterations = cand_events.len() as u32;
        // The reference makes as many timed calls as the candidate did, on the same sets.
        let rreq = json!({
            "op": "time_reference", "warmup": self.opts.warmup,
            "iterations": iterations.max(1), "method": method_name,
            "budget_s": budget, "clones": clones, "spin_us": tr.get("spin_us"),
        });
        let t_ref = Instant::now();
        let (rr, ref_keys) = self.judge_timing_request(&rreq, deadline);
        let rr = match rr {
            Ok(r) if reply_ok(&r) => r,
            Ok(r) => return Ok(Outcome::fail(Status::InvalidReference, reply_message(&r))),
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Outcome::fail(Status::InvalidReference, m)),
        };
        let ref_s = t_ref.elapsed().as_secs_f64();
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
        let ref_events = match ref_rule.and_then(|rule| integrity::bound_samples(&rr, rule)) {
            Ok(t) => t,
            Err(why) => {
                return Ok(Outcome::fail(
                    Status::InvalidReference,
                    format!(
                        "harness: the judge's reference timing is not bound to its timed calls: {why}"
                    ),
                ));
            }
        };
        // What each worker reported, for the log (before CUPTI spans may replace them).
        let (cand_sum_ms, ref_sum_ms) = (
            cand_events.iter().sum::<f64>(),
            ref_events.iter().sum::<f64>(),
        );
        if let Some(why) =
            dual_clock_after_reference(&tr, &rr, ref_sum_ms, !self.opts.device.is_cpu())
        {
            return Ok(Outcome::fail(Status::RewardHack, why).retry_for(RetryReason::DualClock));
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
                "timing produced no samples",
            ));
        };
        // The candidate's median, unless its mean says the work was concentrated in a few calls.
        // The reference keeps its median: raising a noisy reference's latency would inflate
        // the candidate's speedup, the one direction a bound must never move.
        let (c_lat, c_raised) = integrity::robust_latency(&cs);
        let r_lat = rs.median_ms;
        let speedup = if c_lat > 0.0 { r_lat / c_lat } else { 0.0 };
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
        if let Some(p) = tr.get("phases_s") {
            let f = |k: &str| p.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            log.push_str(&format!(
                "harness: phases: correctness rounds {rounds_s:.3} s; timed inputs prepared {:.3} s; candidate load + warm-up {:.3} s; timed batch {:.3} s; sampled re-checks {:.3} s; reference timing {:.3} s\n",
                f("prepare"),
                f("load"),
                f("batch"),
                f("checks"),
                ref_s
            ));
        }
        log.push_str(&format!("harness: round inputs: {round_inputs}\n"));
        log.push_str(&format!(
            "harness: outputs handed over: {}\n",
            self.outputs_via
        ));
        log.push_str(&format!(
            "harness: correctness round costs (ms, summed over {rounds} rounds in {batches} batch(es), {overlapped} of them run in the candidate while the judge prepared them; the last batch checked while the candidate warmed up for timing): {}\n",
            costs.line()
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
        if c_raised {
            log.push_str(&format!(
                "harness: candidate latency is mean / {} = {:.6} ms, not the median {:.6} ms: its timed calls' time is concentrated in a few of them\n",
                integrity::CONCENTRATION_RATIO,
                cs.mean_ms / integrity::CONCENTRATION_RATIO,
                cs.median_ms
            ));
        }
        if let Some(n) = cupti_note {
            log.push_str(&format!("harness: {n}\n"));
        }
        let wall_ms = t_workload.elapsed().as_secs_f64() * 1e3;
        log.push_str(&overhead_line(
            wall_ms,
            (&tr, cand_sum_ms),
            (&rr, ref_sum_ms),
        ));
        log.push_str(&asked_calls_line(
            wall_ms,
            (&tr, cand_sum_ms),
            (&rr, ref_sum_ms),
            &costs,
        ));
        for (who, v) in [("candidate", &tr), ("reference", &rr)] {
            let mut notes = v.get("notes").cloned().unwrap_or(Value::Null);
            if let Some(o) = notes.as_object_mut() {
                o.remove("cupti_ms");
                o.remove("timed_index");
                if !o.is_empty() {
                    log.push_str(&format!("timing notes ({who}): {notes}\n"));
                }
            }
        }
        Ok(Outcome {
            status: Status::Passed,
            log,
            correctness: Some(figs.correctness(rounds)),
            performance: Some(Performance {
                latency_ms: c_lat,
                reference_latency_ms: r_lat,
                speedup_factor: speedup,
                timing_method: Some(method),
                warmup: Some(self.opts.warmup),
                iterations: Some(iterations),
                spread: Some(cs),
                reference_spread: Some(rs),
            }),
            retry: None,
        })
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
                    format!("the judge failed while checking outputs: {m}"),
                )));
            }
        };
        if !reply_ok(&r) {
            return Ok(Some(Outcome::fail(Status::RuntimeError, reply_message(&r))));
        }
        let results = replies_of(&r, "results");
        if results.is_empty() {
            return Ok(Some(Outcome::fail(
                Status::RuntimeError,
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
                let mut o = Outcome::fail(status, msg);
                if status.has_correctness() {
                    o.correctness = Some(figs.correctness(round + 1));
                }
                return Ok(Some(o));
            }
        }
        Ok(short_batch(
            Status::RuntimeError,
            "the judge checked",
            results.len(),
            batch.len(),
        ))
    }
}
