//! The precompiler of a Triton solution: while an earlier evaluation runs, a process of the
//! solution's own trust, with no GPU it could open (the device nodes covered with `/dev/null`,
//! no device visible), compiles the kernels of the solution's first calls into the solution's
//! own Triton cache (`precompile.py`). Its candidate process then finds them there: the
//! compile and launcher build (about 1 s of a candidate's first call on an H100) leave the
//! evaluation. Nothing the precompiler computes is read back but its counts.

use super::*;

/// At most this long is waited, when its candidate is asked for, for a precompiler still at
/// work (what it has not compiled by then the candidate compiles itself).
const PRECOMPILE_WAIT: Duration = Duration::from_secs(60);

/// A precompiler under way.
pub(super) struct Precompiling {
    pub(super) launching: crate::process::Launching,
}

/// The calls a precompiler makes for `workloads` of `problem`: per distinct set of input and
/// output shapes, each tensor's shape and dtype and each scalar's value. A workload with an
/// input of no shape that is not a scalar (custom inputs) is left out.
fn precompile_calls(problem: &Problem, workloads: &[&LoadedWorkload]) -> Vec<Value> {
    let mut calls: Vec<Value> = Vec::new();
    for w in workloads {
        let mut inputs = Vec::new();
        for (name, spec) in &problem.definition.inputs {
            match (
                w.resolved.inputs.get(name).cloned().flatten(),
                w.workload.inputs.get(name),
            ) {
                (Some(shape), _) => {
                    inputs.push(json!({"shape": shape, "dtype": spec.dtype.name()}));
                }
                (None, Some(kg_contract::InputSpec::Scalar { value })) => {
                    inputs.push(json!({ "scalar": value }));
                }
                (None, _) => break,
            }
        }
        let outputs = Session::output_specs(problem, w);
        let shaped = outputs
            .as_array()
            .is_some_and(|o| o.iter().all(|v| v["shape"].is_array()));
        let call = json!({"inputs": inputs, "outputs": outputs});
        if inputs.len() == problem.definition.inputs.len() && shaped && !calls.contains(&call) {
            calls.push(call);
        }
    }
    calls
}

/// Test builds only: `KG_TEST_PRECOMPILE_ARCH` (e.g. `90`) gives a CPU session's Triton
/// solutions a precompiler, so tests without a GPU follow it from the lane to the trace.
fn test_arch() -> Option<u32> {
    if !cfg!(debug_assertions) {
        return None;
    }
    std::env::var("KG_TEST_PRECOMPILE_ARCH").ok()?.parse().ok()
}

/// The GPU architecture number of an `sm_NN` name (`sm_90` is 90).
fn sm_number(arch: &str) -> Option<u32> {
    arch.strip_prefix("sm_")?
        .trim_end_matches(|c: char| c.is_ascii_alphabetic())
        .parse()
        .ok()
}

impl Session {
    /// [`precompile_calls`] where `sol` may get a precompiler on this session's device (a
    /// Triton solution on CUDA, `--precompile` on), else none.
    pub(super) fn precompile_calls_for(
        &self,
        sol: &Solution,
        problem: &Problem,
        workloads: &[&LoadedWorkload],
    ) -> Vec<Value> {
        if self.opts.precompile && self.triton_compiles(sol) {
            precompile_calls(problem, workloads)
        } else {
            Vec::new()
        }
    }

    /// The CUDA architecture to precompile `sol`'s kernels for, where a precompiler may run:
    /// a Triton solution on a CUDA device whose judge or kg-gpu claim named its architecture,
    /// `--precompile` on, and candidates allowed to start beside the running one, which was
    /// observed confined to its own PID namespace and read-only view (the view that covers the
    /// GPU's device nodes: without it a precompiler could reach a GPU another lane times on).
    fn precompile_arch(&self, sol: &Solution) -> Option<u32> {
        if !self.opts.precompile
            || !self.opts.sandbox
            || !self.confined_seen
            || self.prestart_off.is_some()
            || !self.triton_compiles(sol)
        {
            return None;
        }
        // The judge's device, else (before the judge is up) the kg-gpu claim's.
        let judge = self
            .judge_env
            .as_ref()
            .and_then(|e| e.device.as_ref())
            .filter(|d| d.kind == "cuda")
            .and_then(|d| d.arch.clone());
        let claim = self
            .opts
            .gpu_claim
            .as_ref()
            .filter(|c| c.vendor.eq_ignore_ascii_case("nvidia"))
            .and_then(|c| c.arch.clone());
        judge
            .or(claim)
            .as_deref()
            .and_then(sm_number)
            .or_else(test_arch)
    }

    /// Whether `sol` is a Triton solution whose kernels are compiled here (on CUDA; in test
    /// builds also on the CPU under `KG_TEST_PRECOMPILE_ARCH`, whose candidates still
    /// interpret them).
    fn triton_compiles(&self, sol: &Solution) -> bool {
        match warm_for(sol, &self.opts.device) {
            Some("triton-cuda") => true,
            Some(_) => self.opts.device.is_cpu() && test_arch().is_some(),
            None => false,
        }
    }

    /// Starts `sol`'s precompiler on `calls`, where one may run (`None` where none does, or
    /// it could not start: the candidate then compiles everything itself).
    pub(super) fn launch_precompiler(
        &mut self,
        sol: &Solution,
        workloads: usize,
        calls: &[Value],
    ) -> Result<Option<Precompiling>, ExecError> {
        match self.precompile_arch(sol) {
            Some(arch) if !calls.is_empty() => self.start_precompiler(sol, workloads, arch, calls),
            _ => Ok(None),
        }
    }

    /// Compiles the Triton kernels of `sol`'s calls on `workloads` of `problem` for CUDA
    /// architecture `arch` (90 for sm_90) into the solution's own Triton cache now, as its
    /// precompiler does ahead of a candidate (in the candidate's sandbox, with no GPU);
    /// `None` where nothing could be run (no sandbox, no call with known shapes, no start).
    pub fn precompile(
        &mut self,
        sol: &Solution,
        problem: &Problem,
        workloads: &[&LoadedWorkload],
        arch: u32,
    ) -> Result<Option<kg_contract::Precompiled>, ExecError> {
        let calls = precompile_calls(problem, workloads);
        if calls.is_empty() {
            return Ok(None);
        }
        match self.start_precompiler(sol, workloads.len(), arch, &calls)? {
            Some(p) => self.finish_precompile(sol, p),
            None => Ok(None),
        }
    }

    fn start_precompiler(
        &mut self,
        sol: &Solution,
        workloads: usize,
        arch: u32,
        calls: &[Value],
    ) -> Result<Option<Precompiling>, ExecError> {
        let root = self.fresh_dir("pre")?;
        let src = root.join("src");
        let job_path = root.join("job.json");
        // The script checks each is `/dev/null` before any solution code runs.
        let covered = crate::sandbox::gpu_device_nodes();
        let job = json!({
            "solution": sol, "source_dir": src, "arch": arch, "warp_size": 32,
            "dps": sol.spec.destination_passing_style, "calls": calls, "covered": covered,
        });
        std::fs::create_dir_all(&src)
            .and_then(|()| std::fs::write(&job_path, job.to_string()))
            .map_err(|source| ExecError::Io {
                what: format!("write the precompiler's job `{}`", job_path.display()),
                source,
            })?;
        let mut spec = self.candidate_spec(sol, workloads, &root, &root)?;
        spec.script = spec.script.with_file_name("precompile.py");
        spec.label = "precompiler".into();
        let hidden = [
            "CUDA_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
        ];
        // Compiled, never interpreted (a CPU session's workers interpret Triton).
        spec.env.retain(|(k, _)| {
            !hidden.contains(&k.as_str()) && k != "KG_WARM" && k != "TRITON_INTERPRET"
        });
        spec.env
            .extend(hidden.iter().map(|k| ((*k).to_string(), String::new())));
        spec.env
            .push(("KG_PRECOMPILE_JOB".into(), job_path.display().to_string()));
        let Some(sb) = spec.sandbox.as_mut() else {
            return Ok(None);
        };
        // The lowest priority: its compiles take only the CPU the timed evaluation beside it
        // leaves.
        sb.limits.nice = Some(19);
        let Some(view) = sb.view.as_mut() else {
            return Ok(None);
        };
        view.cover = covered;
        match Worker::launch(&spec) {
            Ok(launching) => Ok(Some(Precompiling { launching })),
            Err(e) => {
                tracing::debug!(solution = %sol.name, "no precompiler started: {e}");
                Ok(None)
            }
        }
    }

    /// Waits (up to [`PRECOMPILE_WAIT`]) for a precompiler to finish, reads what it compiled
    /// and ends it: before the candidate's first call, so the two never compile side by side.
    pub(super) fn finish_precompile(
        &mut self,
        sol: &Solution,
        p: Precompiling,
    ) -> Result<Option<kg_contract::Precompiled>, ExecError> {
        let t = Instant::now();
        let mut w = match p.launching.ready(PRECOMPILE_WAIT, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => {
                let log = match &e {
                    WorkerError::NotStarted { log, .. } => tail(log, 2000).to_string(),
                    _ => String::new(),
                };
                tracing::info!(solution = %sol.name, "the precompiler did not finish: {e}\n{log}");
                return Ok(None);
            }
        };
        let waited_s = t.elapsed().as_secs_f64();
        let deadline = Instant::now() + Duration::from_secs(10);
        let r = w.request(&json!({"op": "result"}), deadline, &self.cancel);
        w.kill();
        let r = match r {
            Ok(r) if reply_ok(&r) => r,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Ok(r) => {
                tracing::info!(solution = %sol.name, "the precompiler failed: {}", reply_message(&r));
                return Ok(None);
            }
            Err(e) => {
                tracing::info!(solution = %sol.name, "the precompiler failed: {e}");
                return Ok(None);
            }
        };
        let count = |k: &str| {
            r.get(k)
                .and_then(Value::as_u64)
                .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        if let Some(why) = r.get("refused").and_then(Value::as_str) {
            tracing::warn!(solution = %sol.name, "the precompiler refused to run the solution: {why}");
        }
        if let Some(failed) = r.get("failed").and_then(Value::as_array)
            && !failed.is_empty()
        {
            tracing::debug!(solution = %sol.name, "precompiler: {failed:?}");
        }
        Ok(Some(kg_contract::Precompiled {
            kernels: count("kernels"),
            launchers: count("launchers"),
            failed: count("failed_count"),
            seconds: r.get("seconds").and_then(Value::as_f64).unwrap_or(0.0),
            waited_s,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_carry_each_tensors_shape_and_dtype_and_each_scalars_value_once_per_shape() {
        let dir = kg_test_support::workspace().join("problems/core/rmsnorm_bf16_qwen2_5_0_5b");
        let problem = Problem::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let first = &problem.workloads[0];
        let twice = [first, first];
        let calls = precompile_calls(&problem, &twice);
        let tokens = first.workload.axes["num_tokens"];
        assert_eq!(
            calls,
            vec![json!({
                "inputs": [{"shape": [tokens, 896], "dtype": "bfloat16"},
                           {"shape": [896], "dtype": "bfloat16"}, {"scalar": 1e-6}],
                "outputs": [{"name": "y", "dtype": "bfloat16", "shape": [tokens, 896]}],
            })]
        );
        let all: Vec<_> = problem.workloads.iter().collect();
        assert_eq!(precompile_calls(&problem, &all).len(), all.len());
    }

    #[test]
    fn a_workload_with_an_unshaped_input_that_is_no_scalar_is_left_out() {
        let dir = kg_test_support::workspace().join("problems/core/rmsnorm_bf16_qwen2_5_0_5b");
        let mut problem = Problem::load(&dir).unwrap_or_else(|e| panic!("{e}"));
        let w = &mut problem.workloads[0];
        w.workload
            .inputs
            .insert("eps".into(), kg_contract::InputSpec::Custom);
        let one = [&problem.workloads[0]];
        assert!(precompile_calls(&problem, &one).is_empty());
    }

    #[test]
    fn sm_names_read_as_numbers() {
        assert_eq!(sm_number("sm_90"), Some(90));
        assert_eq!(sm_number("sm_90a"), Some(90));
        assert_eq!(sm_number("sm_100"), Some(100));
        assert_eq!(sm_number("gfx942"), None);
        assert_eq!(sm_number("sm_"), None);
    }
}
