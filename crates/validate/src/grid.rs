//! The S1 grid's channel: which of `--shape-env`, `--shape-arg`, `--shape-argnames` the target
//! structurally has (kg-inject syntax trees), how the grid is handed over on each, and whether
//! the grid adds coverage over the target's declared defaults.

use kg_inject::PySource;

use crate::shapes::{cell_values, default_cells, normalize_cell, value_token};

/// The invalid value a consuming target must refuse.
pub const INVALID_GRID: &str = "__VALIDATOR_INVALID_GRID__";
/// The invalid value a consuming axis flag must refuse.
pub const INVALID_AXIS: &str = "__VALIDATOR_INVALID_AXIS__";

/// A channel found in the source.
#[derive(Debug, Clone, PartialEq)]
pub enum Channel {
    /// An environment variable the target reads.
    Env(String),
    /// A CLI flag the (script) target declares; `list_default` when its default is a list
    /// (then cells are passed as separate values).
    Cli {
        /// The flag.
        flag: String,
        /// Whether the declared default is a list.
        list_default: bool,
    },
    /// Parametrize argnames (pytest target).
    Pytest(Vec<String>),
}

impl Channel {
    /// `env`, `cli` or `pytest` (the report's `grid_channel`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Channel::Env(_) => "env",
            Channel::Cli { .. } => "cli",
            Channel::Pytest(_) => "pytest",
        }
    }

    /// `(extra env, extra argv)` that hand `cells` to the target.
    pub fn hand_over(&self, cells: &[String]) -> (Vec<(String, String)>, Vec<String>) {
        match self {
            Channel::Env(var) => (vec![(var.clone(), cells.join(";"))], vec![]),
            Channel::Cli { flag, list_default } => {
                let mut argv = vec![flag.clone()];
                if *list_default {
                    argv.extend(cells.iter().cloned());
                } else {
                    argv.push(cells.join(";"));
                }
                (vec![], argv)
            }
            Channel::Pytest(names) => {
                let rows: Vec<Vec<serde_json::Value>> =
                    cells.iter().map(|c| cell_values(c)).collect();
                (
                    vec![
                        (
                            crate::env::KG_VALIDATE_GRID_ARGNAMES.into(),
                            names.join(","),
                        ),
                        (
                            crate::env::KG_VALIDATE_GRID_ROWS.into(),
                            serde_json::to_string(&rows).unwrap_or_else(|_| "[]".into()),
                        ),
                    ],
                    vec![],
                )
            }
        }
    }

    /// The hand-over of a deliberately unusable grid.
    pub fn hand_over_invalid(&self) -> (Vec<(String, String)>, Vec<String>) {
        match self {
            Channel::Pytest(names) => {
                let row = vec![INVALID_GRID.to_string(); names.len()].join(",");
                let rows: Vec<Vec<serde_json::Value>> = vec![
                    row.split(',')
                        .map(|s| serde_json::Value::from(s.to_string()))
                        .collect(),
                ];
                (
                    vec![
                        (
                            crate::env::KG_VALIDATE_GRID_ARGNAMES.into(),
                            names.join(","),
                        ),
                        (
                            crate::env::KG_VALIDATE_GRID_ROWS.into(),
                            serde_json::to_string(&rows).unwrap_or_default(),
                        ),
                    ],
                    vec![],
                )
            }
            _ => self.hand_over(&[INVALID_GRID.to_string()]),
        }
    }
}

/// What the structural search found.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelSearch {
    /// The first channel found, in the order env, cli, pytest.
    pub channel: Option<Channel>,
    /// Each channel tried and what was found.
    pub reason: String,
    /// The channel's declared default cells, when literal.
    pub defaults: Option<Vec<String>>,
    /// Why no defaults could be compared (or which comparison applies).
    pub defaults_reason: String,
}

/// Searches `sources` (the target file first, then its `conftest.py` files).
pub fn find(
    sources: &[PySource],
    runner: &str,
    shape_env: Option<&str>,
    shape_arg: Option<&str>,
    shape_argnames: Option<&[String]>,
) -> ChannelSearch {
    let mut tried = Vec::new();
    let mut out = ChannelSearch {
        channel: None,
        reason: String::new(),
        defaults: None,
        defaults_reason: String::new(),
    };
    if let Some(var) = shape_env {
        find_env(sources, var, &mut tried, &mut out);
    }
    if let Some(flag) = shape_arg {
        find_cli(sources, runner, flag, &mut tried, &mut out);
    }
    if let Some(names) = shape_argnames {
        find_pytest(sources, runner, names, &mut tried, &mut out);
    }
    if tried.is_empty() {
        tried.push("no channel flag given (--shape-env, --shape-arg or --shape-argnames)".into());
        out.defaults_reason = "no channel".into();
    }
    out.reason = tried.join("; ");
    out
}

/// The `--shape-env` channel: the target reads `var`. Notes what was found in `tried`; the
/// first channel found (`out.channel` still `None`) becomes `out`'s.
fn find_env(sources: &[PySource], var: &str, tried: &mut Vec<String>, out: &mut ChannelSearch) {
    let read = sources
        .iter()
        .flat_map(|s| s.env_reads())
        .find(|r| r.name.as_deref() == Some(var));
    match read {
        Some(r) => {
            tried.push(format!("env `{var}`: read at {}", r.location));
            if out.channel.is_none() {
                out.channel = Some(Channel::Env(var.to_string()));
                match r.default.as_ref().and_then(default_cells) {
                    Some(d) => {
                        out.defaults = Some(d);
                        out.defaults_reason = format!(
                            "compared with the literal default of `{var}` at {}",
                            r.location
                        );
                    }
                    None => {
                        out.defaults_reason = format!(
                            "`{var}` is read without a literal default, so the target declares no default cells to compare"
                        )
                    }
                }
            }
        }
        None => tried.push(format!(
            "env `{var}`: the target and its conftest.py never read it (os.getenv / os.environ)"
        )),
    }
}

/// The `--shape-arg` channel: a script target declares `flag` with `add_argument`.
fn find_cli(
    sources: &[PySource],
    runner: &str,
    flag: &str,
    tried: &mut Vec<String>,
    out: &mut ChannelSearch,
) {
    if runner != "script" {
        tried.push(format!(
            "cli `{flag}`: the target runs under {runner}; argv reaches script targets only"
        ));
    } else {
        let decl = sources
            .iter()
            .flat_map(|s| s.arg_defaults())
            .find(|a| a.flags.iter().any(|f| f == flag));
        match decl {
            Some(a) => {
                tried.push(format!(
                    "cli `{flag}`: declared by add_argument at {}",
                    a.location
                ));
                if out.channel.is_none() {
                    let list_default = matches!(
                        a.default,
                        Some(kg_inject::PyValue::List(_) | kg_inject::PyValue::Tuple(_))
                    );
                    out.channel = Some(Channel::Cli {
                        flag: flag.to_string(),
                        list_default,
                    });
                    match a.default.as_ref().and_then(default_cells) {
                        Some(d) => {
                            out.defaults = Some(d);
                            out.defaults_reason = format!(
                                "compared with the declared default of `{flag}` at {}",
                                a.location
                            );
                        }
                        None => {
                            out.defaults_reason =
                                format!("`{flag}` has no literal default (none, or computed)")
                        }
                    }
                }
            }
            None => tried.push(format!("cli `{flag}`: no add_argument declares it")),
        }
    }
}

/// The `--shape-argnames` channel: a pytest target parametrizes exactly `names`.
fn find_pytest(
    sources: &[PySource],
    runner: &str,
    names: &[String],
    tried: &mut Vec<String>,
    out: &mut ChannelSearch,
) {
    let joined = names.join(",");
    if runner != "pytest" {
        tried.push(format!(
            "pytest `{joined}`: the target runs under {runner}, not pytest"
        ));
    } else {
        let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
        want.sort_unstable();
        let p = sources.iter().flat_map(|s| s.parametrizes()).find(|p| {
            let mut got: Vec<&str> = p.argnames.iter().map(String::as_str).collect();
            got.sort_unstable();
            got == want
        });
        match p {
            Some(p) => {
                tried.push(format!(
                    "pytest `{joined}`: bound by @pytest.mark.parametrize on `{}` at {}",
                    p.function, p.location
                ));
                if out.channel.is_none() {
                    out.channel = Some(Channel::Pytest(names.to_vec()));
                    match &p.rows {
                        Some(rows) => {
                            // Reorder each row's fields to the requested argname order.
                            let order: Vec<usize> = names
                                .iter()
                                .filter_map(|n| p.argnames.iter().position(|a| a == n))
                                .collect();
                            let cells = rows
                                .iter()
                                .map(|r| match r.items() {
                                    Some(items) if items.len() == p.argnames.len() => {
                                        normalize_cell(
                                            &order
                                                .iter()
                                                .map(|&i| value_token(&items[i]))
                                                .collect::<Vec<_>>()
                                                .join(","),
                                        )
                                    }
                                    _ => normalize_cell(&value_token(r)),
                                })
                                .collect();
                            out.defaults = Some(cells);
                            out.defaults_reason =
                                format!("compared with the parametrize rows at {}", p.location);
                        }
                        None => out.defaults_reason = "the parametrize rows are not literal".into(),
                    }
                }
            }
            None => tried.push(format!(
                "pytest `{joined}`: no @pytest.mark.parametrize binds exactly these names"
            )),
        }
    }
}

/// `adds-coverage`, `duplicates-target-defaults` or `unknown` for `cells` against `defaults`.
pub fn independence(cells: &[String], defaults: Option<&[String]>) -> &'static str {
    match defaults {
        None => "unknown",
        Some(d) => {
            let d: Vec<String> = d.iter().map(|c| normalize_cell(c)).collect();
            if cells.iter().any(|c| !d.contains(&normalize_cell(c))) {
                "adds-coverage"
            } else {
                "duplicates-target-defaults"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(text: &str) -> Vec<PySource> {
        vec![PySource::parse("t.py", text).unwrap()]
    }

    #[test]
    fn env_channel_and_independence() {
        let s = src("import os\nSH = os.getenv('SHAPES', '4,8;5,7')\ndef test_a():\n    pass\n");
        let f = find(&s, "pytest", Some("SHAPES"), None, None);
        assert_eq!(f.channel, Some(Channel::Env("SHAPES".into())));
        assert_eq!(
            f.defaults.as_deref(),
            Some(&["4,8".to_string(), "5,7".to_string()][..])
        );
        assert_eq!(
            independence(&["4,8".into()], f.defaults.as_deref()),
            "duplicates-target-defaults"
        );
        assert_eq!(
            independence(&["4,9".into()], f.defaults.as_deref()),
            "adds-coverage"
        );
        assert_eq!(independence(&["4,9".into()], None), "unknown");
        let f = find(&s, "pytest", Some("OTHER"), None, None);
        assert!(f.channel.is_none());
        assert!(f.reason.contains("never read"), "{}", f.reason);
    }

    #[test]
    fn cli_needs_a_script_and_argnames_need_pytest() {
        let s = src(
            "import argparse\np = argparse.ArgumentParser()\np.add_argument('--shapes', nargs='+', default=['4,8'])\n",
        );
        let f = find(&s, "script", None, Some("--shapes"), None);
        assert_eq!(
            f.channel,
            Some(Channel::Cli {
                flag: "--shapes".into(),
                list_default: true
            })
        );
        assert!(
            find(&s, "pytest", None, Some("--shapes"), None)
                .channel
                .is_none()
        );
        let t = src(
            "import pytest\n@pytest.mark.parametrize('N,M', [(8, 4), (7, 5)])\ndef test_k(M, N):\n    pass\n",
        );
        let names = vec!["M".to_string(), "N".to_string()];
        let f = find(&t, "pytest", None, None, Some(&names));
        assert_eq!(f.defaults.unwrap(), vec!["4,8", "5,7"]);
        let (env, _) = Channel::Pytest(names).hand_over(&["3,9".into()]);
        assert_eq!(env[1].1, "[[3,9]]");
    }
}
