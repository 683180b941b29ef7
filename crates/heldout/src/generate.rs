//! `generate`: held-out shapes per task, by the deterministic rules backend or an agent CLI.

use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use kg_inject::{Parametrize, PySource, PyValue};

use crate::error::{HeldoutError, io_err};
use crate::shape_rules::{self, GeneratedRow, ShapeProblem};
use crate::shapes_file::{Generator, HeldOutShapes, Injection, ShapeEntry, inject_text};
use crate::task::{DiscoveredTask, Scope, TaskConfig};

/// Held-out shapes have this many rows per target (before crossing with dtypes).
pub const NUM_HELDOUT_SHAPES: usize = 8;

/// Which generator to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeneratorKind {
    /// Deterministic rules (default).
    Rules,
    /// `claude` CLI.
    ClaudeCode,
    /// `codex` CLI.
    Codex,
    /// `cursor-agent` CLI.
    Cursor,
}

impl GeneratorKind {
    /// The name used on the command line and in files.
    pub fn name(&self) -> &'static str {
        match self {
            GeneratorKind::Rules => "rules",
            GeneratorKind::ClaudeCode => "claude_code",
            GeneratorKind::Codex => "codex",
            GeneratorKind::Cursor => "cursor",
        }
    }
}

/// Options of one generation run.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// The backend.
    pub backend: GeneratorKind,
    /// The agent's model (agent backends only).
    pub model: Option<String>,
    /// Per-task agent timeout.
    pub timeout: Duration,
    /// The rules backend's seed.
    pub seed: u64,
}

/// What the rules backend would generate for a task (also the `--dry-run` listing).
#[derive(Debug, Clone)]
pub struct Plan {
    /// The task id.
    pub task_id: String,
    /// The file to write.
    pub shapes: HeldOutShapes,
}

fn unsupported(task: &str, reason: impl Into<String>) -> HeldoutError {
    HeldoutError::Unsupported {
        task: task.to_string(),
        reason: reason.into(),
    }
}

fn constraints_from(files: &[PathBuf]) -> Vec<(String, kg_inject::ConstraintKind)> {
    let mut out = Vec::new();
    for f in files {
        match PySource::read(f) {
            Ok(src) => out.extend(src.constraints().into_iter().map(|c| (c.name, c.kind))),
            Err(e) => tracing::debug!("no constraints read from {}: {e}", f.display()),
        }
    }
    out
}

fn kernel_files(task_dir: &Path, cfg: &TaskConfig) -> Vec<PathBuf> {
    cfg.source_file_path
        .iter()
        .chain(cfg.target_file_path.iter())
        .filter(|p| p.ends_with(".py"))
        .map(|p| task_dir.join(p))
        .collect()
}

fn entries(rows: &[GeneratedRow], target: &str) -> Vec<ShapeEntry> {
    rows.iter()
        .map(|r| ShapeEntry {
            category: r.category.to_string(),
            row: r.value.render(),
            note: r.note.clone(),
            target: target.to_string(),
        })
        .collect()
}

/// Replaces `span` (absolute offsets in `src`) inside the `outer` region of `src`.
fn splice(src: &PySource, outer: kg_inject::Span, inner: kg_inject::Span, new: &str) -> String {
    let text = src.text();
    format!(
        "{}{}{}",
        &text[outer.start..inner.start],
        new,
        &text[inner.end..outer.end]
    )
}

/// The rules backend for one task: reads the task, generates rows, builds the injections and
/// checks that each applies to the task's own files and leaves them parseable.
pub fn plan_rules(task: &DiscoveredTask, user_seed: u64) -> Result<Plan, HeldoutError> {
    let id = task.id.as_str();
    let scope = task.scope.clone().map_err(|r| unsupported(id, r))?;
    let cfg = TaskConfig::load(&task.dir.join("config.yaml"))?;
    let seed = user_seed ^ fnv(id);
    let extra = kernel_files(&task.dir, &cfg);
    let planned = match scope {
        Scope::Vllm => plan_vllm(task, seed, extra)?,
        Scope::Rocmbench => plan_rocmbench(task, &cfg, seed, extra)?,
        Scope::Gpumode => plan_gpumode(task, seed, &extra)?,
    };
    let shapes = HeldOutShapes {
        task_type: cfg.task_type.clone(),
        num_original_shapes: planned.num_original,
        init_constraints: planned.init_constraints,
        injections: planned.injections,
        shapes: planned.shapes,
        generator: Some(Generator {
            backend: "rules".into(),
            seed: Some(user_seed),
            version: env!("CARGO_PKG_VERSION").into(),
        }),
    };
    self_check(task, &shapes)?;
    Ok(Plan {
        task_id: id.to_string(),
        shapes,
    })
}

/// What a scope's reader built for a task's held-out file.
struct Planned {
    shapes: Vec<ShapeEntry>,
    injections: Vec<Injection>,
    num_original: u64,
    init_constraints: Option<IndexMap<String, serde_json::Value>>,
}

/// vLLM: `TEST_SHAPES = [...]` in `scripts/task_runner.py`, replaced whole. `extra` are the
/// files whose `assert`s constrain the rows.
fn plan_vllm(
    task: &DiscoveredTask,
    seed: u64,
    mut extra: Vec<PathBuf>,
) -> Result<Planned, HeldoutError> {
    let id = task.id.as_str();
    let rel = "scripts/task_runner.py";
    let path = task.dir.join(rel);
    let src = PySource::read(&path)?;
    let list = src
        .test_shapes()
        .ok_or_else(|| unsupported(id, format!("no `TEST_SHAPES = [...]` in {rel}")))?;
    let rows = list.rows.clone().ok_or_else(|| {
        unsupported(
            id,
            format!("{}: TEST_SHAPES is not a literal list", list.location),
        )
    })?;
    let rows: Vec<PyValue> = rows.into_iter().map(|r| r.value).collect();
    let names = src.row_names("TEST_SHAPES").unwrap_or_default();
    extra.push(path.clone());
    let generated = run_rules(id, rows.clone(), names, &extra, vec![], seed)?;
    let indent = src.indent_at(list.stmt.start).to_string();
    let code = splice(
        &src,
        list.stmt,
        list.value,
        &shape_rules::render_list(&generated, &indent),
    );
    let code = kg_inject::reindent(&code, "");
    Ok(Planned {
        shapes: entries(&generated, &format!("{rel}: TEST_SHAPES")),
        injections: vec![Injection {
            file: rel.into(),
            find_marker: "TEST_SHAPES".into(),
            replacement_code: format!("{code}\n"),
            old_code: None,
        }],
        num_original: rows.len() as u64,
        init_constraints: None,
    })
}

/// rocmbench: every `@pytest.mark.parametrize` with literal values in the kernel's and the
/// task's `test_*.py` files, each replaced in place; one that cannot be handled is left as it
/// is. Each file's `assert`s join `extra` before its rows are generated.
fn plan_rocmbench(
    task: &DiscoveredTask,
    cfg: &TaskConfig,
    seed: u64,
    mut extra: Vec<PathBuf>,
) -> Result<Planned, HeldoutError> {
    let mut planned = Planned {
        shapes: Vec::new(),
        injections: Vec::new(),
        num_original: 0,
        init_constraints: None,
    };
    for rel in &rocmbench_files(task, cfg)? {
        let path = task.dir.join(rel);
        let src = PySource::read(&path)?;
        extra.push(path.clone());
        let constraints = constraints_from(&extra);
        for p in src.parametrizes() {
            plan_parametrize(&src, rel, &p, &constraints, seed, &mut planned);
        }
    }
    if planned.injections.is_empty() {
        return Err(unsupported(
            &task.id,
            "no @pytest.mark.parametrize with literal values in the task's test files",
        ));
    }
    Ok(planned)
}

/// The kernel's Python sources and the task's `test_*.py` files, sorted.
fn rocmbench_files(task: &DiscoveredTask, cfg: &TaskConfig) -> Result<Vec<String>, HeldoutError> {
    let mut files: Vec<String> = cfg
        .source_file_path
        .iter()
        .filter(|p| p.ends_with(".py"))
        .cloned()
        .collect();
    for e in std::fs::read_dir(&task.dir)
        .map_err(io_err(&task.dir))?
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("test_") && name.ends_with(".py") && !files.contains(&name) {
            files.push(name);
        }
    }
    files.sort();
    Ok(files)
}

/// Adds one parametrize's rows and its injection to `planned`; one without literal values or
/// whose rows cannot be handled is left as it is (with a warning).
fn plan_parametrize(
    src: &PySource,
    rel: &str,
    p: &Parametrize,
    constraints: &[(String, kg_inject::ConstraintKind)],
    seed: u64,
    planned: &mut Planned,
) {
    let Some(rows) = p.rows.clone() else {
        tracing::warn!(
            "{}: parametrize({:?}) values are not literal; left as they are",
            p.location,
            p.argnames
        );
        return;
    };
    // Scalar rows for one argname.
    let scalar = p.argnames.len() == 1;
    let names = p.argnames.clone();
    let problem = ShapeProblem {
        rows: rows.clone(),
        names: if scalar {
            vec![Some(names[0].clone())]
        } else {
            names.iter().cloned().map(Some).collect()
        },
        constraints: constraints.to_vec(),
        init_values: vec![],
        seed,
    };
    let generated = match shape_rules::generate(&problem) {
        Ok(g) => g,
        Err(why) => {
            tracing::warn!(
                "{}: parametrize({:?}) left as it is: {why}",
                p.location,
                p.argnames
            );
            return;
        }
    };
    if planned.num_original == 0 && !p.function.contains("performance") {
        planned.num_original = rows.len() as u64;
    }
    let indent = src.indent_at(p.decorator.start).to_string();
    let old = src.slice(p.decorator).to_string();
    let new = splice(
        src,
        p.decorator,
        p.argvalues,
        &shape_rules::render_list(&generated, &indent),
    );
    planned.shapes.extend(entries(
        &generated,
        &format!("{rel}: {}({})", p.function, p.argnames.join(",")),
    ));
    planned.injections.push(Injection {
        file: rel.to_string(),
        find_marker: "raw_replace".into(),
        replacement_code: new,
        old_code: Some(old),
    });
}

/// GPU MODE: the literal shape list of `get_inputs()` in the module, the same `get_inputs`
/// written into the module and its functional twin; `get_init_inputs()` values are kept and
/// recorded as `init_constraints`.
fn plan_gpumode(
    task: &DiscoveredTask,
    seed: u64,
    extra: &[PathBuf],
) -> Result<Planned, HeldoutError> {
    let id = task.id.as_str();
    let module = find_py(&task.dir.join("pytorch_code_module"), |n| {
        !n.ends_with("_func.py")
    })
    .ok_or_else(|| unsupported(id, "no pytorch_code_module/*.py"))?;
    let func = find_py(&task.dir.join("pytorch_code_functional"), |n| {
        n.ends_with("_func.py")
    })
    .ok_or_else(|| unsupported(id, "no pytorch_code_functional/*_func.py"))?;
    let src = PySource::read(&module)?;
    let g = src
        .get_inputs()
        .ok_or_else(|| unsupported(id, format!("no `def get_inputs(` in {}", module.display())))?;
    let configs = g.configs.clone().ok_or_else(|| {
        unsupported(
            id,
            format!(
                "{}: get_inputs() has no literal shape list (`configs = [...]`)",
                g.location
            ),
        )
    })?;
    let rows: Vec<PyValue> = configs
        .rows
        .clone()
        .ok_or_else(|| {
            unsupported(
                id,
                format!("{}: the shape list is not literal", configs.location),
            )
        })?
        .into_iter()
        .map(|r| r.value)
        .collect();
    let names = src.row_names(&configs.name).unwrap_or_default();
    let init = src.init_kwargs().unwrap_or_default();
    let init_values: Vec<i64> = init
        .iter()
        .filter_map(|(_, v)| match v {
            PyValue::Int(i) => Some(*i),
            _ => None,
        })
        .collect();
    let generated = run_rules(id, rows.clone(), names, extra, init_values, seed)?;
    let indent = src.indent_at(configs.stmt.start).to_string();
    let code = splice(
        &src,
        g.def,
        configs.value,
        &shape_rules::render_list(&generated, &indent),
    );
    let code = format!("{}\n", code.trim_end());
    let rel = |p: &Path| {
        p.strip_prefix(&task.dir)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned()
    };
    let mut init_map = IndexMap::new();
    for (k, v) in &init {
        if let Some(j) = to_json(v) {
            init_map.insert(k.clone(), j);
        }
    }
    Ok(Planned {
        shapes: entries(&generated, &format!("{}: get_inputs", rel(&module))),
        injections: vec![
            Injection {
                file: rel(&module),
                find_marker: "def get_inputs".into(),
                replacement_code: code.clone(),
                old_code: None,
            },
            Injection {
                file: rel(&func),
                find_marker: "def get_inputs".into(),
                replacement_code: code,
                old_code: None,
            },
        ],
        num_original: rows.len() as u64,
        init_constraints: Some(init_map),
    })
}

fn run_rules(
    id: &str,
    rows: Vec<PyValue>,
    names: Vec<String>,
    files: &[PathBuf],
    init_values: Vec<i64>,
    seed: u64,
) -> Result<Vec<GeneratedRow>, HeldoutError> {
    let problem = ShapeProblem {
        rows,
        names: names.into_iter().map(Some).collect(),
        constraints: constraints_from(files),
        init_values,
        seed,
    };
    shape_rules::generate(&problem).map_err(|why| unsupported(id, why))
}

/// Applies the injections to the task's own files in memory: each must apply and parse.
fn self_check(task: &DiscoveredTask, shapes: &HeldOutShapes) -> Result<(), HeldoutError> {
    let mut texts: IndexMap<String, String> = IndexMap::new();
    for (index, inj) in shapes.injections.iter().enumerate() {
        let path = task.dir.join(&inj.file);
        let text = match texts.get(&inj.file) {
            Some(t) => t.clone(),
            None => std::fs::read_to_string(&path).map_err(io_err(&path))?,
        };
        let new = inject_text(&path, &text, inj).map_err(|e| HeldoutError::Injection {
            index,
            file: inj.file.clone(),
            reason: e.to_string(),
        })?;
        texts.insert(inj.file.clone(), new);
    }
    Ok(())
}

fn find_py(dir: &Path, pred: impl Fn(&str) -> bool) -> Option<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "py")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| pred(n) && !n.starts_with("__"))
        })
        .collect();
    v.sort();
    v.into_iter().next()
}

fn to_json(v: &PyValue) -> Option<serde_json::Value> {
    Some(match v {
        PyValue::Int(i) => (*i).into(),
        PyValue::Float(f, _) => serde_json::Number::from_f64(*f)?.into(),
        PyValue::Bool(b) => (*b).into(),
        PyValue::Str(s) => s.clone().into(),
        PyValue::None => serde_json::Value::Null,
        PyValue::Tuple(items) | PyValue::List(items) => {
            serde_json::Value::Array(items.iter().map(to_json).collect::<Option<_>>()?)
        }
        PyValue::Expr(s) => s.clone().into(),
    })
}

/// FNV-1a, to mix the task id into the seed.
fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Where a task's held-out file goes.
pub fn shapes_path(output_dir: &Path, task_id: &str) -> PathBuf {
    output_dir.join(task_id).join("held_out_shapes.yaml")
}

/// The ignore file that keeps the held-out directory out of Git.
pub const GITIGNORE: &str = ".gitignore";

/// The line of [`GITIGNORE`] that ignores everything in its directory, itself included.
const IGNORE_ALL: &str = "*";

/// Makes Git ignore `output_dir` wherever it lies: AKA keeps `held_out_tests/` out of Git so
/// held-out shapes stay private (its README), and a directory that ignores itself does that
/// for any `--output-dir` without editing the repository's own `.gitignore`. An existing
/// file without a `*` line gets one appended. Returns the file's path.
pub fn ensure_git_ignored(output_dir: &Path) -> Result<PathBuf, HeldoutError> {
    std::fs::create_dir_all(output_dir).map_err(io_err(output_dir))?;
    let path = output_dir.join(GITIGNORE);
    let existing = match std::fs::read_to_string(&path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&path)(e)),
    };
    let text = match existing {
        Some(text) if text.lines().any(|l| l.trim() == IGNORE_ALL) => return Ok(path),
        Some(text) if text.is_empty() || text.ends_with('\n') => format!("{text}{IGNORE_ALL}\n"),
        Some(text) => format!("{text}\n{IGNORE_ALL}\n"),
        None => format!(
            "# kg-heldout: held-out shapes stay private, as AgentKernelArena keeps held_out_tests/ out of Git.\n{IGNORE_ALL}\n"
        ),
    };
    kg_contract::io::write_atomic(&path, text.as_bytes())?;
    Ok(path)
}

/// Writes a plan's file (and makes Git ignore `output_dir`).
pub fn write_plan(output_dir: &Path, plan: &Plan) -> Result<PathBuf, HeldoutError> {
    ensure_git_ignored(output_dir)?;
    let path = shapes_path(output_dir, &plan.task_id);
    crate::yaml::write(&path, &plan.shapes, "held_out_shapes.yaml")?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A missing ignore file is created; one without `*` gets it appended, keeping its lines;
    /// one with it is left byte for byte.
    #[test]
    fn the_output_dir_ignores_itself() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("held_out_tests");
        let p = ensure_git_ignored(&out).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.lines().any(|l| l == "*"), "{text}");
        let other = d.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join(GITIGNORE), "notes.txt").unwrap();
        ensure_git_ignored(&other).unwrap();
        assert_eq!(
            std::fs::read_to_string(other.join(GITIGNORE)).unwrap(),
            "notes.txt\n*\n"
        );
        let before = std::fs::read(other.join(GITIGNORE)).unwrap();
        ensure_git_ignored(&other).unwrap();
        assert_eq!(before, std::fs::read(other.join(GITIGNORE)).unwrap());
    }
}
