//! What the caller asks for: the seed's flags ([`Options`]) and the host settings it reads from
//! the environment ([`HostSettings`]), validated before anything runs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::env;
use crate::error::{GridCellError, ValidateError};

/// `--runner`: force a runner, or let structural selection decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunnerChoice {
    /// Structural selection.
    Auto,
    /// pytest.
    Pytest,
    /// `python FILE` under the validator's runpy runner.
    Script,
    /// Run nothing.
    None,
}

impl std::str::FromStr for RunnerChoice {
    type Err = ValidateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(RunnerChoice::Auto),
            "pytest" => Ok(RunnerChoice::Pytest),
            "script" => Ok(RunnerChoice::Script),
            "none" => Ok(RunnerChoice::None),
            other => Err(ValidateError::usage(
                "--runner",
                format!("`{other}` is not pytest, script, none or auto"),
            )),
        }
    }
}

/// One `--axis NAME=FLAG:v1;v2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisSpec {
    /// Axis name.
    pub name: String,
    /// The target's CLI flag.
    pub flag: String,
    /// Values, in order.
    pub values: Vec<String>,
}

impl std::str::FromStr for AxisSpec {
    type Err = ValidateError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| {
            ValidateError::usage(
                "--axis",
                format!(
                    "`{s}`: {why}; expected NAME=FLAG:v1;v2 (e.g. `num_heads=--num-heads:16;32`)"
                ),
            )
        };
        let (name, rest) = s.split_once('=').ok_or_else(|| bad("no `=`"))?;
        let (flag, values) = rest
            .split_once(':')
            .ok_or_else(|| bad("no `:` after the flag"))?;
        let values: Vec<String> = values
            .split(';')
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(String::from)
            .collect();
        if name.trim().is_empty() || !flag.starts_with('-') || values.is_empty() {
            return Err(bad(
                "empty name, a flag not starting with `-`, or no values",
            ));
        }
        Ok(AxisSpec {
            name: name.trim().to_string(),
            flag: flag.trim().to_string(),
            values,
        })
    }
}

/// Host settings: environment variables that describe the machine, not the PR.
#[derive(Debug, Clone, PartialEq)]
pub struct HostSettings {
    /// `PYLIB`: runtime modules living outside the checkout (prepended to `PYTHONPATH`).
    pub pylib: Option<PathBuf>,
    /// `PYTHON_BIN`.
    pub python_bin: Option<PathBuf>,
    /// `PICKER`: an external idle-GPU picker (`--samples N --interval S --quiet`, prints an
    /// index, exits 0/1/2/3 as the seed's picker).
    pub picker: Option<PathBuf>,
    /// `TIMEOUT`: per-target budget (default 1800 s).
    pub timeout: Duration,
    /// `PERF_TIMEOUT`: per perf run budget (default `TIMEOUT`).
    pub perf_timeout: Duration,
    /// `PERF_REPEAT` (default 3).
    pub perf_repeat: u32,
    /// `PERF_THRESHOLD` (default 0.95, in (0, 2]).
    pub perf_threshold: f64,
    /// `PERF_MIN_ROWS` (default 3).
    pub perf_min_rows: u32,
    /// `PERF_CONTROL_TOL` (default 0.10).
    pub perf_control_tol: f64,
    /// `KG_VALIDATE_PICK_SAMPLES` (default 10).
    pub pick_samples: u32,
    /// `KG_VALIDATE_PICK_INTERVAL_S` (default 1).
    pub pick_interval: Duration,
}

fn parse_num<T: std::str::FromStr>(name: &str, raw: &str) -> Result<T, ValidateError> {
    raw.trim().parse::<T>().map_err(|_| {
        ValidateError::usage(
            name,
            format!("`{raw}` is not a number; unset it to use the default"),
        )
    })
}

impl HostSettings {
    /// Reads the settings through `get` (the process environment in the binary, a map in tests).
    pub fn from_lookup(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<HostSettings, ValidateError> {
        let nonempty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let secs = |k: &str, default: f64| -> Result<Duration, ValidateError> {
            let v = match nonempty(k) {
                Some(raw) => parse_num::<f64>(k, &raw)?,
                None => default,
            };
            if !(v.is_finite() && v >= 0.0) {
                return Err(ValidateError::usage(
                    k,
                    format!("{v} is not a non-negative number of seconds"),
                ));
            }
            Ok(Duration::from_secs_f64(v))
        };
        let timeout = secs(env::TIMEOUT, 1800.0)?;
        let perf_timeout = match nonempty(env::PERF_TIMEOUT) {
            Some(_) => secs(env::PERF_TIMEOUT, 0.0)?,
            None => timeout,
        };
        let perf_repeat = match nonempty(env::PERF_REPEAT) {
            Some(raw) => parse_num::<u32>(env::PERF_REPEAT, &raw)?,
            None => 3,
        };
        if perf_repeat == 0 {
            return Err(ValidateError::usage(env::PERF_REPEAT, "must be at least 1"));
        }
        let perf_threshold = match nonempty(env::PERF_THRESHOLD) {
            Some(raw) => parse_num::<f64>(env::PERF_THRESHOLD, &raw)?,
            None => 0.95,
        };
        if !(perf_threshold > 0.0 && perf_threshold <= 2.0) {
            return Err(ValidateError::usage(
                env::PERF_THRESHOLD,
                format!(
                    "{perf_threshold} is outside (0, 2]; a head/base ratio threshold such as 0.95"
                ),
            ));
        }
        let perf_min_rows = match nonempty(env::PERF_MIN_ROWS) {
            Some(raw) => parse_num::<u32>(env::PERF_MIN_ROWS, &raw)?,
            None => 3,
        }
        .max(1);
        let perf_control_tol = match nonempty(env::PERF_CONTROL_TOL) {
            Some(raw) => parse_num::<f64>(env::PERF_CONTROL_TOL, &raw)?,
            None => 0.10,
        };
        let pick_samples = match nonempty(env::KG_VALIDATE_PICK_SAMPLES) {
            Some(raw) => parse_num::<u32>(env::KG_VALIDATE_PICK_SAMPLES, &raw)?,
            None => 10,
        }
        .max(1);
        Ok(HostSettings {
            pylib: nonempty(env::PYLIB).map(PathBuf::from),
            python_bin: nonempty(env::PYTHON_BIN).map(PathBuf::from),
            picker: nonempty(env::PICKER).map(PathBuf::from),
            timeout,
            perf_timeout,
            perf_repeat,
            perf_threshold,
            perf_min_rows,
            perf_control_tol,
            pick_samples,
            pick_interval: secs(env::KG_VALIDATE_PICK_INTERVAL_S, 1.0)?,
        })
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<HostSettings, ValidateError> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }
}

/// Everything describing the PR and the run (the seed's flags).
#[derive(Debug, Clone)]
pub struct Options {
    /// `--repo`: the clean base worktree.
    pub repo: PathBuf,
    /// `--target`: a file or `path::node`.
    pub target: String,
    /// `--patch`.
    pub patch: Option<PathBuf>,
    /// `--head-sha`.
    pub head_sha: Option<String>,
    /// `--expected-route module:function`.
    pub expected_route: Option<String>,
    /// `--shape-vars`.
    pub shape_vars: Vec<String>,
    /// `--shape-env`.
    pub shape_env: Option<String>,
    /// `--shape-arg`.
    pub shape_arg: Option<String>,
    /// `--shape-argnames`.
    pub shape_argnames: Option<Vec<String>>,
    /// `--grid` cells (split on `;`).
    pub grid: Vec<String>,
    /// `--grid-novelty WHY`: the caller's reason the grid adds coverage, for channels that
    /// expose no default to compare against (`unknown` independence only; evidence of a
    /// duplicate is never overridden).
    pub grid_novelty: Option<String>,
    /// `--axis`.
    pub axes: Vec<AxisSpec>,
    /// `--runner`.
    pub runner: RunnerChoice,
    /// `--runtime-module`.
    pub runtime_module: Option<String>,
    /// `--perf-control-column`.
    pub perf_control_column: Option<String>,
    /// `--tol-table` as `(dtype, tolerance)`.
    pub tol_table: Vec<(String, f64)>,
    /// `--perf-args`, split like a shell would.
    pub perf_args: Option<Vec<String>>,
    /// `--no-perf`.
    pub no_perf: bool,
    /// `--label`.
    pub label: String,
    /// `--out`.
    pub out: PathBuf,
    /// `--python` (else `PYTHON_BIN`, else `.venv/bin/python`, else `python3`).
    pub python: Option<PathBuf>,
    /// Host settings.
    pub host: HostSettings,
}

/// Splits `--grid "a,b;c,d"` into trimmed cells.
pub fn parse_grid(raw: &str) -> Vec<String> {
    raw.split(';')
        .map(|c| c.split(',').map(str::trim).collect::<Vec<_>>().join(","))
        .filter(|c| !c.is_empty())
        .collect()
}

/// Parses `--tol-table f32=1e-5,f16=2e-3`.
pub fn parse_tol_table(raw: &str) -> Result<Vec<(String, f64)>, ValidateError> {
    let mut out = Vec::new();
    for part in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            ValidateError::usage(
                "--tol-table",
                format!("`{part}` is not DTYPE=TOL (e.g. f32=1e-5)"),
            )
        })?;
        let v: f64 = v.trim().parse().map_err(|_| {
            ValidateError::usage("--tol-table", format!("`{v}` in `{part}` is not a number"))
        })?;
        out.push((crate::shapes::normalize_token(k.trim()), v));
    }
    Ok(out)
}

/// Parses `--perf-args` the way a POSIX shell splits words.
pub fn parse_perf_args(raw: &str) -> Result<Vec<String>, ValidateError> {
    let words = shlex::split(raw).ok_or_else(|| {
        ValidateError::usage("--perf-args", format!("`{raw}` has unbalanced quotes"))
    })?;
    if words.is_empty() {
        return Err(ValidateError::usage(
            "--perf-args",
            "is empty; name the benchmark script",
        ));
    }
    Ok(words)
}

/// Checks that every `--grid` cell gives exactly one non-empty value per `--shape-argnames`
/// name, so a grid the pytest channel cannot hand over is refused before anything runs.
pub fn check_grid_arity(cells: &[String], argnames: &[String]) -> Result<(), GridCellError> {
    let n = argnames.len();
    if n == 0 {
        return Ok(());
    }
    for (i, cell) in cells.iter().enumerate() {
        let values: Vec<&str> = cell.split(',').map(str::trim).collect();
        let index = i + 1;
        if values.len() < n {
            return Err(GridCellError::TooFew {
                index,
                cell: cell.clone(),
                values: values.len(),
                argname: argnames[values.len()].clone(),
                argnames: argnames.to_vec(),
                suggested: None,
            });
        }
        if values.len() > n {
            // `16,33,5,130` for two argnames is usually a forgotten `;`: offer the regrouping.
            let suggested = values.len().is_multiple_of(n).then(|| {
                cells
                    .iter()
                    .enumerate()
                    .map(|(j, c)| {
                        if j == i {
                            values
                                .chunks(n)
                                .map(|ch| ch.join(","))
                                .collect::<Vec<_>>()
                                .join(";")
                        } else {
                            c.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(";")
            });
            return Err(GridCellError::TooMany {
                index,
                cell: cell.clone(),
                values: values.len(),
                argname: argnames[n - 1].clone(),
                argnames: argnames.to_vec(),
                suggested,
            });
        }
        if let Some(k) = values.iter().position(|v| v.is_empty()) {
            return Err(GridCellError::EmptyValue {
                index,
                cell: cell.clone(),
                argname: argnames[k].clone(),
                argnames: argnames.to_vec(),
            });
        }
    }
    Ok(())
}

impl Options {
    /// Checks combinations that cannot work, before anything is touched.
    pub fn check(&self) -> Result<(), ValidateError> {
        if self.target.trim().is_empty() {
            return Err(ValidateError::usage(
                "--target",
                "is empty; name a test file or `path::node`",
            ));
        }
        if let Some(route) = &self.expected_route {
            let ok = route
                .split_once(':')
                .is_some_and(|(m, f)| !m.is_empty() && !f.is_empty() && !f.contains(':'));
            if !ok {
                return Err(ValidateError::usage(
                    "--expected-route",
                    format!("`{route}` is not `module:function` (e.g. `kern.softmax:softmax`)"),
                ));
            }
        }
        if let Some(sha) = &self.head_sha
            && !(sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit()))
        {
            return Err(ValidateError::usage(
                "--head-sha",
                format!("`{sha}` is not a 40-hex commit id; pass the exact PR head OID or omit it"),
            ));
        }
        if let Some(names) = &self.shape_argnames {
            if let Some(bad) = names.iter().find(|n| {
                n.trim().is_empty() || names.iter().filter(|m| m.trim() == n.trim()).count() > 1
            }) {
                return Err(ValidateError::usage(
                    "--shape-argnames",
                    format!(
                        "`{}` has an empty or repeated name (`{bad}`); name each parametrize argument once, e.g. `M,N`",
                        names.join(",")
                    ),
                ));
            }
            check_grid_arity(&self.grid, names)?;
        }
        if !self.grid.is_empty()
            && self.shape_env.is_none()
            && self.shape_arg.is_none()
            && self.shape_argnames.is_none()
        {
            tracing::warn!(
                "--grid given without --shape-env, --shape-arg or --shape-argnames: no channel can carry it"
            );
        }
        Ok(())
    }

    /// The target file (the part before `::`), relative to the repository.
    pub fn target_file(&self) -> &str {
        self.target.split("::").next().unwrap_or(&self.target)
    }

    /// Whether the target names a pytest node (`path::node`).
    pub fn target_is_node(&self) -> bool {
        self.target.contains("::")
    }
}

/// Resolves the interpreter through [`kg_python`]: `--python`, `PYTHON_BIN`,
/// `.venv/bin/python` in the repository (or an ancestor), then in the current directory (or an
/// ancestor), then `python3` on `PATH`.
pub fn resolve_python(
    explicit: Option<&Path>,
    python_bin: Option<&Path>,
    repo: &Path,
) -> Result<PathBuf, ValidateError> {
    let request = kg_python::PythonRequest::from_flag(explicit);
    let env_value = python_bin.map(|p| p.to_string_lossy());
    let cwd = std::env::current_dir().ok();
    let mut roots = vec![repo];
    roots.extend(cwd.as_deref());
    Ok(kg_python::find_python_in(&request, &roots, env_value.as_deref())?.path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn host(pairs: &[(&str, &str)]) -> Result<HostSettings, ValidateError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HostSettings::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn host_defaults_match_the_seed() {
        let h = host(&[]).unwrap();
        assert_eq!(h.timeout, Duration::from_secs(1800));
        assert_eq!(h.perf_timeout, h.timeout);
        assert_eq!(h.perf_repeat, 3);
        assert!((h.perf_threshold - 0.95).abs() < 1e-12);
        assert_eq!(h.perf_min_rows, 3);
        assert!((h.perf_control_tol - 0.10).abs() < 1e-12);
    }

    #[test]
    fn perf_threshold_must_be_in_zero_two() {
        assert!(host(&[("PERF_THRESHOLD", "0")]).is_err());
        assert!(host(&[("PERF_THRESHOLD", "2.5")]).is_err());
        assert!(host(&[("PERF_THRESHOLD", "abc")]).is_err());
        assert!(host(&[("PERF_THRESHOLD", "2")]).is_ok());
        let h = host(&[("TIMEOUT", "60")]).unwrap();
        assert_eq!(h.perf_timeout, Duration::from_secs(60));
    }

    #[test]
    fn axis_and_grid_parse() {
        let a: AxisSpec = "num_heads=--num-heads:16;32".parse().unwrap();
        assert_eq!(a.flag, "--num-heads");
        assert_eq!(a.values, vec!["16", "32"]);
        assert!("nope".parse::<AxisSpec>().is_err());
        assert!("n=flag:1".parse::<AxisSpec>().is_err());
        assert_eq!(
            parse_grid("64, 2048,f32; 64,2000,f32;"),
            vec!["64,2048,f32", "64,2000,f32"]
        );
        let t = parse_tol_table("f32=1e-5,bf16=1e-2").unwrap();
        assert_eq!(t[0], ("float32".to_string(), 1e-5));
        assert!(parse_tol_table("f32:1").is_err());
    }

    #[test]
    fn grid_cells_must_fit_the_argnames() {
        let names = vec!["M".to_string(), "N".to_string()];
        assert_eq!(check_grid_arity(&parse_grid("16,33;5,130"), &names), Ok(()));
        let e = check_grid_arity(&parse_grid("16,33,5,130"), &names).unwrap_err();
        assert!(
            matches!(&e, GridCellError::TooMany { index: 1, values: 4, argname, suggested: Some(s), .. }
                if argname == "N" && s == "16,33;5,130"),
            "{e:?}"
        );
        let e = check_grid_arity(&parse_grid("4,8;16;5,130"), &names).unwrap_err();
        assert!(
            matches!(&e, GridCellError::TooFew { index: 2, values: 1, argname, .. } if argname == "N"),
            "{e:?}"
        );
        let e = check_grid_arity(&parse_grid("1,2,3"), &names).unwrap_err();
        assert!(
            matches!(
                &e,
                GridCellError::TooMany {
                    suggested: None,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = check_grid_arity(&parse_grid(",33"), &names).unwrap_err();
        assert!(
            matches!(&e, GridCellError::EmptyValue { argname, .. } if argname == "M"),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains("--grid '1,2;3,4'"), "{text}");
    }

    #[test]
    fn python_comes_from_the_repository_venv_before_the_current_directory() {
        let repo = tempfile::tempdir().unwrap();
        let bin = repo.path().join(".venv/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("python"), "").unwrap();
        assert_eq!(
            resolve_python(None, None, repo.path()).unwrap(),
            bin.join("python")
        );
        let err = resolve_python(Some(Path::new("/no/such/python")), None, repo.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--python `/no/such/python`"), "{err}");
    }
}
