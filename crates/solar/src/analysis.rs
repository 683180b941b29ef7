//! From a problem and its workloads to bounds and artifact directories.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::{InputSpec, Problem, ScalarValue};
use serde::{Deserialize, Serialize};

use crate::graph::OperatorGraph;
use crate::hardware::LoadedSpec;
use crate::ir::{IrGraph, Totals};
use crate::python::{InputRequest, TraceOutcome, TraceRequest, trace_all};
use crate::{ExtractionPath, SolarError};

/// Version of the analysis and manifest records.
pub const SCHEMA_VERSION: u32 = 1;
/// File names inside an analysis directory.
pub const OPERATOR_GRAPH_FILE: &str = "operator_graph.yaml";
/// What the conversion check verified (an in-toto statement).
pub const ATTESTATION_FILE: &str = "conversion-attestation.yaml";
/// The analysis record.
pub const ANALYSIS_FILE: &str = "solar-analysis.yaml";
/// The manifest binding the other three.
pub const MANIFEST_FILE: &str = "manifest.yaml";

/// Which bound dominates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Compute time exceeds fused memory time.
    Compute,
    /// Fused memory time is at least compute time.
    Memory,
}

/// The analysis record (`solar-analysis.yaml`, and `--json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnalysisRecord {
    /// Record version.
    pub schema_version: u32,
    /// kg-solar version.
    pub tool_version: String,
    /// Definition name.
    pub definition: String,
    /// SHA-256 of the definition file.
    pub definition_sha256: String,
    /// Workload uuid.
    pub workload: String,
    /// Every axis value.
    pub axes: IndexMap<String, i64>,
    /// Extraction backend.
    pub backend: ExtractionPath,
    /// Hardware short name.
    pub hardware: String,
    /// SHA-256 of the hardware YAML.
    pub hardware_sha256: String,
    /// PyTorch that traced the reference.
    pub torch_version: String,
    /// FLOPs and bytes.
    pub totals: Totals,
    /// Tensor-core time (ms), summed per dtype at that dtype's peak.
    pub t_tensor_ms: f64,
    /// Other arithmetic at the vector fp32 peak (ms).
    pub t_vector_ms: f64,
    /// `t_tensor_ms + t_vector_ms`.
    pub t_compute_ms: f64,
    /// Every op reads its inputs and writes its outputs (ms).
    pub t_memory_unfused_ms: f64,
    /// Only graph inputs (as touched) and outputs move (ms).
    pub t_memory_fused_ms: f64,
    /// `max(t_compute_ms, t_memory_fused_ms)`.
    pub t_sol_ms: f64,
    /// Which term is the max.
    pub bound: Bound,
    /// All FLOPs / fused bytes.
    pub arithmetic_intensity: f64,
    /// Peak used per tensor dtype, e.g. `bfloat16: bf16`.
    pub tensor_rates: IndexMap<String, String>,
    /// Ops whose output shapes the IR re-derived.
    pub replay_checked: usize,
    /// Ops whose output shapes came from the trace only (advanced indexing, creation).
    pub replay_traced_only: usize,
}

/// A `manifest.yaml`: SHA-256 of every file of the analysis and what produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// Record version.
    pub schema_version: u32,
    /// kg-solar version.
    pub tool_version: String,
    /// Extraction backend.
    pub backend: ExtractionPath,
    /// Hardware short name.
    pub hardware: String,
    /// SHA-256 of the hardware YAML.
    pub hardware_sha256: String,
    /// Definition name.
    pub definition: String,
    /// SHA-256 of the definition file.
    pub definition_sha256: String,
    /// Workload uuid.
    pub workload: String,
    /// File name -> SHA-256.
    pub files: IndexMap<String, String>,
}

/// `https://in-toto.io/Statement/v1`, the statement type of [`ConversionAttestation`].
pub const IN_TOTO_STATEMENT: &str = "https://in-toto.io/Statement/v1";
/// Predicate type of our attestation: the replay is of shapes, not numerical (the port's
/// callable-to-einsum attestation replays values; ours does not claim that).
pub const ATTESTATION_PREDICATE: &str =
    "https://kernelgate.dev/attestations/operator-graph-to-einsum-shape-replay/v1";

/// A SHA-256 digest as in-toto spells it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Digest {
    /// Lower-case hex.
    pub sha256: String,
}

/// One attested file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// File name (`definition.json` names the definition file the reference came from).
    pub name: String,
    /// Its digest.
    pub digest: Digest,
}

/// What the conversion check found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttestationPredicate {
    /// `passed`: an analysis is only written when lowering and the replay check passed.
    pub status: String,
    /// kg-solar and its version.
    pub verifier: String,
    /// The port's name of the path ([`ExtractionPath::port_name`]).
    pub ir_path: String,
    /// Our backend name.
    pub backend: ExtractionPath,
    /// Ops traced (metadata calls excluded).
    pub ops: usize,
    /// Ops whose output shapes the IR re-derived and matched to the trace.
    pub replay_checked: usize,
    /// Ops whose output shapes came from the trace only.
    pub replay_traced_only: usize,
    /// Whether values were replayed numerically (never, here: the check is of shapes).
    pub numerical_replay: bool,
}

/// `conversion-attestation.yaml`: an in-toto statement binding the definition and the two
/// graph files to what the conversion check verified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConversionAttestation {
    /// [`IN_TOTO_STATEMENT`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// Definition file, operator graph, IR file.
    pub subject: Vec<Subject>,
    /// [`ATTESTATION_PREDICATE`].
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The findings.
    pub predicate: AttestationPredicate,
}

/// One finished analysis.
#[derive(Debug, Clone)]
pub struct Analysis {
    /// The operator graph.
    pub graph: OperatorGraph,
    /// The IR.
    pub ir: IrGraph,
    /// The record.
    pub record: AnalysisRecord,
}

/// What to analyse.
#[derive(Debug, Clone)]
pub struct Options {
    /// Python interpreter.
    pub python: PathBuf,
    /// Extraction backend.
    pub backend: ExtractionPath,
    /// Hardware spec.
    pub hardware: LoadedSpec,
}

fn scalar_json(v: &ScalarValue) -> serde_json::Value {
    match v {
        ScalarValue::Bool(b) => serde_json::Value::Bool(*b),
        ScalarValue::Int(i) => serde_json::Value::from(*i),
        ScalarValue::Float(f) => serde_json::Value::from(*f),
    }
}

/// Builds the trace request of one workload.
pub fn request(problem: &Problem, index: usize, backend: ExtractionPath) -> TraceRequest {
    let def = &problem.definition;
    let lw = &problem.workloads[index];
    let inputs = def
        .inputs
        .iter()
        .map(|(name, spec)| {
            let (kind, value) = match lw.workload.inputs.get(name) {
                Some(InputSpec::Scalar { value }) => ("scalar", Some(scalar_json(value))),
                Some(InputSpec::Custom) => ("custom", None),
                Some(InputSpec::Safetensors { .. }) => ("safetensors", None),
                _ => ("random", None),
            };
            InputRequest {
                name: name.clone(),
                shape: lw.resolved.inputs.get(name).cloned().flatten(),
                dtype: spec.dtype.name().to_string(),
                kind: kind.to_string(),
                value,
            }
        })
        .collect();
    TraceRequest {
        id: lw.workload.uuid.clone(),
        backend,
        reference: def.reference.clone(),
        custom_inputs_entrypoint: def.custom_inputs_entrypoint.clone(),
        axes: lw.resolved.axes.clone(),
        inputs,
        outputs: def.outputs.keys().cloned().collect(),
    }
}

/// Times of an IR graph on a device (ms), before taking the max.
#[derive(Debug, Clone, PartialEq)]
pub struct Times {
    /// FLOPs and bytes.
    pub totals: Totals,
    /// Tensor-core time.
    pub tensor_ms: f64,
    /// Vector time.
    pub vector_ms: f64,
    /// Unfused memory time.
    pub unfused_ms: f64,
    /// Fused memory time.
    pub fused_ms: f64,
    /// Peak used per tensor dtype.
    pub rates: IndexMap<String, String>,
}

/// Computes the bound of an IR graph on a device.
pub fn bound(ir: &IrGraph, hw: &LoadedSpec) -> Result<Times, SolarError> {
    let totals = ir.totals();
    let mut t_tensor_s = 0.0;
    let mut rates = IndexMap::new();
    for (dt, flops) in &totals.tensor_flops {
        let dtype = kg_contract::DType::parse(dt)
            .ok_or_else(|| SolarError::Protocol(format!("unknown dtype `{dt}` in totals")))?;
        let (tflops, field) = hw.spec.tensor_peak(dtype)?;
        t_tensor_s += *flops as f64 / (tflops * 1e12);
        rates.insert(dt.clone(), field.to_string());
    }
    let t_vector_s = totals.other_flops() as f64 / (hw.spec.vector_fp32_tflops.value * 1e12);
    let bw = hw.spec.hbm_bandwidth_gbps.value * 1e9;
    let unfused_s = totals.bytes_unfused as f64 / bw;
    let fused_s = totals.bytes_fused as f64 / bw;
    Ok(Times {
        totals,
        tensor_ms: t_tensor_s * 1e3,
        vector_ms: t_vector_s * 1e3,
        unfused_ms: unfused_s * 1e3,
        fused_ms: fused_s * 1e3,
        rates,
    })
}

/// Lowers a traced graph and bounds it.
pub fn analyze_graph(
    problem: &Problem,
    index: usize,
    graph: OperatorGraph,
    hw: &LoadedSpec,
) -> Result<Analysis, SolarError> {
    let lw = &problem.workloads[index];
    let ir = crate::rules::lower(&graph).map_err(|source| SolarError::Lower {
        definition: problem.definition.name.clone(),
        workload: lw.workload.uuid.clone(),
        source: Box::new(source),
    })?;
    let Times {
        totals,
        tensor_ms: t_tensor_ms,
        vector_ms: t_vector_ms,
        unfused_ms: t_unfused,
        fused_ms: t_fused,
        rates,
    } = bound(&ir, hw)?;
    let t_compute_ms = t_tensor_ms + t_vector_ms;
    let t_sol_ms = t_compute_ms.max(t_fused);
    let all_flops = (totals.tensor_flops_total() + totals.other_flops()) as f64;
    let record = AnalysisRecord {
        schema_version: SCHEMA_VERSION,
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        definition: problem.definition.name.clone(),
        definition_sha256: kg_contract::io::sha256_file(&problem.definition_path)?,
        workload: lw.workload.uuid.clone(),
        axes: lw.resolved.axes.clone(),
        backend: graph.backend,
        hardware: hw.spec.name.clone(),
        hardware_sha256: hw.sha256.clone(),
        torch_version: graph.torch_version.clone(),
        arithmetic_intensity: if totals.bytes_fused > 0 {
            all_flops / totals.bytes_fused as f64
        } else {
            0.0
        },
        totals,
        t_tensor_ms,
        t_vector_ms,
        t_compute_ms,
        t_memory_unfused_ms: t_unfused,
        t_memory_fused_ms: t_fused,
        t_sol_ms,
        bound: if t_compute_ms > t_fused {
            Bound::Compute
        } else {
            Bound::Memory
        },
        tensor_rates: rates,
        replay_checked: ir
            .ops
            .iter()
            .filter(|o| o.replay == crate::ir::Replay::Checked)
            .count(),
        replay_traced_only: ir
            .ops
            .iter()
            .filter(|o| o.replay == crate::ir::Replay::TracedOnly)
            .count(),
    };
    Ok(Analysis { graph, ir, record })
}

/// Traces and analyses the selected workloads of a problem (one interpreter start).
///
/// Returns one result per selected workload, in order; a trace or lowering failure of one
/// workload does not stop the others.
pub fn analyze_problem(
    problem: &Problem,
    selected: &[usize],
    opts: &Options,
) -> Result<Vec<Result<Analysis, SolarError>>, SolarError> {
    let items: Vec<(&Problem, usize, ExtractionPath)> = selected
        .iter()
        .map(|&i| (problem, i, opts.backend))
        .collect();
    analyze_batch(&items, &opts.python, &opts.hardware)
}

/// Traces and analyses many (problem, workload index, backend) items in one interpreter start.
pub fn analyze_batch(
    items: &[(&Problem, usize, ExtractionPath)],
    python: &Path,
    hw: &LoadedSpec,
) -> Result<Vec<Result<Analysis, SolarError>>, SolarError> {
    let reqs: Vec<TraceRequest> = items.iter().map(|(p, i, b)| request(p, *i, *b)).collect();
    let outcomes = trace_all(python, &reqs)?;
    Ok(items
        .iter()
        .zip(outcomes)
        .map(|((problem, i, backend), o)| match o {
            TraceOutcome::Graph(g) => analyze_graph(problem, *i, g, hw),
            TraceOutcome::Failed { kind, message } => Err(SolarError::Trace {
                definition: problem.definition.name.clone(),
                workload: problem.workloads[*i].workload.uuid.clone(),
                backend: *backend,
                kind,
                message,
            }),
        })
        .collect())
}

fn yaml<T: Serialize>(v: &T, what: &str) -> Result<String, SolarError> {
    serde_saphyr::to_string(v)
        .map_err(|e| SolarError::Protocol(format!("failed to write {what} as YAML: {e}")))
}

/// Directory of one analysis under `root`: `root/<definition>/<workload>`.
pub fn analysis_dir(root: &Path, definition: &str, workload: &str) -> PathBuf {
    let clean = |s: &str| {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect::<String>()
    };
    root.join(clean(definition)).join(clean(workload))
}

/// The conversion attestation of `a`, bound to the texts written for its graph files.
pub fn attestation(a: &Analysis, graph_text: &str, ir_text: &str) -> ConversionAttestation {
    let subject = |name: &str, sha256: String| Subject {
        name: name.to_string(),
        digest: Digest { sha256 },
    };
    let backend = a.record.backend;
    ConversionAttestation {
        statement_type: IN_TOTO_STATEMENT.into(),
        subject: vec![
            subject("definition.json", a.record.definition_sha256.clone()),
            subject(
                OPERATOR_GRAPH_FILE,
                kg_contract::io::sha256_hex(graph_text.as_bytes()),
            ),
            subject(
                backend.ir_file(),
                kg_contract::io::sha256_hex(ir_text.as_bytes()),
            ),
        ],
        predicate_type: ATTESTATION_PREDICATE.into(),
        predicate: AttestationPredicate {
            status: "passed".into(),
            verifier: format!("kg-solar {} shape replay", a.record.tool_version),
            ir_path: backend.port_name().into(),
            backend,
            ops: a.ir.ops.len(),
            replay_checked: a.record.replay_checked,
            replay_traced_only: a.record.replay_traced_only,
            numerical_replay: false,
        },
    }
}

/// Writes the published file set of an analysis into `dir` (operator graph, IR under the
/// path's name, conversion attestation, record, manifest), atomically as a directory: they
/// are written into a temporary sibling that is then renamed over `dir`.
pub fn write_analysis(dir: &Path, a: &Analysis, hw: &LoadedSpec) -> Result<Manifest, SolarError> {
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|source| SolarError::Io {
        path: parent.to_path_buf(),
        source,
    })?;
    let tmp = tempfile::Builder::new()
        .prefix(".kg-tmp-solar-")
        .tempdir_in(parent)
        .map_err(|source| SolarError::Io {
            path: parent.to_path_buf(),
            source,
        })?;
    let mut files = IndexMap::new();
    let ir_file = a.record.backend.ir_file();
    let graph_text = yaml(&a.graph, OPERATOR_GRAPH_FILE)?;
    let ir_text = yaml(&a.ir, ir_file)?;
    let attestation = attestation(a, &graph_text, &ir_text);
    for (name, text) in [
        (OPERATOR_GRAPH_FILE, graph_text),
        (ir_file, ir_text),
        (ATTESTATION_FILE, yaml(&attestation, ATTESTATION_FILE)?),
        (ANALYSIS_FILE, yaml(&a.record, ANALYSIS_FILE)?),
    ] {
        kg_contract::io::write_atomic(&tmp.path().join(name), text.as_bytes())?;
        files.insert(
            name.to_string(),
            kg_contract::io::sha256_hex(text.as_bytes()),
        );
    }
    let manifest = Manifest {
        schema_version: SCHEMA_VERSION,
        tool_version: a.record.tool_version.clone(),
        backend: a.record.backend,
        hardware: hw.spec.name.clone(),
        hardware_sha256: hw.sha256.clone(),
        definition: a.record.definition.clone(),
        definition_sha256: a.record.definition_sha256.clone(),
        workload: a.record.workload.clone(),
        files,
    };
    kg_contract::io::write_atomic(
        &tmp.path().join(MANIFEST_FILE),
        yaml(&manifest, MANIFEST_FILE)?.as_bytes(),
    )?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|source| SolarError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let kept = tmp.keep();
    std::fs::rename(&kept, dir).map_err(|source| {
        let _ = std::fs::remove_dir_all(&kept);
        SolarError::Io {
            path: dir.to_path_buf(),
            source,
        }
    })?;
    Ok(manifest)
}

/// The files of the port's published set that `manifest` does not bind: operator graph, the
/// path's IR file, conversion attestation, analysis record. Empty for a complete set; older
/// analyses (`ir.yaml`, no attestation) list what they lack.
pub fn missing_published_files(manifest: &Manifest) -> Vec<&'static str> {
    [
        OPERATOR_GRAPH_FILE,
        manifest.backend.ir_file(),
        ATTESTATION_FILE,
        ANALYSIS_FILE,
    ]
    .into_iter()
    .filter(|f| !manifest.files.contains_key(*f))
    .collect()
}

/// Reads an analysis directory back, re-hashing every file against its manifest.
pub fn read_verified(dir: &Path) -> Result<(Manifest, AnalysisRecord), SolarError> {
    let mpath = dir.join(MANIFEST_FILE);
    let text = kg_contract::io::read_to_string(&mpath)?;
    let manifest: Manifest = serde_saphyr::from_str(&text).map_err(|e| SolarError::Artifact {
        path: mpath.clone(),
        message: e.to_string(),
    })?;
    for (name, sha) in &manifest.files {
        let p = dir.join(name);
        let got = kg_contract::io::sha256_file(&p)?;
        if &got != sha {
            return Err(SolarError::Artifact {
                path: p,
                message: format!("SHA-256 is {got}, the manifest says {sha}"),
            });
        }
    }
    let apath = dir.join(ANALYSIS_FILE);
    if !manifest.files.contains_key(ANALYSIS_FILE) {
        return Err(SolarError::Artifact {
            path: mpath,
            message: format!("does not list `{ANALYSIS_FILE}`"),
        });
    }
    let record: AnalysisRecord = serde_saphyr::from_str(&kg_contract::io::read_to_string(&apath)?)
        .map_err(|e| SolarError::Artifact {
            path: apath.clone(),
            message: e.to_string(),
        })?;
    if record.definition != manifest.definition || record.workload != manifest.workload {
        return Err(SolarError::Artifact {
            path: apath,
            message: "definition/workload differ from the manifest".into(),
        });
    }
    Ok((manifest, record))
}
