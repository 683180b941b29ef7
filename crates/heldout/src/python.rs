//! Running task commands through the chosen interpreter. The interpreter itself is resolved by
//! `kg_python` (`--python`, else `PYTHON_BIN`, else `.venv/bin/python`, else `python3`).

use std::path::Path;

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
