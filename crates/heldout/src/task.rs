//! AgentKernelArena tasks: `config.yaml`, discovery under a tasks directory, and the held-out
//! scope (which task types and suites get held-out shapes, and through which injection).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};

use crate::error::{HeldoutError, io_err};

/// The fields of a task's `config.yaml` that held-out evaluation uses; others are ignored.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TaskConfig {
    /// `triton2triton`, `hip2hip`, `torch2hip`, ...
    pub task_type: String,
    /// Kernel source files (restored into `orig/` for triton tasks).
    #[serde(deserialize_with = "one_or_many")]
    pub source_file_path: Vec<String>,
    /// The kernel file of HIP tasks.
    pub target_file_path: Option<String>,
    /// Commands that must all exit 0.
    #[serde(deserialize_with = "one_or_many")]
    pub compile_command: Vec<String>,
    /// Commands that must exit 0 and not report failure.
    #[serde(deserialize_with = "one_or_many")]
    pub correctness_command: Vec<String>,
    /// Commands that produce the performance report.
    #[serde(deserialize_with = "one_or_many")]
    pub performance_command: Vec<String>,
    /// Per-phase timeouts in seconds (AKA's default is 3600).
    pub compile_timeout: Option<u64>,
    /// See `compile_timeout`.
    pub correctness_timeout: Option<u64>,
    /// See `compile_timeout`.
    pub performance_timeout: Option<u64>,
}

fn one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
        Null(()),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(s) => vec![s],
        OneOrMany::Many(v) => v,
        OneOrMany::Null(()) => Vec::new(),
    })
}

impl TaskConfig {
    /// Loads `config.yaml`.
    pub fn load(path: &Path) -> Result<Self, HeldoutError> {
        crate::yaml::load(path)
    }
}

/// Which injection a supported task gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `triton2triton/vllm`: `TEST_SHAPES` in `scripts/task_runner.py`.
    Vllm,
    /// `triton2triton/rocmbench`: `@pytest.mark.parametrize` declarations.
    Rocmbench,
    /// `hip2hip/gpumode` and `torch2hip/gpumode`: `get_inputs()` in module and functional files.
    Gpumode,
}

impl Scope {
    /// What gets injected, for listings.
    pub fn target(&self) -> &'static str {
        match self {
            Scope::Vllm => "TEST_SHAPES in scripts/task_runner.py",
            Scope::Rocmbench => "@pytest.mark.parametrize declarations",
            Scope::Gpumode => "get_inputs() in the module and functional references",
        }
    }
}

/// A task found under the tasks directory.
#[derive(Debug, Clone)]
pub struct DiscoveredTask {
    /// `type/suite/.../name`, the path relative to the tasks directory.
    pub id: String,
    /// The task directory.
    pub dir: PathBuf,
    /// The injection scope, or why the task is out of scope.
    pub scope: Result<Scope, String>,
}

/// Classifies a task id by AKA's held-out scope.
pub fn scope_of(task_id: &str) -> Result<Scope, String> {
    let mut parts = task_id.split('/');
    let ty = parts.next().unwrap_or("");
    let suite = parts.next().unwrap_or("");
    match (ty, suite) {
        ("triton2triton", "vllm") => Ok(Scope::Vllm),
        ("triton2triton", "rocmbench") => Ok(Scope::Rocmbench),
        ("hip2hip" | "torch2hip", "gpumode") => Ok(Scope::Gpumode),
        _ => Err(format!(
            "`{ty}/{suite}` is outside the held-out scope (supported: triton2triton/vllm, \
             triton2triton/rocmbench, hip2hip/gpumode, torch2hip/gpumode)"
        )),
    }
}

/// Every directory with a `config.yaml` under `tasks_dir`, sorted by id.
pub fn discover(tasks_dir: &Path) -> Result<Vec<DiscoveredTask>, HeldoutError> {
    let mut out = Vec::new();
    walk(tasks_dir, tasks_dir, &mut out)?;
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<DiscoveredTask>) -> Result<(), HeldoutError> {
    if dir.join("config.yaml").is_file() && dir != root {
        let id = rel_id(root, dir);
        out.push(DiscoveredTask {
            scope: scope_of(&id),
            id,
            dir: dir.to_path_buf(),
        });
        return Ok(());
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || name == "__pycache__" {
            continue;
        }
        walk(root, &p, out)?;
    }
    Ok(())
}

fn rel_id(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root)
        .unwrap_or(dir)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}
