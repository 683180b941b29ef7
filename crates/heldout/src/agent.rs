//! Agent backends: run `claude`, `codex` or `cursor-agent` in a copy of the task directory
//! with a prompt that asks for `held_out_shapes.yaml`, keep the agent's output in
//! `agent_log.txt`, and accept the file only if it parses and has `injections`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{HeldoutError, io_err};
use crate::generate::{GeneratorKind, NUM_HELDOUT_SHAPES};
use crate::python::shell_quote;
use crate::runner::{self, CommandSpec};
use crate::shapes_file::HeldOutShapes;
use crate::task::{DiscoveredTask, Scope};

/// The CLI program a backend needs.
pub fn program(backend: GeneratorKind) -> Option<&'static str> {
    match backend {
        GeneratorKind::Rules => None,
        GeneratorKind::ClaudeCode => Some("claude"),
        GeneratorKind::Codex => Some("codex"),
        GeneratorKind::Cursor => Some("cursor-agent"),
    }
}

/// The prompt for a task.
pub fn prompt(task: &DiscoveredTask, scope: Scope, output: &Path) -> String {
    let how = match scope {
        Scope::Vllm => {
            "The file `scripts/task_runner.py` has a module-level `TEST_SHAPES = [...]`. Write one injection with `file: scripts/task_runner.py`, `find_marker: TEST_SHAPES`, and `replacement_code` holding the full new `TEST_SHAPES = [...]` assignment."
        }
        Scope::Rocmbench => {
            "The test file(s) declare `@pytest.mark.parametrize(...)`. For every decorator (correctness and performance tests), write one injection with `find_marker: raw_replace`, `old_code` an exact character-for-character copy of the decorator, and `replacement_code` the same decorator with new argument values."
        }
        Scope::Gpumode => {
            "The files `pytorch_code_module/*.py` and `pytorch_code_functional/*_func.py` each define `get_inputs()`. Write two injections, one per file, with `find_marker: def get_inputs` and byte-identical `replacement_code` holding the whole new function; keep its structure and respect what `get_init_inputs()` fixes (record those values under `init_constraints`)."
        }
    };
    format!(
        "You are choosing held-out test shapes for the kernel task `{id}` in this directory, to \
         check whether an optimised kernel still works on shapes it never saw.\n\n\
         Read the task's tests and kernel source. Choose exactly {n} new shapes, none equal to an \
         existing one, each satisfying every constraint the code states (dtypes, divisibility, \
         maxima), with total input size at most 2 GB, tagged by an inline comment with its \
         category: edge (1), scale-up 2-4x the largest visible size (1), scale-down (1), \
         alignment-stress with primes or sizes that are not multiples of 32/64/128/256 (2), \
         asymmetric aspect ratio (1), production dimensions of real LLMs (2).\n\n{how}\n\n\
         Write the YAML file `{out}` with keys `task_type`, `num_original_shapes`, optional \
         `init_constraints`, and `injections` (a list of `file`, `find_marker`, \
         `replacement_code`, and `old_code` for raw_replace). Do not modify any other file and \
         do not run commands.",
        id = task.id,
        n = NUM_HELDOUT_SHAPES,
        out = output.display(),
    )
}

/// Runs an agent for one task and checks what it wrote. Returns the output path.
pub fn run_agent(
    task: &DiscoveredTask,
    scope: Scope,
    backend: GeneratorKind,
    model: Option<&str>,
    timeout: Duration,
    output_dir: &Path,
) -> Result<PathBuf, HeldoutError> {
    let prog = program(backend)
        .ok_or_else(|| HeldoutError::Usage("the rules backend runs no agent".into()))?;
    let exe = which::which(prog).map_err(|_| HeldoutError::AgentMissing {
        backend: backend.name().into(),
        program: prog.into(),
    })?;
    crate::generate::ensure_git_ignored(output_dir)?;
    let out_path = crate::generate::shapes_path(output_dir, &task.id);
    let out_parent = out_path.parent().unwrap_or(output_dir).to_path_buf();
    std::fs::create_dir_all(&out_parent).map_err(io_err(&out_parent))?;
    let out_abs = std::fs::canonicalize(&out_parent)
        .map_err(io_err(&out_parent))?
        .join("held_out_shapes.yaml");
    let scratch = tempfile::Builder::new()
        .prefix("kg-heldout-agent-")
        .tempdir()
        .map_err(io_err(Path::new("(temp dir)")))?;
    let work = scratch.path().join("task");
    crate::eval::copy_tree(&task.dir, &work, false).map_err(io_err(&task.dir))?;
    let p = prompt(task, scope, &out_abs);
    let exe_q = shell_quote(&exe.to_string_lossy());
    let model_arg = model
        .map(|m| format!(" --model {}", shell_quote(m)))
        .unwrap_or_default();
    let command = match backend {
        GeneratorKind::ClaudeCode => format!(
            "{exe_q} --print --verbose --output-format stream-json --permission-mode bypassPermissions{model_arg} {}",
            shell_quote(&p)
        ),
        GeneratorKind::Codex => format!(
            "{exe_q} exec --json --skip-git-repo-check --cd {}{model_arg} {}",
            shell_quote(&work.to_string_lossy()),
            shell_quote(&p)
        ),
        GeneratorKind::Cursor => format!(
            "{exe_q} --force --print --output-format stream-json{model_arg} {}",
            shell_quote(&p)
        ),
        GeneratorKind::Rules => unreachable_rules(),
    };
    let log_path = out_parent.join("agent_log.txt");
    let out = runner::run(&CommandSpec {
        command,
        cwd: work,
        env: vec![],
        timeout,
        log_path: Some(log_path.clone()),
    });
    tracing::info!(
        "{}: agent {} ({})",
        task.id,
        out.describe(),
        log_path.display()
    );
    if !out_abs.is_file() {
        return Err(HeldoutError::Unsupported {
            task: task.id.clone(),
            reason: format!(
                "the agent did not write {} ({}; see {})",
                out_abs.display(),
                out.describe(),
                log_path.display()
            ),
        });
    }
    HeldOutShapes::load(&out_abs)?;
    Ok(out_abs)
}

fn unreachable_rules() -> String {
    // `program()` returned Some, so the backend is an agent.
    String::from("false")
}
