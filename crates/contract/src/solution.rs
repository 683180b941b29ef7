//! SOL-ExecBench `Solution`: a candidate implementation of a definition.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_true() -> bool {
    true
}

/// Extra compiler flags for C++/CUDA solutions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompileOptions {
    /// Host compiler flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cflags: Option<Vec<String>>,
    /// NVCC flags of a `cuda_cpp` solution (upstream default `["-O3", "--use_fast_math"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_cflags: Option<Vec<String>>,
    /// hipcc device flags of a `hip_cpp` solution (the ROCm port's field; default `["-O3"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hip_cflags: Option<Vec<String>>,
    /// Linker flags (upstream default `["-lcuda"]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ld_flags: Option<Vec<String>>,
}

/// How to build and call a solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BuildSpec {
    /// Languages, e.g. `["triton"]`, `["pytorch"]`, `["cuda_cpp"]`.
    pub languages: Vec<String>,
    /// Target hardware names, e.g. `["H200", "LOCAL"]`.
    #[serde(default)]
    pub target_hardware: Vec<String>,
    /// `file.py::function` the evaluator calls.
    pub entry_point: String,
    /// Outputs are pre-allocated and passed after the inputs (default true).
    #[serde(default = "default_true")]
    pub destination_passing_style: bool,
    /// Binding for C++/CUDA solutions (`torch` by default).
    #[serde(default)]
    pub binding: Option<String>,
    /// Package requirements.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dependencies: Option<Vec<String>>,
    /// Compiler flags for C++/CUDA.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_options: Option<CompileOptions>,
}

impl BuildSpec {
    /// Splits `entry_point` into `(file, function)`.
    pub fn entry(&self) -> Option<(&str, &str)> {
        let (file, func) = self.entry_point.split_once("::")?;
        (!file.is_empty() && !func.is_empty()).then_some((file, func))
    }
}

/// One source file of a solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SourceFile {
    /// Relative path inside the solution.
    pub path: String,
    /// File content.
    pub content: String,
}

/// A candidate implementation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Solution {
    /// Unique solution name.
    pub name: String,
    /// Name of the definition it solves.
    pub definition: String,
    /// Author (agent or human).
    pub author: String,
    /// Technique summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Build and call specification.
    pub spec: BuildSpec,
    /// Source files.
    pub sources: Vec<SourceFile>,
}
