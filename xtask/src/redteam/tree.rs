//! Directory snapshots (relative path -> hash) and their diffs: a case's problem copy, its
//! working directory and the run's cache are hashed before kg-bench starts and after.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

/// Relative path -> SHA-256 of every file (and `dir` for directories) below `dir`.
pub(super) fn tree_hash(dir: &Path) -> Result<BTreeMap<String, String>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
        let rd = std::fs::read_dir(dir)
            .with_context(|| format!("failed to list `{}`", dir.display()))?;
        for ent in rd {
            let ent = ent.with_context(|| format!("failed to list `{}`", dir.display()))?;
            let p = ent.path();
            let rel = p
                .strip_prefix(base)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&p)
                .with_context(|| format!("failed to stat `{}`", p.display()))?;
            if meta.is_dir() {
                out.insert(rel, "dir".into());
                walk(base, &p, out)?;
            } else if meta.is_file() {
                let bytes = std::fs::read(&p)
                    .with_context(|| format!("failed to read `{}`", p.display()))?;
                out.insert(rel, kg_contract::io::sha256_hex(&bytes));
            } else {
                out.insert(rel, "special".into());
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

pub(super) fn tree_diff(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => d.push(format!("+{k}")),
            Some(b) if b != v => d.push(format!("~{k}")),
            _ => {}
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            d.push(format!("-{k}"));
        }
    }
    d
}

pub(super) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    kg_contract::tree::copy_tree(from, to, kg_contract::tree::CopyOptions::default())
        .with_context(|| format!("failed to copy `{}` to `{}`", from.display(), to.display()))?;
    Ok(())
}

/// Changes to the run's kernelgate cache that are not a case's own new directories: a file
/// changed or removed, or a file added to a directory that existed before the case (another
/// solution's cache, the decoys included).
pub(super) fn cache_changes(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            Some(b) if b != v && v != "dir" => out.push(format!("~{k}")),
            None if v != "dir" => {
                let parent = Path::new(k)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if parent.is_empty() || before.get(&parent).is_some_and(|t| t == "dir") {
                    out.push(format!("+{k}"));
                }
            }
            _ => {}
        }
    }
    for (k, v) in before {
        if !after.contains_key(k) && v != "dir" {
            out.push(format!("-{k}"));
        }
    }
    out
}
