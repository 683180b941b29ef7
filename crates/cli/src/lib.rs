//! What every kernelgate binary sets up the same way, so that `KG_LOG`, colour and the log's
//! destination mean one thing across kg-bench, kg-gpu, kg-heldout and kg-validate-pr, and a
//! command's failure ([`Failure`]) ends a process the same way.

use std::io::IsTerminal;

/// The variable that sets the log level of every binary (a `tracing` filter: `info`,
/// `kg_exec=debug,warn`).
pub const LOG_ENV: &str = "KG_LOG";

/// Logs to stderr at the level [`LOG_ENV`] names, else `default`; in colour only when stderr is
/// a terminal and `NO_COLOR` is unset, so a log redirected to a file or read by CI stays plain.
pub fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env(LOG_ENV)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ))
        .init();
}

/// Whether to colour output: on a terminal, unless `NO_COLOR` is set to anything non-empty
/// (<https://no-color.org>).
pub fn colour(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        assert!(!colour(false, None));
        assert!(!colour(true, Some("1".as_ref())));
        // An empty NO_COLOR does not count, as no-color.org says.
        assert!(colour(true, Some("".as_ref())));
    }
}

/// An error with the exit code it maps to: what a binary's commands return.
#[derive(Debug)]
pub struct Failure {
    /// The process's exit code.
    pub code: i32,
    /// What went wrong, printed with its causes.
    pub error: anyhow::Error,
}

/// A usage error (exit code 2): bad arguments or inputs the user can fix.
pub fn usage(e: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: kg_contract::exit::USAGE,
        error: e.into(),
    }
}

/// The exit code of a command's result; a failure is printed first as `error: ...` with its
/// causes.
pub fn exit_code(result: Result<i32, Failure>) -> std::process::ExitCode {
    match result {
        Ok(code) => std::process::ExitCode::from(code as u8),
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            std::process::ExitCode::from(f.code as u8)
        }
    }
}
