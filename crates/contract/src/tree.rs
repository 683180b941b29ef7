//! Content hash of a problem directory ("tree hash"): every entry under the root by relative
//! path and content, so a changed tolerance, dataset or reference is a different hash even when
//! it keeps its size and modification time.
//!
//! # What is hashed
//!
//! [`walk`] records every entry below the root (the root itself is followed if it is a
//! symlink; nothing below it is):
//!
//! | entry | listing line |
//! |---|---|
//! | directory | `dir - "rel/path"` |
//! | regular file | `file <sha256 of its bytes> "rel/path"` |
//! | symlink | `symlink <sha256 of the target's bytes, or -> "rel/path" -> "target"`; the target is recorded as written in the link; its bytes are hashed only when it resolves to a regular file (a link to a directory is not followed: no cycles, no escaping walks) |
//! | FIFO, socket, device | `fifo - "rel/path"` (`socket`, `char_device`, `block_device`): recorded, never opened |
//!
//! Paths use `/`, are JSON strings (so names with spaces or newlines stay unambiguous), and
//! lines are sorted by that path's bytes. [`Tree::listing`] is `kernelgate-tree v1\n` followed by
//! those lines, each ending in `\n`; the tree hash is the lower-case hex SHA-256 of the listing.
//! Modes, owners and times are not covered (a checkout on another machine hashes the same).
//!
//! A walk that could not record everything — a file it could not read, a name that is not
//! UTF-8, more than [`MAX_ENTRIES`] entries or deeper than [`MAX_DEPTH`] levels — has no hash
//! ([`Tree::sha256`] fails, naming the entry): a tree hash never stands for less than the whole
//! directory. Files are opened with `O_NOFOLLOW | O_NONBLOCK` and checked to be regular files
//! after opening, so an entry swapped for a FIFO or a link while walking cannot hang or redirect
//! the walk.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Entries a tree may hold before its walk gives up (the hash then fails).
pub const MAX_ENTRIES: usize = 100_000;
/// Directory levels below the root a walk descends.
pub const MAX_DEPTH: usize = 32;
/// First line of every listing: names the format.
pub const LISTING_HEADER: &str = "kernelgate-tree v1\n";

/// One entry of a directory tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// A directory (its entries are listed on their own).
    Dir,
    /// A regular file and the SHA-256 of its bytes.
    File {
        /// Lower-case hex SHA-256 of the content.
        sha256: String,
    },
    /// A symbolic link, not followed below the root.
    Symlink {
        /// The link's target as written in it.
        target: PathBuf,
        /// SHA-256 of the target's bytes when it resolves to a regular file.
        target_sha256: Option<String>,
    },
    /// A FIFO, socket or device: recorded by kind, never opened.
    Special {
        /// `fifo`, `socket`, `char_device` or `block_device`.
        kind: &'static str,
    },
    /// An entry the walk could not record (read error, name not UTF-8); no hash stands for a
    /// tree holding one, and it never equals another entry.
    Unreadable {
        /// What went wrong.
        error: String,
    },
}

impl Entry {
    /// Whether two records of the same path say the content is the same. An unreadable entry
    /// is never the same as anything, itself included: what it held is unknown.
    pub fn same_as(&self, other: &Entry) -> bool {
        !matches!(self, Entry::Unreadable { .. }) && self == other
    }
}

/// What a walk of a directory found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// The directory walked.
    pub root: PathBuf,
    /// Every entry below the root, by path relative to it.
    pub entries: BTreeMap<PathBuf, Entry>,
    /// Why the walk stopped before recording everything (too many entries, too deep, the root
    /// unreadable); `None` when it saw the whole tree.
    pub incomplete: Option<String>,
}

/// A tree that has no hash: something in it could not be recorded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// The walk did not see the whole tree.
    #[error("failed to hash the tree `{root}`: {why}")]
    Incomplete {
        /// The directory walked.
        root: PathBuf,
        /// Why it stopped.
        why: String,
    },
    /// One entry could not be read.
    #[error("failed to hash the tree `{root}`: `{}`: {error}", path.display())]
    Unreadable {
        /// The directory walked.
        root: PathBuf,
        /// The entry, relative to the root.
        path: PathBuf,
        /// What went wrong.
        error: String,
    },
}

/// How a later walk differs from an earlier one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeChanges {
    /// Entries present now and not before.
    pub added: Vec<PathBuf>,
    /// Entries present before that are gone now or hold other content (or could not be read).
    pub changed: Vec<PathBuf>,
    /// Why the later walk is incomplete, if it is (everything it did not see is unknown).
    pub incomplete: Option<String>,
}

impl TreeChanges {
    /// Whether nothing differs and the later walk saw everything.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.incomplete.is_none()
    }
}

impl Tree {
    /// The listing the tree hash is taken over (module docs), or why there is none.
    pub fn listing(&self) -> Result<String, TreeError> {
        if let Some(why) = &self.incomplete {
            return Err(TreeError::Incomplete {
                root: self.root.clone(),
                why: why.clone(),
            });
        }
        let unreadable = |path: &Path, error: &str| TreeError::Unreadable {
            root: self.root.clone(),
            path: path.to_path_buf(),
            error: error.to_string(),
        };
        let mut lines: Vec<(String, String)> = Vec::with_capacity(self.entries.len());
        for (path, entry) in &self.entries {
            let rel = json_path(path).ok_or_else(|| unreadable(path, "name is not UTF-8"))?;
            let line = match entry {
                Entry::Dir => format!("dir - {}", rel.1),
                Entry::File { sha256 } => format!("file {sha256} {}", rel.1),
                Entry::Symlink {
                    target,
                    target_sha256,
                } => {
                    // The target as written in the link (absolute or relative).
                    let t = target
                        .to_str()
                        .and_then(|t| serde_json::to_string(t).ok())
                        .ok_or_else(|| unreadable(path, "link target is not UTF-8"))?;
                    format!(
                        "symlink {} {} -> {t}",
                        target_sha256.as_deref().unwrap_or("-"),
                        rel.1,
                    )
                }
                Entry::Special { kind } => format!("{kind} - {}", rel.1),
                Entry::Unreadable { error } => return Err(unreadable(path, error)),
            };
            lines.push((rel.0, line));
        }
        // Sorted by the path's bytes, not by `Path`'s component order, so anyone can rebuild
        // the listing from the line format alone.
        lines.sort();
        let mut out = String::from(LISTING_HEADER);
        for (_, line) in lines {
            out.push_str(&line);
            out.push('\n');
        }
        Ok(out)
    }

    /// The tree hash: lower-case hex SHA-256 of [`Tree::listing`].
    pub fn sha256(&self) -> Result<String, TreeError> {
        Ok(crate::io::sha256_hex(self.listing()?.as_bytes()))
    }

    /// What differs in `now` (a later walk of the same root) from this walk.
    pub fn changes(&self, now: &Tree) -> TreeChanges {
        let added = now
            .entries
            .keys()
            .filter(|k| !self.entries.contains_key(*k))
            .cloned()
            .collect();
        let changed = self
            .entries
            .iter()
            .filter(|(k, before)| now.entries.get(*k).is_none_or(|n| !before.same_as(n)))
            .map(|(k, _)| k.clone())
            .collect();
        TreeChanges {
            added,
            changed,
            incomplete: now.incomplete.clone(),
        }
    }
}

/// A relative path with `/` separators, and as a JSON string (for the listing); `None` when
/// not UTF-8.
fn json_path(p: &Path) -> Option<(String, String)> {
    let mut parts = Vec::new();
    for c in p.components() {
        parts.push(c.as_os_str().to_str()?);
    }
    let s = parts.join("/");
    let quoted = serde_json::to_string(&s).ok()?;
    Some((s, quoted))
}

/// Records directory `dir` (below `root`) as unreadable: it could not be listed.
fn unlistable(tree: &mut Tree, root: &Path, dir: &Path, e: &std::io::Error) {
    let rel = dir.strip_prefix(root).unwrap_or(dir).to_path_buf();
    tree.entries.insert(
        rel,
        Entry::Unreadable {
            error: format!("failed to list the directory: {e}"),
        },
    );
}

/// Walks `root` and hashes every regular file (module docs). Never fails: what it could not
/// record is in the tree ([`Entry::Unreadable`], [`Tree::incomplete`]) and makes
/// [`Tree::sha256`] fail.
pub fn walk(root: &Path) -> Tree {
    let mut tree = Tree {
        root: root.to_path_buf(),
        entries: BTreeMap::new(),
        incomplete: None,
    };
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if dir == root => {
                tree.incomplete = Some(format!("failed to read the directory: {e}"));
                return tree;
            }
            Err(e) => {
                unlistable(&mut tree, root, &dir, &e);
                continue;
            }
        };
        for item in rd {
            let item = match item {
                Ok(i) => i,
                Err(e) => {
                    unlistable(&mut tree, root, &dir, &e);
                    continue;
                }
            };
            if tree.entries.len() >= MAX_ENTRIES {
                tree.incomplete = Some(format!("more than {MAX_ENTRIES} entries"));
                return tree;
            }
            let path = item.path();
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            let entry = match std::fs::symlink_metadata(&path) {
                Err(e) => Entry::Unreadable {
                    error: format!("failed to stat: {e}"),
                },
                Ok(m) => {
                    let ft = m.file_type();
                    if rel.to_str().is_none() {
                        Entry::Unreadable {
                            error: "name is not UTF-8".into(),
                        }
                    } else if ft.is_dir() {
                        if depth + 1 > MAX_DEPTH {
                            tree.incomplete = Some(format!(
                                "`{}` is deeper than {MAX_DEPTH} levels",
                                rel.display()
                            ));
                            return tree;
                        }
                        stack.push((path.clone(), depth + 1));
                        Entry::Dir
                    } else if ft.is_file() {
                        match hash_regular_file(&path, false) {
                            Ok(Some(sha256)) => Entry::File { sha256 },
                            Ok(None) => Entry::Unreadable {
                                error: "changed into a non-regular file while being hashed".into(),
                            },
                            Err(e) => Entry::Unreadable {
                                error: format!("failed to read: {e}"),
                            },
                        }
                    } else if ft.is_symlink() {
                        match std::fs::read_link(&path) {
                            Ok(target) => {
                                let target_sha256 = match std::fs::metadata(&path) {
                                    Ok(t) if t.is_file() => {
                                        hash_regular_file(&path, true).ok().flatten()
                                    }
                                    _ => None,
                                };
                                Entry::Symlink {
                                    target,
                                    target_sha256,
                                }
                            }
                            Err(e) => Entry::Unreadable {
                                error: format!("failed to read the link: {e}"),
                            },
                        }
                    } else {
                        Entry::Special {
                            kind: special_kind(&ft),
                        }
                    }
                }
            };
            tree.entries.insert(rel, entry);
        }
    }
    tree
}

/// The tree hash of `root` (module docs).
pub fn tree_sha256(root: &Path) -> Result<String, TreeError> {
    walk(root).sha256()
}

#[cfg(unix)]
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_char_device() {
        "char_device"
    } else if ft.is_block_device() {
        "block_device"
    } else {
        "unknown"
    }
}

#[cfg(not(unix))]
fn special_kind(_: &std::fs::FileType) -> &'static str {
    "unknown"
}

/// SHA-256 of a regular file's bytes, streamed; `Ok(None)` when what is opened is not a
/// regular file (swapped while walking). `follow`: through a symlink (for link targets).
fn hash_regular_file(path: &Path, follow: bool) -> std::io::Result<Option<String>> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking: opening a FIFO swapped in for the file must not wait for a writer.
        let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
        if !follow {
            flags |= libc::O_NOFOLLOW;
        }
        opts.custom_flags(flags);
    }
    let mut f = opts.open(path)?;
    if !f.metadata()?.is_file() {
        return Ok(None);
    }
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let digest = hasher.finalize();
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    Ok(Some(s))
}

/// How [`copy_tree`] treats what it finds.
#[derive(Debug, Clone, Copy, Default)]
pub struct CopyOptions<'a> {
    /// Names left out at the top level only (e.g. `build`).
    pub skip_top: &'a [&'a str],
    /// Recreate symlinks as symlinks (else they are followed and their targets copied).
    pub keep_symlinks: bool,
}

/// Copies the tree `from` into `to` (created): directories, files and (with
/// [`CopyOptions::keep_symlinks`]) symlinks, in name order. Returns the files copied.
pub fn copy_tree(from: &Path, to: &Path, opts: CopyOptions<'_>) -> std::io::Result<Vec<PathBuf>> {
    fn copy(from: &Path, to: &Path, skip: &[&str], links: bool) -> std::io::Result<Vec<PathBuf>> {
        std::fs::create_dir_all(to)?;
        let mut entries = std::fs::read_dir(from)?.collect::<Result<Vec<_>, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mut files = Vec::new();
        for e in entries {
            let name = e.file_name();
            if skip.iter().any(|s| name == *s) {
                continue;
            }
            let (src, dst) = (e.path(), to.join(&name));
            let ft = e.file_type()?;
            if links && ft.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
            } else if src.is_dir() {
                files.extend(copy(&src, &dst, &[], links)?);
            } else {
                std::fs::copy(&src, &dst)?;
                files.push(dst);
            }
        }
        Ok(files)
    }
    copy(from, to, opts.skip_top, opts.keep_symlinks)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A copy holds every file in name order, leaves out only top-level skipped names, and
    /// keeps a symlink as a link or follows it as asked.
    #[test]
    fn copy_tree_skips_top_level_names_and_keeps_or_follows_links() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("build")).unwrap();
        std::fs::create_dir_all(src.join("sub/build")).unwrap();
        std::fs::write(src.join("b.txt"), "b").unwrap();
        std::fs::write(src.join("build/stale"), "x").unwrap();
        std::fs::write(src.join("sub/build/kept"), "k").unwrap();
        std::os::unix::fs::symlink("b.txt", src.join("a_link")).unwrap();
        let kept = d.path().join("kept");
        let files = copy_tree(
            &src,
            &kept,
            CopyOptions {
                skip_top: &["build"],
                keep_symlinks: true,
            },
        )
        .unwrap();
        assert_eq!(files, vec![kept.join("b.txt"), kept.join("sub/build/kept")]);
        assert!(!kept.join("build").exists());
        assert_eq!(
            std::fs::read_link(kept.join("a_link")).unwrap(),
            Path::new("b.txt")
        );
        let followed = d.path().join("followed");
        let files = copy_tree(&src, &followed, CopyOptions::default()).unwrap();
        assert_eq!(files.len(), 4, "{files:?}");
        let link = followed.join("a_link");
        assert!(!link.is_symlink() && std::fs::read_to_string(link).unwrap() == "b");
    }

    fn problem() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("definition.json"), "{\"name\":\"p\"}").unwrap();
        std::fs::write(d.path().join("workload.jsonl"), "{\"tol\":0.01}\n").unwrap();
        std::fs::create_dir(d.path().join("data")).unwrap();
        std::fs::write(d.path().join("data/w.bin"), "abc").unwrap();
        d
    }

    #[test]
    fn listing_is_sorted_by_path_bytes_and_names_each_entry() {
        let d = problem();
        std::fs::write(d.path().join("data-x"), "1").unwrap();
        let l = walk(d.path()).listing().unwrap();
        let sha_abc = crate::io::sha256_hex(b"abc");
        let expected = format!(
            "kernelgate-tree v1\ndir - \"data\"\nfile {} \"data-x\"\nfile {sha_abc} \"data/w.bin\"\nfile {} \"definition.json\"\nfile {} \"workload.jsonl\"\n",
            crate::io::sha256_hex(b"1"),
            crate::io::sha256_hex(b"{\"name\":\"p\"}"),
            crate::io::sha256_hex(b"{\"tol\":0.01}\n"),
        );
        assert_eq!(l, expected);
        assert_eq!(
            tree_sha256(d.path()).unwrap(),
            crate::io::sha256_hex(expected.as_bytes())
        );
    }

    #[test]
    fn same_size_and_mtime_edit_changes_the_hash_and_is_named() {
        let d = problem();
        let p = d.path().join("workload.jsonl");
        let before = walk(d.path());
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        // Same length, same modification time: only the content differs.
        std::fs::write(&p, "{\"tol\":9.99}\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let now = walk(d.path());
        assert_ne!(before.sha256().unwrap(), now.sha256().unwrap());
        let c = before.changes(&now);
        assert_eq!(c.changed, vec![PathBuf::from("workload.jsonl")]);
        assert!(c.added.is_empty());
        assert!(before.changes(&before).is_empty());
    }

    #[test]
    fn added_removed_and_emptied_directories_count() {
        let d = problem();
        let before = walk(d.path());
        std::fs::create_dir(d.path().join("pkg")).unwrap();
        std::fs::remove_file(d.path().join("data/w.bin")).unwrap();
        let c = before.changes(&walk(d.path()));
        assert_eq!(c.added, vec![PathBuf::from("pkg")]);
        assert_eq!(c.changed, vec![PathBuf::from("data/w.bin")]);
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_recorded_with_their_target_and_its_content() {
        let d = problem();
        let outside = tempfile::tempdir().unwrap();
        let big = outside.path().join("weights.bin");
        std::fs::write(&big, "weights").unwrap();
        std::os::unix::fs::symlink(&big, d.path().join("data/link.bin")).unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("dirlink")).unwrap();
        let t = walk(d.path());
        let l = t.listing().unwrap();
        assert!(
            l.contains(&format!(
                "symlink {} \"data/link.bin\" -> {}",
                crate::io::sha256_hex(b"weights"),
                serde_json::to_string(&big.display().to_string()).unwrap()
            )),
            "{l}"
        );
        assert!(l.contains("symlink - \"dirlink\""), "{l}");
        // The target's content is covered: changing it changes the hash.
        std::fs::write(&big, "WEIGHTS").unwrap();
        assert_eq!(
            t.changes(&walk(d.path())).changed,
            vec![PathBuf::from("data/link.bin")]
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_recorded_without_being_opened() {
        let d = problem();
        let fifo = d.path().join("data/pipe");
        // mkfifo(1) keeps this crate free of unsafe code.
        let st = std::process::Command::new("mkfifo").arg(&fifo).status();
        if !st.is_ok_and(|s| s.success()) {
            return;
        }
        let l = walk(d.path()).listing().unwrap();
        assert!(l.contains("fifo - \"data/pipe\""), "{l}");
    }

    #[cfg(unix)]
    #[test]
    fn an_unreadable_file_leaves_the_tree_without_a_hash() {
        use std::os::unix::fs::PermissionsExt;
        let d = problem();
        let p = d.path().join("definition.json");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&p).is_ok() {
            // Root reads anything; nothing to test.
            return;
        }
        let t = walk(d.path());
        let e = t.sha256().unwrap_err();
        assert!(e.to_string().contains("definition.json"), "{e}");
        // Unreadable is never "unchanged".
        assert_eq!(
            t.changes(&t).changed,
            vec![PathBuf::from("definition.json")]
        );
    }

    #[test]
    fn a_missing_root_has_no_hash() {
        let d = tempfile::tempdir().unwrap();
        let e = tree_sha256(&d.path().join("nope")).unwrap_err();
        assert!(
            e.to_string().contains("failed to read the directory"),
            "{e}"
        );
    }
}
