//! YAML reading and writing through `serde-saphyr`, with errors that name the file.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{HeldoutError, io_err};

/// Reads and parses a YAML file.
pub fn load<T: DeserializeOwned>(path: &Path) -> Result<T, HeldoutError> {
    let text = std::fs::read_to_string(path).map_err(io_err(path))?;
    parse(&text, path)
}

/// Parses YAML text; `path` names it in errors.
pub fn parse<T: DeserializeOwned>(text: &str, path: &Path) -> Result<T, HeldoutError> {
    serde_saphyr::from_str(text).map_err(|e| HeldoutError::Yaml {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Serialises to YAML text (multi-line strings as block scalars).
pub fn to_string<T: Serialize>(value: &T, what: &str) -> Result<String, HeldoutError> {
    serde_saphyr::to_string(value).map_err(|e| HeldoutError::Serialize {
        what: what.to_string(),
        message: e.to_string(),
    })
}

/// Writes a value as YAML, atomically.
pub fn write<T: Serialize>(path: &Path, value: &T, what: &str) -> Result<(), HeldoutError> {
    let text = to_string(value, what)?;
    kg_contract::io::write_atomic(path, text.as_bytes())?;
    Ok(())
}
