//! Compiled solutions (`cuda_cpp`, `hip_cpp`) are built by kernelgate's builder, not by the
//! candidate: a process started like a candidate (the same sandbox, its own scratch
//! directory) that runs only kernelgate's worker script and torch's extension builder on the
//! solution's sources, then ends. The parent takes the module from where the builder was told
//! to put it, installs it in the build cache ([`crate::build`]), and before each evaluation
//! copies the verified module into the candidate's scratch directory, where the candidate
//! imports it. The cache is never in a candidate's view.
//!
//! [`crate::runner::CorpusRunner`] builds a run's compiled solutions on spare cores ahead of
//! the lanes ([`Session::provide_build`]); `kg-bench evaluate` builds when the candidate
//! starts ([`Session::take_build`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kg_contract::{BuildRecord, Solution, Status};
use serde_json::json;

use super::{CandidateLaunch, ExecError, Session, reply_message, reply_ok};
use crate::build::{BuildCache, BuildKey, FileId, Hit, Toolchain};
use crate::process::WorkerError;

/// A compiled solution's module, ready for a candidate.
#[derive(Debug, Clone)]
pub struct Built {
    /// The cache entry (verified when it was found or installed).
    pub hit: Hit,
    /// Whether it came from the cache rather than a build now.
    pub cached: bool,
}

/// What became of a build: the module, or the status and log every workload of the solution
/// gets instead (a compile error, with the compiler's output).
pub type BuildOutcome = Result<Built, (Status, String)>;

/// The environment variables that change what torch's extension builder produces.
const BUILD_ENV: [&str; 5] = [
    "TORCH_CUDA_ARCH_LIST",
    "PYTORCH_ROCM_ARCH",
    "CUDAFLAGS",
    "CXXFLAGS",
    "CFLAGS",
];

impl Session {
    /// The toolchain that builds `sol` here (for its cache key).
    fn toolchain_for(&mut self, sol: &Solution) -> Result<Toolchain, ExecError> {
        let paths = self.interpreter_paths()?;
        let torch_version_sha256 = paths
            .sys_path
            .iter()
            .map(|d| Path::new(d).join("torch").join("version.py"))
            .find_map(|p| std::fs::read(p).ok())
            .map(|b| kg_contract::io::sha256_hex(&b));
        let (device_compiler, host_compiler) =
            crate::toolchain::build_compilers(sol, &self.python.path, &|k| std::env::var_os(k));
        let env = BUILD_ENV
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        // torch builds for the visible device's architecture when no list is set: the claimed
        // GPU's name, else this host's device index.
        let device = match &self.opts.gpu_claim {
            Some(c) => format!("{} {}", c.name, c.arch.clone().unwrap_or_default()),
            None => format!(
                "{} on {}",
                self.opts.device,
                super::host_name().unwrap_or_default()
            ),
        };
        Ok(Toolchain {
            python: FileId::of(&self.python.path),
            torch_version_sha256,
            device_compiler: device_compiler.as_deref().and_then(FileId::of),
            host_compiler: host_compiler.as_deref().and_then(FileId::of),
            env,
            device,
        })
    }

    /// The build cache key of `sol` on this session's device.
    pub fn build_key(&mut self, sol: &Solution) -> Result<BuildKey, ExecError> {
        let t = self.toolchain_for(sol)?;
        Ok(BuildKey::of(sol, &t))
    }

    /// Builds `sol` (a compiled solution) unless the build cache holds its module: the module,
    /// or the compile error every workload gets. Errors stop the evaluation (cancelled, the
    /// session's own directories).
    pub fn build(&mut self, sol: &Solution) -> Result<BuildOutcome, ExecError> {
        let toolchain = self.toolchain_for(sol)?;
        let key = BuildKey::of(sol, &toolchain);
        let cache = BuildCache::new(&self.opts.cache_dir);
        if let Some(hit) = cache.lookup(&key) {
            return Ok(Ok(Built { hit, cached: true }));
        }
        let t = Instant::now();
        let module = match self.run_builder(sol, &key)? {
            Ok(m) => m,
            Err(log) => return Ok(Err((Status::CompileError, log))),
        };
        let build_s = t.elapsed().as_secs_f64();
        let hit = cache
            .install(&key, &module, &sol.name, build_s, &toolchain)
            .map_err(|e| ExecError::Io {
                what: "install a build in the build cache".into(),
                source: std::io::Error::other(e.to_string()),
            })?;
        if let Err(e) = cache.evict_to(crate::build::max_bytes()) {
            tracing::warn!("build cache eviction failed: {e}");
        }
        Ok(Ok(Built { hit, cached: false }))
    }

    /// Runs the builder process for `sol`: the module it left where it was told, or the
    /// build's log.
    fn run_builder(
        &mut self,
        sol: &Solution,
        key: &BuildKey,
    ) -> Result<Result<PathBuf, String>, ExecError> {
        let p = match self.launch_candidate(sol, 1, CandidateLaunch::WhenAsked)? {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("failed to start the builder: {e}"))),
        };
        let deadline = Instant::now() + self.opts.compile_timeout;
        let mut w = match p.launching.ready(self.opts.compile_timeout, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => return Ok(Err(format!("failed to start the builder: {e}"))),
        };
        let build_root = p.root.join("build");
        let req = json!({
            "op": "build",
            "solution": sol,
            "source_dir": p.root.join("src"),
            "build_root": build_root,
            "name": key.name,
        });
        let reply = w.request(&req, deadline, &self.cancel);
        let log = w.take_log();
        w.kill();
        match reply {
            Ok(r) if reply_ok(&r) => {}
            Ok(r) => return Ok(Err(format!("{}\n{log}", reply_message(&r)))),
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(WorkerError::Timeout { .. }) => {
                return Ok(Err(format!(
                    "building the solution exceeded --compile-timeout ({:.0} s)\n{log}",
                    self.opts.compile_timeout.as_secs_f64()
                )));
            }
            Err(e) => return Ok(Err(format!("the builder failed: {e}\n{log}"))),
        }
        // Only where it was told to write: never a path the builder's reply names.
        let module = build_root.join(&key.name).join(format!("{}.so", key.name));
        match std::fs::symlink_metadata(&module) {
            Ok(m) if m.file_type().is_file() => Ok(Ok(module)),
            _ => Ok(Err(format!(
                "the builder reported success but left no module at `{}`\n{log}",
                module.display()
            ))),
        }
    }

    /// Hands this session the build of `sol` made elsewhere (a build pool), for its next
    /// evaluation.
    pub fn provide_build(&mut self, sol: &Solution, outcome: BuildOutcome, waited: Duration) {
        let k = super::prestart_key(sol, 0);
        self.builds.insert(k, (outcome, waited));
    }

    /// The build of `sol`: the one provided, else one made now (the time waited for it).
    pub(super) fn take_build(
        &mut self,
        sol: &Solution,
    ) -> Result<(BuildOutcome, Duration), ExecError> {
        let k = super::prestart_key(sol, 0);
        if let Some(b) = self.builds.remove(&k) {
            return Ok(b);
        }
        let t = Instant::now();
        let b = self.build(sol)?;
        Ok((b, t.elapsed()))
    }

    /// Copies the verified module into the candidate's scratch directory `root` (the cache
    /// stays out of its view); the file, and the trace's record of the build.
    pub(super) fn place_module(
        &self,
        built: &Built,
        waited: Duration,
        root: &Path,
    ) -> Result<Result<(PathBuf, BuildRecord), String>, ExecError> {
        let bytes = std::fs::read(&built.hit.module).map_err(|source| ExecError::Io {
            what: format!("read `{}`", built.hit.module.display()),
            source,
        })?;
        let sha = kg_contract::io::sha256_hex(&bytes);
        if sha != built.hit.entry.module_sha256 {
            return Ok(Err(format!(
                "the cached module `{}` changed after it was checked (SHA-256 {sha}, recorded {}); not loaded",
                built.hit.module.display(),
                built.hit.entry.module_sha256
            )));
        }
        let dir = root.join("prebuilt");
        let dest = dir.join(&built.hit.entry.module);
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&dest, &bytes))
            .map_err(|source| ExecError::Io {
                what: format!("write `{}`", dest.display()),
                source,
            })?;
        Ok(Ok((
            dest,
            BuildRecord {
                cached: built.cached,
                key: built.hit.entry.key.clone(),
                module_sha256: sha,
                build_s: built.hit.entry.build_s,
                waited_s: waited.as_secs_f64(),
            },
        )))
    }
}
