//! The correctness rounds of one workload, in batches: the judge prepares each batch (or
//! announces its draws), the candidate runs it, the judge checks it. The last batch is checked
//! while the candidate warms up for timing ([`PendingCheck`]).

use super::*;

/// What every batch of one workload's rounds shares.
pub(super) struct RoundsCx<'a> {
    pub(super) problem: &'a Problem,
    pub(super) w: &'a LoadedWorkload,
    pub(super) xfer: &'a Transfer,
    /// The outputs' specs, as the candidate is told them.
    pub(super) outputs: Value,
    /// v1: the tolerance; v2: the workload's checks (never the v1 defaults).
    pub(super) tolerance: Value,
    pub(super) rounds: u32,
    pub(super) method_name: &'a str,
    pub(super) deadline: Instant,
}

/// How far the rounds got, and what they leave for timing.
pub(super) struct Rounds {
    /// The first round not yet run.
    next: u32,
    /// Round inputs the candidate draws from each round's seed; None: inputs go as files.
    draws: Option<Vec<Value>>,
    pub(super) figs: Figures,
    pub(super) pending: Option<PendingCheck>,
    /// The last round's inputs (the timed calls run on them).
    pub(super) last_in: Value,
    pub(super) costs: RoundCosts,
    /// How round inputs reached the candidate, for the log.
    pub(super) round_inputs: &'static str,
    /// The judge's preparation of the timed sets, asked with the last batch.
    pub(super) early_timed: Option<Result<Value, JudgeFail>>,
    pub(super) batches: u32,
    /// Batches run in the candidate while the judge prepared them.
    pub(super) overlapped: u32,
}

/// The judge's replies to a batch's preparation, the round inputs they name, and the
/// candidate's early run.
type Prepared = (Vec<Value>, Vec<Value>, Option<EarlyRun>);

/// One batch's rounds, paths and requests.
struct Batch {
    rounds: Vec<u32>,
    out: PathBuf,
    ins: Vec<PathBuf>,
    /// Whether the candidate draws the inputs itself.
    generate: bool,
    device_out: bool,
}

/// The candidate's run of a batch, when it ran while the judge prepared it.
type EarlyRun = (Result<Result<Value, Outcome>, ExecError>, Duration);

impl Batch {
    /// The candidate's `run_rounds` request on `inputs`.
    fn run_request(&self, cx: &RoundsCx, inputs: &[Value]) -> Value {
        let runs: Vec<Value> = self
            .rounds
            .iter()
            .zip(inputs)
            .map(|(&round, input)| {
                json!({"round": round, "in": input, "outputs": cx.outputs,
                       "digest": self.generate && round == 0})
            })
            .collect();
        json!({"op": "run_rounds", "runs": runs, "out": self.out, "device_out": self.device_out})
    }
}

impl Session {
    /// Runs every correctness round of `cx`'s workload; an outcome when one did not pass.
    pub(super) fn correctness_rounds(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
    ) -> Result<Result<Rounds, Outcome>, ExecError> {
        // Round inputs that are random, scalar or custom (the problem's own generator) are drawn
        // by the candidate from the round's seed (no bytes move): the judge announces the draws
        // first, and each batch then runs in the candidate while the judge prepares it (neither
        // is timed). Round 0's bytes are compared on both sides; when they differ, or the
        // candidate could not draw them, the rounds restart with inputs as files, written by
        // the judge before each batch runs.
        let draws = self.round_draws(cx.w, cx.rounds, cx.deadline)?;
        let mut st = Rounds {
            next: 0,
            draws,
            figs: Figures::new(),
            pending: None,
            last_in: Value::Null,
            costs: RoundCosts::default(),
            round_inputs: "files (an input is read from a file)",
            early_timed: None,
            batches: 0,
            overlapped: 0,
        };
        let per_batch = rounds_per_batch(cx.problem, cx.w);
        while st.next < cx.rounds {
            let rounds: Vec<u32> = (st.next..cx.rounds.min(st.next + per_batch)).collect();
            let batch = Batch {
                out: cx.xfer.outputs.join(format!("out_{}.bin", rounds[0])),
                ins: rounds
                    .iter()
                    .map(|r| cx.xfer.inputs.join(format!("in_{r}.pt")))
                    .collect(),
                generate: st.draws.is_some(),
                device_out: self.device_out(cand),
                rounds,
            };
            st.batches += 1;
            match self.round_batch(cx, cand, &mut st, batch)? {
                Err(o) => return Ok(Err(o)),
                Ok(true) => break,
                Ok(false) => {}
            }
        }
        Ok(Ok(st))
    }

    /// Runs and checks one batch: true when it was the last (its check left pending), false
    /// when the rounds go on (or restart with inputs as files).
    fn round_batch(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        st: &mut Rounds,
        batch: Batch,
    ) -> Result<Result<bool, Outcome>, ExecError> {
        let (replies, mut inputs, early_run) = match self.prepare_batch(cx, cand, st, &batch)? {
            Ok(p) => p,
            Err(o) => return Ok(Err(o)),
        };
        let (cr, run_ms) = match early_run {
            Some((cr, took)) => (cr, took.as_secs_f64() * 1e3),
            None => {
                let t = Instant::now();
                let cr = self.candidate_call(cand, &batch.run_request(cx, &inputs), cx.deadline);
                (cr, t.elapsed().as_secs_f64() * 1e3)
            }
        };
        let cr = match cr? {
            Err(o) => return Ok(Err(o)),
            Ok(cr) => cr,
        };
        let creplies = replies_of(&cr, "replies");
        st.costs.add_ms(
            "candidate run",
            run_ms,
            creplies.iter().chain(std::iter::once(&cr)),
        );
        let first = batch.generate && batch.rounds[0] == 0;
        if first && let Some(m) = cr.get("draw_failed").and_then(Value::as_str) {
            tracing::debug!("the candidate could not draw round 0: {m}");
            st.restart_with_files("files (the candidate could not run the input generator)");
            return Ok(Ok(false));
        }
        for (round, c) in batch.rounds.iter().zip(&creplies) {
            if let Some(m) = c.get("reward_hack").and_then(Value::as_str) {
                return Ok(Err(Outcome::fail(
                    Status::RewardHack,
                    hack_reason(c),
                    format!("round {round}: {m}"),
                )));
            }
        }
        if let Some(o) = short_batch(
            (Status::RuntimeError, Reason::ShortReply),
            "the candidate answered",
            creplies.len(),
            batch.rounds.len(),
        ) {
            return Ok(Err(o));
        }
        if first {
            if creplies[0].get("digest").and_then(Value::as_str)
                != replies[0].get("digest").and_then(Value::as_str)
            {
                st.restart_with_files(
                    "files (the candidate's generator did not reproduce round 0's inputs)",
                );
                return Ok(Ok(false));
            }
            st.round_inputs = "drawn in the candidate from each round's seed";
        }
        st.next += batch.rounds.len() as u32;
        let check = json!({"op": "check_rounds", "rounds": batch.rounds, "path": batch.out,
                           "tolerance": cx.tolerance});
        let check = match self.handed_check(cand, &cr, check, cx.deadline)? {
            Ok(c) => c,
            Err(o) => return Ok(Err(o)),
        };
        st.last_in = inputs.pop().unwrap_or(Value::Null);
        if st.next >= cx.rounds {
            // The last batch is checked while the candidate loads and warms up for timing.
            st.pending = Some(PendingCheck {
                batch: batch.rounds,
                req: check,
            });
            return Ok(Ok(true));
        }
        let t_op = Instant::now();
        let r = self.judge_request(&check, cx.deadline);
        let r = match self.settle_check(cand, r, &check, cx.deadline)? {
            Ok(r) => r,
            Err(o) => return Ok(Err(o)),
        };
        st.costs.add("judge check", t_op, r.as_ref().ok());
        if let Some(o) = Self::round_check_outcome(r, &batch.rounds, &mut st.figs)? {
            return Ok(Err(o));
        }
        let _ = std::fs::remove_file(&batch.out);
        for (inp, &round) in batch.ins.iter().zip(&batch.rounds) {
            if round + 1 < cx.rounds {
                let _ = std::fs::remove_file(inp);
            }
        }
        Ok(Ok(false))
    }

    /// The judge's preparation of `batch`: its replies and the round inputs they name, and the
    /// candidate's run when the batch ran in it meanwhile (its inputs drawn from the seeds).
    fn prepare_batch(
        &mut self,
        cx: &RoundsCx,
        cand: &mut Worker,
        st: &mut Rounds,
        batch: &Batch,
    ) -> Result<Result<Prepared, Outcome>, ExecError> {
        let reqs: Vec<Value> = batch
            .rounds
            .iter()
            .zip(&batch.ins)
            .map(|(&round, inp)| {
                let mut req = self.prepare_request(cx.problem, cx.w, round, inp);
                req["generate"] = json!(batch.generate);
                req["digest"] = json!(batch.generate && round == 0);
                req
            })
            .collect();
        let req = json!({"op": "prepare_rounds", "rounds": reqs});
        let drawn: Option<Vec<Value>> = st.draws.as_ref().map(|d| {
            batch
                .rounds
                .iter()
                .filter_map(|&r| d.get(r as usize).cloned())
                .collect()
        });
        let (r, judge_took, early_run) = match &drawn {
            Some(inputs) => {
                let run = batch.run_request(cx, inputs);
                let mut jreqs = vec![req];
                if st.next + batch.rounds.len() as u32 >= cx.rounds {
                    jreqs.push(self.prepare_timed_request(cx.w, cx.xfer, cx.method_name, true));
                }
                let (rs, c) = self.judge_requests_during(&jreqs, cx.deadline, |s| {
                    let t = Instant::now();
                    (s.candidate_call(cand, &run, cx.deadline), t.elapsed())
                });
                let mut rs = rs.into_iter();
                let (r, took) = rs.next().unwrap_or((
                    Err(JudgeFail::Other("the judge was not asked".into())),
                    Duration::ZERO,
                ));
                st.early_timed = rs.next().map(|(t, _)| t);
                st.overlapped += 1;
                (r, took, Some(c))
            }
            None => {
                let t = Instant::now();
                let r = self.judge_request(&req, cx.deadline);
                (r, t.elapsed(), None)
            }
        };
        let r = match judge_ok(r, REFERENCE_FAILED, "the reference failed: ")? {
            Ok(r) => r,
            Err(o) => return Ok(Err(o)),
        };
        let replies = replies_of(&r, "replies");
        st.costs
            .add_ms("judge prepare", judge_took.as_secs_f64() * 1e3, &replies);
        if let Some(bad) = replies.iter().find(|r| !reply_ok(r)) {
            return Ok(Err(Outcome::fail(
                Status::InvalidReference,
                Reason::ReferenceFailed,
                reply_message(bad),
            )));
        }
        if let Some(o) = short_batch(
            (Status::InvalidReference, Reason::ReferenceFailed),
            "the judge prepared",
            replies.len(),
            batch.rounds.len(),
        ) {
            return Ok(Err(o));
        }
        let inputs: Vec<Value> = replies
            .iter()
            .zip(&batch.ins)
            .map(|(r, inp)| {
                r.get("input")
                    .filter(|v| v.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!(inp))
            })
            .collect();
        if early_run.is_some() && drawn.as_deref() != Some(&inputs[..]) {
            return Ok(Err(Outcome::fail(
                Status::RuntimeError,
                Reason::DrawsMismatch,
                "the judge's round inputs differ from the draws it announced",
            )));
        }
        Ok(Ok((replies, inputs, early_run)))
    }
}

impl Rounds {
    /// The rounds start again with inputs as files (`why` goes to the log).
    fn restart_with_files(&mut self, why: &'static str) {
        self.draws = None;
        self.early_timed = None;
        self.round_inputs = why;
    }
}
