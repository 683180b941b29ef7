//! Loading and writing contract documents (JSON and JSONL) with located errors, SHA-256
//! content addressing, and atomic writes used by every artifact writer in the project.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

use crate::error::{ContractError, Location};

/// Reads a file, naming it in the error.
pub fn read_to_string(path: &Path) -> Result<String, ContractError> {
    std::fs::read_to_string(path).map_err(|source| ContractError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses one JSON document; `line` is the JSONL line it came from, if any.
///
/// Unknown fields are accepted (upstream readers ignore them too) and returned as dotted paths
/// so callers can warn about likely typos.
pub fn parse_json<T: DeserializeOwned>(
    text: &str,
    path: &Path,
    line: Option<usize>,
) -> Result<(T, Vec<String>), ContractError> {
    let mut unknown = Vec::new();
    let mut de = serde_json::Deserializer::from_str(text);
    let mut on_unknown = |p: serde_ignored::Path<'_>| unknown.push(p.to_string());
    let track = serde_ignored::Deserializer::new(&mut de, &mut on_unknown);
    let result: Result<T, _> = serde_path_to_error::deserialize(track);
    match result {
        Ok(v) => {
            de.end()
                .map_err(|e| parse_error(path, line, String::new(), &e))?;
            Ok((v, unknown))
        }
        Err(err) => {
            // serde_path_to_error writes `?` for a map key it had not read yet (syntax errors).
            let mut field = err.path().to_string();
            while let Some(stripped) = field.strip_suffix(".?") {
                field.truncate(stripped.len());
            }
            if field == "." || field == "?" {
                field.clear();
            }
            Err(parse_error(path, line, field, err.inner()))
        }
    }
}

fn parse_error(
    path: &Path,
    line: Option<usize>,
    field: String,
    err: &serde_json::Error,
) -> ContractError {
    // serde_json appends "at line L column C"; for JSONL the line is the file's line, not the
    // document's, so keep the column but report our own line.
    let mut message = err.to_string();
    if let Some(i) = message.rfind(" at line ") {
        message.truncate(i);
    }
    let line = match line {
        Some(l) => Some(l),
        None if err.line() > 0 => Some(err.line()),
        None => None,
    };
    let message = if err.column() > 0 {
        format!("{message} (column {})", err.column())
    } else {
        message
    };
    ContractError::Parse {
        at: Location {
            path: path.to_path_buf(),
            line,
            field,
        },
        message,
    }
}

/// Loads one JSON document from a file.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> Result<(T, Vec<String>), ContractError> {
    let text = read_to_string(path)?;
    parse_json(&text, path, None)
}

/// Loads a JSONL file: one document per non-blank line, with 1-based line numbers.
pub fn load_jsonl<T: DeserializeOwned>(
    path: &Path,
) -> Result<Vec<(usize, T, Vec<String>)>, ContractError> {
    let text = read_to_string(path)?;
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let (v, unknown) = parse_json(raw, path, Some(i + 1))?;
        out.push((i + 1, v, unknown));
    }
    Ok(out)
}

/// Serialises a document as pretty JSON (2-space indent) with a trailing newline.
pub fn to_json_pretty<T: Serialize>(value: &T, what: &str) -> Result<String, ContractError> {
    let mut s = serde_json::to_string_pretty(value).map_err(|source| ContractError::Serialize {
        what: what.to_string(),
        source,
    })?;
    s.push('\n');
    Ok(s)
}

/// Serialises a document as one compact JSON line with a trailing newline.
pub fn to_json_line<T: Serialize>(value: &T, what: &str) -> Result<String, ContractError> {
    let mut s = serde_json::to_string(value).map_err(|source| ContractError::Serialize {
        what: what.to_string(),
        source,
    })?;
    s.push('\n');
    Ok(s)
}

/// Lower-case hex SHA-256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Lower-case hex SHA-256 of a file's content.
pub fn sha256_file(path: &Path) -> Result<String, ContractError> {
    let bytes = std::fs::read(path).map_err(|source| ContractError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(sha256_hex(&bytes))
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ContractError + '_ {
    move |source| ContractError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes a file atomically: a temp file in the same directory, flushed and synced, then renamed.
/// Readers see the old content or the new, never a torn file; on error nothing is left behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ContractError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let mut builder = tempfile::Builder::new();
    builder.prefix(".kg-tmp-");
    // A temp file is private (0600); the artifact keeps the mode of the file it replaces, or
    // gets the usual 0666 minus umask, so other users and tools can read what we wrote.
    let mode = match std::fs::metadata(path) {
        Ok(m) => Some(m.permissions()),
        Err(_) => default_permissions(),
    };
    if let Some(mode) = mode {
        builder.permissions(mode);
    }
    let mut tmp = builder.tempfile_in(&dir).map_err(io_err(&dir))?;
    tmp.write_all(bytes).map_err(io_err(path))?;
    tmp.as_file().sync_all().map_err(io_err(path))?;
    tmp.persist(path).map_err(|e| ContractError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

#[cfg(unix)]
fn default_permissions() -> Option<std::fs::Permissions> {
    use std::os::unix::fs::PermissionsExt;
    Some(std::fs::Permissions::from_mode(0o666))
}

#[cfg(not(unix))]
fn default_permissions() -> Option<std::fs::Permissions> {
    None
}

/// Appends one complete line to a JSONL file atomically (the whole file is rewritten through
/// [`write_atomic`]), so a crash never leaves a torn line.
pub fn append_line_atomic(path: &Path, line: &str) -> Result<(), ContractError> {
    let mut content = match std::fs::read(path) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(ContractError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    if !content.is_empty() && !content.ends_with(b"\n") {
        content.push(b'\n');
    }
    content.extend_from_slice(line.as_bytes());
    if !line.ends_with('\n') {
        content.push(b'\n');
    }
    write_atomic(path, &content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/b.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn atomic_write_is_not_private_and_keeps_an_existing_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("artifact.json");
        write_atomic(&p, b"one").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        // 0666 minus whatever umask the test runs under: never the temp file's 0600 unless the
        // umask itself is 077.
        assert_ne!(mode & 0o600, 0, "{mode:o}");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o640
        );
    }

    #[test]
    fn append_mends_missing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"a\":1}").unwrap();
        append_line_atomic(&p, "{\"b\":2}").unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"a\":1}\n{\"b\":2}\n"
        );
    }

    #[test]
    fn write_into_unwritable_path_fails_with_path() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        // A regular file used as a directory.
        let err = write_atomic(&file.join("child.json"), b"x").unwrap_err();
        assert!(err.to_string().contains("f"), "{err}");
    }
}
