//! What the kg-bench under test supports, read from its `--help` texts, and the cases it
//! therefore cannot run (reported as SKIPPED).

use std::path::Path;
use std::process::{Command, Stdio};

use super::manifest::Case;

/// What the kg-bench under test supports (from its `--help` texts).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Probe {
    /// `kg-bench verify` exists: every case's `-o` file must pass it.
    pub(super) verify: bool,
    /// `kg-bench evaluate --memory-limit` exists: cases that `requires: memory-limit` run.
    pub(super) memory_limit: bool,
}

/// Whether a clap help text lists `name` under `Commands:`.
pub(super) fn help_has_command(help: &str, name: &str) -> bool {
    let mut in_commands = false;
    for l in help.lines() {
        if l.trim_end().ends_with("Commands:") {
            in_commands = true;
        } else if in_commands && !l.starts_with(' ') && !l.trim().is_empty() {
            in_commands = false;
        } else if in_commands && l.split_whitespace().next() == Some(name) {
            return true;
        }
    }
    false
}

/// Whether a help text documents option `flag` (`--memory-limit`, not `--memory-limits`).
pub(super) fn help_has_flag(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == '<')
        .any(|w| w == flag)
}

pub(super) fn probe_kg_bench(kg_bench: &Path) -> Probe {
    let help = |args: &[&str]| {
        Command::new(kg_bench)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    Probe {
        verify: help_has_command(&help(&["--help"]), "verify"),
        memory_limit: help_has_flag(&help(&["evaluate", "--help"]), "--memory-limit"),
    }
}

/// Why a case cannot run against this kg-bench (reported as SKIPPED, never as a pass).
pub(super) fn skip_reason(c: &Case, probe: &Probe) -> Option<String> {
    match c.requires.as_deref() {
        None => None,
        Some("memory-limit") if probe.memory_limit => None,
        Some("memory-limit") => Some(
            "kg-bench evaluate has no --memory-limit: unbounded allocation would take the machine's memory".into(),
        ),
        Some(other) => Some(format!("unknown requirement `{other}`")),
    }
}
