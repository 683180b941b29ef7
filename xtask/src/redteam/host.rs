//! The host outside a case's scratch directory that a candidate can still reach (Integrity
//! II): the interpreter's start-up files, the kg-bench binary, litter in the host's temp
//! directories; what the run plants there (secrets, cache decoys) and what it restores.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};

use super::Opts;

/// Variables the runner plants in kg-bench's environment for every case, each with a random
/// value per run: a case fails if a value shows up in any trace log or output.
pub(super) const SECRET_VARS: [&str; 2] = ["KG_REDTEAM_SECRET", "AWS_SECRET_ACCESS_KEY"];

/// Files a candidate may leave in the host's temp directories (`host_tmp_litter`).
const LITTER_PREFIX: &str = "kg-redteam-litter-";
pub(super) const LITTER_DIRS: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// Another solution's cache directories, planted by the runner in the run's kernelgate cache
/// so that a candidate writing into other solutions' caches has something to hit.
pub(super) const DECOY: &str = "kg-redteam-decoy";

/// The interpreter kg-bench will use: the one this runner passes as `--python` (ours, else
/// `.venv/bin/python` where it exists), else kg-bench's own fallbacks (`$PYTHON_BIN`, python3).
pub(super) fn interpreter(root: &Path, opts: &Opts) -> PathBuf {
    if let Some(p) = &opts.python {
        return p.clone();
    }
    let venv = root.join(".venv/bin/python");
    if venv.is_file() {
        return venv;
    }
    if let Some(p) = std::env::var_os("PYTHON_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from("python3")
}

/// The directories a Python start-up reads `.pth`, `sitecustomize` and `usercustomize` from,
/// as the interpreter itself reports them: `sys.path`, `site.getsitepackages()` and
/// `site.getusersitepackages()` (the user site even where it does not exist yet); also its
/// base installation's site-packages and the system interpreters' directories
/// (`/usr/lib/python3*`, `/usr/lib/python3/dist-packages`, `/usr/local/lib/python3*/*-packages`),
/// which a candidate that can write them reaches just as well.
pub(super) fn site_dirs(python: &Path) -> Result<Vec<PathBuf>> {
    let code = "import glob, json, os, site, sys\nd = list(sys.path)\ntry:\n    d += site.getsitepackages()\nexcept Exception:\n    pass\ntry:\n    d.append(site.getusersitepackages())\nexcept Exception:\n    pass\nv = 'python%d.%d' % sys.version_info[:2]\nd.append(os.path.join(sys.base_prefix, 'lib', v, 'site-packages'))\nfor g in ('/usr/lib/python3*', '/usr/lib/python3/dist-packages', '/usr/local/lib/python3*/dist-packages', '/usr/local/lib/python3*/site-packages'):\n    d += sorted(glob.glob(g))\nprint(json.dumps(d))";
    let out = Command::new(python)
        .args(["-c", code])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("failed to start `{}`", python.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` could not list its site directories: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let list: Vec<String> = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("`{}`: site directories not JSON", python.display()))?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in list {
        if d.is_empty() || d.ends_with(".zip") {
            continue;
        }
        let p = PathBuf::from(d);
        if !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    Ok(dirs)
}

fn is_startup_file(name: &str) -> bool {
    name.ends_with(".pth") || name == "sitecustomize.py" || name == "usercustomize.py"
}

/// Path -> contents of every start-up file directly in `dirs` (a missing directory has none).
pub(super) fn startup_files(dirs: &[PathBuf]) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_startup_file(&name) {
                continue;
            }
            let p = e.path();
            if let Ok(bytes) = std::fs::read(&p) {
                out.insert(p, bytes);
            }
        }
    }
    out
}

/// `+path`, `~path`, `-path` for start-up files added, changed, removed.
pub(super) fn files_diff(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => d.push(format!("+{}", k.display())),
            Some(b) if b != v => d.push(format!("~{}", k.display())),
            _ => {}
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            d.push(format!("-{}", k.display()));
        }
    }
    d
}

/// Puts the start-up files back as in `baseline`: added ones removed, changed or removed ones
/// rewritten. Returns what it restored.
pub(super) fn restore_files(
    baseline: &BTreeMap<PathBuf, Vec<u8>>,
    dirs: &[PathBuf],
) -> Vec<String> {
    let now = startup_files(dirs);
    let mut done = Vec::new();
    for p in now.keys() {
        if !baseline.contains_key(p) && std::fs::remove_file(p).is_ok() {
            done.push(format!("removed {}", p.display()));
        }
    }
    for (p, bytes) in baseline {
        // Through a symbolic link (Debian's sitecustomize.py points into /etc): the link stays.
        let target = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if now.get(p) != Some(bytes) && kg_contract::io::write_atomic(&target, bytes).is_ok() {
            done.push(format!("restored {}", p.display()));
        }
    }
    done
}

/// The kg-bench binary as the run started: checked after every case, restored at the end
/// where it was replaced by a copy with bytes appended (what `plant_startup_file` does).
pub(super) struct Binary {
    path: PathBuf,
    bytes: Vec<u8>,
    sha: String,
}

impl Binary {
    pub(super) fn read(path: &Path) -> Result<Binary> {
        let bytes =
            std::fs::read(path).with_context(|| format!("failed to read `{}`", path.display()))?;
        let sha = kg_contract::io::sha256_hex(&bytes);
        Ok(Binary {
            path: path.to_path_buf(),
            bytes,
            sha,
        })
    }

    /// What changed since the run started, if anything.
    pub(super) fn changed(&self) -> Option<String> {
        match std::fs::read(&self.path) {
            Ok(now) if kg_contract::io::sha256_hex(&now) == self.sha => None,
            Ok(now) => Some(format!(
                "kg-bench binary `{}` changed ({} -> {} bytes)",
                self.path.display(),
                self.bytes.len(),
                now.len()
            )),
            Err(e) => Some(format!(
                "kg-bench binary `{}` unreadable: {e}",
                self.path.display()
            )),
        }
    }

    /// Restores the binary if its new contents start with the old ones (an append, or a copy
    /// with a trailer); a wholly different file (a rebuild) is left alone and reported.
    pub(super) fn restore(&self) -> Option<String> {
        let now = std::fs::read(&self.path).ok()?;
        if now == self.bytes {
            return None;
        }
        if now.starts_with(&self.bytes) {
            let mode = std::fs::metadata(&self.path).ok().map(|m| m.permissions());
            let ok = kg_contract::io::write_atomic(&self.path, &self.bytes).is_ok();
            if let (true, Some(m)) = (ok, mode) {
                let _ = std::fs::set_permissions(&self.path, m);
            }
            return Some(format!(
                "{} `{}` (bytes appended by a case)",
                if ok { "restored" } else { "FAILED to restore" },
                self.path.display()
            ));
        }
        Some(format!(
            "`{}` differs from the run's start and was not restored (not an append)",
            self.path.display()
        ))
    }
}

/// Everything the run must put back however it ends: the interpreter's start-up files and the
/// kg-bench binary as they were when it started.
pub(super) struct Restore {
    pub(super) dirs: Vec<PathBuf>,
    pub(super) baseline: BTreeMap<PathBuf, Vec<u8>>,
    pub(super) binary: Option<Binary>,
}

impl Restore {
    /// Puts everything back as the run found it, saying what it restored.
    pub(super) fn now(&self) {
        let mut done = restore_files(&self.baseline, &self.dirs);
        if let Some(b) = &self.binary {
            done.extend(b.restore());
        }
        for d in done {
            eprintln!("redteam: {d}");
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        self.now();
    }
}

/// `kg-redteam-litter-*` entries in `dirs`.
pub(super) fn litter(dirs: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(LITTER_PREFIX) {
                    out.push(e.path());
                }
            }
        }
    }
    out.sort();
    out
}

pub(super) fn remove_litter(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
    }
}

pub(super) fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        return kg_contract::io::sha256_hex(format!("{t}-{}", std::process::id()).as_bytes())
            [..2 * n]
            .to_string();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}
