//! `held_out_tests/<task_id>/held_out_shapes.yaml`: AgentKernelArena's format (`task_type`,
//! `num_original_shapes`, `init_constraints`, `injections`) plus kernelgate's additive
//! `shapes` (each generated shape with its category) and `generator` fields, and applying the
//! injections to a workspace.

use std::path::Path;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::error::{HeldoutError, io_err};

/// One file replacement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Injection {
    /// The file, relative to the task workspace.
    pub file: String,
    /// `TEST_SHAPES`, `def get_inputs` (any text starting with it) or `raw_replace`.
    pub find_marker: String,
    /// The new code.
    pub replacement_code: String,
    /// For `raw_replace`: the exact text to replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_code: Option<String>,
}

/// A generated shape and the category it tests (kernelgate addition).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeEntry {
    /// `edge`, `scale-up`, `scale-down`, `alignment-stress`, `asymmetric` or `production`.
    pub category: String,
    /// The row as Python source.
    pub row: String,
    /// Why this row belongs to its category.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// Which list it goes into (`file: marker`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub target: String,
}

/// Who wrote the file (kernelgate addition).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    /// `rules`, `claude_code`, `codex` or `cursor`.
    pub backend: String,
    /// The seed of the rules backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The kg-heldout version.
    pub version: String,
}

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldOutShapes {
    /// The task type, as in `config.yaml`.
    #[serde(default)]
    pub task_type: String,
    /// How many shapes the task's visible tests have.
    #[serde(default)]
    pub num_original_shapes: u64,
    /// Shape constraints read from `get_init_inputs()` (gpumode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_constraints: Option<IndexMap<String, serde_json::Value>>,
    /// The replacements; a file without them is rejected.
    pub injections: Vec<Injection>,
    /// The generated shapes with categories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<ShapeEntry>,
    /// Who generated the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<Generator>,
}

impl HeldOutShapes {
    /// Loads and checks a file: it must parse and have at least one injection.
    pub fn load(path: &Path) -> Result<Self, HeldoutError> {
        let v: Self = crate::yaml::load(path)?;
        if v.injections.is_empty() {
            return Err(HeldoutError::Yaml {
                path: path.to_path_buf(),
                message: "`injections` is empty: nothing to inject".into(),
            });
        }
        Ok(v)
    }
}

/// Applies one injection to a text; `path` names the file in errors.
pub fn inject_text(
    path: &Path,
    text: &str,
    inj: &Injection,
) -> Result<String, kg_inject::InjectError> {
    let marker = inj.find_marker.as_str();
    if marker == "TEST_SHAPES" {
        let src = kg_inject::PySource::parse(path, text)?;
        kg_inject::replace_test_shapes(&src, &inj.replacement_code)
    } else if marker.starts_with("def get_inputs") {
        let src = kg_inject::PySource::parse(path, text)?;
        kg_inject::replace_get_inputs(&src, &inj.replacement_code)
    } else if marker == "raw_replace" {
        let old = inj.old_code.as_deref().unwrap_or("");
        kg_inject::raw_replace(path, text, old, &inj.replacement_code)
    } else {
        Err(kg_inject::InjectError::MarkerNotFound {
            path: path.to_path_buf(),
            what: format!(
                "a handler for find_marker `{marker}` (known: TEST_SHAPES, def get_inputs, raw_replace)"
            ),
        })
    }
}

/// Applies every injection to the files under `workspace`, in order. Stops at the first
/// failure; files already rewritten stay rewritten (the caller owns the workspace copy).
pub fn apply_all(workspace: &Path, shapes: &HeldOutShapes) -> Result<(), HeldoutError> {
    if shapes.injections.is_empty() {
        return Err(HeldoutError::Injection {
            index: 0,
            file: String::new(),
            reason: "no injections defined".into(),
        });
    }
    for (index, inj) in shapes.injections.iter().enumerate() {
        let rel = Path::new(&inj.file);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(HeldoutError::Injection {
                index,
                file: inj.file.clone(),
                reason: "the path must be relative to the workspace and stay inside it".into(),
            });
        }
        let path = workspace.join(rel);
        let text = std::fs::read_to_string(&path).map_err(|e| HeldoutError::Injection {
            index,
            file: inj.file.clone(),
            reason: format!("cannot read the file: {e}"),
        })?;
        let new = inject_text(&path, &text, inj).map_err(|e| HeldoutError::Injection {
            index,
            file: inj.file.clone(),
            reason: e.to_string(),
        })?;
        std::fs::write(&path, new).map_err(io_err(&path))?;
    }
    Ok(())
}
