//! Running the embedded extraction script in the user's Python interpreter (resolved by the
//! caller through `kg_exec::python`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::SolarError;

/// The extraction script, embedded so an installed binary needs no checkout.
pub const EXTRACT_PY: &str = include_str!("../py/extract.py");

/// One input of a trace request.
#[derive(Debug, Clone, Serialize)]
pub struct InputRequest {
    /// Input name.
    pub name: String,
    /// Concrete shape; `None` for a Python scalar.
    pub shape: Option<Vec<i64>>,
    /// dtype name.
    pub dtype: String,
    /// `random`, `scalar`, `safetensors` or `custom`.
    pub kind: String,
    /// The value of a `scalar` input.
    pub value: Option<serde_json::Value>,
}

/// One analysis to trace.
#[derive(Debug, Clone, Serialize)]
pub struct TraceRequest {
    /// Caller's id, echoed back.
    pub id: String,
    /// `aten` or `fx`.
    pub backend: crate::ExtractionPath,
    /// Reference source.
    pub reference: String,
    /// Name of the custom-inputs function, if any.
    pub custom_inputs_entrypoint: Option<String>,
    /// Every axis value.
    pub axes: indexmap::IndexMap<String, i64>,
    /// Inputs in definition order.
    pub inputs: Vec<InputRequest>,
    /// Output names in definition order.
    pub outputs: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Reply {
    result: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    torch_version: Option<String>,
    #[serde(default)]
    analyses: Vec<serde_json::Value>,
}

/// The outcome of tracing one request.
#[derive(Debug, Clone)]
pub enum TraceOutcome {
    /// The op list.
    Graph(crate::graph::OperatorGraph),
    /// The reference could not be traced (data-dependent shapes, an exception, bad outputs).
    Failed {
        /// Failure kind from the script.
        kind: String,
        /// Message, with the traceback tail.
        message: String,
    },
}

fn tail(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    let start = s.len().saturating_sub(2000);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    s[start..].to_string()
}

/// Traces every request in one interpreter start (importing torch costs seconds).
pub fn trace_all(
    python: &Path,
    requests: &[TraceRequest],
) -> Result<Vec<TraceOutcome>, SolarError> {
    let dir = tempfile::tempdir().map_err(|source| SolarError::Io {
        path: std::env::temp_dir(),
        source,
    })?;
    let script = dir.path().join("kg_solar_extract.py");
    let reply_path = dir.path().join("reply.json");
    std::fs::write(&script, EXTRACT_PY).map_err(|source| SolarError::Io {
        path: script.clone(),
        source,
    })?;
    let body = serde_json::to_vec(&serde_json::json!({ "analyses": requests }))
        .map_err(|e| SolarError::Protocol(format!("failed to encode the request: {e}")))?;
    let mut child = Command::new(python)
        .arg("-I")
        .arg("-B")
        .arg(&script)
        .arg(&reply_path)
        .current_dir(dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| SolarError::Spawn {
            python: python.to_path_buf(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error shows up as a non-zero exit or a missing reply below.
        let _ = stdin.write_all(&body);
    }
    let out = child
        .wait_with_output()
        .map_err(|source| SolarError::Spawn {
            python: python.to_path_buf(),
            source,
        })?;
    if !out.status.success() {
        return Err(SolarError::PythonExit {
            python: python.to_path_buf(),
            status: out.status.to_string(),
            stderr: tail(&out.stderr),
        });
    }
    let text = std::fs::read_to_string(&reply_path).map_err(|_| {
        SolarError::Protocol(format!(
            "the extraction script wrote no reply; stderr: {}",
            tail(&out.stderr)
        ))
    })?;
    let reply: Reply = serde_json::from_str(&text)
        .map_err(|e| SolarError::Protocol(format!("malformed reply: {e}")))?;
    if reply.result != "success" {
        return Err(SolarError::PythonSetup {
            python: python.to_path_buf(),
            kind: reply.kind.unwrap_or_default(),
            message: reply.message.unwrap_or_default(),
        });
    }
    let torch_version = reply.torch_version.unwrap_or_default();
    if reply.analyses.len() != requests.len() {
        return Err(SolarError::Protocol(format!(
            "asked for {} analyses, got {}",
            requests.len(),
            reply.analyses.len()
        )));
    }
    let mut outcomes = Vec::new();
    for mut a in reply.analyses {
        let ok = a
            .get("ok")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false);
        if !ok {
            let field = |k: &str| a.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
            outcomes.push(TraceOutcome::Failed {
                kind: field("kind"),
                message: field("message"),
            });
            continue;
        }
        if let Some(obj) = a.as_object_mut() {
            obj.remove("id");
            obj.remove("ok");
            obj.insert(
                "torch_version".into(),
                serde_json::Value::String(torch_version.clone()),
            );
        }
        let g: crate::graph::OperatorGraph = serde_json::from_value(a)
            .map_err(|e| SolarError::Protocol(format!("malformed operator graph: {e}")))?;
        outcomes.push(TraceOutcome::Graph(g));
    }
    Ok(outcomes)
}
