//! The judge process: its start, requests under deadlines, and the reference's answers.

use super::*;

impl Session {
    pub(super) fn judge_error(&self, message: String) -> ExecError {
        ExecError::Judge {
            python: self.python.path.clone(),
            message,
        }
    }

    /// Starts the judge if it is not running, and loads `problem`'s reference into it.
    pub(super) fn ensure_judge(
        &mut self,
        problem: &Problem,
    ) -> Result<Result<(), String>, ExecError> {
        if self.judge.as_ref().is_some_and(Worker::is_dead) {
            if let Some(j) = self.judge.take() {
                j.shutdown();
            }
            self.judge_setup_for = None;
        }
        if self.judge.is_none() {
            // Scripts written for this judge alone: a candidate that ran before (and, without a
            // mount namespace, could write) never touched them.
            let scripts = self.fresh_scripts("judge-py")?;
            let paths = self.interpreter_paths()?;
            let spec = self.spec(&paths, "judge", &scripts.join("judge.py"), self.dir.path());
            let mut w = match Worker::spawn(&spec, Duration::from_secs(300), &self.cancel) {
                Ok(w) => w,
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => return Err(self.judge_error(e.to_string())),
            };
            let deadline = Instant::now() + Duration::from_secs(300);
            let hello = json!({"op": "hello", "device": self.opts.device.worker_name(), "seed": self.opts.seed,
                "cupti": self.opts.timing_method() == TimingMethod::Cupti});
            let r = match w.request(&hello, deadline, &self.cancel) {
                Ok(r) => r,
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => {
                    let log = w.take_log();
                    return Err(self.judge_error(format!("{e}\n{}", tail(&log, 4000))));
                }
            };
            if !reply_ok(&r) {
                return Err(self.judge_error(reply_message(&r)));
            }
            let mut env: Environment = r
                .get("environment")
                .cloned()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            env.host = host_name();
            env.kernelgate_version = Some(env!("CARGO_PKG_VERSION").to_string());
            self.judge_env = Some(env);
            self.judge = Some(w);
            self.judge_setup_for = None;
        }
        let key = format!(
            "{}\0{}",
            problem.definition_path.display(),
            kg_contract::io::sha256_hex(problem.definition.reference.as_bytes())
        );
        if self.judge_setup_for.as_deref() == Some(key.as_str()) {
            return Ok(Ok(()));
        }
        let def = serde_json::to_value(&problem.definition).unwrap_or(Value::Null);
        let dir = problem.dir.canonicalize().unwrap_or(problem.dir.clone());
        let req = json!({"op": "setup", "definition": def, "work_dir": self.dir.path(), "problem_dir": dir});
        let deadline = Instant::now() + self.opts.compile_timeout;
        let Some(j) = self.judge.as_mut() else {
            return Err(self.judge_error("judge not running".into()));
        };
        match j.request(&req, deadline, &self.cancel) {
            Ok(r) if reply_ok(&r) => {
                self.judge_setup_for = Some(key);
                Ok(Ok(()))
            }
            Ok(r) => Ok(Err(reply_message(&r))),
            Err(WorkerError::Cancelled) => Err(ExecError::Cancelled),
            Err(e) => {
                let log = j.take_log();
                Ok(Err(format!(
                    "the judge failed while loading the reference: {e}\n{log}"
                )))
            }
        }
    }

    pub(super) fn judge_request(
        &mut self,
        req: &Value,
        deadline: Instant,
    ) -> Result<Value, JudgeFail> {
        let Some(j) = self.judge.as_mut() else {
            return Err(JudgeFail::Other("judge not running".into()));
        };
        let r = Self::ask_judge(j, req, deadline, &self.cancel);
        self.judge_reply(r)
    }

    /// [`Session::judge_request`] for the reference's timing: also returns how many timed-set
    /// asides the judge made (one per sealed set it opened, in order), or why they were out of
    /// order.
    pub(super) fn judge_timing_request(
        &mut self,
        req: &Value,
        deadline: Instant,
    ) -> (Result<Value, JudgeFail>, Result<usize, String>) {
        let Some(j) = self.judge.as_mut() else {
            return (Err(JudgeFail::Other("judge not running".into())), Ok(0));
        };
        let mut served = 0usize;
        let mut order = None;
        let mut count = |a: &Aside| {
            let Aside::TimedKey { index } = *a;
            if index != served as u64 {
                order.get_or_insert(format!(
                    "the judge opened timed set {index} when set {served} was due"
                ));
            }
            served += 1;
            AsideReply::Ack
        };
        let r = j.request_with(req, deadline, &self.cancel, &mut count);
        let keys = order.map_or(Ok(served), Err);
        (self.judge_reply(r), keys)
    }

    /// [`Session::judge_request`] on another thread while `other` runs on this one (the
    /// candidate's half of a correctness batch), so the two workers' untimed work overlaps.
    /// Returns the judge's reply, how long the judge took, and what `other` returned.
    pub(super) fn judge_request_during<T>(
        &mut self,
        req: &Value,
        deadline: Instant,
        other: impl FnOnce(&Self) -> T,
    ) -> (Result<Value, JudgeFail>, Duration, T) {
        let (mut rs, t) = self.judge_requests_during(std::slice::from_ref(req), deadline, other);
        let (r, took) = rs.pop().unwrap_or((
            Err(JudgeFail::Other("the judge was not asked".into())),
            Duration::ZERO,
        ));
        (r, took, t)
    }

    /// [`Session::judge_request_during`] for several requests, asked in order; each reply
    /// comes with how long the judge took over it. After a reply that is not a reply (the
    /// judge failed), the later requests are not asked and get the same failure.
    pub(super) fn judge_requests_during<T>(
        &mut self,
        reqs: &[Value],
        deadline: Instant,
        other: impl FnOnce(&Self) -> T,
    ) -> (Vec<JudgeTook>, T) {
        let Some(mut j) = self.judge.take() else {
            let t = other(self);
            let none = || {
                (
                    Err(JudgeFail::Other("judge not running".into())),
                    Duration::ZERO,
                )
            };
            return (reqs.iter().map(|_| none()).collect(), t);
        };
        let cancel = self.cancel.clone();
        let (rs, t) = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut out = Vec::new();
                for req in reqs {
                    let t0 = Instant::now();
                    let r = Self::ask_judge(&mut j, req, deadline, &cancel);
                    let failed = r.is_err();
                    out.push((r, t0.elapsed()));
                    if failed {
                        break;
                    }
                }
                out
            });
            let t = other(self);
            (h.join().ok(), t)
        });
        self.judge = Some(j);
        let mut out = Vec::new();
        let mut failure = JudgeFail::Other("the thread waiting on the judge panicked".into());
        for (r, took) in rs.unwrap_or_default() {
            let r = self.judge_reply(r);
            match &r {
                Err(JudgeFail::Other(m)) => failure = JudgeFail::Other(m.clone()),
                Err(JudgeFail::Cancelled) => failure = JudgeFail::Cancelled,
                Ok(_) => {}
            }
            out.push((r, took));
        }
        while out.len() < reqs.len() {
            let f = match &failure {
                JudgeFail::Other(m) => JudgeFail::Other(m.clone()),
                JudgeFail::Cancelled => JudgeFail::Cancelled,
            };
            out.push((Err(f), Duration::ZERO));
        }
        (out, t)
    }

    pub(super) fn ask_judge(
        j: &mut Worker,
        req: &Value,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Value, WorkerError> {
        // The judge's only aside: the reference's timed calls make the same per-call round trip
        // to us as the candidate's key requests, so both sides are timed alike.
        let mut echo = |_: &Aside| AsideReply::Ack;
        j.request_with(req, deadline, cancel, &mut echo)
    }

    pub(super) fn judge_reply(
        &mut self,
        r: Result<Value, WorkerError>,
    ) -> Result<Value, JudgeFail> {
        match r {
            Ok(v) => Ok(v),
            Err(WorkerError::Cancelled) => Err(JudgeFail::Cancelled),
            Err(e) => {
                let log = self
                    .judge
                    .as_ref()
                    .map(Worker::take_log)
                    .unwrap_or_default();
                self.judge_setup_for = None;
                Err(JudgeFail::Other(format!("judge worker: {e}\n{log}")))
            }
        }
    }

    pub(super) fn environment_now(&mut self) -> Environment {
        let mut env = self.judge_env.clone().unwrap_or_default();
        if !self.opts.device.is_cpu() {
            let deadline = Instant::now() + Duration::from_secs(10);
            if let Ok(r) = self.judge_request(&json!({"op": "clocks"}), deadline)
                && let Some(c) = r.get("clocks").cloned()
                && let Ok(c) = serde_json::from_value::<ClockState>(c)
            {
                env.clocks = Some(c);
            }
        }
        if let Some(claim) = &self.opts.gpu_claim {
            // The claim, not the worker, knows whether clocks were locked for the run.
            let clocks = env.clocks.get_or_insert_with(ClockState::default);
            clocks.locked = claim.clocks.locked;
            clocks.reason.clone_from(&claim.clocks.reason);
            env.gpu_claim = Some(claim.clone());
        }
        env
    }

    /// Runs the reference of `problem` on one workload (round 0, with the constant-output
    /// check) and reports what is wrong with it, if anything.
    pub fn check_reference(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
    ) -> Result<Option<String>, ExecError> {
        if let Err(msg) = self.ensure_judge(problem)? {
            return Ok(Some(msg));
        }
        let _l2 =
            crate::l2::hold_for_workload(&self.opts, &problem.definition.name, &w.workload.uuid)?;
        let xfer = self.fresh_dir("validate")?;
        let req = self.prepare_request(problem, w, 0, &xfer.join("in_0.pt"));
        let deadline = Instant::now() + self.opts.timeout;
        let r = match self.judge_request(&req, deadline) {
            Ok(r) => r,
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Some(m)),
        };
        let _ = std::fs::remove_dir_all(&xfer);
        Ok((!reply_ok(&r)).then(|| reply_message(&r)))
    }

    pub(super) fn prepare_request(
        &self,
        problem: &Problem,
        w: &LoadedWorkload,
        round: u32,
        path: &Path,
    ) -> Value {
        let dir = problem.dir.canonicalize().unwrap_or(problem.dir.clone());
        json!({
            "op": "prepare",
            "workload": w.workload,
            "round": round,
            "path": path,
            "input_shapes": shapes_json(&w.resolved.inputs),
            "output_shapes": shapes_json(&w.resolved.outputs),
            "axes": w.resolved.axes,
            "problem_dir": dir,
            "check_constant": round == 0,
        })
    }

    /// What the candidate draws each of the workload's `rounds` correctness rounds from, as the
    /// judge announces it (None when an input travels as a file, or the judge could not say:
    /// the rounds then go as files, one batch after the other).
    pub(super) fn round_draws(
        &mut self,
        w: &LoadedWorkload,
        rounds: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<Value>>, ExecError> {
        let req = json!({"op": "draws", "workload": w.workload,
                         "input_shapes": shapes_json(&w.resolved.inputs), "axes": w.resolved.axes,
                         "rounds": (0..rounds).collect::<Vec<u32>>()});
        match self.judge_request(&req, deadline) {
            Ok(r) => Ok(r
                .get("draws")
                .and_then(Value::as_array)
                .filter(|d| d.len() == rounds as usize)
                .cloned()),
            Err(JudgeFail::Cancelled) => Err(ExecError::Cancelled),
            Err(JudgeFail::Other(_)) => Ok(None),
        }
    }

    pub(super) fn output_specs(problem: &Problem, w: &LoadedWorkload) -> Value {
        let v: Vec<Value> = problem
            .definition
            .outputs
            .iter()
            .map(|(n, spec)| {
                json!({
                    "name": n,
                    "dtype": spec.dtype.name(),
                    "shape": w.resolved.outputs.get(n).cloned().flatten(),
                })
            })
            .collect();
        Value::Array(v)
    }
}
