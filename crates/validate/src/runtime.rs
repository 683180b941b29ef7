//! `runtime_compat`: does the repository's own package import from the checkout against the
//! installed runtime? Repository-aware as the seed: `aiter` from the checkout; `flydsl` from
//! `PYLIB` when given (else the checkout's `python/`); otherwise `--runtime-module` or the
//! target's first top-level import that the checkout provides.

use std::path::Path;

use kg_contract::report::{NativeArtifact, RuntimeIdentity};
use serde::Deserialize;

use crate::error::ValidateError;
use crate::runner::{Phase, RunContext};

/// `aiter`, `flydsl` or `unknown`.
pub fn repo_kind(root: &Path) -> &'static str {
    if root.join("aiter/__init__.py").is_file() {
        "aiter"
    } else if root.join("python/flydsl").is_dir() {
        "flydsl"
    } else {
        "unknown"
    }
}

/// The checkout's FlyDSL version: `__version__ = "..."` in `python/flydsl/_version.py`, else in
/// `python/flydsl/__init__.py` (older trees).
pub fn flydsl_checkout_version(root: &Path) -> Option<String> {
    ["_version.py", "__init__.py"].iter().find_map(|f| {
        let text = std::fs::read_to_string(root.join("python/flydsl").join(f)).ok()?;
        text.lines().find_map(|l| {
            let rest = l.trim().strip_prefix("__version__")?.trim_start();
            let v = rest.strip_prefix('=')?.trim();
            let q = v.chars().next().filter(|c| *c == '"' || *c == '\'')?;
            let inner = &v[1..];
            Some(inner[..inner.find(q)?].to_string())
        })
    })
}

/// Changed paths a prebuilt FlyDSL runtime (`PYLIB`) would stand in for: the package's Python,
/// C++/MLIR sources and bindings, headers, TableGen, CMake and packaging inputs. Kernels and
/// tests are not among them.
pub fn flydsl_runtime_inputs(changed: &[String]) -> Vec<String> {
    changed
        .iter()
        .filter(|p| {
            let name = p.rsplit('/').next().unwrap_or(p);
            let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
            p.starts_with("python/flydsl/")
                || p.starts_with("include/")
                || p.starts_with("lib/")
                || p.starts_with("cmake/")
                || matches!(
                    ext,
                    "cpp" | "cc" | "cxx" | "c" | "h" | "hpp" | "hxx" | "td" | "cmake"
                )
                || matches!(
                    name,
                    "CMakeLists.txt" | "setup.py" | "setup.cfg" | "pyproject.toml" | "MANIFEST.in"
                )
                || name.starts_with("requirements")
        })
        .cloned()
        .collect()
}

/// The module to probe and why.
pub fn choose_module(
    root: &Path,
    kind: &str,
    explicit: Option<&str>,
    target_imports: &[String],
    target_file: &str,
) -> Option<(String, String)> {
    if let Some(m) = explicit {
        return Some((m.to_string(), "--runtime-module".into()));
    }
    match kind {
        "aiter" => return Some(("aiter".into(), "repo kind aiter".into())),
        "flydsl" => return Some(("flydsl".into(), "repo kind flydsl".into())),
        _ => {}
    }
    let stem = target_file
        .rsplit('/')
        .next()
        .unwrap_or(target_file)
        .trim_end_matches(".py");
    target_imports
        .iter()
        .find(|m| {
            // Test packages are not the runtime under review.
            !matches!(m.as_str(), "tests" | "test" | "conftest")
                && m.as_str() != stem
                && (root.join(m.as_str()).join("__init__.py").is_file()
                    || root
                        .join("src")
                        .join(m.as_str())
                        .join("__init__.py")
                        .is_file())
        })
        .map(|m| {
            (
                m.clone(),
                format!("the target's first import that the checkout provides (`{m}`)"),
            )
        })
}

#[derive(Debug, Deserialize)]
struct ProbeOut {
    module: String,
    module_path: Option<String>,
    module_version: Option<String>,
    python_executable: String,
    python_version: String,
    torch_version: Option<String>,
    triton_version: Option<String>,
    native: Vec<String>,
    error: Option<String>,
}

/// What the probe established.
#[derive(Debug, Clone)]
pub struct RuntimeResult {
    /// The identity (module_path `None` when the import failed or came from elsewhere).
    pub identity: RuntimeIdentity,
    /// `Ok(note)` when compatible, `Err(why)` otherwise.
    pub verdict: Result<String, String>,
}

/// Imports `module` in the head phase and checks where it came from.
pub fn probe(
    ctx: &RunContext,
    module: &str,
    kind: &str,
    base_sha: &str,
) -> Result<RuntimeResult, ValidateError> {
    let out = ctx.scratch.join("runtime-probe.json");
    let mut roots = vec![ctx.repo.to_string_lossy().to_string()];
    if let Some(p) = &ctx.pylib {
        roots.push(p.to_string_lossy().to_string());
    }
    let env = ctx.base_env(Phase::Head)?;
    let mut cmd = std::process::Command::new(&ctx.python);
    cmd.arg("-B")
        .arg(ctx.probe_dir().join("kg_runtime_probe.py"))
        .arg(module)
        .arg(&out)
        .args(&roots)
        .current_dir(&ctx.repo)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let _ = std::fs::remove_file(&out);
    let res = probe_output(cmd)?;
    let text = std::fs::read_to_string(&out).map_err(|_| ValidateError::Usage {
        what: "interpreter".into(),
        message: format!(
            "the runtime probe wrote no result ({}); stderr: {}",
            res.0, res.1
        ),
    })?;
    let p: ProbeOut = serde_json::from_str(&text)
        .map_err(|e| ValidateError::Report(format!("unreadable runtime probe output: {e}")))?;
    let mut native = Vec::new();
    for path in &p.native {
        let pb = Path::new(path);
        if let (Ok(meta), Ok(sha)) = (std::fs::metadata(pb), kg_contract::io::sha256_file(pb)) {
            native.push(NativeArtifact {
                path: path.clone(),
                size: meta.len(),
                sha256: sha,
            });
        }
    }
    let repo_real = std::fs::canonicalize(&ctx.repo).unwrap_or_else(|_| ctx.repo.clone());
    let pylib_real = ctx
        .pylib
        .as_ref()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()));
    let verdict = match (&p.error, &p.module_path) {
        (Some(e), _) => Err(format!(
            "`import {module}` failed against the installed runtime: {e}"
        )),
        (None, None) => Err(format!("`{module}` imported but has no file or path")),
        (None, Some(path)) => {
            let path = Path::new(path);
            let in_repo = path.starts_with(&repo_real);
            let in_pylib = pylib_real.as_ref().is_some_and(|p| path.starts_with(p));
            match kind {
                "flydsl" if pylib_real.is_some() && !in_pylib => Err(format!(
                    "`flydsl` resolved to `{}`, not PYLIB",
                    path.display()
                )),
                "flydsl" if pylib_real.is_some() => {
                    let have = p.module_version.clone().unwrap_or_default();
                    match flydsl_checkout_version(&ctx.repo) {
                        Some(want) if want != have => Err(format!(
                            "PYLIB's `flydsl` is version `{have}` but the checkout's python/flydsl is `{want}`: the prebuilt runtime does not match the tree under review"
                        )),
                        _ => Ok(format!("`flydsl` {have} from PYLIB `{}`", path.display())),
                    }
                }
                _ if in_repo => Ok(format!(
                    "`{module}` imports from the checkout (`{}`)",
                    path.display()
                )),
                _ => Err(format!(
                    "`{module}` resolved to `{}`, outside the checkout: an installed copy shadows the code under review",
                    path.display()
                )),
            }
        }
    };
    let ok = verdict.is_ok();
    Ok(RuntimeResult {
        identity: RuntimeIdentity {
            module: p.module,
            module_path: if ok { p.module_path } else { None },
            module_version: p.module_version,
            python_executable: p.python_executable,
            python_version: p.python_version,
            source_sha: Some(base_sha.to_string()),
            torch_version: p.torch_version,
            triton_version: p.triton_version,
            native_artifacts: native,
        },
        verdict,
    })
}

/// Runs the runtime probe (in its own process group, ended after [`PROBE_TIMEOUT`]): how it
/// ended, and the tail of its stderr.
fn probe_output(cmd: std::process::Command) -> Result<(String, String), ValidateError> {
    let out =
        kg_proc::output_with_timeout(cmd, PROBE_TIMEOUT).map_err(|e| ValidateError::Usage {
            what: "interpreter".into(),
            message: format!("failed to start the runtime probe: {e}"),
        })?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok((out.status_text, kg_proc::tail(&stderr, 2000).to_string()))
}

/// How long the runtime probe (imports of the module under review) may take.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flydsl_version_is_read_from_version_py_then_init() {
        let d = tempfile::tempdir().unwrap();
        let pkg = d.path().join("python/flydsl");
        std::fs::create_dir_all(&pkg).unwrap();
        assert_eq!(flydsl_checkout_version(d.path()), None);
        std::fs::write(
            pkg.join("__init__.py"),
            "import os\n__version__ = '0.1.0'\n",
        )
        .unwrap();
        assert_eq!(flydsl_checkout_version(d.path()).as_deref(), Some("0.1.0"));
        std::fs::write(
            pkg.join("_version.py"),
            "__version__ = \"0.1.3.1.dev485\"\n",
        )
        .unwrap();
        assert_eq!(
            flydsl_checkout_version(d.path()).as_deref(),
            Some("0.1.3.1.dev485")
        );
    }

    #[test]
    fn flydsl_runtime_inputs_are_sources_bindings_and_packaging_not_kernels_or_tests() {
        let changed: Vec<String> = [
            "python/flydsl/compiler/jit_function.py",
            "lib/Dialect/Fly/FlyOps.cpp",
            "include/fly/FlyOps.td",
            "CMakeLists.txt",
            "pyproject.toml",
            "requirements-dev.txt",
            "kernels/softmax_kernel.py",
            "tests/kernels/test_softmax.py",
            "README.md",
        ]
        .map(str::to_string)
        .to_vec();
        assert_eq!(
            flydsl_runtime_inputs(&changed),
            &changed[..6],
            "kernels, tests and docs are what a PR under review may change"
        );
    }
}
