//! The build cache: compiled solutions' modules (`cuda_cpp`, `hip_cpp`), as kernelgate's
//! builder made them, keyed by what went into them.
//!
//! A [`BuildKey`] is the SHA-256 of the solution's sources, compile options and languages and
//! of the [`Toolchain`] (interpreter, torch build, compiler binaries, target architecture
//! settings, device). An entry is a directory `<cache>/builds-v1/<key>/` holding the module
//! and `entry.json` ([`Entry`]) with the module's SHA-256: [`BuildCache::lookup`] hashes the
//! module again and treats any mismatch as a miss (the entry is removed and the solution
//! rebuilt, never used). Entries are installed whole (written beside, then renamed), so a
//! reader never sees half of one. Only kernelgate's builder writes here; a candidate never
//! sees the cache (its module is copied into its own scratch directory after the hash check).
//!
//! The cache is bounded ([`BuildCache::evict_to`], `KG_CACHE_MAX_BYTES`): least recently used
//! entries go first (a hit touches its `entry.json`).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kg_contract::Solution;
use serde::{Deserialize, Serialize};

/// The cache directory's bucket; bumped when the layout or the key's inputs change.
pub const BUCKET: &str = "builds-v1";

/// `KG_CACHE_MAX_BYTES`: the build cache's size bound (default [`DEFAULT_MAX_BYTES`]).
pub const MAX_BYTES_ENV: &str = "KG_CACHE_MAX_BYTES";

/// The default size bound of the build cache: 20 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 20 << 30;

/// The size bound in effect (`KG_CACHE_MAX_BYTES`, else the default; a value that is not a
/// number of bytes is ignored with a warning).
pub fn max_bytes() -> u64 {
    match std::env::var(MAX_BYTES_ENV) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| {
            tracing::warn!("{MAX_BYTES_ENV}=`{v}` is not a number of bytes; using the default");
            DEFAULT_MAX_BYTES
        }),
        Err(_) => DEFAULT_MAX_BYTES,
    }
}

/// Errors of the build cache.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildCacheError {
    /// A file or directory of the cache could not be read or written.
    #[error("failed to {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The builder's output has no module where it said.
    #[error("the builder reported `{}`, which is not a file", .0.display())]
    NoModule(PathBuf),
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> BuildCacheError {
    let path = path.to_path_buf();
    move |source| BuildCacheError::Io { what, path, source }
}

/// A file identified without reading it: path, size and modification time (a compiler or
/// interpreter replaced in place changes it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileId {
    /// The path.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its modification time, nanoseconds since the epoch.
    pub mtime_ns: u128,
}

impl FileId {
    /// The identity of `path` (following links), or `None` when it cannot be read.
    pub fn of(path: &Path) -> Option<FileId> {
        let m = std::fs::metadata(path).ok()?;
        let mtime_ns = m
            .modified()
            .ok()?
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        Some(FileId {
            path: path.display().to_string(),
            bytes: m.len(),
            mtime_ns,
        })
    }
}

/// What besides the solution decides what a build produces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Toolchain {
    /// The interpreter the builder runs.
    pub python: Option<FileId>,
    /// SHA-256 of torch's `version.py` (its version and the CUDA/HIP it was built for).
    pub torch_version_sha256: Option<String>,
    /// `nvcc` (or `hipcc`).
    pub device_compiler: Option<FileId>,
    /// The host C++ compiler (`CXX`, else `c++` on PATH).
    pub host_compiler: Option<FileId>,
    /// `TORCH_CUDA_ARCH_LIST`, `PYTORCH_ROCM_ARCH`, `CUDAFLAGS`, `CXXFLAGS` as set.
    pub env: Vec<(String, String)>,
    /// The device the module is built for (its name; torch builds for the visible device's
    /// architecture when no list is set).
    pub device: String,
}

/// A solution's cache key and module name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BuildKey {
    /// SHA-256 (hex) of everything that goes into the build.
    pub key: String,
    /// The module's name (its `PyInit_` symbol), as torch's extension builder names it.
    pub name: String,
}

impl BuildKey {
    /// The key of `sol` built with `toolchain`.
    pub fn of(sol: &Solution, toolchain: &Toolchain) -> BuildKey {
        let mut h: Vec<u8> = Vec::new();
        h.extend_from_slice(BUCKET.as_bytes());
        let mut sources: Vec<_> = sol.sources.iter().collect();
        sources.sort_by(|a, b| a.path.cmp(&b.path));
        for s in sources {
            h.extend_from_slice(b"\0source\0");
            h.extend_from_slice(s.path.as_bytes());
            h.extend_from_slice(b"\0");
            h.extend_from_slice(s.content.as_bytes());
        }
        h.extend_from_slice(b"\0spec\0");
        // Compile options, languages and the entry point, as serialised (field order fixed).
        h.extend_from_slice(
            serde_json::to_string(&(
                &sol.spec.languages,
                &sol.spec.entry_point,
                &sol.spec.compile_options,
            ))
            .unwrap_or_default()
            .as_bytes(),
        );
        h.extend_from_slice(b"\0toolchain\0");
        h.extend_from_slice(
            serde_json::to_string(toolchain)
                .unwrap_or_default()
                .as_bytes(),
        );
        let key = kg_contract::io::sha256_hex(&h);
        let name = format!("kg_ext_{}", &key[..16]);
        BuildKey { key, name }
    }
}

/// `entry.json` of a cache entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The cache key.
    pub key: String,
    /// The module's name.
    pub name: String,
    /// The module's file name in the entry directory.
    pub module: String,
    /// The module's SHA-256.
    pub module_sha256: String,
    /// The module's size in bytes.
    pub module_bytes: u64,
    /// Seconds the build took.
    pub build_s: f64,
    /// When it was built (ISO 8601, UTC).
    pub created_utc: String,
    /// The solution it was built for (its name; the key binds its content).
    pub solution: String,
    /// The toolchain it was built with.
    pub toolchain: Toolchain,
}

/// A cache entry found by [`BuildCache::lookup`], its module verified.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The entry.
    pub entry: Entry,
    /// The module file.
    pub module: PathBuf,
}

/// One entry as [`BuildCache::list`] sees it.
#[derive(Debug, Clone)]
pub struct Listed {
    /// The entry directory.
    pub dir: PathBuf,
    /// Its `entry.json`, or why it could not be read.
    pub entry: Result<Entry, String>,
    /// Bytes on disk.
    pub bytes: u64,
    /// Last used (the `entry.json` modification time).
    pub last_used: Option<SystemTime>,
}

/// The build cache under a kernelgate cache directory.
#[derive(Debug, Clone)]
pub struct BuildCache {
    root: PathBuf,
}

impl BuildCache {
    /// The build cache of the cache directory `cache_dir` (`KG_CACHE_DIR`).
    pub fn new(cache_dir: &Path) -> BuildCache {
        BuildCache {
            root: cache_dir.join(BUCKET),
        }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn dir_of(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// The verified entry of `key`, or `None`. An entry that does not verify (unreadable
    /// `entry.json`, another key, a module whose hash differs) is removed with a warning.
    pub fn lookup(&self, key: &BuildKey) -> Option<Hit> {
        let dir = self.dir_of(&key.key);
        if !dir.exists() {
            return None;
        }
        match verify(&dir, key) {
            Ok(hit) => {
                // Last used, for eviction.
                let _ = std::fs::File::options()
                    .append(true)
                    .open(dir.join("entry.json"))
                    .and_then(|f| f.set_modified(SystemTime::now()));
                Some(hit)
            }
            Err(why) => {
                tracing::warn!(entry = %dir.display(), "build cache entry removed: {why}");
                let _ = std::fs::remove_dir_all(&dir);
                None
            }
        }
    }

    /// Installs `module` (the builder's output) as the entry of `key`, whole: copied with
    /// its `entry.json` into a directory beside, then renamed into place. Where another run
    /// installed the same key meanwhile, that entry stays and is returned.
    pub fn install(
        &self,
        key: &BuildKey,
        module: &Path,
        solution: &str,
        build_s: f64,
        toolchain: &Toolchain,
    ) -> Result<Hit, BuildCacheError> {
        if !module.is_file() {
            return Err(BuildCacheError::NoModule(module.to_path_buf()));
        }
        std::fs::create_dir_all(&self.root).map_err(io("create", &self.root))?;
        let tmp = tempfile::Builder::new()
            .prefix(".install-")
            .tempdir_in(&self.root)
            .map_err(io("create a directory in", &self.root))?;
        let file = format!("{}.so", key.name);
        let dest = tmp.path().join(&file);
        std::fs::copy(module, &dest).map_err(io("copy", module))?;
        let bytes = std::fs::read(&dest).map_err(io("read", &dest))?;
        let entry = Entry {
            key: key.key.clone(),
            name: key.name.clone(),
            module: file,
            module_sha256: kg_contract::io::sha256_hex(&bytes),
            module_bytes: bytes.len() as u64,
            build_s,
            created_utc: kg_proc::now_utc(),
            solution: solution.to_string(),
            toolchain: toolchain.clone(),
        };
        let json = serde_json::to_vec_pretty(&entry).map_err(|e| BuildCacheError::Io {
            what: "serialise",
            path: tmp.path().join("entry.json"),
            source: std::io::Error::other(e),
        })?;
        std::fs::write(tmp.path().join("entry.json"), json)
            .map_err(io("write", &tmp.path().join("entry.json")))?;
        let final_dir = self.dir_of(&key.key);
        let staged = tmp.keep();
        if let Err(e) = std::fs::rename(&staged, &final_dir) {
            let _ = std::fs::remove_dir_all(&staged);
            // Another run installed it first: use theirs if it verifies.
            if let Some(hit) = self.lookup(key) {
                return Ok(hit);
            }
            return Err(BuildCacheError::Io {
                what: "install into",
                path: final_dir,
                source: e,
            });
        }
        Ok(Hit {
            module: final_dir.join(&entry.module),
            entry,
        })
    }

    /// Every entry directory, with its entry, size and last use (oldest use first).
    pub fn list(&self) -> Result<Vec<Listed>, BuildCacheError> {
        let rd = match std::fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io("read", &self.root)(e)),
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let dir = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if !dir.is_dir() || name.starts_with('.') {
                continue;
            }
            let json = dir.join("entry.json");
            let entry = std::fs::read(&json)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<Entry>(&b).map_err(|e| e.to_string()));
            let bytes = dir_bytes(&dir);
            let last_used = std::fs::metadata(&json).and_then(|m| m.modified()).ok();
            out.push(Listed {
                dir,
                entry,
                bytes,
                last_used,
            });
        }
        out.sort_by_key(|l| l.last_used);
        Ok(out)
    }

    /// Removes the entries `remove` selects (and any half-installed leftovers); the removed
    /// directories.
    pub fn clean(&self, remove: impl Fn(&Listed) -> bool) -> Result<Vec<PathBuf>, BuildCacheError> {
        let mut removed = Vec::new();
        for l in self.list()? {
            if remove(&l) {
                std::fs::remove_dir_all(&l.dir).map_err(io("remove", &l.dir))?;
                removed.push(l.dir);
            }
        }
        if let Ok(rd) = std::fs::read_dir(&self.root) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(".install-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(removed)
    }

    /// Removes least recently used entries until the cache holds at most `max_bytes`; the
    /// removed directories.
    pub fn evict_to(&self, max_bytes: u64) -> Result<Vec<PathBuf>, BuildCacheError> {
        let listed = self.list()?;
        let mut total: u64 = listed.iter().map(|l| l.bytes).sum();
        let mut removed = Vec::new();
        for l in listed {
            if total <= max_bytes {
                break;
            }
            std::fs::remove_dir_all(&l.dir).map_err(io("remove", &l.dir))?;
            total = total.saturating_sub(l.bytes);
            removed.push(l.dir);
        }
        Ok(removed)
    }
}

/// Checks the entry in `dir` against `key`: its `entry.json` names the key, and its module
/// hashes to what that records.
fn verify(dir: &Path, key: &BuildKey) -> Result<Hit, String> {
    let bytes = std::fs::read(dir.join("entry.json")).map_err(|e| format!("entry.json: {e}"))?;
    let entry: Entry = serde_json::from_slice(&bytes).map_err(|e| format!("entry.json: {e}"))?;
    if entry.key != key.key || entry.name != key.name {
        return Err(format!("entry.json is for key {}", entry.key));
    }
    let module = dir.join(&entry.module);
    if entry.module.contains('/') || entry.module.starts_with('.') {
        return Err(format!("module name `{}` leaves the entry", entry.module));
    }
    let data = std::fs::read(&module).map_err(|e| format!("{}: {e}", entry.module))?;
    let sha = kg_contract::io::sha256_hex(&data);
    if sha != entry.module_sha256 {
        return Err(format!(
            "module SHA-256 {sha} differs from the recorded {}",
            entry.module_sha256
        ));
    }
    Ok(Hit { entry, module })
}

/// Bytes of the regular files under `dir` (not following links).
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn solution(src: &str) -> Solution {
        serde_json::from_value(serde_json::json!({
            "name": "s", "definition": "d", "author": "t",
            "spec": {"languages": ["cuda_cpp"], "target_hardware": ["H200"],
                     "entry_point": "k.cu::run"},
            "sources": [{"path": "k.cu", "content": src}],
        }))
        .unwrap()
    }

    fn module(dir: &Path, content: &[u8]) -> PathBuf {
        let p = dir.join("built.so");
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn keys_change_with_sources_options_and_toolchain() {
        let t = Toolchain::default();
        let a = BuildKey::of(&solution("a"), &t);
        assert_eq!(a, BuildKey::of(&solution("a"), &t));
        assert_ne!(a, BuildKey::of(&solution("b"), &t));
        let mut other = solution("a");
        other.spec.compile_options =
            serde_json::from_value(serde_json::json!({"cflags": ["-O0"]})).unwrap();
        assert_ne!(a, BuildKey::of(&other, &t));
        let t2 = Toolchain {
            device: "NVIDIA H200".into(),
            ..Toolchain::default()
        };
        assert_ne!(a, BuildKey::of(&solution("a"), &t2));
        assert!(
            a.name.starts_with("kg_ext_") && a.name.len() == 23,
            "{}",
            a.name
        );
    }

    #[test]
    fn an_installed_entry_is_found_and_a_changed_module_is_never_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(&dir.path().join("cache"));
        let t = Toolchain::default();
        let key = BuildKey::of(&solution("a"), &t);
        assert!(cache.lookup(&key).is_none());
        let hit = cache
            .install(&key, &module(dir.path(), b"module bytes"), "s", 1.5, &t)
            .unwrap();
        assert_eq!(
            hit.entry.module_sha256,
            kg_contract::io::sha256_hex(b"module bytes")
        );
        assert_eq!(cache.lookup(&key), Some(hit.clone()));
        // Another key does not find it.
        assert!(cache.lookup(&BuildKey::of(&solution("b"), &t)).is_none());
        // A module changed after it was cached is a miss, and the entry is gone.
        std::fs::write(&hit.module, b"planted").unwrap();
        assert!(cache.lookup(&key).is_none());
        assert!(!hit.module.exists());
        // An entry.json naming another key is a miss too.
        let hit = cache
            .install(&key, &module(dir.path(), b"module bytes"), "s", 1.5, &t)
            .unwrap();
        let other = BuildKey::of(&solution("b"), &t);
        std::fs::create_dir_all(cache.root().join(&other.key)).unwrap();
        std::fs::copy(
            hit.module.parent().unwrap().join("entry.json"),
            cache.root().join(&other.key).join("entry.json"),
        )
        .unwrap();
        assert!(cache.lookup(&other).is_none());
        assert!(cache.lookup(&key).is_some());
    }

    #[test]
    fn a_second_install_of_one_key_keeps_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(dir.path());
        let t = Toolchain::default();
        let key = BuildKey::of(&solution("a"), &t);
        let first = cache
            .install(&key, &module(dir.path(), b"one"), "s", 1.0, &t)
            .unwrap();
        let second = cache
            .install(&key, &module(dir.path(), b"two"), "s", 1.0, &t)
            .unwrap();
        assert_eq!(first.entry.module_sha256, second.entry.module_sha256);
        assert_eq!(cache.list().unwrap().len(), 1);
    }

    #[test]
    fn eviction_removes_the_least_recently_used_first() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BuildCache::new(&dir.path().join("c"));
        let t = Toolchain::default();
        let keys: Vec<BuildKey> = ["a", "b", "c"]
            .iter()
            .map(|s| BuildKey::of(&solution(s), &t))
            .collect();
        for (k, key) in keys.iter().enumerate() {
            let m = module(dir.path(), &vec![b'x'; 1000]);
            let hit = cache.install(key, &m, "s", 1.0, &t).unwrap();
            // Distinct, increasing last-use times.
            let when =
                SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000 + k as u64);
            std::fs::File::options()
                .append(true)
                .open(hit.module.parent().unwrap().join("entry.json"))
                .unwrap()
                .set_modified(when)
                .unwrap();
        }
        // `a` used last: it stays, `b` (oldest now) goes first.
        assert!(cache.lookup(&keys[0]).is_some());
        let total: u64 = cache.list().unwrap().iter().map(|l| l.bytes).sum();
        let removed = cache.evict_to(total - 1).unwrap();
        assert_eq!(removed, vec![cache.root().join(&keys[1].key)]);
        let removed = cache.evict_to(0).unwrap();
        assert_eq!(removed.len(), 2);
        assert!(cache.list().unwrap().is_empty());
    }
}
