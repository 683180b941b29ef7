//! kg-exec: the engine that runs candidate kernels against a problem's reference and produces
//! SOL-ExecBench traces — process isolation, the Python judge and candidate workers,
//! correctness checks and timing.
//!
//! # Design
//! - [`python`]: finds the interpreter (`--python`, `$PYTHON_BIN`, `.venv/bin/python` in the
//!   current directory or an ancestor, `python3`) and probes it (torch, triton, devices).
//! - [`placement`]: which device an evaluation runs on (`auto`, `cpu`, `cuda:N`, `--gpus`) and
//!   the kg-gpu claim that holds it for the run.
//! - [`engine::Session`] is one device lane. It owns a session directory under the runtime
//!   directory ([`runtime`], swept of dead runs' leftovers) holding the embedded worker
//!   scripts ([`scripts`]) and a long-lived **judge** process (trusted code only): the
//!   judge generates inputs from a workload with a secret per-run seed (fresh inputs every
//!   round), runs the reference, keeps the reference outputs in its memory and compares.
//! - For each solution the session starts one **candidate** process (untrusted): it writes the
//!   solution's sources into its own directory, imports the entry point (a C++/CUDA module
//!   built beforehand by kernelgate's builder and kept in the [`build`] cache, handed to it as
//!   a checked copy), runs and times it. It never sees
//!   the seed or the reference outputs. A candidate that crashes, hangs or is killed is
//!   replaced by a fresh process for the next workload. It runs in the [`sandbox`]: a
//!   read-only view of the filesystem but its scratch, no privilege (an unprivileged uid when
//!   we are root), seccomp, its own namespaces and limits, each layer observed from outside
//!   and recorded in its traces. Both workers start as `python -I -S` with an explicit import
//!   path, so no start-up file of the interpreter runs in them.
//! - The workers' Python ([`scripts`], `crates/exec/py/`): `judge.py` and `candidate.py` over
//!   modules with one job each: `kg_wire` (channel, request loop, watchdog), `kg_inputs`
//!   (dtypes, seeded and sealed input sets), `kg_env` (device identity, versions), `kg_timing`
//!   (one timer class per method, CUPTI readings), `kg_handover` (outputs file and device
//!   pool), `judge_compare` (tolerances and v2 checks), `kgcupti` and `kgvmm` (ctypes
//!   bindings). The candidate guards every attribute of the shared modules by identity.
//! - **Messages** travel as JSON lines on a per-worker socketpair the worker inherits (no
//!   filesystem path), never on stdout, in the typed envelope of [`protocol`] and within its
//!   per-message and per-request bounds. Worker stdout/stderr are drained on threads into
//!   bounded (64 KiB, head + tail) buffers and end up in the trace's `log`.
//! - **Tensors** travel as files in two per-workload directories: the judge writes the inputs
//!   into one the candidate can only read (never into a directory the candidate controls,
//!   where a planted symlink would redirect the judge's write), the candidate writes its
//!   outputs as raw bytes behind a checked header into one of its own, which the judge opens
//!   without following symlinks (or hands them over in device memory); no pickle of the
//!   candidate's is ever loaded. Only the candidate's calls are timed, on device-resident
//!   tensors.
//! - [`integrity`]: checks made from outside the candidate. Timed calls run on distinct
//!   judge-generated input sets (one per timed iteration); after timing the judge samples
//!   which timed outputs to check; the parent measures wall time around the timed batch (dual
//!   clock) and computes statistics from raw samples; the candidate worker flags replaced
//!   timer/save functions, threads started while timed, tensor subclasses and outputs that
//!   alias inputs (REWARD_HACK); the problem directory is snapshotted and any write to it is
//!   REWARD_HACK. See `docs/integrity.md`.
//! - [`process`]: every worker runs in its own process group; on timeout, cancellation
//!   ([`CancelToken`]) or drop the group gets SIGTERM, a grace period, then SIGKILL. Workers
//!   also kill their own group when their parent disappears, so no orphan outlives kg-bench.
//! - [`engine::Event`]s report progress; the engine does no report-file I/O. [`corpus`] holds
//!   `run`/`dataset validate` bookkeeping (problem discovery, solution sources, summaries);
//!   [`runner::CorpusRunner`] runs a whole corpus and emits [`runner::RunEvent`]s to a
//!   [`runner::Reporter`] the caller attaches (it writes the trace files and `summary.json`,
//!   the run's evidence, and prints nothing). It spreads a run over several [`lanes::Lane`]s
//!   (every claimed GPU of a host, or CPU cores), one session each, on its own thread.
//!
//! Ownership: the [`engine::Session`] owns the judge; `evaluate` owns its candidate and shuts
//! it down before returning (also on error); dropping a [`process::Worker`] kills its group.
//!
//! Not for: GPU discovery, claims and clock locking (kg-gpu), score aggregation (kg-score).

#![warn(missing_docs)]

pub mod build;
pub mod corpus;
pub mod engine;
pub mod integrity;
pub mod l2;
pub mod lanes;
pub mod placement;
pub mod process;
pub mod protocol;
/// Interpreter discovery and probe ([`kg_python`]).
pub use kg_python as python;
pub mod runner;
pub mod runtime;
pub mod sandbox;
pub mod scripts;
pub mod shard;
pub mod toolchain;

pub use engine::{
    Due, EvalOptions, Evaluated, Event, ExecError, Prestart, Session, SolFloor, TimingChoice,
};
pub use placement::{DeviceChoice, DeviceRequest};
pub use process::CancelToken;
pub use python::{
    Interpreter, ProbeInfo, PythonRequest, find_python, find_python_env, find_python_in, probe,
    probe_cached,
};
