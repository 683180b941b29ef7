//! The timed calls of one workload, both sides interleaved.

use super::*;
use rounds::{Rounds, RoundsCx};

/// The candidate loaded and warmed up.
struct Loaded {
    /// The judge's `prepare_timed` reply, when it was asked.
    prepared: Option<Result<Value, JudgeFail>>,
    warmup_ms: f64,
    /// Seconds until both the candidate's warm-up and the judge's requests were answered.
    load_s: f64,
}

/// The timed input sets, in the candidate.
struct Sets {
    keys: integrity::TimedKeys,
    /// The reference's host launch time (ms), when measured.
    ref_host_ms: Option<f64>,
    /// How the sets were handed over, for the log.
    handover: &'static str,
}

impl Session {
    /// Where the judge writes sealed timed input sets for the candidate.
    pub(super) fn timed_inputs_path(xfer: &Transfer) -> PathBuf {
        xfer.inputs.join("in_timed.pt")
    }

    /// The judge's `prepare_timed` request: the timed input sets drawn from per-set seeds
    /// (`generate`) or sealed into a file, and the reference's host launch time.
    pub(super) fn prepare_timed_request(
        &self,
        w: &LoadedWorkload,
        xfer: &Transfer,
        method_name: &str,
        generate: bool,
    ) -> Value {
        let budget_bytes = if self.opts.device.is_cpu() {
            integrity::TIMED_INPUT_BUDGET_CPU
        } else {
            integrity::TIMED_INPUT_BUDGET_GPU
        };
        json!({
            "op": "prepare_timed", "workload": w.workload, "path": Self::timed_inputs_path(xfer),
            "input_shapes": shapes_json(&w.resolved.inputs), "axes": w.resolved.axes,
            "iterations": self.opts.iterations.max(1), "generate": generate,
            "cupti": method_name == "cupti", "budget_bytes": budget_bytes,
        })
    }

    /// The timed calls: the judge writes distinct input sets (one per timed iteration), the
    /// candidate warms up on the last correctness round's inputs and times one call per set;
    /// the parent measures the wall time around the timed batch (dual clock); after timing the
    /// judge picks which timed outputs to check and checks them against its reference.
    /// `st.pending`, the last correctness batch's check, runs in the judge while the candidate
    /// loads and warms up (its figures merged into `st.figs`, its cost into `st.costs`); a
    /// batch that failed it ends the workload with that outcome. `st.early_timed`, the judge's
    /// `prepare_timed` reply when it was asked with the last batch's rounds.
    pub(super) fn timed_calls(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        st: &mut Rounds,
        budget: Option<f64>,
    ) -> Result<Timed, ExecError> {
        let loaded = match self.time_load(cx, cand, st, budget)? {
            Ok(l) => l,
            Err(fail) => return Ok(fail),
        };
        let t_prep = Instant::now();
        let Sets {
            mut keys,
            ref_host_ms,
            handover,
        } = match self.time_sets(cx, cand, loaded.prepared)? {
            Ok(s) => s,
            Err(fail) => return Ok(fail),
        };
        let prep_s = t_prep.elapsed().as_secs_f64();
        let spin_us = spin_us_for(ref_host_ms);
        let treq = json!({
            "op": "time", "iterations": self.opts.iterations.max(1),
            "method": cx.method_name, "budget_s": budget, "spin_us": spin_us,
        });
        let t0 = Instant::now();
        let tr = self.candidate_call_with(cand, &treq, cx.deadline, &mut |a| keys.answer(a))?;
        let mut outside_ms = t0.elapsed().as_secs_f64() * 1e3;
        if self.inject("dual-clock") {
            outside_ms += 60_000.0;
        }
        // A key asked out of turn is the attack the sealing exists for, whatever happened next.
        if let Some(why) = keys.violation.take() {
            return Ok(Timed::fail(Status::RewardHack, Reason::SealedKeyOrder, why));
        }
        let mut tr = match tr {
            Ok(r) => r,
            Err(o) => return Ok(Timed::failed(o)),
        };
        let t_checks = Instant::now();
        if let Some(m) = tr.get("reward_hack").and_then(Value::as_str) {
            return Ok(Timed::fail(
                Status::RewardHack,
                hack_reason(&tr),
                m.to_string(),
            ));
        }
        let graph = cx.method_name == "cuda_graph";
        // One sample per timed call we handed a key out for, each naming its set: samples a
        // candidate adds to the harness's list from inside a call are caught here.
        let rule = if graph {
            integrity::SampleRule::GraphReplays {
                calls: (self.opts.iterations.max(1) as usize).min(keys.len()),
                served: keys.served(),
            }
        } else {
            integrity::SampleRule::OnePerKey {
                served: keys.served(),
            }
        };
        let times = match integrity::bound_samples(&tr, rule) {
            Ok(t) => t,
            Err(why) => {
                return Ok(Timed::fail(
                    Status::RewardHack,
                    Reason::SamplesUnbound,
                    format!("timing samples not bound to the timed calls: {why}"),
                ));
            }
        };
        if times.is_empty() {
            return Ok(Timed::fail(
                Status::RuntimeError,
                Reason::NoSamples,
                "timing produced no samples",
            ));
        }
        // A CUDA graph replays `graph_unroll` launches (our harness: 10) per reported sample.
        let reported_ms: f64 = times.iter().sum::<f64>() * if graph { 10.0 } else { 1.0 };
        // The dual clock is decided once the reference has been timed: its own unexplained
        // batch time widens the allowance (`dual_clock_after_reference`).
        let dual = json!({"reported_ms": reported_ms, "calls": times.len(),
                          "extra_ms": 2.0 * keys.seal_ms_served()});
        // CUDA-graph timing replays the first input set only.
        let ran = if graph { 1 } else { times.len() };
        if let Some(fail) = self.check_timed_outputs(cx, cand, ran)? {
            return Ok(fail);
        }
        if let Some(o) = tr.as_object_mut() {
            o.insert("outside_ms".into(), json!(outside_ms));
            o.insert("dual_clock".into(), dual);
            o.insert("handover".into(), json!(handover));
            o.insert("spin_us".into(), json!(spin_us));
            o.insert("ref_host_ms".into(), json!(ref_host_ms));
            o.insert("warmup_ms".into(), json!(loaded.warmup_ms));
            o.insert(
                "phases_s".into(),
                json!({"prepare": prep_s, "load": loaded.load_s, "batch": outside_ms / 1e3,
                       "checks": t_checks.elapsed().as_secs_f64()}),
            );
        }
        Ok(Timed::Ok(tr))
    }

    /// The candidate loads and warms up on the last round's inputs (none of the timed sets)
    /// while the judge checks the last correctness batch (and prepares the timed input sets,
    /// unless it did so with the last batch's rounds): the judge's `prepare_timed` reply, when
    /// it was asked, and the candidate's warm-up time (ms).
    fn time_load(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        st: &mut Rounds,
        budget: Option<f64>,
    ) -> Result<Result<Loaded, Timed>, ExecError> {
        let t_load = Instant::now();
        let lreq = json!({
            "op": "time_load", "in": st.last_in, "outputs": cx.outputs,
            "warmup": self.opts.warmup, "budget_s": budget,
        });
        let mut jreqs = Vec::new();
        let checked = st.pending.take().map(|p| {
            jreqs.push(p.req);
            p.batch
        });
        let pending_req = jreqs.first().cloned();
        let early_timed = st.early_timed.take();
        if early_timed.is_none() {
            jreqs.push(self.prepare_timed_request(cx.w, cx.xfer, cx.method_name, true));
        }
        let (replies, lr) = self.judge_requests_during(&jreqs, cx.deadline, |s| {
            s.candidate_call(cand, &lreq, cx.deadline)
        });
        let load_s = t_load.elapsed().as_secs_f64();
        let mut replies = replies.into_iter();
        // The candidate's outputs are judged first, then the reference's timed inputs, then
        // the candidate's warm-up.
        if let Some(batch) = checked {
            let Some((cr, took)) = replies.next() else {
                return Ok(Err(Timed::fail(
                    Status::RuntimeError,
                    Reason::JudgeFailed,
                    "the judge did not check the last batch",
                )));
            };
            let cr = match pending_req {
                Some(req) if lr.as_ref().is_ok_and(Result::is_ok) => {
                    match self.settle_check(cand, cr, &req, cx.deadline)? {
                        Ok(cr) => cr,
                        Err(o) => return Ok(Err(Timed::failed(o))),
                    }
                }
                _ => cr,
            };
            st.costs
                .add_ms("judge check", took.as_secs_f64() * 1e3, cr.as_ref().ok());
            if let Some(o) = Self::round_check_outcome(cr, &batch, &mut st.figs)? {
                return Ok(Err(Timed::failed(o)));
            }
        }
        let prepared = early_timed.or_else(|| replies.next().map(|(r, _)| r));
        let lr = match lr? {
            Ok(lr) => lr,
            Err(o) => {
                if let Some(Ok(r)) = &prepared
                    && !reply_ok(r)
                {
                    return Ok(Err(Timed::fail(
                        Status::InvalidReference,
                        Reason::ReferenceFailed,
                        reply_message(r),
                    )));
                }
                return Ok(Err(Timed::failed(o)));
            }
        };
        let warmup_ms = lr.get("warmup_ms").and_then(Value::as_f64).unwrap_or(0.0);
        Ok(Ok(Loaded {
            prepared,
            warmup_ms,
            load_s,
        }))
    }

    /// The timed input sets: first choice, drawn in the candidate from per-set seeds (the
    /// keys), so no bytes move; files when an input is from safetensors, or when the
    /// candidate's generator does not reproduce the judge's probe set. The keys, the
    /// reference's host launch time (ms) and how the sets were handed over.
    fn time_sets(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        mut prepared: Option<Result<Value, JudgeFail>>,
    ) -> Result<Result<Sets, Timed>, ExecError> {
        let timed_in = Self::timed_inputs_path(cx.xfer);
        let mut handover = "sealed files (an input is read from a file)";
        let mut keys = integrity::TimedKeys::new(Vec::new(), Vec::new());
        let mut ref_host_ms = None;
        for generate in [true, false] {
            let r = match prepared.take() {
                Some(r) => r,
                None => self.judge_request(
                    &self.prepare_timed_request(cx.w, cx.xfer, cx.method_name, generate),
                    cx.deadline,
                ),
            };
            let r = match judge_ok(r, REFERENCE_FAILED, "")? {
                Ok(r) => r,
                Err(o) => return Ok(Err(Timed::failed(o))),
            };
            let strs = |k: &str| -> Vec<String> {
                r.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let seal_ms = r
                .get("seal_ms")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            keys = integrity::TimedKeys::new(strs("keys"), seal_ms);
            ref_host_ms = r.get("ref_host_ms").and_then(Value::as_f64);
            let generated = r.get("generate").filter(|g| g.is_object()).cloned();
            let probe = r
                .get("probe_digest")
                .and_then(Value::as_str)
                .map(str::to_string);
            let sreq = json!({
                "op": "time_sets", "timed_in": timed_in, "outputs": cx.outputs,
                "generate": generated,
            });
            let sr = match self.candidate_call(cand, &sreq, cx.deadline)? {
                Ok(sr) => sr,
                Err(o) => return Ok(Err(Timed::failed(o))),
            };
            if generated.is_none() {
                break;
            }
            if sr.get("probe_digest").and_then(Value::as_str) == probe.as_deref() {
                handover =
                    "drawn in the candidate from per-set seeds handed out as each call starts";
                break;
            }
            handover =
                "sealed files (the candidate's generator did not reproduce the judge's probe set)";
        }
        let _ = std::fs::remove_file(&timed_in);
        Ok(Ok(Sets {
            keys,
            ref_host_ms,
            handover,
        }))
    }

    /// After timing, the judge picks `integrity::TIMED_SAMPLES` of the `ran` timed sets, the
    /// candidate saves their outputs while the judge runs its reference on them, and the judge
    /// checks them: the failure, when they differ.
    fn check_timed_outputs(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        ran: usize,
    ) -> Result<Option<Timed>, ExecError> {
        let deadline = cx.deadline;
        let sreq = json!({"op": "sample_timed", "ran": ran, "samples": integrity::TIMED_SAMPLES});
        let indices = match judge_ok(self.judge_request(&sreq, deadline), JUDGE_FAILED, "")? {
            Ok(r) => r.get("indices").cloned().unwrap_or(Value::Null),
            Err(o) => return Ok(Some(Timed::failed(o))),
        };
        let timed_out = cx.xfer.outputs.join("out_timed.bin");
        let save = json!({"op": "time_save", "indices": indices, "out": timed_out,
                          "device_out": self.device_out(cand)});
        // The judge runs its reference on the sampled sets while the candidate saves them.
        let (refs, _, saved) =
            self.judge_request_during(&json!({"op": "timed_refs"}), deadline, |s| {
                s.candidate_call(cand, &save, deadline)
            });
        let saved = match saved? {
            Err(o) => return Ok(Some(Timed::failed(o))),
            Ok(r) => {
                if let Some(m) = r.get("reward_hack").and_then(Value::as_str) {
                    return Ok(Some(Timed::fail(
                        Status::RewardHack,
                        hack_reason(&r),
                        m.to_string(),
                    )));
                }
                r
            }
        };
        match refs {
            Ok(r) if reply_ok(&r) => {}
            Ok(r) => {
                return Ok(Some(Timed::fail(
                    Status::InvalidReference,
                    Reason::ReferenceFailed,
                    reply_message(&r),
                )));
            }
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => {
                return Ok(Some(Timed::fail(
                    Status::RuntimeError,
                    Reason::JudgeFailed,
                    m,
                )));
            }
        }
        let check = json!({"op": "check_timed", "path": timed_out, "tolerance": cx.tolerance});
        let check = match self.handed_check(cand, &saved, check, deadline)? {
            Ok(c) => c,
            Err(o) => return Ok(Some(Timed::failed(o))),
        };
        let r = self.judge_request(&check, deadline);
        let r = match self.settle_check(cand, r, &check, deadline)? {
            Ok(r) => r,
            Err(o) => return Ok(Some(Timed::failed(o))),
        };
        match r {
            Ok(r) if reply_ok(&r) => {
                let st = r.get("status").and_then(Value::as_str).unwrap_or("");
                if st != "PASSED" {
                    let msg = format!(
                        "outputs of the timed calls (distinct inputs, sampled after timing) differ from the reference although the untimed calls matched: {}",
                        r.get("message").and_then(Value::as_str).unwrap_or(st)
                    );
                    let status = Status::parse(st).unwrap_or(Status::IncorrectNumerical);
                    // Outputs that differ are this check's own finding; outputs it could not
                    // read say so.
                    let reason = match check_reason(&r, status) {
                        Reason::OutputsUnreadable => Reason::OutputsUnreadable,
                        Reason::OutputsMissing => Reason::OutputsMissing,
                        Reason::OutputSubclass => Reason::OutputSubclass,
                        _ => Reason::TimedOutputsDiffer,
                    };
                    return Ok(Some(Timed::Fail(Box::new(TimedFail {
                        outcome: Outcome::fail(status, reason, msg),
                        check: Some(r),
                    }))));
                }
                Ok(None)
            }
            Ok(r) => Ok(Some(Timed::fail(
                Status::RuntimeError,
                Reason::JudgeFailed,
                reply_message(&r),
            ))),
            Err(JudgeFail::Cancelled) => Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => Ok(Some(Timed::fail(
                Status::RuntimeError,
                Reason::JudgeFailed,
                m,
            ))),
        }
    }
}
