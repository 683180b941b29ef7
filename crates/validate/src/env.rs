//! Every environment variable kg-validate reads or sets, in one place.

/// Runtime modules living outside the checkout (prepended to the target's `PYTHONPATH`).
pub const PYLIB: &str = "PYLIB";
/// The one interpreter used for pytest and script targets (after `--python`).
pub const PYTHON_BIN: &str = "PYTHON_BIN";
/// An external idle-GPU picker; unset, kg-gpu's picker is used.
pub const PICKER: &str = "PICKER";
/// Per-target budget in seconds (default 1800).
pub const TIMEOUT: &str = "TIMEOUT";
/// The perf stage's per-run budget (default `TIMEOUT`).
pub const PERF_TIMEOUT: &str = "PERF_TIMEOUT";
/// Perf runs per side (default 3).
pub const PERF_REPEAT: &str = "PERF_REPEAT";
/// Ratio below which a regression is claimed (default 0.95; must be in (0, 2]).
pub const PERF_THRESHOLD: &str = "PERF_THRESHOLD";
/// Matched rows a column needs before its ratio counts (default 3).
pub const PERF_MIN_ROWS: &str = "PERF_MIN_ROWS";
/// Largest |ratio − 1| of the `--perf-control-column` before timings are distrusted (0.10).
pub const PERF_CONTROL_TOL: &str = "PERF_CONTROL_TOL";
/// Samples of the idle-GPU window (default 10).
pub const KG_VALIDATE_PICK_SAMPLES: &str = "KG_VALIDATE_PICK_SAMPLES";
/// Seconds between idle-GPU samples (default 1).
pub const KG_VALIDATE_PICK_INTERVAL_S: &str = "KG_VALIDATE_PICK_INTERVAL_S";

/// Set for targets: where the probe writes this run's receipt (removed from `os.environ` by
/// the probe before user code runs).
pub const KG_VALIDATE_RECEIPT: &str = "KG_VALIDATE_RECEIPT";
/// Set for targets: the watched route `module:function`.
pub const KG_VALIDATE_ROUTE: &str = "KG_VALIDATE_ROUTE";
/// Set for targets: the shape locals to record, comma-separated.
pub const KG_VALIDATE_SHAPE_VARS: &str = "KG_VALIDATE_SHAPE_VARS";
/// Set for pytest targets on the `--shape-argnames` channel: the argnames to replace.
pub const KG_VALIDATE_GRID_ARGNAMES: &str = "KG_VALIDATE_GRID_ARGNAMES";
/// Set with [`KG_VALIDATE_GRID_ARGNAMES`]: the rows, as a JSON list of lists.
pub const KG_VALIDATE_GRID_ROWS: &str = "KG_VALIDATE_GRID_ROWS";
/// Set for watched runs when a grid is given: its cells (normalised), as a JSON list of
/// strings; the probe records which route locals hold their coordinates.
pub const KG_VALIDATE_GRID_CELLS: &str = "KG_VALIDATE_GRID_CELLS";

/// Variables copied from the caller's environment into a target's, when set. Everything else
/// is dropped (the seed's `env -i` allowlist).
pub const PASS_THROUGH: &[&str] = &[
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "USER",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "ROCM_PATH",
    "HIP_PATH",
    "TRITON_INTERPRET",
    "TRITON_PTXAS_PATH",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "VIRTUAL_ENV",
    "CI",
];
