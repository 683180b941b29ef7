//! `--target` must name a file that exists: in the base worktree, in the base commit (a path a
//! sparse checkout leaves out), or among the files the patch writes. Anything else is refused
//! before any stage runs, with the closest existing paths (or what the directory holds), so a
//! typo is not reported as a fact about the target's imports.

use std::path::Path;

use crate::error::{NoSuchTarget, ValidateError};
use crate::worktree::Worktree;

/// Close matches offered at most.
const MAX_CLOSE: usize = 3;
/// Files listed at most when nothing is close.
const MAX_LISTED: usize = 12;

/// `target_file` relative to `root`: `./` and an absolute prefix inside `root` removed.
pub fn relative_target(root: &Path, target_file: &str) -> String {
    let p = Path::new(target_file);
    let rel = p
        .strip_prefix(root)
        .map(|r| r.to_string_lossy().to_string())
        .unwrap_or_else(|_| target_file.to_string());
    rel.trim_start_matches("./").to_string()
}

/// Refuses a target that exists nowhere ([`NoSuchTarget`]).
pub fn check(root: &Path, target_file: &str, wt: &Worktree) -> Result<(), ValidateError> {
    if root.join(target_file).is_file() {
        return Ok(());
    }
    let rel = relative_target(root, target_file);
    if wt.files().all.contains(&rel) || wt.in_base(&rel) {
        return Ok(());
    }
    let mut candidates = wt.tracked_files()?;
    candidates.extend(wt.files().all.iter().cloned());
    candidates.retain(|c| c.ends_with(".py"));
    candidates.sort();
    candidates.dedup();
    let close = close_matches(&rel, &candidates);
    let (existing, listed_dir) = if close.is_empty() {
        let (dir, files) = nearest_listing(&rel, &candidates);
        (files, Some(dir))
    } else {
        (Vec::new(), None)
    };
    Err(NoSuchTarget {
        target: target_file.to_string(),
        repo: root.to_path_buf(),
        close,
        existing,
        listed_dir,
    }
    .into())
}

/// Paths within a small edit distance of `target` (or with the same file name elsewhere),
/// closest first.
pub fn close_matches(target: &str, candidates: &[String]) -> Vec<String> {
    let limit = (target.chars().count() / 6).max(2);
    let name = target.rsplit('/').next().unwrap_or(target);
    let tlen = target.chars().count();
    let mut scored: Vec<(usize, &String)> = candidates
        .iter()
        .filter_map(|c| {
            if c.rsplit('/').next() == Some(name) {
                return Some((0, c));
            }
            // A length gap alone already exceeds the limit: skip the quadratic distance.
            if c.chars().count().abs_diff(tlen) > limit {
                return None;
            }
            let d = levenshtein(target, c);
            (d <= limit).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_CLOSE)
        .map(|(_, c)| c.clone())
        .collect()
}

/// The nearest ancestor directory of `target` that holds candidates, and its Python files.
fn nearest_listing(target: &str, candidates: &[String]) -> (String, Vec<String>) {
    let mut dir = Path::new(target).parent();
    while let Some(d) = dir {
        let prefix = d.to_string_lossy().to_string();
        if prefix.is_empty() {
            break;
        }
        let files: Vec<String> = candidates
            .iter()
            .filter(|c| {
                c.strip_prefix(&prefix)
                    .and_then(|r| r.strip_prefix('/'))
                    .is_some_and(|r| !r.contains('/'))
            })
            .take(MAX_LISTED)
            .cloned()
            .collect();
        if candidates
            .iter()
            .any(|c| c.starts_with(&format!("{prefix}/")))
        {
            return (prefix, files);
        }
        dir = d.parent();
    }
    let files = candidates
        .iter()
        .filter(|c| !c.contains('/'))
        .take(MAX_LISTED)
        .cloned()
        .collect();
    (".".into(), files)
}

/// Edit distance (insertions, deletions, substitutions) over characters.
pub fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn distance_and_close_matches() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("", "ab"), 2);
        let c = files(&[
            "tests/test_rowsum.py",
            "tests/test_rowsum_env.py",
            "kern/rowsum.py",
            "other/test_rowsun.py",
        ]);
        assert_eq!(
            close_matches("tests/test_rowsun.py", &c),
            vec!["other/test_rowsun.py", "tests/test_rowsum.py"],
            "same file name elsewhere first, then the one-letter typo"
        );
        assert!(close_matches("tests/zz.py", &c).is_empty());
    }

    #[test]
    fn listing_uses_the_nearest_directory_that_exists() {
        let c = files(&["tests/a.py", "tests/sub/b.py", "top.py"]);
        assert_eq!(
            nearest_listing("tests/nope/x.py", &c),
            ("tests".to_string(), files(&["tests/a.py"]))
        );
        assert_eq!(
            nearest_listing("nowhere/x.py", &c),
            (".".to_string(), files(&["top.py"]))
        );
        assert_eq!(
            relative_target(Path::new("/r"), "./tests/a.py"),
            "tests/a.py"
        );
        assert_eq!(
            relative_target(Path::new("/r"), "/r/tests/a.py"),
            "tests/a.py"
        );
    }
}
