//! Which Python interpreter runs task commands: `--python`, else `PYTHON_BIN`, else
//! `.venv/bin/python` in the current directory or an ancestor, else `python3` on PATH.

use std::path::{Path, PathBuf};

use crate::error::HeldoutError;

/// Where the interpreter came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PythonSource {
    /// `--python`.
    Flag,
    /// The `PYTHON_BIN` environment variable.
    EnvVar,
    /// A `.venv` found from the current directory upwards.
    Venv(PathBuf),
    /// `python3` on PATH.
    SearchPath,
}

/// A resolved interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Python {
    /// The executable.
    pub path: PathBuf,
    /// How it was found.
    pub source: PythonSource,
}

/// Resolves the interpreter. `env_value` is `PYTHON_BIN`; `cwd` starts the `.venv` search.
pub fn resolve(
    flag: Option<&Path>,
    env_value: Option<&str>,
    cwd: &Path,
) -> Result<Python, HeldoutError> {
    let mut checked = Vec::new();
    if let Some(p) = flag {
        return Ok(Python {
            path: p.to_path_buf(),
            source: PythonSource::Flag,
        });
    }
    checked.push("--python (not given)".to_string());
    match env_value.filter(|v| !v.is_empty()) {
        Some(v) => {
            return Ok(Python {
                path: PathBuf::from(v),
                source: PythonSource::EnvVar,
            });
        }
        None => checked.push("PYTHON_BIN (unset)".into()),
    }
    for dir in cwd.ancestors() {
        let cand = dir.join(".venv/bin/python");
        if cand.is_file() {
            return Ok(Python {
                path: cand,
                source: PythonSource::Venv(dir.to_path_buf()),
            });
        }
    }
    checked.push(format!("{}/**/.venv/bin/python (none)", cwd.display()));
    match which::which("python3") {
        Ok(p) => Ok(Python {
            path: p,
            source: PythonSource::SearchPath,
        }),
        Err(_) => {
            checked.push("python3 on PATH (not found)".into());
            Err(HeldoutError::PythonNotFound {
                checked: checked.join(", "),
            })
        }
    }
}

/// Routes a task command's leading `python3`/`python`/`pytest` through the interpreter, as
/// AgentKernelArena's runner does.
pub fn normalize_command(command: &str, python: &Path) -> String {
    let q = shell_quote(&python.to_string_lossy());
    let lead = command.len() - command.trim_start().len();
    let (ws, rest) = command.split_at(lead);
    for (token, repl) in [
        ("python3", q.clone()),
        ("python", q.clone()),
        ("pytest", format!("{q} -m pytest")),
    ] {
        if rest == token || rest.starts_with(&format!("{token} ")) {
            return format!("{ws}{repl}{}", &rest[token.len()..]);
        }
    }
    command.to_string()
}

/// Single-quotes a string for `bash -c`.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_flag_env_venv_path() {
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join(".venv/bin");
        std::fs::create_dir_all(&venv).unwrap();
        std::fs::write(venv.join("python"), "").unwrap();
        let deep = dir.path().join("a/b");
        std::fs::create_dir_all(&deep).unwrap();
        let r = resolve(Some(Path::new("/x/py")), Some("/y/py"), &deep).unwrap();
        assert_eq!(r.source, PythonSource::Flag);
        let r = resolve(None, Some("/y/py"), &deep).unwrap();
        assert_eq!(
            (r.path, r.source),
            (PathBuf::from("/y/py"), PythonSource::EnvVar)
        );
        let r = resolve(None, None, &deep).unwrap();
        assert_eq!(r.path, venv.join("python"));
        assert!(matches!(r.source, PythonSource::Venv(_)));
    }

    #[test]
    fn commands_are_normalized_like_aka() {
        let py = Path::new("/opt/my py/bin/python");
        assert_eq!(
            normalize_command("python3 scripts/task_runner.py compile", py),
            "'/opt/my py/bin/python' scripts/task_runner.py compile"
        );
        assert_eq!(
            normalize_command("pytest -x t.py", Path::new("/p/python")),
            "/p/python -m pytest -x t.py"
        );
        assert_eq!(normalize_command("python3x a", py), "python3x a");
        assert_eq!(normalize_command("make all", py), "make all");
    }
}
