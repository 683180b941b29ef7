//! The parent's half of building the candidate's filesystem view: which mount points get a
//! fresh tmpfs (the private `/tmp` and `/dev/shm`, and "masks" over directories the sandbox
//! uid could not traverse), which paths are bound back into the view (read-only or writable),
//! and the list of existing mounts to make read-only where `mount_setattr` is missing. All of
//! it is computed here, as C strings, because the child between fork and exec must not
//! allocate.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A path bound back into the view at the same place, or `/dev/null` bound over a file the
/// worker must not open (a cover).
#[derive(Debug)]
pub(crate) struct Bind {
    /// The target (and, unless `cover`, the source).
    pub path: CString,
    /// `/dev/null` is the source, made read-only.
    pub cover: bool,
    /// Directories to create (inside a tmpfs mask) before the bind, outermost first.
    pub make_dirs: Vec<CString>,
    /// The target is a file (its mount point is created as an empty file).
    pub is_file: bool,
    /// Writable in the view.
    pub write: bool,
    /// Flags of the mount it comes from, for the remount that makes it writable where
    /// `mount_setattr` is missing.
    pub source_flags: u64,
    /// The `O_PATH` descriptor of the source, opened in the child before anything is masked.
    pub fd: i32,
}

/// A fresh tmpfs.
#[derive(Debug)]
pub(crate) struct Tmpfs {
    /// Mount point.
    pub path: CString,
    /// Mount data, e.g. `mode=1777,size=1073741824`.
    pub data: CString,
    /// Made read-only once the mount points of the binds inside it exist (a mask; the
    /// private temp dirs stay writable).
    pub read_only: bool,
}

/// Everything the child needs to build the view.
#[derive(Debug, Default)]
pub(crate) struct MountPlan {
    /// Existing mount points and their per-mount flags (`MS_*`), for the per-mount read-only
    /// remount where `mount_setattr` is missing.
    pub existing: Vec<(CString, u64)>,
    /// Fresh tmpfs mounts (private temp dirs first, then masks).
    pub tmpfs: Vec<Tmpfs>,
    /// Binds, shallowest first (a bind inside another comes after it).
    pub binds: Vec<Bind>,
    /// Where the worker starts (`chdir` after the binds: its old cwd may be masked).
    pub cwd: Option<CString>,
}

fn cstr(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

/// Whether `uid`/`gid` may search directory `meta`.
fn traversable(meta: &std::fs::Metadata, uid: u32, gid: u32) -> bool {
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o100 != 0
    } else if meta.gid() == gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// The first ancestor of `p` (excluding `p`) that `uid`/`gid` cannot search.
fn blocked_ancestor(p: &Path, uid: u32, gid: u32) -> Option<PathBuf> {
    let mut cur = PathBuf::new();
    let parent = p.parent()?;
    for c in parent.components() {
        cur.push(c);
        let meta = std::fs::metadata(&cur).ok()?;
        if !traversable(&meta, uid, gid) {
            return Some(cur);
        }
    }
    None
}

/// What the view needs: `read` and `write` paths (absolute, existing), files to `cover` with
/// `/dev/null`, private tmpfs mount points with their size, the worker's cwd, and the uid/gid
/// it will run as (masks are computed for that identity; `None`: it keeps ours, nothing is
/// masked but the temp dirs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan(
    read: &[PathBuf],
    write: &[PathBuf],
    cover: &[PathBuf],
    private_tmp: &[PathBuf],
    tmp_bytes: u64,
    cwd: Option<&Path>,
    identity: Option<(u32, u32)>,
) -> MountPlan {
    let existing = read_mounts();
    let canon = |p: &PathBuf| p.canonicalize().ok();
    let read: Vec<PathBuf> = read.iter().filter_map(canon).collect();
    let write: Vec<PathBuf> = write.iter().filter_map(canon).collect();
    let private_tmp: Vec<PathBuf> = private_tmp
        .iter()
        .filter(|p| p.is_dir())
        .filter_map(canon)
        .collect();

    let mut masks: Vec<PathBuf> = Vec::new();
    if let Some((uid, gid)) = identity {
        for p in read.iter().chain(&write) {
            if private_tmp.iter().any(|t| p.starts_with(t)) {
                continue;
            }
            if let Some(a) = blocked_ancestor(p, uid, gid) {
                masks.push(a);
            }
        }
    }
    masks.sort();
    masks.dedup();
    // A mask inside a private temp dir or another mask is covered already.
    let covered = |m: &PathBuf, all: &[PathBuf]| all.iter().any(|o| o != m && m.starts_with(o));
    let snapshot = masks.clone();
    masks.retain(|m| !covered(m, &snapshot) && !private_tmp.iter().any(|t| m.starts_with(t)));

    let mut tmpfs: Vec<Tmpfs> = Vec::new();
    for t in &private_tmp {
        if let (Some(path), Ok(data)) =
            (cstr(t), CString::new(format!("mode=1777,size={tmp_bytes}")))
        {
            tmpfs.push(Tmpfs {
                path,
                data,
                read_only: false,
            });
        }
    }
    for m in &masks {
        if let Some(path) = cstr(m) {
            tmpfs.push(Tmpfs {
                path,
                data: c"mode=0755,size=1m".to_owned(),
                read_only: true,
            });
        }
    }

    let hidden_by = |p: &Path| -> Option<PathBuf> {
        private_tmp
            .iter()
            .chain(&masks)
            .find(|m| p != m.as_path() && p.starts_with(m))
            .cloned()
    };
    let mut binds: Vec<(usize, Bind)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // Writable paths always get their own mount (to be made writable); read paths only where
    // a tmpfs hides them. A path listed both ways is writable.
    for (p, write) in write
        .iter()
        .map(|p| (p, true))
        .chain(read.iter().map(|p| (p, false)))
    {
        if !seen.insert(p.clone()) {
            continue;
        }
        let under = hidden_by(p);
        if !write && under.is_none() {
            continue;
        }
        let mut make_dirs = Vec::new();
        if let Some(m) = &under {
            let mut cur = m.clone();
            if let Ok(rest) = p.strip_prefix(m) {
                let comps: Vec<_> = rest.components().collect();
                for (i, c) in comps.iter().enumerate() {
                    cur.push(c);
                    // The last component of a file is created as a file, not a directory.
                    if i + 1 < comps.len() || p.is_dir() {
                        make_dirs.extend(cstr(&cur));
                    }
                }
            }
        }
        let Some(path) = cstr(p) else { continue };
        let source_flags = covering_mount(&existing, p).map_or(0, |(_, f)| *f);
        binds.push((
            p.components().count(),
            Bind {
                path,
                cover: false,
                make_dirs,
                is_file: !p.is_dir(),
                write,
                source_flags,
                fd: -1,
            },
        ));
    }
    binds.sort_by_key(|(depth, _)| *depth);
    // Covers last: over whatever the binds above put in place.
    for c in cover.iter().filter(|c| c.exists() && !c.is_dir()) {
        if let Some(path) = cstr(c) {
            binds.push((
                usize::MAX,
                Bind {
                    path,
                    cover: true,
                    make_dirs: Vec::new(),
                    is_file: false,
                    write: false,
                    source_flags: 0,
                    fd: -1,
                },
            ));
        }
    }
    MountPlan {
        existing: existing
            .into_iter()
            .filter_map(|(p, f)| Some((cstr(&p)?, f)))
            .collect(),
        tmpfs,
        binds: binds.into_iter().map(|(_, b)| b).collect(),
        cwd: cwd.and_then(|c| cstr(&c.canonicalize().unwrap_or_else(|_| c.to_path_buf()))),
    }
}

/// The mount that holds `p`: the longest mount point that is an ancestor of it (or it).
fn covering_mount<'a>(mounts: &'a [(PathBuf, u64)], p: &Path) -> Option<&'a (PathBuf, u64)> {
    mounts
        .iter()
        .filter(|(m, _)| p.starts_with(m))
        .max_by_key(|(m, _)| m.components().count())
}

/// Our mount points with their per-mount flags, from `/proc/self/mountinfo` (empty when
/// unreadable: the child then relies on `mount_setattr` alone).
fn read_mounts() -> Vec<(PathBuf, u64)> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// One line of `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountEntry {
    /// Mount point.
    pub point: PathBuf,
    /// Per-mount `MS_*` flags.
    pub flags: u64,
    /// Mounted read-only (per mount).
    pub read_only: bool,
    /// `major:minor` of the filesystem.
    pub dev: String,
    /// Filesystem type.
    pub fstype: String,
}

/// Every mountinfo line, in order (later mounts on the same point stack over earlier ones).
pub(crate) fn parse_mountinfo_full(text: &str) -> Vec<MountEntry> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dev = f.get(2)?.to_string();
            let point = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape(f.get(4)?)));
            let opts = f.get(5)?;
            let sep = f.iter().position(|x| *x == "-")?;
            let fstype = f.get(sep + 1)?.to_string();
            let flags = opts.split(',').fold(0u64, |acc, o| {
                acc | match o {
                    "ro" => libc::MS_RDONLY,
                    "nosuid" => libc::MS_NOSUID,
                    "nodev" => libc::MS_NODEV,
                    "noexec" => libc::MS_NOEXEC,
                    "noatime" => libc::MS_NOATIME,
                    "nodiratime" => libc::MS_NODIRATIME,
                    "relatime" => libc::MS_RELATIME,
                    _ => 0,
                }
            });
            Some(MountEntry {
                point,
                flags,
                read_only: flags & libc::MS_RDONLY != 0,
                dev,
                fstype,
            })
        })
        .collect()
}

/// (mount point, per-mount `MS_*` flags) of each mountinfo line, in order.
pub(crate) fn parse_mountinfo(text: &str) -> Vec<(PathBuf, u64)> {
    parse_mountinfo_full(text)
        .into_iter()
        .map(|m| (m.point, m.flags))
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
pub(crate) fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn mountinfo_flags_and_escapes_are_read() {
        let m = parse_mountinfo(
            "22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n\
             42 22 0:21 /a\\040b /a\\040b ro,nosuid,nodev - tmpfs tmpfs rw\n",
        );
        assert_eq!(m[0], (PathBuf::from("/"), libc::MS_RELATIME));
        assert_eq!(
            m[1],
            (
                PathBuf::from("/a b"),
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV
            )
        );
        assert_eq!(
            covering_mount(&m, Path::new("/a b/c")).map(|x| &x.0),
            Some(&PathBuf::from("/a b"))
        );
        assert_eq!(
            covering_mount(&m, Path::new("/ab")).map(|x| &x.0),
            Some(&PathBuf::from("/"))
        );
    }

    /// A directory the sandbox uid cannot search is masked, and what the worker needs under
    /// it is bound back, with the directories between created; writable paths always get
    /// their own bind; read paths that stay visible are not bound.
    #[test]
    fn masks_cover_unsearchable_ancestors_and_needed_paths_are_bound_back() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let locked = base.join("locked");
        let lib = locked.join("py/lib");
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        let open = base.join("open");
        std::fs::create_dir_all(&open).unwrap();
        let scratch = base.join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        let p = plan(
            &[lib.clone(), open.clone()],
            std::slice::from_ref(&scratch),
            &[],
            &[],
            1 << 20,
            None,
            Some((61_904, 61_904)),
        );
        let tmpfs: Vec<_> = p.tmpfs.iter().map(|t| t.path.clone()).collect();
        assert_eq!(tmpfs, vec![cstr(&locked).unwrap()]);
        let binds: Vec<_> = p.binds.iter().map(|b| (b.path.clone(), b.write)).collect();
        assert!(binds.contains(&(cstr(&lib).unwrap(), false)), "{binds:?}");
        assert!(
            binds.contains(&(cstr(&scratch).unwrap(), true)),
            "{binds:?}"
        );
        assert!(!binds.iter().any(|(p, _)| *p == cstr(&open).unwrap()));
        let lib_bind = p
            .binds
            .iter()
            .find(|b| b.path == cstr(&lib).unwrap())
            .unwrap();
        assert_eq!(
            lib_bind.make_dirs,
            vec![
                cstr(&locked.join("py")).unwrap(),
                cstr(&locked.join("py/lib")).unwrap()
            ]
        );
        // Keeping our own identity masks nothing.
        let p = plan(&[lib], &[scratch], &[], &[], 1 << 20, None, None);
        assert!(p.tmpfs.is_empty());
    }
}
