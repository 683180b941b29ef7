//! Finding the user's Python interpreter and probing what it can do.
//!
//! This is the one place every kernelgate binary and library resolves its interpreter.
//! Order (first hit wins): `--python` ([`PythonRequest::Explicit`]), the `PYTHON_BIN`
//! environment variable, `.venv/bin/python` in the current directory or any ancestor, then
//! `python3` on `PATH`. A "not found" error lists every source checked.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;

/// The interpreter probe script ([`probe`] runs it; kg-exec installs it beside its workers).
pub const PROBE: &str = include_str!("../py/probe.py");

/// Environment variable naming the interpreter when `--python` is not given.
pub const PYTHON_BIN_ENV: &str = "PYTHON_BIN";

/// What the user asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonRequest {
    /// An interpreter given on the command line.
    Explicit(PathBuf),
    /// Search in the documented order.
    Auto,
}

impl PythonRequest {
    /// `Explicit` for a given `--python`, else `Auto`.
    pub fn from_flag(flag: Option<&Path>) -> PythonRequest {
        match flag {
            Some(p) => PythonRequest::Explicit(p.to_path_buf()),
            None => PythonRequest::Auto,
        }
    }
}

/// Where an interpreter was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonSource {
    /// `--python`.
    CommandLine,
    /// The `PYTHON_BIN` environment variable.
    EnvVar,
    /// A `.venv` in the current directory or an ancestor (the project root).
    ProjectVenv(PathBuf),
    /// `python3` on `PATH`.
    SearchPath,
}

impl std::fmt::Display for PythonSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PythonSource::CommandLine => f.write_str("--python"),
            PythonSource::EnvVar => write!(f, "${PYTHON_BIN_ENV}"),
            PythonSource::ProjectVenv(dir) => write!(f, "virtual environment `{}`", dir.display()),
            PythonSource::SearchPath => f.write_str("`python3` on PATH"),
        }
    }
}

/// A resolved interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interpreter {
    /// Path to the executable.
    pub path: PathBuf,
    /// Where it was found.
    pub source: PythonSource,
}

/// What the probe found in an interpreter.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
pub struct ProbeInfo {
    /// Python version.
    pub python: String,
    /// `sys.executable`.
    pub executable: String,
    /// torch version.
    pub torch: String,
    /// CUDA version torch was built with.
    #[serde(default)]
    pub cuda_version: Option<String>,
    /// HIP version torch was built with.
    #[serde(default)]
    pub hip_version: Option<String>,
    /// Whether torch sees a CUDA or HIP device.
    #[serde(default)]
    pub accelerator_available: bool,
    /// Number of devices torch sees.
    #[serde(default)]
    pub device_count: u32,
    /// Name of device 0.
    #[serde(default)]
    pub device_name: Option<String>,
    /// triton version, if importable.
    #[serde(default)]
    pub triton: Option<String>,
    /// numpy version, if importable.
    #[serde(default)]
    pub numpy: Option<String>,
    /// safetensors version, if importable.
    #[serde(default)]
    pub safetensors: Option<String>,
    /// ninja version, if importable (needed for C++/CUDA solutions).
    #[serde(default)]
    pub ninja: Option<String>,
}

/// Failure to find or probe an interpreter.
#[derive(Debug, thiserror::Error)]
pub enum PythonError {
    /// No interpreter in any source.
    #[error(
        "failed to find a Python interpreter; checked: {checked}; pass `--python PATH`, set ${PYTHON_BIN_ENV}, or create `.venv` (`cargo xtask setup` in a kernelgate checkout)"
    )]
    NotFound {
        /// Every source checked, with what was wrong with it.
        checked: String,
    },
    /// The interpreter could not be started.
    #[error("failed to start `{path}` (from {source_kind}): {error}")]
    Spawn {
        /// The interpreter.
        path: PathBuf,
        /// Where it came from.
        source_kind: PythonSource,
        /// OS error.
        error: std::io::Error,
    },
    /// torch is not importable.
    #[error(
        "`{path}` (from {source_kind}, Python {python}) cannot import torch ({message}); run `cargo xtask setup` or pass `--python` naming an interpreter with torch"
    )]
    NoTorch {
        /// The interpreter.
        path: PathBuf,
        /// Where it came from.
        source_kind: PythonSource,
        /// Its version.
        python: String,
        /// The import error.
        message: String,
    },
    /// The probe exited abnormally or replied with something unreadable.
    #[error("failed to probe `{path}`: {message}")]
    Probe {
        /// The interpreter.
        path: PathBuf,
        /// What went wrong, with the stderr tail.
        message: String,
    },
}

fn is_executable(p: &Path) -> bool {
    p.is_file()
}

/// Resolves an interpreter. `cwd` is where the `.venv` search starts; `env_value` is the value
/// of `PYTHON_BIN` (passed in so tests need not touch the process environment).
pub fn find_python(
    request: &PythonRequest,
    cwd: &Path,
    env_value: Option<&str>,
) -> Result<Interpreter, PythonError> {
    find_python_in(request, &[cwd], env_value)
}

/// [`find_python`] reading `PYTHON_BIN` from the process environment: what a binary calls with
/// its `--python` flag and the current directory.
pub fn find_python_env(flag: Option<&Path>, cwd: &Path) -> Result<Interpreter, PythonError> {
    let env_value = std::env::var(PYTHON_BIN_ENV).ok();
    find_python(&PythonRequest::from_flag(flag), cwd, env_value.as_deref())
}

/// [`find_python`] with several `.venv` search starts, tried in order (each with its
/// ancestors), e.g. the repository under test, then the current directory.
pub fn find_python_in(
    request: &PythonRequest,
    venv_roots: &[&Path],
    env_value: Option<&str>,
) -> Result<Interpreter, PythonError> {
    let mut checked = Vec::new();
    if let PythonRequest::Explicit(p) = request {
        if is_executable(p) {
            // Workers run in private directories: a relative path must not change meaning.
            // (Not canonicalised: a venv's `python` is a symlink that must stay one.)
            return Ok(Interpreter {
                path: std::path::absolute(p).unwrap_or_else(|_| p.clone()),
                source: PythonSource::CommandLine,
            });
        }
        if let Ok(found) = which::which(p) {
            return Ok(Interpreter {
                path: found,
                source: PythonSource::CommandLine,
            });
        }
        return Err(PythonError::NotFound {
            checked: format!("--python `{}` (not an executable file)", p.display()),
        });
    }
    match env_value.filter(|v| !v.is_empty()) {
        Some(v) => {
            let p = PathBuf::from(v);
            if is_executable(&p) {
                return Ok(Interpreter {
                    path: std::path::absolute(&p).unwrap_or(p),
                    source: PythonSource::EnvVar,
                });
            }
            if let Ok(found) = which::which(&p) {
                return Ok(Interpreter {
                    path: found,
                    source: PythonSource::EnvVar,
                });
            }
            checked.push(format!(
                "${PYTHON_BIN_ENV} = `{v}` (not an executable file)"
            ));
        }
        None => checked.push(format!("${PYTHON_BIN_ENV} (unset)")),
    }
    for root in venv_roots {
        for d in root.ancestors() {
            let venv = d.join(".venv");
            let py = venv.join("bin").join("python");
            if is_executable(&py) {
                return Ok(Interpreter {
                    path: py,
                    source: PythonSource::ProjectVenv(venv),
                });
            }
        }
    }
    let roots: Vec<String> = venv_roots
        .iter()
        .map(|r| format!("`{}`", r.display()))
        .collect();
    let whose = if roots.len() == 1 { "its" } else { "their" };
    checked.push(format!(
        "`.venv/bin/python` in {} and {whose} ancestors (none)",
        roots.join(", ")
    ));
    match which::which("python3") {
        Ok(p) => Ok(Interpreter {
            path: p,
            source: PythonSource::SearchPath,
        }),
        Err(_) => {
            checked.push("`python3` on PATH (not found)".into());
            Err(PythonError::NotFound {
                checked: checked.join("; "),
            })
        }
    }
}

/// How the workers start an interpreter: `-I -S -B`, so no start-up code of its site
/// directories (`.pth` import lines, `sitecustomize`, `usercustomize`) ever runs in a judge or
/// a candidate — a file planted there by one run cannot act in a later one — with the import
/// path the site module would have built handed over explicitly ([`InterpreterPaths::sys_path`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpreterPaths {
    /// `sys.executable` (a launcher script such as a pyenv shim, which needs more than the
    /// interpreter to run, is not in the way).
    pub executable: PathBuf,
    /// The import path: the interpreter's own, its site-packages and the directories their
    /// `.pth` files name (their path lines only; nothing is executed).
    pub sys_path: Vec<String>,
    /// Directories a sandboxed worker must be able to read: prefixes and the import path.
    pub read: Vec<PathBuf>,
    /// Start-up code found and not run: `.pth` files with import lines, `sitecustomize` and
    /// `usercustomize` modules.
    pub startup_code: Vec<PathBuf>,
}

/// The query behind [`sandbox_paths`]: run with `-I -S`, so it executes nothing from the
/// site directories while it reads them.
const PATHS_QUERY: &str = r##"
import json, os, site, sys
paths = [p for p in sys.path if p]
code = []
# Without the site module a virtual environment is not entered: find its pyvenv.cfg as
# site.venv() does (beside the executable or one directory up).
exe_dir = os.path.dirname(sys.executable)
venv = next((d for d in (exe_dir, os.path.dirname(exe_dir))
             if os.path.isfile(os.path.join(d, "pyvenv.cfg"))), None)
dirs = site.getsitepackages()
if venv is not None:
    system = False
    for line in open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8", errors="replace"):
        k, _, v = line.partition("=")
        if k.strip().lower() == "include-system-site-packages":
            system = v.strip().lower() == "true"
    # A virtual environment's own layout (site.getsitepackages would name the base's, e.g.
    # Debian's dist-packages, since without the site module sys.prefix is the base).
    ver = "python%d.%d" % sys.version_info[:2]
    own = []
    for lib in ("lib", "lib64"):
        d = os.path.join(venv, lib, ver, "site-packages")
        if os.path.isdir(d) and os.path.realpath(d) not in [os.path.realpath(x) for x in own]:
            own.append(d)
    dirs = own + (dirs if system else [])
for d in dirs:
    if not os.path.isdir(d):
        continue
    if d not in paths:
        paths.append(d)
    for name in sorted(os.listdir(d)):
        if not name.endswith(".pth"):
            continue
        full = os.path.join(d, name)
        for line in open(full, encoding="utf-8", errors="replace"):
            line = line.rstrip()
            if not line or line.startswith("#"):
                continue
            if line.startswith(("import ", "import	")):
                code.append(full)
                continue
            p = os.path.join(d, line)
            if os.path.isdir(p) and p not in paths:
                paths.append(p)
for d in paths:
    for m in ("sitecustomize", "usercustomize"):
        for f in (m + ".py", os.path.join(m, "__init__.py")):
            if os.path.isfile(os.path.join(d, f)):
                code.append(os.path.join(d, f))
prefixes = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable))] + ([venv] if venv else [])
print(json.dumps({"executable": sys.executable, "sys_path": paths, "prefixes": prefixes,
                  "startup_code": sorted(set(code))}))
"##;

#[derive(Deserialize)]
struct PathsReply {
    executable: PathBuf,
    sys_path: Vec<String>,
    prefixes: Vec<PathBuf>,
    startup_code: Vec<PathBuf>,
}

/// Asks `python` (`-I -S`, as the workers run) for its [`InterpreterPaths`].
pub fn sandbox_paths(python: &Path) -> Result<InterpreterPaths, PythonError> {
    let mut cmd = Command::new(python);
    cmd.arg("-I").arg("-S").arg("-B").arg("-c").arg(PATHS_QUERY);
    let err = |message: String| PythonError::Probe {
        path: python.to_path_buf(),
        message,
    };
    let out = kg_proc::output_with_timeout(cmd, Duration::from_secs(60))
        .map_err(|e| err(format!("failed to start it: {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let reply: PathsReply = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            err(format!(
                "no path list in its reply; stderr: {}",
                kg_proc::tail(&String::from_utf8_lossy(&out.stderr), 2000)
            ))
        })?;
    let mut read: Vec<PathBuf> = Vec::new();
    let dirs = reply
        .prefixes
        .iter()
        .cloned()
        .chain(reply.sys_path.iter().map(PathBuf::from));
    for d in dirs {
        // The import path holds zip files and entries that do not exist; a bind needs a real
        // path.
        if let Ok(c) = d.canonicalize()
            && !read.contains(&c)
        {
            read.push(c);
        }
    }
    Ok(InterpreterPaths {
        executable: reply.executable,
        sys_path: reply.sys_path,
        read,
        startup_code: reply.startup_code,
    })
}

#[derive(Deserialize)]
struct ProbeError {
    #[serde(default)]
    message: String,
    #[serde(default)]
    python: String,
}

/// The probe cache's bucket under the cache directory; bumped when [`ProbeInfo`] or the key
/// changes.
const PROBE_BUCKET: &str = "interpreter-v1";

/// How long a cached probe is believed at most, whatever its key says.
const PROBE_TTL: Duration = Duration::from_secs(24 * 3600);

/// Environment variables that change what the probe finds (which devices torch sees).
const PROBE_ENV: [&str; 5] = [
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "LD_LIBRARY_PATH",
];

/// The probe cache key of `interp`: its path and canonical path, size and modification time
/// (of the file and of every directory of its import path, which `pip install` touches), the
/// variables of [`PROBE_ENV`], the GPU driver's version and the boot. `None` when the import
/// path cannot be read (no caching then).
fn probe_key(interp: &Interpreter) -> Option<String> {
    let stamp = |p: &Path| -> Option<String> {
        let m = std::fs::metadata(p).ok()?;
        let t = m
            .modified()
            .ok()?
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(format!("{}:{}:{t}", p.display(), m.len()))
    };
    let mut parts = vec![
        stamp(&interp.path)?,
        std::fs::canonicalize(&interp.path)
            .ok()
            .and_then(|c| stamp(&c))?,
    ];
    let paths = sandbox_paths(&interp.path).ok()?;
    for d in &paths.sys_path {
        parts.push(stamp(Path::new(d)).unwrap_or_else(|| format!("{d}:absent")));
    }
    for k in PROBE_ENV {
        parts.push(format!("{k}={:?}", std::env::var_os(k)));
    }
    for f in [
        "/proc/driver/nvidia/version",
        "/sys/module/amdgpu/version",
        "/proc/sys/kernel/random/boot_id",
    ] {
        parts.push(std::fs::read_to_string(f).unwrap_or_default());
    }
    Some(kg_contract::io::sha256_hex(parts.join("\0").as_bytes()))
}

/// [`probe`], cached under `cache_dir` (`interpreter-v1/<key>.json`, the key from
/// [`probe_key`]; at most a day old). A corrupt entry is removed with a warning and the
/// interpreter probed again. The second value says whether the cache answered.
pub fn probe_cached(
    interp: &Interpreter,
    cache_dir: &Path,
) -> Result<(ProbeInfo, bool), PythonError> {
    let Some(key) = probe_key(interp) else {
        return probe(interp).map(|p| (p, false));
    };
    let dir = cache_dir.join(PROBE_BUCKET);
    let file = dir.join(format!("{key}.json"));
    let fresh = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < PROBE_TTL);
    if fresh {
        match std::fs::read(&file).map(|b| serde_json::from_slice::<ProbeInfo>(&b)) {
            Ok(Ok(info)) => return Ok((info, true)),
            Ok(Err(e)) => {
                tracing::warn!(file = %file.display(), "corrupt interpreter probe cache entry removed: {e}");
                let _ = std::fs::remove_file(&file);
            }
            Err(_) => {}
        }
    }
    let info = probe(interp)?;
    // A cache that cannot be written costs only the next probe.
    if let Ok(json) = serde_json::to_vec(&info)
        && std::fs::create_dir_all(&dir).is_ok()
        && let Err(e) = kg_contract::io::write_atomic(&file, &json)
    {
        tracing::debug!("interpreter probe not cached: {e}");
    }
    Ok((info, false))
}

/// Runs the embedded probe in `interp` (`-I -B`, imports torch) and reports versions and
/// devices.
pub fn probe(interp: &Interpreter) -> Result<ProbeInfo, PythonError> {
    let dir = tempfile::Builder::new()
        .prefix("kg-probe-")
        .tempdir()
        .map_err(|e| PythonError::Probe {
            path: interp.path.clone(),
            message: format!("failed to create a temp dir: {e}"),
        })?;
    let script = dir.path().join("probe.py");
    std::fs::write(&script, PROBE).map_err(|e| PythonError::Probe {
        path: interp.path.clone(),
        message: format!("failed to write `{}`: {e}", script.display()),
    })?;
    let mut cmd = Command::new(&interp.path);
    cmd.arg("-I").arg("-B").arg(&script);
    let out = kg_proc::output_with_timeout(cmd, Duration::from_secs(120)).map_err(|error| {
        PythonError::Spawn {
            path: interp.path.clone(),
            source_kind: interp.source.clone(),
            error,
        }
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let Some(line) = line else {
        return Err(PythonError::Probe {
            path: interp.path.clone(),
            message: format!(
                "{}; no JSON reply; stderr: {}",
                out.status_text,
                kg_proc::tail(&stderr, 2000)
            ),
        });
    };
    let v: serde_json::Value = serde_json::from_str(line).map_err(|e| PythonError::Probe {
        path: interp.path.clone(),
        message: format!("malformed reply `{line}`: {e}"),
    })?;
    if v.get("result").and_then(|r| r.as_str()) == Some("error") {
        let e: ProbeError = serde_json::from_value(v).unwrap_or(ProbeError {
            message: "unknown".into(),
            python: "unknown".into(),
        });
        return Err(PythonError::NoTorch {
            path: interp.path.clone(),
            source_kind: interp.source.clone(),
            python: e.python,
            message: e.message,
        });
    }
    serde_json::from_value(v).map_err(|e| PythonError::Probe {
        path: interp.path.clone(),
        message: format!("malformed reply `{line}`: {e}"),
    })
}

#[cfg(test)]
mod tests {

    /// A virtual environment's import path without its site module: its own site-packages and
    /// the directories its `.pth` files name, while the `.pth` import line is reported, not
    /// run (its side effect never happens).
    #[test]
    fn sandbox_paths_read_a_venv_without_running_its_start_up_code() {
        let d = tempfile::tempdir().unwrap();
        let venv = d.path().join("venv");
        let st = Command::new("python3")
            .args(["-m", "venv", "--without-pip"])
            .arg(&venv)
            .status()
            .expect("python3 with the venv module is needed for this test (CI has it)");
        assert!(st.success());
        let python = venv.join("bin/python");
        let site = std::fs::read_dir(venv.join("lib"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path()
            .join("site-packages");
        let extra = d.path().join("extra");
        std::fs::create_dir(&extra).unwrap();
        let marker = d.path().join("ran");
        std::fs::write(
            site.join("zz_test.pth"),
            format!(
                "{}\nimport os; open({:?}, 'w').close()\n",
                extra.display(),
                marker.display().to_string()
            ),
        )
        .unwrap();
        let p = sandbox_paths(&python).unwrap();
        assert!(p.sys_path.contains(&site.display().to_string()), "{p:?}");
        assert!(p.sys_path.contains(&extra.display().to_string()), "{p:?}");
        assert!(
            p.startup_code.iter().any(|f| f.ends_with("zz_test.pth")),
            "{p:?}"
        );
        assert!(!marker.exists(), "the .pth import line ran");
        assert!(p.read.contains(&site.canonicalize().unwrap()));
    }

    use super::*;

    #[test]
    fn explicit_missing_interpreter_is_named() {
        let err = find_python(
            &PythonRequest::Explicit(PathBuf::from("/nonexistent/python9")),
            Path::new("/"),
            None,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/python9"), "{err}");
    }

    #[test]
    fn project_venv_found_from_a_subdirectory() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("python"), "#!/bin/sh\n").unwrap();
        let sub = root.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let found = find_python(&PythonRequest::Auto, &sub, None).unwrap();
        assert_eq!(found.path, bin.join("python"));
        assert!(matches!(found.source, PythonSource::ProjectVenv(_)));
    }

    #[test]
    fn env_var_wins_over_venv_and_bad_env_var_is_listed() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("python"), "#!/bin/sh\n").unwrap();
        let other = root.path().join("mypy");
        std::fs::write(&other, "#!/bin/sh\n").unwrap();
        let found = find_python(&PythonRequest::Auto, root.path(), other.to_str()).unwrap();
        assert_eq!(found.source, PythonSource::EnvVar);
        // A bad PYTHON_BIN falls through to the venv.
        let found = find_python(&PythonRequest::Auto, root.path(), Some("/no/such/py")).unwrap();
        assert!(matches!(found.source, PythonSource::ProjectVenv(_)));
    }

    fn fake_venv(root: &Path) -> PathBuf {
        let bin = root.join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("python"), "#!/bin/sh\n").unwrap();
        bin.join("python")
    }

    #[test]
    fn order_is_explicit_then_env_then_venv_then_python3() {
        let root = tempfile::tempdir().unwrap();
        let venv_py = fake_venv(root.path());
        let sub = root.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let flag = root.path().join("flag-python");
        let env = root.path().join("env-python");
        std::fs::write(&flag, "").unwrap();
        std::fs::write(&env, "").unwrap();
        let explicit = PythonRequest::from_flag(Some(&flag));
        let found = find_python(&explicit, &sub, env.to_str()).unwrap();
        assert_eq!(
            (found.path, found.source),
            (flag, PythonSource::CommandLine)
        );
        let auto = PythonRequest::from_flag(None);
        assert_eq!(auto, PythonRequest::Auto);
        let found = find_python(&auto, &sub, env.to_str()).unwrap();
        assert_eq!((found.path, found.source), (env, PythonSource::EnvVar));
        // An empty PYTHON_BIN counts as unset.
        let found = find_python(&auto, &sub, Some("")).unwrap();
        assert_eq!(found.path, venv_py);
        assert_eq!(
            found.source,
            PythonSource::ProjectVenv(root.path().join(".venv"))
        );
        // No venv anywhere above: `python3` on PATH, or an error listing every source.
        let bare = tempfile::tempdir().unwrap();
        match find_python(&auto, bare.path(), None) {
            Ok(found) => {
                assert_eq!(found.source, PythonSource::SearchPath);
                assert_eq!(found.path.file_name().unwrap(), "python3");
            }
            Err(PythonError::NotFound { checked }) => {
                for want in [
                    "$PYTHON_BIN (unset)",
                    ".venv/bin/python",
                    "`python3` on PATH",
                ] {
                    assert!(checked.contains(want), "{checked}");
                }
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn a_relative_explicit_path_is_made_absolute_without_resolving_links() {
        // Tests run in the crate directory; workers run elsewhere.
        let dir = tempfile::tempdir_in(".").unwrap();
        let target = dir.path().join("real-python");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("python");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let rel = PathBuf::from(dir.path().file_name().unwrap()).join("python");
        assert!(rel.is_relative());
        let found = find_python(&PythonRequest::Explicit(rel), Path::new("/"), None).unwrap();
        assert!(found.path.is_absolute(), "{}", found.path.display());
        assert_eq!(
            found.path.file_name().unwrap(),
            "python",
            "the link is kept"
        );
        assert_eq!(
            found.path.canonicalize().unwrap(),
            target.canonicalize().unwrap()
        );
    }

    #[test]
    fn venv_roots_are_tried_in_order() {
        let repo = tempfile::tempdir().unwrap();
        let cwd = tempfile::tempdir().unwrap();
        let cwd_py = fake_venv(cwd.path());
        let auto = PythonRequest::Auto;
        let found = find_python_in(&auto, &[repo.path(), cwd.path()], None).unwrap();
        assert_eq!(
            found.path, cwd_py,
            "the second root is used when the first has none"
        );
        let repo_py = fake_venv(repo.path());
        let found = find_python_in(&auto, &[repo.path(), cwd.path()], None).unwrap();
        assert_eq!(found.path, repo_py, "the first root wins");
    }

    #[test]
    fn not_found_names_what_was_checked_and_the_fix() {
        let err = find_python(
            &PythonRequest::Explicit(PathBuf::from("/nonexistent/python9")),
            Path::new("/"),
            Some("/also/missing"),
        )
        .unwrap_err()
        .to_string();
        for want in [
            "--python `/nonexistent/python9`",
            "$PYTHON_BIN",
            "cargo xtask setup",
        ] {
            assert!(err.contains(want), "{err}");
        }
    }
}
