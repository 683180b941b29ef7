//! Candidate processes: spec, launch, start ahead of time (prestart) and the isolation probe.

use super::*;

/// A candidate process started before it was asked for: it runs only kernelgate's worker
/// script (the interpreter start and `import torch`) until [`Session::start_candidate`] takes
/// it and sends it the solution.
pub(super) struct Prestarted {
    /// Which evaluation it is for ([`prestart_key`]).
    pub(super) key: String,
    /// When it was started.
    pub(super) during: CandidateLaunch,
    /// Its scratch directory.
    pub(super) root: PathBuf,
    /// Where the judge writes its inputs.
    pub(super) inputs: PathBuf,
    pub(super) launching: crate::process::Launching,
    /// Its solution's precompiler, where one runs beside it.
    pub(super) precompile: Option<super::precompile::Precompiling>,
}

/// An evaluation due after the next one ([`Session::prestart_next`]).
#[derive(Clone, Copy)]
pub struct Due<'a> {
    /// Its solution.
    pub solution: &'a Solution,
    /// Its problem.
    pub problem: &'a Problem,
    /// The workloads it evaluates.
    pub workloads: &'a [&'a LoadedWorkload],
}

/// A candidate process ready with its solution loaded, and what its start cost.
pub(super) struct StartedCandidate {
    pub(super) worker: Worker,
    pub(super) start: CandidateStart,
    /// How its compiled module was built (compiled solutions only).
    pub(super) build: Option<kg_contract::BuildRecord>,
}

/// What a candidate process for `sol` prepares as it starts, before any solution code
/// (`KG_WARM`, read by candidate.py): for a Triton solution, Triton's import and, on CUDA, its
/// driver utilities (a C module compiled into the solution's own cache), which its import and
/// first call would otherwise spend in its evaluation. None for other solutions.
pub(super) fn warm_for(sol: &Solution, device: &DeviceChoice) -> Option<&'static str> {
    let triton = sol
        .spec
        .languages
        .iter()
        .any(|l| l.eq_ignore_ascii_case("triton"));
    match (triton, device) {
        (false, _) => None,
        (true, DeviceChoice::Cuda(_)) => Some("triton-cuda"),
        (true, _) => Some("triton"),
    }
}

/// What a started candidate process is for: the solution as a whole (every byte of its JSON)
/// and the number of workloads its limits were sized for.
pub(super) fn prestart_key(sol: &Solution, workloads: usize) -> String {
    let json = serde_json::to_vec(sol).unwrap_or_default();
    format!("{}:{workloads}", kg_contract::io::sha256_hex(&json))
}

/// At most this many candidate processes are started ahead of time: one for each pair whose
/// evaluation fits into a candidate's start (1-4 s on an H200 host against 0.5-1.5 s for a
/// reference pair of 2 workloads).
pub(super) const MAX_PRESTARTED: usize = 5;

/// How many candidate processes start ahead of time: [`MAX_PRESTARTED`], fewer on a host of
/// under 16 cores (a quarter of them, at least one).
pub(super) fn prestart_depth() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (cores / 4).clamp(1, MAX_PRESTARTED)
}

/// The layers without which a candidate could reach another candidate process running beside
/// it (see it, signal or trace it, change the scripts it imports).
pub(super) const PRESTART_NEEDS: [kg_contract::Layer; 2] = [
    kg_contract::Layer::PidNamespace,
    kg_contract::Layer::ReadOnlyFilesystem,
];

/// The layers of [`PRESTART_NEEDS`] that `report` shows missing, joined for a message (`None`
/// when candidates may run side by side).
pub(crate) fn missing_beside(report: &kg_contract::IsolationReport) -> Option<String> {
    let missing: Vec<&str> = report
        .missing()
        .into_iter()
        .filter(|l| PRESTART_NEEDS.contains(l))
        .map(|l| l.as_str())
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

impl Session {
    /// `sol`'s own Triton and C++-extension cache directories: a candidate cannot plant
    /// compiled kernels or extensions another solution would load.
    pub(super) fn solution_caches(&self, sol: &Solution) -> (PathBuf, PathBuf) {
        let key = serde_json::to_vec(sol).unwrap_or_default();
        let key = &kg_contract::io::sha256_hex(&key)[..16];
        (
            self.opts.cache_dir.join("triton").join(key),
            self.opts.cache_dir.join("torch-extensions-v1").join(key),
        )
    }

    /// The candidate's confinement: its filesystem view (the interpreter and worker scripts
    /// readable, `root` and its own caches writable, everything else read-only, a private
    /// `/tmp`), private HOME, and limits.
    pub(super) fn candidate_spec(
        &mut self,
        sol: &Solution,
        workloads: usize,
        root: &Path,
        inputs: &Path,
    ) -> Result<WorkerSpec, ExecError> {
        let paths = self.interpreter_paths()?;
        let scripts = self.fresh_scripts("cand-py")?;
        let mut spec = self.spec(&paths, "candidate", &scripts.join("candidate.py"), root);
        let home = root.join("home");
        std::fs::create_dir_all(&home).map_err(|source| ExecError::Io {
            what: format!("create `{}`", home.display()),
            source,
        })?;
        spec.env.push(("HOME".into(), home.display().to_string()));
        // A build (ninja, the compiler) finds the interpreter's own tools, as in an activated
        // venv.
        let path = crate::toolchain::build_path(&self.python.path, std::env::var_os("PATH"));
        spec.env
            .push(("PATH".into(), path.to_string_lossy().into_owned()));
        let (triton, ext) = self.solution_caches(sol);
        for d in [&triton, &ext] {
            std::fs::create_dir_all(d).map_err(|source| ExecError::Io {
                what: format!("create `{}`", d.display()),
                source,
            })?;
        }
        spec.env
            .push(("TRITON_CACHE_DIR".into(), triton.display().to_string()));
        if let Some(warm) = warm_for(sol, &self.opts.device) {
            spec.env.push(("KG_WARM".into(), warm.into()));
        }
        if !self.opts.sandbox {
            spec.env
                .push(("TMPDIR".into(), root.join("tmp").display().to_string()));
            std::fs::create_dir_all(root.join("tmp")).map_err(|source| ExecError::Io {
                what: format!("create `{}`", root.join("tmp").display()),
                source,
            })?;
            return Ok(spec);
        }
        spec.env.push(("TMPDIR".into(), "/tmp".into()));
        // A uid with no account: libraries that ask who we are read these first.
        for k in ["USER", "LOGNAME"] {
            spec.env.push((k.into(), "kg-candidate".into()));
        }
        let mut read = paths.read;
        read.push(scripts);
        read.push(inputs.to_path_buf());
        let budget = self.opts.compile_timeout.as_secs()
            + self.opts.timeout.as_secs().saturating_mul(workloads as u64);
        let view = crate::sandbox::View {
            read,
            write: vec![root.to_path_buf(), triton, ext],
            cwd: Some(root.to_path_buf()),
            ..Default::default()
        };
        let mut sb = Sandbox::candidate(view, budget, self.opts.memory_bytes);
        // No GPU runtime in a CPU worker: nothing legitimate there needs shared anonymous
        // memory, so RLIMIT_DATA becomes a real bound.
        sb.refuse_shared_memory = self.opts.device.is_cpu();
        spec.sandbox = Some(sb);
        Ok(spec)
    }

    /// Starts a candidate process for `sol` in fresh scratch and input directories, without
    /// waiting for it.
    pub(super) fn launch_candidate(
        &mut self,
        sol: &Solution,
        workloads: usize,
        during: CandidateLaunch,
    ) -> Result<Result<Prestarted, WorkerError>, ExecError> {
        let root = self.fresh_dir("cand")?;
        // The judge's side of the transfer: readable, never writable, by the candidate.
        let inputs = self.fresh_dir("cand-in")?;
        let src = root.join("src");
        std::fs::create_dir_all(&src).map_err(|source| ExecError::Io {
            what: format!("create `{}`", src.display()),
            source,
        })?;
        let spec = self.candidate_spec(sol, workloads, &root, &inputs)?;
        Ok(Worker::launch(&spec).map(|launching| Prestarted {
            key: prestart_key(sol, workloads),
            during,
            root,
            inputs,
            launching,
            precompile: None,
        }))
    }

    /// Starts a candidate process for `sol` now, kept for when it is asked for (a failure to
    /// start is reported by [`Session::start_candidate`], which then tries again), and, where
    /// one may run, its precompiler on `calls` ([`super::precompile`]).
    pub(super) fn prestart(
        &mut self,
        sol: &Solution,
        workloads: usize,
        calls: &[Value],
        during: CandidateLaunch,
    ) -> Result<(), ExecError> {
        match self.launch_candidate(sol, workloads, during)? {
            Ok(mut p) => {
                p.precompile = self.launch_precompiler(sol, workloads, calls)?;
                self.prestarted.push(p);
            }
            Err(e) => {
                tracing::debug!(solution = %sol.name, "no candidate started ahead of time: {e}")
            }
        }
        Ok(())
    }

    /// Names the evaluations due after the next one, in order (solution and number of
    /// workloads), so that the first few of them (up to 5, fewer on a small host) get their
    /// candidate process started (interpreter and `import torch`, none of their code) while
    /// the next one is evaluated, and are ready when asked for. Only where each candidate is confined to its
    /// own PID namespace and a read-only view (so the running one cannot reach a starting
    /// one), and not on a CPU device unless [`Prestart::On`]. A guess that turns out wrong
    /// costs a killed process, never a verdict.
    pub fn prestart_next(&mut self, upcoming: &[Due<'_>]) {
        self.next = Some(
            upcoming
                .iter()
                .take(prestart_depth())
                .map(|d| {
                    let calls = self.precompile_calls_for(d.solution, d.problem, d.workloads);
                    (d.solution.clone(), d.workloads.len(), calls)
                })
                .collect(),
        );
    }

    /// Why no candidate may start beside `current` (None: one may).
    pub(super) fn prestart_refusal(&self, current: &Worker) -> Option<String> {
        if let Some(why) = &self.prestart_off {
            return Some(why.clone());
        }
        if self.opts.prestart == Prestart::Off {
            return Some("--prestart off".into());
        }
        if !self.opts.sandbox {
            return Some("candidates run without the sandbox (--no-sandbox)".into());
        }
        if self.opts.device.is_cpu() && self.opts.prestart == Prestart::Auto {
            return Some(
                "a CPU device's cores run the timed workload (--prestart on starts them anyway)"
                    .into(),
            );
        }
        let report = current.isolation.clone().unwrap_or_default();
        missing_beside(&report).map(|missing| {
            format!(
                "a candidate ran without {missing}: it could reach a candidate process started beside it"
            )
        })
    }

    /// Once `current` is ready: makes the processes started ahead of time those named by
    /// [`Session::prestart_next`] (killing any no longer due, starting any missing), or, where
    /// that is refused, ends every one.
    pub(super) fn launch_next(&mut self, current: &Worker) -> Result<(), ExecError> {
        if let Some(why) = self.prestart_refusal(current) {
            self.next = None;
            if !self.prestarted.is_empty() || self.prestart_off.is_none() {
                tracing::info!("candidates are not started ahead of time: {why}");
            }
            self.prestarted.clear();
            self.prestart_off = Some(why);
            return Ok(());
        }
        self.confined_seen = true;
        let Some(wanted) = self.next.take() else {
            return Ok(());
        };
        let mut have = std::mem::take(&mut self.prestarted);
        let mut missing = Vec::new();
        for (sol, n, calls) in wanted {
            let key = prestart_key(&sol, n);
            match have.iter().position(|p| p.key == key) {
                Some(i) => self.prestarted.push(have.remove(i)),
                None => missing.push((sol, n, calls)),
            }
        }
        // Started for evaluations no longer due: killed with their process groups.
        drop(have);
        for (sol, n, calls) in missing {
            self.prestart(&sol, n, &calls, CandidateLaunch::EarlierEvaluation)?;
        }
        Ok(())
    }

    /// A ready candidate process with `sol` loaded: the one started ahead of time for it if
    /// there is one, else a fresh one; with what its start cost.
    pub(super) fn start_candidate(
        &mut self,
        sol: &Solution,
        workloads: usize,
    ) -> Result<Result<StartedCandidate, (Status, String)>, ExecError> {
        let asked = Instant::now();
        // A compiled solution's module comes from kernelgate's builder; its failure is the
        // solution's compile error, and no candidate process is needed for it.
        let build = if crate::toolchain::is_compiled(sol) {
            match self.take_build(sol)? {
                (Ok(b), waited) => Some((b, waited)),
                (Err(f), _) => return Ok(Err(f)),
            }
        } else {
            None
        };
        let key = prestart_key(sol, workloads);
        let taken = self
            .prestarted
            .iter()
            .position(|p| p.key == key)
            .map(|i| self.prestarted.remove(i));
        let p = match taken {
            Some(p) => p,
            None => match self.launch_candidate(sol, workloads, CandidateLaunch::WhenAsked)? {
                Ok(p) => p,
                Err(e) => {
                    return Ok(Err((
                        Status::RuntimeError,
                        format!("failed to start the candidate worker: {e}"),
                    )));
                }
            },
        };
        let Prestarted {
            root,
            inputs,
            launching,
            during,
            precompile,
            ..
        } = p;
        let src = root.join("src");
        let placed = match &build {
            Some((b, waited)) => match self.place_module(b, *waited, &root)? {
                Ok(p) => Some(p),
                Err(why) => return Ok(Err((Status::CompileError, why))),
            },
            None => None,
        };
        self.candidate_root = Some(root);
        self.candidate_inputs = Some(inputs);
        let launched = launching.started();
        let mut w = match launching.ready(self.opts.compile_timeout, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => {
                return Ok(Err((
                    Status::RuntimeError,
                    format!("failed to start the candidate worker: {e}"),
                )));
            }
        };
        let ready = Instant::now();
        // Ended before the solution loads: its compiles never run beside the candidate's.
        let precompiled = match precompile {
            Some(pc) => self.finish_precompile(sol, pc)?,
            None => None,
        };
        self.launch_next(&w)?;
        let deadline = asked + self.opts.compile_timeout;
        let hello = json!({"op": "hello", "device": self.opts.device.worker_name(),
            "cupti": self.opts.timing_method() == TimingMethod::Cupti});
        let mut load = json!({
            "op": "load",
            "solution": sol,
            "source_dir": src,
            "cache_dir": self.solution_caches(sol).1,
        });
        if let Some((path, _)) = &placed {
            load["prebuilt"] = json!({"path": path, "name": build.as_ref().map(|(b, _)| b.hit.entry.name.clone())});
        }
        for req in [hello, load] {
            match w.request(&req, deadline, &self.cancel) {
                Ok(r) if reply_ok(&r) => {}
                Ok(r) => {
                    let log = w.take_log();
                    w.kill();
                    return Ok(Err((
                        Status::CompileError,
                        format!("{}\n{log}", reply_message(&r)),
                    )));
                }
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => {
                    let log = w.take_log();
                    let what = match e {
                        WorkerError::Timeout { .. } => format!(
                            "building/importing the solution exceeded --compile-timeout ({:.0} s)",
                            self.opts.compile_timeout.as_secs_f64()
                        ),
                        other => format!("the candidate worker failed while importing: {other}"),
                    };
                    w.kill();
                    return Ok(Err((Status::CompileError, format!("{what}\n{log}"))));
                }
            }
        }
        let start = CandidateStart {
            ready_s: ready.duration_since(asked).as_secs_f64(),
            process_s: ready.duration_since(launched).as_secs_f64(),
            load_s: ready.elapsed().as_secs_f64(),
            started: during,
            precompiled,
        };
        Ok(Ok(StartedCandidate {
            worker: w,
            start,
            build: placed.map(|(_, r)| r),
        }))
    }

    /// What the sandbox holds on a candidate process here: starts one for `sol` that runs only
    /// kernelgate's worker script (the interpreter and `import torch`, none of the solution's
    /// code), reads its layers from outside, and ends it. Several lanes run candidates side by
    /// side only where this shows each is confined to its own PID namespace and read-only view.
    pub fn probe_isolation(
        &mut self,
        sol: &Solution,
    ) -> Result<kg_contract::IsolationReport, ExecError> {
        let p = match self.launch_candidate(sol, 1, CandidateLaunch::WhenAsked)? {
            Ok(p) => p,
            Err(e) => {
                return Err(ExecError::Io {
                    what: "start a candidate process to check its sandbox".into(),
                    source: std::io::Error::other(e.to_string()),
                });
            }
        };
        let mut worker = match p.launching.ready(self.opts.compile_timeout, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => {
                return Err(ExecError::Io {
                    what: "start a candidate process to check its sandbox".into(),
                    source: std::io::Error::other(e.to_string()),
                });
            }
        };
        let report = worker.isolation.clone().unwrap_or_default();
        worker.kill();
        Ok(report)
    }
}
