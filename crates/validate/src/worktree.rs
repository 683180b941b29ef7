//! The caller's worktree: checked clean, patched with libgit2, restored to exactly the state it
//! was received in.
//!
//! "Restored" means: every tracked file has its `HEAD` content and mode again (the tree was
//! verified clean, so `HEAD` *is* what was received), every untracked path is removed, and every
//! ignored path that was not there at the start is removed (caches a run left behind). The
//! index and `.git` are never written: the patch goes to the working directory only. Restoring
//! is idempotent and runs on every exit path: [`Worktree::restore`] explicitly, and `Drop` as a
//! backstop (errors, panics that unwind, and a signal turned into a normal return).
//!
//! The report inside the worktree: when `--out` is in the checkout at a path that is ignored,
//! or untracked where `git status` lists the file itself, that path and its logs directory are
//! the validator's own output ([`Worktree::set_own_output`]): not counted as dirty, never
//! removed on restore. Tracked paths and paths the patch touches are refused
//! ([`Worktree::output_location`]).
//!
//! Sparse checkouts: libgit2's status ignores the index's skip-worktree bit, so a path a
//! `git sparse-checkout` (or `git update-index --skip-worktree`) leaves out reads as deleted.
//! `git status` does not report such entries, and neither does [`Worktree::dirty`]; restore
//! never writes them back, and a patch that touches one is refused
//! ([`Worktree::outside_sparse_checkout`]), since it cannot be applied where the file is not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use git2::{
    ApplyLocation, ApplyOptions, Diff, IndexEntryExtendedFlag, Repository, Status, StatusOptions,
};

use crate::error::ValidateError;

/// What the patch touches, as read from the patch itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PatchFiles {
    /// Files in the patch (new path; old path for deletions), in order.
    pub all: Vec<String>,
    /// Files the patch creates.
    pub added: Vec<String>,
    /// Added lines per file (`+` lines), for scans that look only at new code.
    pub added_lines: Vec<(String, Vec<String>)>,
}

/// A worktree under validation.
pub struct Worktree {
    repo: Repository,
    root: PathBuf,
    base: String,
    patch: Option<Vec<u8>>,
    files: PatchFiles,
    ignored_at_start: BTreeSet<String>,
    skip_worktree: BTreeSet<String>,
    applied: bool,
    touched: bool,
    own_output: Vec<String>,
}

/// How a report path inside the worktree is kept out of the worktree's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputLocation {
    /// Git ignores the path.
    Ignored,
    /// Untracked, in a directory with tracked files, so `git status` lists just that path.
    Untracked,
}

impl std::fmt::Debug for Worktree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worktree")
            .field("root", &self.root)
            .field("base", &self.base)
            .field("applied", &self.applied)
            .finish()
    }
}

fn git_err(action: &str, repo: &Path) -> impl FnOnce(git2::Error) -> ValidateError {
    let action = action.to_string();
    let repo = repo.to_path_buf();
    move |e| ValidateError::Git {
        action,
        repo,
        message: e.message().to_string(),
    }
}

/// Why a worktree is not clean: the first few offending paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dirty(pub Vec<String>);

impl Worktree {
    /// Opens the repository whose working directory is `path` and reads the patch.
    pub fn open(path: &Path, patch: Option<&Path>) -> Result<Worktree, ValidateError> {
        let repo = Repository::open(path).map_err(git_err("open the git repository", path))?;
        let root = repo
            .workdir()
            .ok_or_else(|| {
                ValidateError::usage(
                    "--repo",
                    format!("`{}` is a bare repository; pass a worktree", path.display()),
                )
            })?
            .to_path_buf();
        let base = repo
            .head()
            .and_then(|h| h.peel_to_commit())
            .map(|c| c.id().to_string())
            .map_err(git_err("read HEAD", path))?;
        let patch = match patch {
            Some(p) => Some(std::fs::read(p).map_err(ValidateError::io("read the patch", p))?),
            None => None,
        };
        let skip_worktree = skip_worktree_entries(&repo, path)?;
        let mut wt = Worktree {
            repo,
            root,
            base,
            patch,
            files: PatchFiles::default(),
            ignored_at_start: BTreeSet::new(),
            skip_worktree,
            applied: false,
            touched: false,
            own_output: Vec::new(),
        };
        if let Some(bytes) = &wt.patch {
            wt.files = patch_files(bytes).map_err(git_err("parse the patch", path))?;
        }
        wt.ignored_at_start = wt.ignored()?;
        Ok(wt)
    }

    /// The working directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The base commit (HEAD).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The patch bytes.
    pub fn patch(&self) -> Option<&[u8]> {
        self.patch.as_deref()
    }

    /// What the patch touches.
    pub fn files(&self) -> &PatchFiles {
        &self.files
    }

    /// Whether the patch is applied now.
    pub fn is_applied(&self) -> bool {
        self.applied
    }

    fn statuses(&self, ignored: bool) -> Result<Vec<(String, Status)>, ValidateError> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true)
            .recurse_untracked_dirs(false)
            .include_ignored(ignored)
            .recurse_ignored_dirs(false)
            .exclude_submodules(true)
            .renames_head_to_index(false);
        let list = self
            .repo
            .statuses(Some(&mut opts))
            .map_err(git_err("read the worktree status", &self.root))?;
        let worktree_bits = Status::WT_NEW
            | Status::WT_MODIFIED
            | Status::WT_DELETED
            | Status::WT_TYPECHANGE
            | Status::WT_RENAMED
            | Status::WT_UNREADABLE;
        Ok(list
            .iter()
            .filter_map(|e| {
                let path = e.path().ok()?.to_string();
                let mut st = e.status();
                // As `git status`: the working copy of a skip-worktree entry is not compared.
                if self.skip_worktree.contains(&path) {
                    st.remove(worktree_bits);
                }
                // The report and its logs are ours; earlier runs' copies do not make it dirty.
                if self.own_output.contains(&path) {
                    return None;
                }
                (!st.is_empty()).then_some((path, st))
            })
            .collect())
    }

    /// Whether `out` (the report, relative to the root) and `logs` (its logs directory) may be
    /// written inside the worktree; `Err` says why not. Refused: tracked in the base commit,
    /// touched by the patch, under `.git`, or untracked in a directory without tracked files
    /// (git would list the whole directory as untracked, hiding anything else in it).
    pub fn output_location(&self, out: &str, logs: &str) -> Result<OutputLocation, String> {
        let under = |p: &str, dir: &str| p == dir || p.starts_with(&format!("{dir}/"));
        if under(out, ".git") || under(logs, ".git") {
            return Err("it is inside `.git`".into());
        }
        let tracked = self.tracked_files().map_err(|e| e.to_string())?;
        if let Some(t) = tracked.iter().find(|t| *t == out || under(t, logs)) {
            return Err(format!(
                "`{t}` is tracked, and the worktree must be handed back unchanged"
            ));
        }
        if let Some(p) = self.files.all.iter().find(|p| *p == out || under(p, logs)) {
            return Err(format!("the patch touches `{p}`"));
        }
        let ignored = |p: &str| self.repo.is_path_ignored(p).unwrap_or(false);
        if ignored(out) && ignored(logs) {
            return Ok(OutputLocation::Ignored);
        }
        let parent = out.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
        if parent.is_empty() || tracked.iter().any(|t| under(t, parent)) {
            return Ok(OutputLocation::Untracked);
        }
        Err(format!(
            "`{parent}/` holds no tracked file, so git would report the whole directory as untracked; add the path to `.gitignore`"
        ))
    }

    /// Marks the report and its logs directory (relative paths) as the validator's own
    /// output: never dirty, never removed by [`Worktree::restore`].
    pub fn set_own_output(&mut self, out: &str, logs: &str) {
        // libgit2 lists an untracked directory once, with a trailing slash.
        self.own_output = vec![out.to_string(), logs.to_string(), format!("{logs}/")];
        // Ignored directories the report will create (`reports/`) are listed as new ignored
        // paths, which restore would remove between phases, logs and all.
        let mut dir = Path::new(out).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            if !self.root.join(d).exists() {
                self.own_output.push(format!("{}/", d.to_string_lossy()));
            }
            dir = d.parent();
        }
    }

    /// Paths the index marks skip-worktree (left out by a sparse checkout).
    pub fn skip_worktree(&self) -> &BTreeSet<String> {
        &self.skip_worktree
    }

    /// Files the patch touches that the sparse checkout leaves out of the working directory.
    pub fn outside_sparse_checkout(&self) -> Vec<String> {
        self.files
            .all
            .iter()
            .filter(|p| self.skip_worktree.contains(p.as_str()))
            .cloned()
            .collect()
    }

    /// Every file of the base commit, by path.
    pub fn tracked_files(&self) -> Result<Vec<String>, ValidateError> {
        let tree = self
            .repo
            .head()
            .and_then(|h| h.peel_to_tree())
            .map_err(git_err("read the HEAD tree", &self.root))?;
        let mut out = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob)
                && let Ok(name) = entry.name()
            {
                out.push(format!("{dir}{name}"));
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(git_err("list the HEAD tree", &self.root))?;
        Ok(out)
    }

    fn ignored(&self) -> Result<BTreeSet<String>, ValidateError> {
        Ok(self
            .statuses(true)?
            .into_iter()
            .filter(|(_, s)| s.contains(Status::IGNORED))
            .map(|(p, _)| p)
            .collect())
    }

    /// Tracked changes and untracked files (ignored files do not count).
    pub fn dirty(&self) -> Result<Option<Dirty>, ValidateError> {
        let paths: Vec<String> = self
            .statuses(false)?
            .into_iter()
            .filter(|(_, s)| !s.is_empty() && !s.contains(Status::IGNORED))
            .map(|(p, _)| p)
            .collect();
        Ok(if paths.is_empty() {
            None
        } else {
            Some(Dirty(paths))
        })
    }

    /// Applies the patch to the working directory; `Err(message)` on a conflict (nothing is
    /// written then: libgit2 checks every hunk first).
    pub fn apply(&mut self) -> Result<Result<(), String>, ValidateError> {
        let Some(bytes) = &self.patch else {
            return Ok(Ok(()));
        };
        let diff = Diff::from_buffer(bytes).map_err(git_err("parse the patch", &self.root))?;
        let mut check = ApplyOptions::new();
        check.check(true);
        if let Err(e) = self
            .repo
            .apply(&diff, ApplyLocation::WorkDir, Some(&mut check))
        {
            return Ok(Err(e.message().to_string()));
        }
        self.touched = true;
        match self.repo.apply(&diff, ApplyLocation::WorkDir, None) {
            Ok(()) => {
                self.applied = true;
                Ok(Ok(()))
            }
            Err(e) => {
                // A partial write is possible only if the filesystem failed under us.
                self.restore()?;
                Ok(Err(e.message().to_string()))
            }
        }
    }

    /// Marks that runs happened (so the final restore also sweeps new ignored files).
    pub fn mark_touched(&mut self) {
        self.touched = true;
    }

    /// Puts the worktree back as received: tracked files from HEAD, untracked paths and new
    /// ignored paths removed. Returns the paths it had to fix.
    pub fn restore(&mut self) -> Result<Vec<String>, ValidateError> {
        let mut fixed = Vec::new();
        let head = self
            .repo
            .head()
            .and_then(|h| h.peel_to_tree())
            .map_err(git_err("read the HEAD tree", &self.root))?;
        for (path, st) in self.statuses(true)? {
            let abs = self.root.join(&path);
            if st.contains(Status::IGNORED) {
                if self.ignored_at_start.contains(&path) {
                    continue;
                }
                remove_path(&abs)?;
                fixed.push(path);
            } else if st.contains(Status::WT_NEW) {
                remove_path(&abs)?;
                fixed.push(path);
            } else if st.intersects(
                Status::WT_MODIFIED
                    | Status::WT_DELETED
                    | Status::WT_TYPECHANGE
                    | Status::WT_RENAMED,
            ) {
                let entry = head
                    .get_path(Path::new(&path))
                    .map_err(git_err(&format!("find `{path}` in HEAD"), &self.root))?;
                let blob = self
                    .repo
                    .find_blob(entry.id())
                    .map_err(git_err(&format!("read `{path}` from HEAD"), &self.root))?;
                if abs.is_dir() && !abs.is_symlink() {
                    std::fs::remove_dir_all(&abs).map_err(ValidateError::io("remove", &abs))?;
                } else if abs.symlink_metadata().is_ok() {
                    std::fs::remove_file(&abs).map_err(ValidateError::io("remove", &abs))?;
                }
                if let Some(dir) = abs.parent() {
                    std::fs::create_dir_all(dir).map_err(ValidateError::io("create", dir))?;
                }
                write_entry(&abs, blob.content(), entry.filemode())?;
                fixed.push(path);
            }
        }
        self.applied = false;
        Ok(fixed)
    }

    /// Whether the worktree is now as received (clean, and no ignored path that was not there).
    pub fn verify(&self) -> Result<Result<(), String>, ValidateError> {
        if let Some(Dirty(paths)) = self.dirty()? {
            return Ok(Err(format!("changed or untracked: {}", paths.join(", "))));
        }
        let now = self.ignored()?;
        let extra: Vec<&String> = now.difference(&self.ignored_at_start).collect();
        if !extra.is_empty() {
            return Ok(Err(format!(
                "new ignored paths: {}",
                extra
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(Ok(()))
    }

    /// Reads a file's base content from HEAD (`None` when absent there).
    pub fn base_text(&self, path: &str) -> Option<String> {
        let tree = self.repo.head().ok()?.peel_to_tree().ok()?;
        let entry = tree.get_path(Path::new(path)).ok()?;
        let blob = self.repo.find_blob(entry.id()).ok()?;
        String::from_utf8(blob.content().to_vec()).ok()
    }

    /// Whether `path` exists in the base commit.
    pub fn in_base(&self, path: &str) -> bool {
        self.repo
            .head()
            .ok()
            .and_then(|h| h.peel_to_tree().ok())
            .is_some_and(|t| t.get_path(Path::new(path)).is_ok())
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if !(self.applied || self.touched) {
            return;
        }
        match self.restore() {
            Ok(fixed) if !fixed.is_empty() => {
                tracing::info!(paths = fixed.len(), "worktree restored on drop")
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "failed to restore the worktree"),
        }
    }
}

/// Index entries with the skip-worktree bit (what `git ls-files -t` shows as `S`).
fn skip_worktree_entries(
    repo: &Repository,
    path: &Path,
) -> Result<BTreeSet<String>, ValidateError> {
    let index = match repo.index() {
        Ok(i) => i,
        // libgit2 cannot read a sparse index (directory entries); say how to get a full one.
        Err(_)
            if repo
                .config()
                .and_then(|c| c.get_bool("index.sparse"))
                .unwrap_or(false) =>
        {
            return Err(ValidateError::usage(
                "--repo",
                format!(
                    "`{}` uses a sparse index (index.sparse=true), which libgit2 cannot read; run `git sparse-checkout reapply --no-sparse-index` there (the checkout stays sparse) and retry",
                    path.display()
                ),
            ));
        }
        Err(e) => return Err(git_err("read the index", path)(e)),
    };
    Ok(index
        .iter()
        .filter(|e| IndexEntryExtendedFlag::from_bits_truncate(e.flags_extended).is_skip_worktree())
        .map(|e| String::from_utf8_lossy(&e.path).to_string())
        .collect())
}

fn remove_path(abs: &Path) -> Result<(), ValidateError> {
    let Ok(meta) = abs.symlink_metadata() else {
        return Ok(());
    };
    if meta.is_dir() {
        std::fs::remove_dir_all(abs).map_err(ValidateError::io("remove", abs))
    } else {
        std::fs::remove_file(abs).map_err(ValidateError::io("remove", abs))
    }
}

fn write_entry(abs: &Path, content: &[u8], mode: i32) -> Result<(), ValidateError> {
    use std::os::unix::fs::PermissionsExt;
    if mode == 0o120000 {
        let target = String::from_utf8_lossy(content).to_string();
        return std::os::unix::fs::symlink(target, abs)
            .map_err(ValidateError::io("create the symlink", abs));
    }
    std::fs::write(abs, content).map_err(ValidateError::io("write", abs))?;
    let perm = if mode == 0o100755 { 0o755 } else { 0o644 };
    let mut p = std::fs::metadata(abs)
        .map_err(ValidateError::io("stat", abs))?
        .permissions();
    // Keep the caller's umask-derived bits for group/other read; set the executable bit as git
    // records it.
    let old = p.mode() & 0o777;
    let new = if perm == 0o755 {
        old | 0o111
    } else {
        old & !0o111
    };
    p.set_mode(new);
    std::fs::set_permissions(abs, p).map_err(ValidateError::io("chmod", abs))
}

/// Reads the files a patch touches, and its added lines.
pub fn patch_files(bytes: &[u8]) -> Result<PatchFiles, git2::Error> {
    let diff = Diff::from_buffer(bytes)?;
    let mut out = PatchFiles::default();
    for delta in diff.deltas() {
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        if delta.status() == git2::Delta::Added {
            out.added.push(path.clone());
        }
        out.all.push(path);
    }
    let mut lines: Vec<(String, Vec<String>)> =
        out.all.iter().map(|p| (p.clone(), Vec::new())).collect();
    diff.print(git2::DiffFormat::Patch, |delta, _hunk, line| {
        if line.origin() == '+' {
            let path = delta
                .new_file()
                .path()
                .map(|p| p.to_string_lossy().to_string())
                .unwrap_or_default();
            if let Some((_, v)) = lines.iter_mut().find(|(p, _)| *p == path) {
                v.push(
                    String::from_utf8_lossy(line.content())
                        .trim_end()
                        .to_string(),
                );
            }
        }
        true
    })?;
    out.added_lines = lines;
    Ok(out)
}
