//! Bound files: path, SHA-256 and size checks, and the verifier that counts them.

use std::path::{Component, Path, PathBuf};

use super::ArtifactRef;
use crate::ScoreError;

/// The error for a bound artifact (or field) that is missing, altered or inconsistent.
pub(super) fn bad(artifact: impl Into<String>, message: impl Into<String>) -> ScoreError {
    ScoreError::Bundle {
        artifact: artifact.into(),
        message: message.into(),
    }
}

/// A lower-case hex SHA-256.
pub(super) fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// A lower-case hex Git SHA-1.
pub(super) fn is_revision(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// A relative path that stays where it is put: no root, no `..`, no backslash, not empty.
pub(super) fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\\')
        && !Path::new(p).is_absolute()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Checks bound files below the bundle directory and counts those it checked.
pub(super) struct Verifier {
    /// The bundle directory; no bound file may resolve outside it.
    pub(super) root: PathBuf,
    /// Files whose size and SHA-256 were checked.
    pub(super) checked: usize,
}

impl Verifier {
    /// Resolves and checks one bound file: regular, not a symlink, inside the bundle, size and
    /// SHA-256 as bound.
    pub(super) fn file(
        &mut self,
        base: &Path,
        r: &ArtifactRef,
        what: &str,
    ) -> Result<PathBuf, ScoreError> {
        if !safe_relative(&r.path) {
            return Err(bad(
                &r.path,
                format!("{what}: path must be relative and stay inside the bundle"),
            ));
        }
        if !is_sha256(&r.sha256) {
            return Err(bad(
                &r.path,
                format!("{what}: `{}` is not a lower-case SHA-256", r.sha256),
            ));
        }
        let p = base.join(&r.path);
        let meta = std::fs::symlink_metadata(&p)
            .map_err(|_| bad(&r.path, format!("{what} is missing")))?;
        if meta.file_type().is_symlink() || !meta.is_file() {
            return Err(bad(&r.path, format!("{what} is not a regular file")));
        }
        let root = self.root.canonicalize().map_err(|source| ScoreError::Io {
            path: self.root.clone(),
            source,
        })?;
        let real = p.canonicalize().map_err(|source| ScoreError::Io {
            path: p.clone(),
            source,
        })?;
        if !real.starts_with(&root) {
            return Err(bad(&r.path, format!("{what} escapes the bundle directory")));
        }
        if meta.len() != r.size_bytes {
            return Err(bad(
                &r.path,
                format!(
                    "{what} is {} bytes, the bundle binds {}",
                    meta.len(),
                    r.size_bytes
                ),
            ));
        }
        let got = kg_contract::io::sha256_file(&p)?;
        if got != r.sha256 {
            return Err(bad(
                &r.path,
                format!("{what}: SHA-256 is {got}, the bundle binds {}", r.sha256),
            ));
        }
        self.checked += 1;
        Ok(p)
    }

    /// Reads one bound JSON file of at most `limit` bytes, checked as [`Verifier::file`] does.
    pub(super) fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        r: &ArtifactRef,
        what: &str,
        limit: u64,
    ) -> Result<T, ScoreError> {
        if r.size_bytes > limit {
            return Err(bad(&r.path, format!("{what} exceeds {limit} bytes")));
        }
        let root = self.root.clone();
        let p = self.file(&root, r, what)?;
        let text = kg_contract::io::read_to_string(&p)?;
        serde_json::from_str(&text).map_err(|e| bad(&r.path, format!("invalid {what}: {e}")))
    }
}
