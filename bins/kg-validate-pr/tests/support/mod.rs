//! Test support: builds the fixture kernel repository (`fixtures/validate/base`) as a git repo
//! under a temp dir, turns a case's head edits into the PR patch, resets the worktree to base,
//! runs `kg-validate-pr`, and fingerprints the worktree byte for byte.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    dead_code
)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sha2_free::sha256_hex;

pub const BIN: &str = env!("CARGO_BIN_EXE_kg-validate-pr");
pub const FAKE_UUID: &str = "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

/// Minimal SHA-256 through kg-contract (no extra dependency).
mod sha2_free {
    pub fn sha256_hex(b: &[u8]) -> String {
        kg_contract::io::sha256_hex(b)
    }
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// The interpreter the tests use: `KG_TEST_PYTHON`, `<workspace>/.venv/bin/python`, `python3`.
/// Panics when it cannot import numpy and pytest (and torch and triton with `need_torch`): a
/// case that cannot run fails, it never passes by returning early.
pub fn python(need_torch: bool) -> PathBuf {
    let p = std::env::var_os("KG_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| Some(workspace().join(".venv/bin/python")).filter(|p| p.is_file()))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let mods = if need_torch {
        "numpy, pytest, torch, triton"
    } else {
        "numpy, pytest"
    };
    let ok = Command::new(&p)
        .args(["-c", &format!("import {mods}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "`{}` cannot import {mods}; run `cargo xtask setup` or set KG_TEST_PYTHON",
        p.display()
    );
    p
}

/// A head edit.
#[derive(Clone)]
pub enum Edit {
    /// Replace exactly one occurrence of `old` with `new` in a file.
    Replace(&'static str, &'static str, &'static str),
    /// Write a file (new or replaced).
    Write(&'static str, String),
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub patch: PathBuf,
    pub out: PathBuf,
    pub locks: PathBuf,
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            if e.file_name() == "__pycache__" {
                continue;
            }
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn commit_all(repo: &git2::Repository, msg: &str) -> git2::Oid {
    let mut idx = repo.index().unwrap();
    idx.add_all(["*"], git2::IndexAddOption::DEFAULT, None)
        .unwrap();
    idx.write().unwrap();
    let tree = repo.find_tree(idx.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("kg test", "kg@test").unwrap();
    let parents: Vec<git2::Commit> = repo
        .head()
        .ok()
        .and_then(|h| h.peel_to_commit().ok())
        .into_iter()
        .collect();
    let refs: Vec<&git2::Commit> = parents.iter().collect();
    repo.commit(Some("HEAD"), &sig, &sig, msg, &tree, &refs)
        .unwrap()
}

fn apply_edits(root: &Path, edits: &[Edit]) {
    for e in edits {
        match e {
            Edit::Replace(path, old, new) => {
                let p = root.join(path);
                let text = std::fs::read_to_string(&p).unwrap();
                assert_eq!(
                    text.matches(old).count(),
                    1,
                    "`{old}` must occur once in {path}"
                );
                std::fs::write(&p, text.replace(old, new)).unwrap();
            }
            Edit::Write(path, content) => {
                let p = root.join(path);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, content).unwrap();
            }
        }
    }
}

impl Fixture {
    /// Base commit from the fixture tree; the patch is base → base + `edits`. With `drift`, a
    /// second commit (base + `drift`) becomes the worktree's HEAD, so the patch may conflict.
    pub fn new(edits: &[Edit], drift: &[Edit]) -> Fixture {
        Fixture::with_base(&[], edits, drift)
    }

    /// [`Fixture::new`] with `base_edits` applied to the fixture tree before the base commit.
    pub fn with_base(base_edits: &[Edit], edits: &[Edit], drift: &[Edit]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repo_dir = dir.path().join("repo");
        copy_tree(&workspace().join("fixtures/validate/base"), &repo_dir);
        apply_edits(&repo_dir, base_edits);
        let repo = git2::Repository::init(&repo_dir).unwrap();
        let base = commit_all(&repo, "base");
        apply_edits(&repo_dir, edits);
        let head = commit_all(&repo, "head");
        let base_tree = repo.find_commit(base).unwrap().tree().unwrap();
        let head_tree = repo.find_commit(head).unwrap().tree().unwrap();
        let diff = repo
            .diff_tree_to_tree(Some(&base_tree), Some(&head_tree), None)
            .unwrap();
        let mut buf = Vec::new();
        diff.print(git2::DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                buf.push(line.origin() as u8);
            }
            buf.extend_from_slice(line.content());
            true
        })
        .unwrap();
        let patch = dir.path().join("pr.patch");
        std::fs::write(&patch, &buf).unwrap();
        // Back to base: move HEAD and force the tree, then drift if asked.
        let base_commit = repo.find_commit(base).unwrap();
        repo.reset(base_commit.as_object(), git2::ResetType::Hard, None)
            .unwrap();
        if !drift.is_empty() {
            apply_edits(&repo_dir, drift);
            commit_all(&repo, "drift");
        }
        let locks = dir.path().join("locks");
        let out = dir.path().join("out/validation_report.json");
        let scenario = serde_json::json!({
            "devices": [{
                "uuid": FAKE_UUID,
                "pci_bus_id": "0000:19:00.0",
                "name": "Fake H200",
                "arch": "sm_90",
                "runtime_index": 0,
                "memory_total_bytes": 150_000_000_000u64,
                "samples": [{"activity_pct": 0.0, "memory_used_bytes": 0, "memory_free_bytes": 140_000_000_000u64}]
            }]
        });
        std::fs::write(dir.path().join("scenario.json"), scenario.to_string()).unwrap();
        Fixture {
            repo: repo_dir,
            patch,
            out,
            locks,
            dir,
        }
    }

    /// Every path under the worktree except `.git`, with type, mode and content hash.
    pub fn fingerprint(&self) -> BTreeMap<String, String> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                if rel == ".git" {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&p).unwrap();
                if meta.is_dir() {
                    out.insert(rel, format!("dir {:o}", meta.permissions().mode()));
                    walk(root, &p, out);
                } else {
                    let bytes = std::fs::read(&p).unwrap();
                    out.insert(
                        rel,
                        format!(
                            "file {:o} {}",
                            meta.permissions().mode(),
                            sha256_hex(&bytes)
                        ),
                    );
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(&self.repo, &self.repo, &mut out);
        out
    }

    /// The command with the fixture's environment; `gpu`: fake backend, else none (NO_GPU).
    pub fn command(&self, python: &Path, gpu: bool, args: &[&str]) -> Command {
        self.command_with(BIN, python, gpu, Some(&self.out), args)
    }

    /// [`Fixture::command`] through `program` (the binary or a shim), with `--out` only when
    /// `out` is given (else the validator's default).
    pub fn command_with(
        &self,
        program: impl AsRef<std::ffi::OsStr>,
        python: &Path,
        gpu: bool,
        out: Option<&Path>,
        args: &[&str],
    ) -> Command {
        let mut c = Command::new(program);
        c.arg("--repo")
            .arg(&self.repo)
            .arg("--patch")
            .arg(&self.patch);
        if let Some(out) = out {
            c.arg("--out").arg(out);
        }
        c.arg("--python")
            .arg(python)
            .args(args)
            .env("KG_GPU_LOCK_DIR", &self.locks)
            .env("KG_VALIDATE_PICK_SAMPLES", "1")
            .env("KG_VALIDATE_PICK_INTERVAL_S", "0")
            // The product default, best of three interleaved base/head runs per cell: with two,
            // a burst of load on a shared CI host can read a neutral change as a regression.
            .env("PERF_REPEAT", "3")
            .env("TIMEOUT", "300")
            .env("TRITON_INTERPRET", "1")
            .env_remove("PYTHON_BIN")
            .env_remove("PICKER")
            .env_remove("CUDA_VISIBLE_DEVICES");
        if gpu {
            c.env("KG_GPU_BACKEND", "fake")
                .env("KG_GPU_FAKE", self.dir.path().join("scenario.json"));
        } else {
            c.env("KG_GPU_BACKEND", "none");
        }
        c
    }

    /// Runs to completion; returns the output and the report.
    pub fn run(&self, python: &Path, gpu: bool, args: &[&str]) -> (Output, serde_json::Value) {
        let out = self.command(python, gpu, args).output().unwrap();
        let text = std::fs::read_to_string(&self.out).unwrap_or_else(|e| {
            panic!(
                "no report ({e}); stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out, serde_json::from_str(&text).unwrap())
    }

    /// Whether the fake device's L1 lock is free now.
    pub fn lock_free(&self) -> bool {
        let path =
            kg_gpu::lock::lock_path(&self.locks, FAKE_UUID, kg_gpu::lock::Level::L1Ownership);
        match std::fs::File::open(&path) {
            Err(_) => true,
            Ok(f) => f.try_lock().is_ok(),
        }
    }
}

pub fn stage<'a>(r: &'a serde_json::Value, name: &str) -> &'a str {
    r["stages"][name]["status"].as_str().unwrap_or("<missing>")
}

pub fn severities(r: &serde_json::Value) -> Vec<(String, String)> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["severity"].as_str().unwrap().to_string(),
                f["stage"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Pretty context for assertion messages.
pub fn ctx(out: &Output, r: &serde_json::Value) -> String {
    format!(
        "verdict {} ({})\nstages: {}\nfindings: {}\nselection: {}\nstderr: {}",
        r["verdict"],
        r["verdict_reason"],
        serde_json::to_string(
            &r["stages"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), format!("{}: {}", v["status"], v["note"])))
                .collect::<Vec<_>>()
        )
        .unwrap(),
        r["findings"],
        r["test_selection"],
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Validates a JUnit file against `docs/schemas/junit.xsd` with xmllint (libxml2-utils;
/// `.ci/run` installs it).
pub fn junit_is_valid(path: &Path) {
    let schema = workspace().join("docs/schemas/junit.xsd");
    let o = std::process::Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!("xmllint is needed to validate JUnit files (apt-get install libxml2-utils): {e}")
        });
    assert!(
        o.status.success(),
        "{} does not validate against {}: {}",
        path.display(),
        schema.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}
